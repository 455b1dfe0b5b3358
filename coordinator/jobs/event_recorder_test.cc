#include "coordinator/jobs/event_recorder.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/jobs/test_db.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

std::unique_ptr<EventRecorder> OpenRecorder(const std::string& path) {
  absl::StatusOr<std::unique_ptr<EventRecorder>> recorder = EventRecorder::Open(path);
  EXPECT_TRUE(recorder.ok()) << recorder.status();
  return recorder.ok() ? *std::move(recorder) : nullptr;
}

std::vector<std::string> Reasons(const std::vector<v1::JobEventRecord>& events) {
  std::vector<std::string> out;
  for (const v1::JobEventRecord& e : events) out.push_back(e.reason());
  return out;
}

TEST(EventRecorderTest, ListsEventsNewestLastWithTypeAndReason) {
  auto recorder = OpenRecorder(FreshDbPath());
  ASSERT_TRUE(recorder->Record("job-1", JobEventReason::kSubmitted, "submitted", 1000).ok());
  ASSERT_TRUE(recorder->Record("job-1", JobEventReason::kScheduled, "admitted", 2000).ok());
  ASSERT_TRUE(recorder->Record("job-2", JobEventReason::kSubmitted, "other job", 2500).ok());
  ASSERT_TRUE(recorder->Record("job-1", JobEventReason::kWorkerLost, "w-2 died", 3000).ok());
  absl::StatusOr<std::vector<v1::JobEventRecord>> events = recorder->List("job-1");
  ASSERT_TRUE(events.ok()) << events.status();
  EXPECT_EQ(Reasons(*events), (std::vector<std::string>{"Submitted", "Scheduled", "WorkerLost"}));
  EXPECT_EQ((*events)[0].type(), "Normal");
  EXPECT_EQ((*events)[2].type(), "Warning");
  EXPECT_EQ((*events)[2].message(), "w-2 died");
  EXPECT_EQ((*events)[2].count(), 1);
  EXPECT_EQ((*events)[2].first_unix_ms(), 3000);
  EXPECT_EQ((*events)[2].last_unix_ms(), 3000);
  EXPECT_TRUE(recorder->List("job-9")->empty());
}

TEST(EventRecorderTest, CoalescesRepeatsOfTheSameReasonAndMessage) {
  auto recorder = OpenRecorder(FreshDbPath());
  ASSERT_TRUE(recorder->Record("job-1", JobEventReason::kSubmitted, "submitted", 1000).ok());
  ASSERT_TRUE(recorder->Record("job-1", JobEventReason::kSkippedStep, "non-finite", 2000).ok());
  ASSERT_TRUE(recorder->Record("job-1", JobEventReason::kStarted, "started", 2500).ok());
  ASSERT_TRUE(recorder->Record("job-1", JobEventReason::kSkippedStep, "non-finite", 3000).ok());
  ASSERT_TRUE(recorder->Record("job-1", JobEventReason::kSkippedStep, "non-finite", 4000).ok());
  // Same reason, another message: a separate entry.
  ASSERT_TRUE(recorder->Record("job-1", JobEventReason::kSkippedStep, "other", 4500).ok());
  std::vector<v1::JobEventRecord> events = *recorder->List("job-1");
  ASSERT_EQ(events.size(), 4u);
  // The coalesced entry moved after Started: ordered by last occurrence.
  EXPECT_EQ(Reasons(events),
            (std::vector<std::string>{"Submitted", "Started", "SkippedStep", "SkippedStep"}));
  EXPECT_EQ(events[2].message(), "non-finite");
  EXPECT_EQ(events[2].count(), 3);
  EXPECT_EQ(events[2].first_unix_ms(), 2000);
  EXPECT_EQ(events[2].last_unix_ms(), 4000);
  EXPECT_EQ(events[3].count(), 1);
}

