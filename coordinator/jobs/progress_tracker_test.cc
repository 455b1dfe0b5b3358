#include "coordinator/jobs/progress_tracker.h"

#include <cmath>
#include <string>

#include "common/eval_metrics.h"
#include "common/schedule/job_lowering.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

v1::JobSpec Spec(int64_t global_batch, int64_t epochs, int64_t max_steps) {
  v1::JobSpec spec;
  spec.mutable_training()->set_global_batch(global_batch);
  spec.mutable_training()->set_epochs(epochs);
  spec.mutable_training()->set_max_steps(max_steps);
  return spec;
}

v1::ProgressReport Step(int64_t step, int epoch, double loss, double seconds) {
  v1::ProgressReport r;
  r.set_kind(v1::PROGRESS_STEP);
  r.set_step(step);
  r.set_epoch(epoch);
  r.set_loss(loss);
  r.set_step_seconds(seconds);
  return r;
}

TEST(TotalStepsTest, EpochsTimesFullBatchesCappedByMaxSteps) {
  EXPECT_EQ(TotalSteps(Spec(256, 3, 0)), 3 * 234);  // 60000 / 256 = 234.375
  EXPECT_EQ(TotalSteps(Spec(256, 3, 100)), 100);
  EXPECT_EQ(TotalSteps(Spec(256, 3, 1000)), 702);
  EXPECT_EQ(TotalSteps(Spec(60000, 2, 0)), 2);
  EXPECT_EQ(TotalSteps(Spec(0, 2, 0)), 0);
}

TEST(ProgressTrackerTest, StepsUpdateMetricsThroughputAndEta) {
  v1::Job job;
  job.mutable_metrics()->set_total_steps(10);
  ProgressTracker tracker(/*global_batch=*/256, /*running_since_unix_ms=*/1000);
  tracker.OnStep(Step(1, 1, 2.5, 0.5), 2000, &job);
  EXPECT_EQ(job.metrics().step(), 1);
  EXPECT_EQ(job.metrics().epoch(), 1);
  EXPECT_DOUBLE_EQ(job.metrics().loss(), 2.5);
  EXPECT_DOUBLE_EQ(job.metrics().samples_per_second(), 512);
  EXPECT_DOUBLE_EQ(job.metrics().eta_seconds(), 9 * 0.5);
  EXPECT_DOUBLE_EQ(job.metrics().elapsed_seconds(), 1.0);

  tracker.OnStep(Step(2, 1, 2.0, 0.25), 2500, &job);
  EXPECT_DOUBLE_EQ(job.metrics().samples_per_second(), 256 / 0.375);
  EXPECT_DOUBLE_EQ(job.metrics().eta_seconds(), 8 * 0.375);
  ASSERT_EQ(job.step_losses_size(), 2);
  EXPECT_DOUBLE_EQ(job.step_losses(1), 2.0);

  // A duplicate does not append; a gap is visible as NaN.
  tracker.OnStep(Step(2, 1, 9.0, 0.25), 2600, &job);
  EXPECT_EQ(job.step_losses_size(), 2);
  EXPECT_DOUBLE_EQ(job.metrics().loss(), 2.0);
  tracker.OnStep(Step(4, 2, 1.0, 0.25), 2700, &job);
  ASSERT_EQ(job.step_losses_size(), 4);
  EXPECT_TRUE(std::isnan(job.step_losses(2)));
  EXPECT_EQ(job.metrics().epoch(), 2);
}

// Pipe-SGD's replicas reduce gradients only, each reporting the loss over its own share of the
// batch: the step's loss is their samples-weighted mean, once all reported (a user's D = 2 and
// D = 4 runs read 0.92 and 1.02 where the same weights gave 0.76 synchronously).
TEST(ProgressTrackerTest, PipeSgdReplicasLossesAreCombined) {
  v1::ParallelPlanSummary plan;
  plan.set_schedule("pipesgd");
  plan.add_stages()->set_replicas(2);
  EXPECT_EQ(schedule::LossReplicas(plan), 2);
  EXPECT_TRUE(schedule::ReportsLoss(plan, 0, 1));
  plan.set_schedule("dapple");
  EXPECT_EQ(schedule::LossReplicas(plan), 1);  // the AllReduce adds the replicas' loss sums already
  EXPECT_TRUE(schedule::ReportsLoss(plan, 0, 0));
  EXPECT_FALSE(schedule::ReportsLoss(plan, 0, 1));
  plan.add_stages()->set_replicas(2);
  EXPECT_FALSE(schedule::ReportsLoss(plan, 0, 0));  // not the last stage

  v1::Job job;
  job.mutable_metrics()->set_total_steps(10);
  ProgressTracker tracker(/*global_batch=*/64, /*running_since_unix_ms=*/1000, /*loss_shares=*/2);
  auto share = [](int64_t step, int replica, double loss, int64_t samples) {
    v1::ProgressReport r = Step(step, 1, loss, 0.5);
    r.set_replica(replica);
    r.mutable_stats()->set_samples(samples);
    return r;
  };
  tracker.OnStep(share(1, 0, 2.0, 32), 2000, &job);
  EXPECT_EQ(job.metrics().step(), 0);  // waits for the other replica
  EXPECT_EQ(job.step_losses_size(), 0);
  tracker.OnStep(share(1, 0, 2.0, 32), 2000, &job);  // replayed: counts once
  EXPECT_EQ(job.metrics().step(), 0);
  tracker.OnStep(share(1, 1, 1.0, 32), 2100, &job);
  EXPECT_EQ(job.metrics().step(), 1);
  EXPECT_DOUBLE_EQ(job.metrics().loss(), 1.5);
  // Unequal shares weigh by their samples.
  tracker.OnStep(share(2, 1, 3.0, 48), 2200, &job);
  tracker.OnStep(share(2, 0, 1.0, 16), 2300, &job);
  ASSERT_EQ(job.step_losses_size(), 2);
  EXPECT_DOUBLE_EQ(job.step_losses(1), (3.0 * 48 + 1.0 * 16) / 64);
}

