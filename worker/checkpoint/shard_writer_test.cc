#include "worker/checkpoint/shard_writer.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "common/checkpoint_files.h"
#include "dapple/v1/checkpoint.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::worker {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

StageState SmallState() {
  StageState s;
  s.params.push_back({"layer3.weight", {2, 3}, {1, -2, 3.5f, 4, 5, 6}});
  s.params.push_back({"layer3.bias", {2}, {0.25f, -0.5f}});
  s.optimizer_state.push_back({"layer3.weight.momentum", {2, 3}, {0.1f, 0.2f, 0.3f, 0, 0, 1e-30f}});
  s.optimizer_state.push_back({"layer3.bias.momentum", {2}, {7, 8}});
  s.optimizer_steps = 12;
  return s;
}

class ShardWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ckpt-writer-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST_F(ShardWriterTest, WritesTheShardIntoThePartialFolder) {
  absl::StatusOr<WrittenShard> w =
      WriteShard(dir_ + "/job-1", "job-1", 4, {1, 0, 3, 4}, SmallState());
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->file, "stage1.replica0.shard");
  EXPECT_EQ(w->path, dir_ + "/job-1/step-4.partial/stage1.replica0.shard");
  EXPECT_EQ(static_cast<int64_t>(fs::file_size(w->path)), w->bytes);
  EXPECT_FALSE(fs::exists(w->path + ".tmp"));

  v1::CheckpointShard shard;
  ASSERT_TRUE(shard.ParseFromString(*ReadWholeFile(w->path)));
  EXPECT_EQ(shard.job_id(), "job-1");
  EXPECT_EQ(shard.step(), 4);
  EXPECT_EQ(shard.stage(), 1);
  EXPECT_EQ(shard.first_layer(), 3);
  EXPECT_EQ(shard.last_layer(), 4);
  EXPECT_EQ(shard.optimizer_steps(), 12);
  ASSERT_EQ(shard.params_size(), 2);
  EXPECT_EQ(shard.params(0).name(), "layer3.weight");
  EXPECT_THAT(shard.params(0).shape(), ::testing::ElementsAre(2, 3));
  EXPECT_EQ(shard.params(0).data().size(), 6 * sizeof(float));
  ASSERT_EQ(shard.optimizer_state_size(), 2);
  EXPECT_EQ(shard.optimizer_state(1).name(), "layer3.bias.momentum");
}

TEST_F(ShardWriterTest, RefusesBadArguments) {
  EXPECT_EQ(WriteShard("", "job-1", 4, {}, SmallState()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteShard(dir_, "job-1", 0, {}, SmallState()).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A file where the job's folder should be.
  ASSERT_TRUE(WriteFileAtomically(dir_ + "/file", "x").ok());
  absl::StatusOr<WrittenShard> w = WriteShard(dir_ + "/file", "job-1", 4, {}, SmallState());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(w.status().message(), HasSubstr(dir_ + "/file/step-4.partial"));
}

// The test-only fault hook: the process dies with half a temporary file and no shard.
TEST_F(ShardWriterTest, FaultHookDiesMidWrite) {
  const std::string job_dir = dir_ + "/job-1";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    setenv(kFaultExitDuringCheckpointEnv, "8", 1);
    (void)WriteShard(job_dir, "job-1", 4, {0, 0, 3, 4}, SmallState());  // not step 8: written
    (void)WriteShard(job_dir, "job-1", 8, {0, 0, 3, 4}, SmallState());  // dies here
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  EXPECT_TRUE(fs::exists(job_dir + "/step-4.partial/stage0.replica0.shard"));
  const std::string shard = job_dir + "/step-8.partial/stage0.replica0.shard";
  EXPECT_FALSE(fs::exists(shard));
  ASSERT_TRUE(fs::exists(shard + ".tmp"));
  const auto full = fs::file_size(job_dir + "/step-4.partial/stage0.replica0.shard");
  EXPECT_EQ(fs::file_size(shard + ".tmp"), full / 2);
}

}  // namespace
}  // namespace dapple::worker
