#include "coordinator/jobs/trace_store.h"

#include <sqlite3.h>

#include "coordinator/jobs/test_db.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

v1::StepTrace Trace(const std::string& job, int stage, int replica, int64_t step) {
  v1::StepTrace t;
  t.set_job_id(job);
  t.set_stage(stage);
  t.set_replica(replica);
  t.set_worker_id("w-" + std::to_string(stage + 1));
  t.set_device("cpu");
  t.set_step(step);
  t.set_start_us(1000 * step);
  t.set_end_us(1000 * step + 900);
  v1::TraceEvent* e = t.add_events();
  e->set_kind(v1::FORWARD);
  e->set_micro_batch(0);
  e->set_start_us(t.start_us());
  e->set_end_us(t.end_us());
  t.mutable_stats()->set_step(step);
  t.mutable_stats()->set_idle_seconds(0.25);
  return t;
}

TEST(TraceStoreTest, NoTracesIsAnEmptyAnswer) {
  auto store = TraceStore::Open(FreshDbPath());
  ASSERT_TRUE(store.ok()) << store.status();
  auto got = (*store)->Get("job-1");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->job_id(), "job-1");
  EXPECT_EQ(got->num_stages(), 0);
  EXPECT_EQ(got->steps_size(), 0);
}

TEST(TraceStoreTest, OrdersByStepStageReplicaAndKeepsJobsApart) {
  auto store = TraceStore::Open(FreshDbPath()).value();
  ASSERT_TRUE(store->Put(Trace("job-1", 1, 0, 2), 1).ok());
  ASSERT_TRUE(store->Put(Trace("job-1", 0, 0, 2), 1).ok());
  ASSERT_TRUE(store->Put(Trace("job-1", 1, 0, 1), 1).ok());
  ASSERT_TRUE(store->Put(Trace("job-1", 0, 0, 1), 1).ok());
  ASSERT_TRUE(store->Put(Trace("job-2", 0, 0, 1), 1).ok());
  v1::JobTrace got = store->Get("job-1").value();
  EXPECT_EQ(got.num_stages(), 2);
  ASSERT_EQ(got.steps_size(), 4);
  const int want[4][2] = {{1, 0}, {1, 1}, {2, 0}, {2, 1}};  // (step, stage)
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(got.steps(i).step(), want[i][0]) << i;
    EXPECT_EQ(got.steps(i).stage(), want[i][1]) << i;
    EXPECT_EQ(got.steps(i).events_size(), 1) << i;
    EXPECT_DOUBLE_EQ(got.steps(i).stats().idle_seconds(), 0.25) << i;
  }
  EXPECT_EQ(store->Get("job-2").value().steps_size(), 1);
  EXPECT_EQ(store->Get("job-3").value().steps_size(), 0);
}

TEST(TraceStoreTest, KeepsTheNewestStepsOfEachRank) {
  auto store = TraceStore::Open(FreshDbPath()).value();
  const int n = TraceStore::kStepsPerRank + 5;
  for (int step = 1; step <= n; ++step) {
    ASSERT_TRUE(store->Put(Trace("job-1", 0, 0, step * 10), step).ok());
    if (step <= 2) {
      ASSERT_TRUE(store->Put(Trace("job-1", 1, 0, step * 10), step).ok());
    }
  }
  v1::JobTrace got = store->Get("job-1").value();
  ASSERT_EQ(got.steps_size(), TraceStore::kStepsPerRank + 2);
  std::vector<int64_t> stage0;
  for (const v1::StepTrace& t : got.steps()) {
    if (t.stage() == 0) stage0.push_back(t.step());
  }
  ASSERT_EQ(stage0.size(), TraceStore::kStepsPerRank);
  EXPECT_EQ(stage0.front(), (n - TraceStore::kStepsPerRank + 1) * 10);
  EXPECT_EQ(stage0.back(), n * 10);
}

// A job restarted onto another layout: its traces since the restart are the new layout's only,
// and a rank keeps its last recorded steps, not the highest-numbered (the resumed job runs steps
// again).
TEST(TraceStoreTest, ReadsTheStepsRecordedSinceATimeAndKeepsTheLastRecorded) {
  auto store = TraceStore::Open(FreshDbPath()).value();
  // The first run: 2 stages, steps 1..12 at times 1..12.
  for (int step = 1; step <= 12; ++step) {
    ASSERT_TRUE(store->Put(Trace("job-1", 0, 0, step), step).ok());
    ASSERT_TRUE(store->Put(Trace("job-1", 1, 0, step), step).ok());
  }
  // Resumed at time 100 on 1 stage from step 3.
  for (int step = 4; step <= 6; ++step) {
    ASSERT_TRUE(store->Put(Trace("job-1", 0, 0, step), 100 + step).ok());
  }
  v1::JobTrace since = store->Get("job-1", 100).value();
  EXPECT_EQ(since.num_stages(), 1);
  ASSERT_EQ(since.steps_size(), 3);
  EXPECT_EQ(since.steps(0).step(), 4);
  EXPECT_EQ(since.steps(2).step(), 6);
  // Stage 0 kept its kStepsPerRank last recorded: 4, 5, 6 of the resumed run and 8..12 of the
  // first (step 7 was dropped, not step 4).
  std::vector<int64_t> stage0;
  const v1::JobTrace all = store->Get("job-1").value();
  for (const v1::StepTrace& t : all.steps()) {
    if (t.stage() == 0) stage0.push_back(t.step());
  }
  EXPECT_EQ(stage0, (std::vector<int64_t>{4, 5, 6, 8, 9, 10, 11, 12}));
}

TEST(TraceStoreTest, ReplacesTheSameStepAndSurvivesReopening) {
  const std::string path = FreshDbPath();
  {
    auto store = TraceStore::Open(path).value();
    ASSERT_TRUE(store->Put(Trace("job-1", 0, 0, 1), 1).ok());
    v1::StepTrace again = Trace("job-1", 0, 0, 1);
    again.set_device("cuda:0");
    ASSERT_TRUE(store->Put(again, 2).ok());
  }
  auto store = TraceStore::Open(path).value();
  v1::JobTrace got = store->Get("job-1").value();
  ASSERT_EQ(got.steps_size(), 1);
  EXPECT_EQ(got.steps(0).device(), "cuda:0");
}

TEST(TraceStoreTest, RefusesTracesWithoutJobOrStep) {
  auto store = TraceStore::Open(FreshDbPath()).value();
  EXPECT_EQ(store->Put(Trace("", 0, 0, 1), 1).code(), absl::StatusCode::kInvalidArgument);
  absl::Status s = store->Put(Trace("job-1", 0, 0, 0), 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "trace of job job-1 has step 0, not >= 1");
}

TEST(TraceStoreTest, ACorruptRowIsDataLoss) {
  const std::string path = FreshDbPath();
  auto store = TraceStore::Open(path).value();
  ASSERT_TRUE(store->Put(Trace("job-1", 0, 0, 1), 1).ok());
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE traces SET step = 7", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  auto got = store->Get("job-1");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(got.status().message(), "trace table in '" + path +
                                        "': row of job job-1 stage 0 replica 0 step 7 holds no "
                                        "valid trace");
}

TEST(TraceStoreTest, AnUnopenablePathIsAFailedPrecondition) {
  auto store = TraceStore::Open("/no/such/dir/d.db");
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store.status().message(),
            "cannot open trace table in '/no/such/dir/d.db': unable to open database file");
}

}  // namespace
}  // namespace dapple::coordinator