TEST(ProgressTrackerTest, ThroughputUsesTheLastTwentySteps) {
  v1::Job job;
  job.mutable_metrics()->set_total_steps(100);
  ProgressTracker tracker(100, 0);
  for (int i = 1; i <= 10; ++i) tracker.OnStep(Step(i, 1, 1.0, 10.0), 0, &job);
  for (int i = 11; i <= 30; ++i) tracker.OnStep(Step(i, 1, 1.0, 1.0), 0, &job);
  EXPECT_DOUBLE_EQ(job.metrics().samples_per_second(), 100.0);
  EXPECT_DOUBLE_EQ(job.metrics().eta_seconds(), 70.0);
}

TEST(ProgressTrackerTest, EvalSetsTestMetrics) {
  v1::Job job;
  ProgressTracker tracker(100, 0);
  EXPECT_FALSE(job.metrics().has_test_accuracy());
  v1::ProgressReport r;
  r.set_kind(v1::PROGRESS_EVAL);
  r.set_test_accuracy(0.85);
  r.set_test_loss(0.4);
  r.set_step(234);
  tracker.OnEval(r, 3000, &job);
  EXPECT_DOUBLE_EQ(job.metrics().test_accuracy(), 0.85);
  EXPECT_DOUBLE_EQ(job.metrics().test_loss(), 0.4);
  EXPECT_EQ(job.metrics().eval_step(), 234);
  EXPECT_DOUBLE_EQ(job.metrics().elapsed_seconds(), 3.0);
  EXPECT_FALSE(job.metrics().has_validation_loss());
  EXPECT_FALSE(job.metrics().has_validation_bits_per_byte());
  EXPECT_FALSE(job.metrics().has_validation_accuracy());
}

TEST(ProgressTrackerTest, EvalOfATextDatasetSetsValidationMetrics) {
  v1::Job job;
  ProgressTracker tracker(100, 0);
  v1::ProgressReport r;
  r.set_kind(v1::PROGRESS_EVAL);
  r.set_step(500);
  r.set_validation_loss(1.2);
  r.set_validation_bits_per_byte(1.2 / std::log(2.0));
  r.set_validation_accuracy(0.6);
  tracker.OnEval(r, 2000, &job);
  EXPECT_DOUBLE_EQ(job.metrics().validation_loss(), 1.2);
  EXPECT_DOUBLE_EQ(job.metrics().validation_bits_per_byte(), 1.2 / std::log(2.0));
  EXPECT_DOUBLE_EQ(job.metrics().validation_accuracy(), 0.6);
  EXPECT_EQ(job.metrics().eval_step(), 500);
  // The test-set fields stay unset: a job reports one group.
  EXPECT_FALSE(job.metrics().has_test_accuracy());
  EXPECT_FALSE(job.metrics().has_test_loss());
  // The next evaluation replaces them.
  r.set_step(1000);
  r.set_validation_loss(0.9);
  tracker.OnEval(r, 2500, &job);
  EXPECT_DOUBLE_EQ(job.metrics().validation_loss(), 0.9);
  EXPECT_EQ(job.metrics().eval_step(), 1000);
}

TEST(ProgressTrackerTest, SampleIsStoredAsDisplayText) {
  v1::Job job;
  ProgressTracker tracker(100, 0);
  v1::ProgressReport r;
  r.set_kind(v1::PROGRESS_SAMPLE);
  r.set_sample_text("And God said\n\tLet there be light");
  tracker.OnSample(r, 4000, &job);
  EXPECT_EQ(job.sample_text(), "And God said\n\tLet there be light");
  EXPECT_DOUBLE_EQ(job.metrics().elapsed_seconds(), 4.0);
  // Whatever a worker sends, the job keeps text a terminal shows as it is, and a bounded amount.
  r.set_sample_text("a\rb\x1b[2J");
  tracker.OnSample(r, 4000, &job);
  EXPECT_EQ(job.sample_text(),
            "a\xEF\xBF\xBD"
            "b\xEF\xBF\xBD[2J");
  r.set_sample_text(std::string(kMaxSampleTextBytes + 100, 'x'));
  tracker.OnSample(r, 4000, &job);
  EXPECT_EQ(job.sample_text(), std::string(kMaxSampleTextBytes, 'x'));
}

}  // namespace
}  // namespace dapple::coordinator
