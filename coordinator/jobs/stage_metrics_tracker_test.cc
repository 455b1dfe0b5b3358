#include "coordinator/jobs/stage_metrics_tracker.h"

#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

v1::ProgressReport Report(int stage, int replica, int64_t step, double seconds, int64_t samples,
                          bool skipped = false) {
  v1::ProgressReport r;
  r.set_worker_id("w-" + std::to_string(stage + 1));
  r.set_stage(stage);
  r.set_replica(replica);
  r.set_kind(v1::PROGRESS_STEP);
  r.set_step(step);
  v1::StageStepStats* st = r.mutable_stats();
  st->set_step(step);
  st->set_step_seconds(seconds);
  st->set_idle_seconds(seconds / 4);
  st->set_samples(samples);
  st->set_skipped(skipped);
  return r;
}

TEST(StageMetricsTrackerTest, OneEntryPerRankSortedWithTheNewestStats) {
  StageMetricsTracker t;
  v1::Job job;
  EXPECT_TRUE(t.OnStep(Report(1, 0, 1, 0.5, 64), 1000, &job));
  EXPECT_TRUE(t.OnStep(Report(0, 0, 1, 0.25, 64), 1001, &job));
  EXPECT_TRUE(t.OnStep(Report(0, 0, 2, 0.75, 64), 1500, &job));
  ASSERT_EQ(job.stage_metrics_size(), 2);
  const v1::StageMetrics& s0 = job.stage_metrics(0);
  EXPECT_EQ(s0.stage(), 0);
  EXPECT_EQ(s0.replica(), 0);
  EXPECT_EQ(s0.worker_id(), "w-1");
  EXPECT_EQ(s0.last().step(), 2);
  EXPECT_DOUBLE_EQ(s0.last().idle_seconds(), 0.75 / 4);
  EXPECT_EQ(s0.last_step_unix_ms(), 1500);
  EXPECT_DOUBLE_EQ(s0.samples_per_second(), 128 / 1.0);  // (64 + 64) / (0.25 + 0.75)
  const v1::StageMetrics& s1 = job.stage_metrics(1);
  EXPECT_EQ(s1.stage(), 1);
  EXPECT_EQ(s1.worker_id(), "w-2");
  EXPECT_EQ(s1.last().step(), 1);
  EXPECT_EQ(s1.last_step_unix_ms(), 1000);
  EXPECT_DOUBLE_EQ(s1.samples_per_second(), 128.0);  // 64 / 0.5
}

TEST(StageMetricsTrackerTest, ThroughputIsOverTheRecentWindow) {
  StageMetricsTracker t;
  v1::Job job;
  // kWindow slow steps, then kWindow fast ones: only the fast ones count.
  int64_t step = 0;
  for (int i = 0; i < StageMetricsTracker::kWindow; ++i)
    t.OnStep(Report(0, 0, ++step, 2, 10), 1, &job);
  EXPECT_DOUBLE_EQ(job.stage_metrics(0).samples_per_second(), 5.0);
  for (int i = 0; i < StageMetricsTracker::kWindow; ++i) {
    t.OnStep(Report(0, 0, ++step, 0.5, 10), 2, &job);
  }
  EXPECT_DOUBLE_EQ(job.stage_metrics(0).samples_per_second(), 20.0);
}

TEST(StageMetricsTrackerTest, CountsSkippedStepsOnceAndIgnoresRepeats) {
  StageMetricsTracker t;
  v1::Job job;
  EXPECT_TRUE(t.OnStep(Report(0, 0, 1, 1, 8, /*skipped=*/true), 1, &job));
  EXPECT_FALSE(t.OnStep(Report(0, 0, 1, 1, 8, /*skipped=*/true), 2, &job));  // delivered twice
  EXPECT_FALSE(t.OnStep(Report(0, 0, 0, 1, 8, /*skipped=*/true), 3, &job));  // older
  EXPECT_TRUE(t.OnStep(Report(0, 0, 2, 1, 8), 4, &job));
  EXPECT_TRUE(t.OnStep(Report(0, 0, 3, 1, 8, /*skipped=*/true), 5, &job));
  ASSERT_EQ(job.stage_metrics_size(), 1);
  EXPECT_EQ(job.stage_metrics(0).skipped_steps(), 2);
  EXPECT_EQ(job.stage_metrics(0).last().step(), 3);
  EXPECT_EQ(job.stage_metrics(0).last_step_unix_ms(), 5);
}

TEST(StageMetricsTrackerTest, IgnoresReportsWithoutStats) {
  StageMetricsTracker t;
  v1::Job job;
  v1::ProgressReport r = Report(0, 0, 1, 1, 8);
  r.clear_stats();
  EXPECT_FALSE(t.OnStep(r, 1, &job));
  EXPECT_EQ(job.stage_metrics_size(), 0);
}

TEST(StageMetricsTrackerTest, ZeroTimeGivesZeroThroughput) {
  StageMetricsTracker t;
  v1::Job job;
  EXPECT_TRUE(t.OnStep(Report(0, 0, 1, 0, 8), 1, &job));
  EXPECT_EQ(job.stage_metrics(0).samples_per_second(), 0);
}

TEST(StageMetricsTrackerTest, ReplicasOfAStageAreSeparateEntries) {
  StageMetricsTracker t;
  v1::Job job;
  t.OnStep(Report(0, 1, 1, 1, 8), 1, &job);
  t.OnStep(Report(0, 0, 1, 1, 8), 1, &job);
  ASSERT_EQ(job.stage_metrics_size(), 2);
  EXPECT_EQ(job.stage_metrics(0).replica(), 0);
  EXPECT_EQ(job.stage_metrics(1).replica(), 1);
}

TEST(StageMetricsTrackerTest, ComputeMedianLeavesOutTheWarmUpAndSkippedSteps) {
  StageMetricsTracker t;
  v1::Job job;
  auto step = [&](int64_t n, double forward, bool skipped = false) {
    v1::ProgressReport r = Report(1, 0, n, 1.0, 64, skipped);
    r.mutable_stats()->set_forward_seconds(forward);
    r.mutable_stats()->set_backward_seconds(2 * forward);
    r.mutable_stats()->set_optimizer_seconds(0.001);
    EXPECT_TRUE(t.OnStep(r, 1000 + n, &job));
  };
  // The warm-up's slow steps, then 4 steps of 31 ms, one of 61 ms and a skipped one.
  for (int n = 1; n <= StageMetricsTracker::kWarmupSteps; ++n) step(n, 0.5);
  EXPECT_EQ(t.MedianComputeMs(1, 0, 1), std::nullopt);
  step(4, 0.010);
  step(5, 0.010);
  step(6, 0.020);
  step(7, 0.010, /*skipped=*/true);
  step(8, 0.010);
  step(9, 0.010);
  EXPECT_EQ(t.MedianComputeMs(1, 0, 6), std::nullopt);
  ASSERT_TRUE(t.MedianComputeMs(1, 0, 5).has_value());
  EXPECT_NEAR(*t.MedianComputeMs(1, 0, 5), 31.0, 1e-9);
  // Each step lasted 1 s (Report's step_seconds): the rest of the median step is 969 ms.
  EXPECT_NEAR(*t.MedianNonComputeMs(1, 0, 5), 969.0, 1e-9);
  EXPECT_EQ(t.MedianNonComputeMs(1, 0, 6), std::nullopt);
  EXPECT_EQ(t.MedianComputeMs(0, 0, 1), std::nullopt);  // never reported
}

}  // namespace
}  // namespace dapple::coordinator
