#include "coordinator/jobs/worker_id_store.h"

#include "coordinator/jobs/job_store.h"
#include "coordinator/jobs/test_db.h"
#include "coordinator/jobs/trace_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

using ::testing::HasSubstr;

TEST(WorkerIdStoreTest, ANewDatabaseStartsAtOne) {
  auto store = WorkerIdStore::Open(FreshDbPath());
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<int64_t> next = (*store)->LoadNext();
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(*next, 1);
}

TEST(WorkerIdStoreTest, TheSequenceSurvivesReopeningAndNeverGoesBack) {
  const std::string path = FreshDbPath();
  {
    auto store = WorkerIdStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->SaveNext(3).ok());
    ASSERT_TRUE((*store)->SaveNext(5).ok());
    ASSERT_TRUE((*store)->SaveNext(4).ok());  // an older value: kept at 5
    EXPECT_EQ(*(*store)->LoadNext(), 5);
  }
  auto reopened = WorkerIdStore::Open(path);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  EXPECT_EQ(*(*reopened)->LoadNext(), 5);
  absl::Status bad = (*reopened)->SaveNext(0);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), HasSubstr("next worker id number 0 must be >= 1"));
}

TEST(WorkerIdStoreTest, SharesTheFileWithTheOtherStores) {
  const std::string path = FreshDbPath();
  auto jobs = JobStore::Open(path);
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  auto traces = TraceStore::Open(path);
  ASSERT_TRUE(traces.ok()) << traces.status();
  auto ids = WorkerIdStore::Open(path);
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_TRUE((*ids)->SaveNext(7).ok());
  auto loaded = (*jobs)->LoadAll();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(loaded->empty());
  EXPECT_EQ(*(*ids)->LoadNext(), 7);
}

TEST(WorkerIdStoreTest, AnUnopenableFileIsNamed) {
  auto store = WorkerIdStore::Open("/nonexistent-dir/dapple.db");
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(),
              HasSubstr("cannot open worker id table in '/nonexistent-dir/dapple.db'"));
}

}  // namespace
}  // namespace dapple::coordinator
