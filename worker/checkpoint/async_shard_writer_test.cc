#include "worker/checkpoint/async_shard_writer.h"

#include <unistd.h>

#include <filesystem>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/checkpoint_files.h"
#include "dapple/v1/checkpoint.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::worker {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

StageState State(float value) {
  StageState s;
  NamedTensor w;
  w.name = "layer3.weight";
  w.shape = {2, 3};
  w.data.assign(6, value);
  s.params.push_back(w);
  s.optimizer_steps = 7;
  return s;
}

class AsyncShardWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ckpt-async-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    where_.stage = 1;
    where_.first_layer = 3;
    where_.last_layer = 5;
  }
  void TearDown() override { fs::remove_all(dir_); }

  AsyncShardWriter::Sink Collect(absl::Duration delay = absl::ZeroDuration()) {
    return [this, delay](CheckpointReport r) {
      absl::SleepFor(delay);
      absl::MutexLock l(&mu_);
      reports_.push_back(std::move(r));
    };
  }
  std::vector<CheckpointReport> Reports() {
    absl::MutexLock l(&mu_);
    return reports_;
  }

  std::string dir_;
  ShardLocation where_;
  absl::Mutex mu_;
  std::vector<CheckpointReport> reports_;
};

TEST_F(AsyncShardWriterTest, WritesReportsAndKeepsTheBytesInMemory) {
  ShardMemoryCache cache;
  {
    AsyncShardWriter w(dir_, "job-5", where_, Collect(), &cache);
    EXPECT_EQ(w.Submit(4, State(1.5f)), 0);
    w.Finish();
    ASSERT_EQ(Reports().size(), 1u);
  }
  const CheckpointReport r = Reports()[0];
  EXPECT_EQ(r.step, 4);
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.file, "stage1.replica0.shard");
  const std::string path = dir_ + "/step-4.partial/stage1.replica0.shard";
  absl::StatusOr<std::string> file = ReadWholeFile(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(static_cast<int64_t>(file->size()), r.bytes);
  CachedShardKey key{CheckpointOrigin(dir_), "job-5", 4, 1, 0, 3, 5};
  std::shared_ptr<const std::string> cached = cache.Find(key, r.bytes);
  ASSERT_NE(cached, nullptr);
  EXPECT_EQ(*cached, *file);  // the in-memory copy is the file, byte for byte
  v1::CheckpointShard shard;
  ASSERT_TRUE(shard.ParseFromString(*file));
  EXPECT_EQ(shard.params(0).data(),
            std::string(reinterpret_cast<const char*>(State(1.5f).params[0].data.data()), 24));
}

TEST_F(AsyncShardWriterTest, OneSaveInFlightTheNextSubmitWaits) {
  AsyncShardWriter w(dir_, "job-5", where_, Collect(absl::Milliseconds(300)), nullptr);
  EXPECT_EQ(w.Submit(2, State(1)), 0);
  // The first save's report takes 300 ms to deliver: the second snapshot waits for it.
  const double waited = w.Submit(4, State(2));
  EXPECT_GT(waited, 0.1);
  w.Finish();
  std::vector<CheckpointReport> r = Reports();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].step, 2);
  EXPECT_EQ(r[1].step, 4);
  EXPECT_TRUE(fs::exists(dir_ + "/step-4.partial/stage1.replica0.shard"));
}

TEST_F(AsyncShardWriterTest, AFailedWriteIsAReportAndTheWriterGoesOn) {
  ShardMemoryCache cache;
  AsyncShardWriter w("/proc/no-checkpoints-here", "job-5", where_, Collect(), &cache);
  w.Submit(2, State(1));
  w.Submit(4, State(2));
  w.Finish();
  std::vector<CheckpointReport> r = Reports();
  ASSERT_EQ(r.size(), 2u);
  for (const CheckpointReport& c : r) {
    EXPECT_EQ(c.file, "");
    EXPECT_THAT(c.error, HasSubstr("stage 1: cannot create checkpoint folder"));
  }
  EXPECT_EQ(cache.size(), 0);  // nothing unwritten is kept
}

TEST_F(AsyncShardWriterTest, TheDestructorWaitsForTheSaveInFlight) {
  {
    AsyncShardWriter w(dir_, "job-5", where_, Collect(absl::Milliseconds(100)), nullptr);
    w.Submit(6, State(1));
  }
  ASSERT_EQ(Reports().size(), 1u);
  EXPECT_EQ(Reports()[0].step, 6);
}

}  // namespace
}  // namespace dapple::worker
