#include "dapplectl/progress.h"

#include <limits>

#include "gtest/gtest.h"

namespace dapple::ctl {
namespace {

v1::Job RunningJob(int64_t step, int64_t total, int epoch, int epochs) {
  v1::Job job;
  job.set_id("job-3");
  job.set_name("fmnist-mlp");
  job.set_state(v1::JOB_STATE_RUNNING);
  v1::JobMetrics* m = job.mutable_metrics();
  m->set_step(step);
  m->set_total_steps(total);
  m->set_epoch(epoch);
  m->set_epochs(epochs);
  if (step > 0) {
    m->set_loss(0.42131);
    m->set_samples_per_second(1234.4);
    m->set_elapsed_seconds(10);
  }
  return job;
}

TEST(ProgressLineTest, ZeroPercent) {
  v1::Job job = RunningJob(0, 702, 0, 3);
  EXPECT_EQ(RenderProgressLine(job),
            "job-3 RUNNING [....................] step 0/702 epoch 0/3 ETA -");
}

TEST(ProgressLineTest, AResumedJobShowsNoLossBeforeItsFirstStep) {
  v1::Job job = RunningJob(83, 234, 1, 1);
  job.mutable_metrics()->set_loss(std::numeric_limits<double>::quiet_NaN());
  job.mutable_metrics()->set_samples_per_second(0);
  job.mutable_metrics()->set_elapsed_seconds(0);
  EXPECT_EQ(RenderProgressLine(job),
            "job-3 RUNNING [#######.............] step 83/234 epoch 1/1 ETA -");
}

TEST(ProgressLineTest, FiftyPercent) {
  v1::Job job = RunningJob(351, 702, 2, 3);
  job.mutable_metrics()->set_eta_seconds(42);
  EXPECT_EQ(RenderProgressLine(job),
            "job-3 RUNNING [##########..........] step 351/702 epoch 2/3 loss 0.4213 "
            "1234 samples/s ETA 0:42");
}

TEST(ProgressLineTest, HundredPercent) {
  v1::Job job = RunningJob(702, 702, 3, 3);
  job.mutable_metrics()->set_eta_seconds(5);  // stale: the job is at its last step
  EXPECT_EQ(RenderProgressLine(job),
            "job-3 RUNNING [####################] step 702/702 epoch 3/3 loss 0.4213 "
            "1234 samples/s ETA 0:00");
}

TEST(ProgressLineTest, BarIsFullOnlyWhenAllStepsAreDone) {
  v1::Job job = RunningJob(701, 702, 3, 3);
  const std::string line = RenderProgressLine(job);
  EXPECT_NE(line.find("[###################.]"), std::string::npos) << line;
}

TEST(ProgressLineTest, UnknownTotalHasNoBarNoEta) {
  v1::Job job = RunningJob(120, 0, 0, 0);
  EXPECT_EQ(RenderProgressLine(job), "job-3 RUNNING step 120 loss 0.4213 1234 samples/s");
}

TEST(ProgressLineTest, PendingJobWithoutMetricsIsJustIdAndState) {
  v1::Job job;
  job.set_id("job-4");
  job.set_state(v1::JOB_STATE_PENDING);
  EXPECT_EQ(RenderProgressLine(job), "job-4 PENDING");
}

TEST(ProgressLineTest, PlainStyleShowsPercentInsteadOfBar) {
  v1::Job job = RunningJob(120, 702, 1, 3);
  job.mutable_metrics()->set_eta_seconds(42);
  EXPECT_EQ(RenderProgressLine(job, ProgressStyle{.bar = false}),
            "job-3 RUNNING step 120/702 (17%) epoch 1/3 loss 0.4213 1234 samples/s ETA 0:42");
}

TEST(ProgressLineTest, CustomBarWidth) {
  v1::Job job = RunningJob(50, 100, 1, 1);
  const std::string line = RenderProgressLine(job, ProgressStyle{.bar = true, .bar_width = 10});
  EXPECT_NE(line.find(" [#####.....] "), std::string::npos) << line;
}

TEST(EtaTest, UsesCoordinatorEtaThenExtrapolates) {
  v1::JobMetrics m;
  m.set_total_steps(300);
  EXPECT_EQ(EstimateEtaSeconds(m), -1);  // no step yet
  m.set_step(100);
  m.set_elapsed_seconds(100);
  EXPECT_DOUBLE_EQ(EstimateEtaSeconds(m), 200);  // 1 s per step, 200 steps to go
  m.set_eta_seconds(30);
  EXPECT_DOUBLE_EQ(EstimateEtaSeconds(m), 30);
  m.set_step(300);
  EXPECT_DOUBLE_EQ(EstimateEtaSeconds(m), 0);
  m.set_total_steps(0);
  EXPECT_EQ(EstimateEtaSeconds(m), -1);
}

TEST(EtaTest, ExtrapolatedEtaInTheLine) {
  v1::Job job = RunningJob(100, 300, 1, 1);
  job.mutable_metrics()->set_elapsed_seconds(100);
  const std::string line = RenderProgressLine(job);
  EXPECT_NE(line.find("ETA 3:20"), std::string::npos) << line;
}

TEST(SummaryLineTest, Succeeded) {
  v1::Job job = RunningJob(702, 702, 3, 3);
  job.set_state(v1::JOB_STATE_SUCCEEDED);
  job.mutable_metrics()->set_test_accuracy(0.87123);
  job.mutable_metrics()->set_elapsed_seconds(83);
  EXPECT_EQ(RenderSummaryLine(job),
            "job-3 SUCCEEDED: test accuracy 87.12%, 1234 samples/s, 702/702 steps in 1:23");
}

void SetValidation(v1::Job* job, double loss, double bits_per_byte) {
  job->mutable_spec()->mutable_data()->set_dataset("text");
  job->mutable_metrics()->set_validation_loss(loss);
  job->mutable_metrics()->set_validation_bits_per_byte(bits_per_byte);
}

TEST(ValidationSummaryTest, OnlyOnceEvaluated) {
  v1::Job job = RunningJob(100, 300, 1, 1);
  EXPECT_EQ(ValidationSummary(job.metrics()), "");
  SetValidation(&job, 1.23456, 1.78108);
  EXPECT_EQ(ValidationSummary(job.metrics()), "validation loss 1.2346 (1.7811 bits/byte)");
}

TEST(ProgressLineTest, TextJobShowsItsValidationLoss) {
  v1::Job job = RunningJob(351, 702, 2, 3);
  job.mutable_metrics()->set_eta_seconds(42);
  SetValidation(&job, 1.23456, 1.78108);
  EXPECT_EQ(RenderProgressLine(job),
            "job-3 RUNNING [##########..........] step 351/702 epoch 2/3 loss 0.4213 "
            "validation loss 1.2346 (1.7811 bits/byte) 1234 samples/s ETA 0:42");
}

TEST(SummaryLineTest, TextJobLeadsWithItsValidationLoss) {
  v1::Job job = RunningJob(702, 702, 3, 3);
  job.set_state(v1::JOB_STATE_SUCCEEDED);
  job.mutable_metrics()->set_elapsed_seconds(83);
  SetValidation(&job, 1.23456, 1.78108);
  EXPECT_EQ(RenderSummaryLine(job),
            "job-3 SUCCEEDED: validation loss 1.2346 (1.7811 bits/byte), 1234 samples/s, "
            "702/702 steps in 1:23");
}

TEST(SummaryLineTest, FailedShowsMessageAndNoMissingAccuracy) {
  v1::Job job = RunningJob(120, 702, 1, 3);
  job.set_state(v1::JOB_STATE_FAILED);
  job.set_message("stage 1: worker w-2 stopped sending heartbeats");
  EXPECT_EQ(RenderSummaryLine(job),
            "job-3 FAILED (stage 1: worker w-2 stopped sending heartbeats): 1234 samples/s, "
            "120/702 steps in 0:10");
}

TEST(SummaryLineTest, CancelledBeforeStarting) {
  v1::Job job;
  job.set_id("job-5");
  job.set_state(v1::JOB_STATE_CANCELLED);
  job.set_message("cancelled by user");
  EXPECT_EQ(RenderSummaryLine(job), "job-5 CANCELLED (cancelled by user)");
}

TEST(SummaryLineTest, MessageOnlyForFailedOrCancelled) {
  v1::Job job;
  job.set_id("job-6");
  job.set_state(v1::JOB_STATE_SUCCEEDED);
  job.set_message("ignored");
  EXPECT_EQ(RenderSummaryLine(job), "job-6 SUCCEEDED");
}

TEST(FitToWidthTest, CutsToColumnsMinusOne) {
  EXPECT_EQ(FitToWidth("abcdef", 4), "abc");
  EXPECT_EQ(FitToWidth("abc", 4), "abc");
  EXPECT_EQ(FitToWidth("abcd", 4), "abc");
  EXPECT_EQ(FitToWidth("abcdef", 0), "abcdef");
}

TEST(PlainProgressThrottleTest, FirstStateChangesAndEveryTwoSeconds) {
  PlainProgressThrottle throttle;
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  EXPECT_TRUE(throttle.ShouldPrint(v1::JOB_STATE_PENDING, t0));
  EXPECT_TRUE(throttle.ShouldPrint(v1::JOB_STATE_RUNNING, t0 + absl::Milliseconds(10)));
  EXPECT_FALSE(throttle.ShouldPrint(v1::JOB_STATE_RUNNING, t0 + absl::Milliseconds(500)));
  EXPECT_FALSE(throttle.ShouldPrint(v1::JOB_STATE_RUNNING, t0 + absl::Milliseconds(2009)));
  EXPECT_TRUE(throttle.ShouldPrint(v1::JOB_STATE_RUNNING, t0 + absl::Milliseconds(2010)));
  EXPECT_FALSE(throttle.ShouldPrint(v1::JOB_STATE_RUNNING, t0 + absl::Milliseconds(3000)));
  EXPECT_TRUE(throttle.ShouldPrint(v1::JOB_STATE_SUCCEEDED, t0 + absl::Milliseconds(3001)));
}

}  // namespace
}  // namespace dapple::ctl