// A job checkpointing every few steps: its CheckpointSaved events are one row (the newest
// message, the count of them), so its lifecycle stays in the 100 rows.
TEST(EventRecorderTest, PeriodicCheckpointsAreOneRowThatKeepsTheLifecycle) {
  EXPECT_TRUE(ReplacesByReason(JobEventReason::kCheckpointSaved));
  EXPECT_FALSE(ReplacesByReason(JobEventReason::kSkippedStep));
  auto recorder = OpenRecorder(FreshDbPath());
  ASSERT_TRUE(recorder->Record("job-1", JobEventReason::kSubmitted, "submitted", 1000).ok());
  ASSERT_TRUE(recorder->Record("job-1", JobEventReason::kStarted, "started", 1500).ok());
  for (int i = 1; i <= 2 * EventRecorder::kMaxEventsPerJob; ++i) {
    ASSERT_TRUE(recorder
                    ->Record("job-1", JobEventReason::kCheckpointSaved,
                             absl::StrCat("checkpoint after step ", 50 * i, " published"), 2000 + i)
                    .ok());
  }
  std::vector<v1::JobEventRecord> events = *recorder->List("job-1");
  EXPECT_EQ(Reasons(events), (std::vector<std::string>{"Submitted", "Started", "CheckpointSaved"}));
  EXPECT_EQ(events[2].message(), "checkpoint after step 10000 published");
  EXPECT_EQ(events[2].count(), 2 * EventRecorder::kMaxEventsPerJob);
  EXPECT_EQ(events[2].first_unix_ms(), 2001);
}

// A checkpoint disk that stays full fails every checkpoint of the job: one Warning row, counted,
// with the newest reason.
TEST(EventRecorderTest, FailedCheckpointsAreOneWarningRow) {
  EXPECT_EQ(JobEventReasonName(JobEventReason::kCheckpointFailed), "CheckpointFailed");
  EXPECT_EQ(JobEventType(JobEventReason::kCheckpointFailed), "Warning");
  EXPECT_TRUE(ReplacesByReason(JobEventReason::kCheckpointFailed));
  auto recorder = OpenRecorder(FreshDbPath());
  for (int step : {200, 400}) {
    ASSERT_TRUE(recorder
                    ->Record("job-4", JobEventReason::kCheckpointFailed,
                             absl::StrCat("checkpoint after step ", step,
                                          " of job job-4 abandoned: stage 1 replica 0: writing "
                                          "shard: No space left on device"),
                             step)
                    .ok());
  }
  std::vector<v1::JobEventRecord> events = *recorder->List("job-4");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type(), "Warning");
  EXPECT_EQ(events[0].reason(), "CheckpointFailed");
  EXPECT_EQ(events[0].count(), 2);
  EXPECT_EQ(
      events[0].message(),
      "checkpoint after step 400 of job job-4 abandoned: stage 1 replica 0: writing shard: No "
      "space left on device");
}

TEST(EventRecorderTest, KeepsAtMostTheBoundPerJobAndAlwaysTheFirst) {
  auto recorder = OpenRecorder(FreshDbPath());
  ASSERT_TRUE(recorder->Record("job-1", JobEventReason::kSubmitted, "submitted", 1).ok());
  ASSERT_TRUE(recorder->Record("job-2", JobEventReason::kSubmitted, "submitted", 1).ok());
  const int extra = EventRecorder::kMaxEventsPerJob + 20;
  for (int i = 1; i <= extra; ++i) {
    ASSERT_TRUE(recorder
                    ->Record("job-1", JobEventReason::kSkippedStep,
                             absl::StrCat("non-finite loss at step ", i), 10 + i)
                    .ok());
  }
  std::vector<v1::JobEventRecord> events = *recorder->List("job-1");
  ASSERT_EQ(static_cast<int>(events.size()), EventRecorder::kMaxEventsPerJob);
  EXPECT_EQ(events.front().reason(), "Submitted");
  // The newest kMaxEventsPerJob - 1 of them, oldest first.
  EXPECT_EQ(events[1].message(),
            absl::StrCat("non-finite loss at step ", extra - EventRecorder::kMaxEventsPerJob + 2));
  EXPECT_EQ(events.back().message(), absl::StrCat("non-finite loss at step ", extra));
  // Another job's events are not pruned by this one's.
  EXPECT_EQ(recorder->List("job-2")->size(), 1u);
}

TEST(EventRecorderTest, EventsOutliveAReopen) {
  const std::string path = FreshDbPath();
  {
    auto recorder = OpenRecorder(path);
    ASSERT_TRUE(recorder->Record("job-1", JobEventReason::kSubmitted, "submitted", 1000).ok());
    ASSERT_TRUE(recorder->Record("job-1", JobEventReason::kFailed, "boom", 2000).ok());
  }
  auto reopened = OpenRecorder(path);
  std::vector<v1::JobEventRecord> events = *reopened->List("job-1");
  EXPECT_EQ(Reasons(events), (std::vector<std::string>{"Submitted", "Failed"}));
  // Coalescing continues across the reopen.
  ASSERT_TRUE(reopened->Record("job-1", JobEventReason::kFailed, "boom", 3000).ok());
  events = *reopened->List("job-1");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].count(), 2);
}

TEST(EventRecorderTest, RefusesAnEmptyJobId) {
  auto recorder = OpenRecorder(FreshDbPath());
  EXPECT_EQ(recorder->Record("", JobEventReason::kSubmitted, "x", 1).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(EventRecorderTest, EveryReasonHasANameAndType) {
  EXPECT_EQ(JobEventReasonName(JobEventReason::kCheckpointSaved), "CheckpointSaved");
  EXPECT_EQ(JobEventReasonName(JobEventReason::kStraggler), "Straggler");
  EXPECT_EQ(JobEventType(JobEventReason::kStraggler), "Warning");
  EXPECT_EQ(JobEventType(JobEventReason::kSucceeded), "Normal");
  EXPECT_EQ(JobEventType(JobEventReason::kCancelled), "Warning");
}

TEST(EventRecorderTest, PlannedAndStartedMessagesDescribeTheShape) {
  v1::ParallelPlanSummary plan;
  plan.set_planner("dapple");
  plan.set_schedule("dapple");
  plan.set_micro_batches(8);
  plan.set_predicted_step_ms(12.34);
  plan.set_profile_source("estimated");
  v1::PlanStageSummary* s0 = plan.add_stages();
  s0->set_replicas(2);
  s0->add_worker_ids("w-1");
  s0->add_devices("cpu");
  s0->add_worker_ids("w-2");
  s0->add_devices("cpu");
  v1::PlanStageSummary* s1 = plan.add_stages();
  s1->set_replicas(2);
  s1->add_worker_ids("w-3");
  s1->add_worker_ids("w-4");
  EXPECT_EQ(PlannedMessage(plan),
            "2 stages x 2 replicas by the dapple planner (schedule dapple, M=8), predicted 12.3 "
            "ms/step (profile: estimated)");
  EXPECT_EQ(StartedMessage(plan),
            "stage 0 replica 0 on w-1 (cpu), stage 0 replica 1 on w-2 (cpu), stage 1 replica 0 "
            "on w-3, stage 1 replica 1 on w-4");
  s1->set_replicas(1);
  s1->clear_worker_ids();
  EXPECT_EQ(PlannedMessage(plan).substr(0, 27), "2 stages with 2/1 replicas ");
  plan.mutable_stages(0)->set_recompute(true);
  EXPECT_THAT(PlannedMessage(plan), ::testing::HasSubstr("(schedule dapple, M=8, recompute on "
                                                         "stage 0), predicted"));
  s1->set_recompute(true);
  EXPECT_THAT(PlannedMessage(plan), ::testing::HasSubstr("M=8, recompute on stages 0, 1)"));
}

TEST(EventRecorderTest, TransitionEventsFollowTheState) {
  v1::Job job;
  JobEventReason reason;
  std::string message;
  job.set_state(v1::JOB_STATE_PENDING);  // back to PENDING: preempted
  ASSERT_TRUE(
      TransitionEvent(job, "reclaimed: tenant a needs its nominal quota back", &reason, &message));
  EXPECT_EQ(reason, JobEventReason::kPreempted);
  EXPECT_EQ(message, "reclaimed: tenant a needs its nominal quota back");
  job.set_state(v1::JOB_STATE_FAILED);
  ASSERT_TRUE(TransitionEvent(job, "worker w-2 stopped heartbeating", &reason, &message));
  EXPECT_EQ(reason, JobEventReason::kFailed);
  EXPECT_EQ(message, "worker w-2 stopped heartbeating");
  job.set_state(v1::JOB_STATE_SUCCEEDED);
  job.mutable_metrics()->set_step(10);
  job.mutable_metrics()->set_total_steps(10);
  job.mutable_metrics()->set_elapsed_seconds(2.5);
  job.mutable_metrics()->set_loss(0.25);
  ASSERT_TRUE(TransitionEvent(job, "", &reason, &message));
  EXPECT_EQ(reason, JobEventReason::kSucceeded);
  EXPECT_EQ(message, "10/10 steps in 2.5 s, last loss 0.2500");
}

}  // namespace
}  // namespace dapple::coordinator
