#include "coordinator/jobs/job_manager.h"

#include <atomic>
#include <thread>

#include "absl/time/clock.h"
#include "coordinator/jobs/test_db.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class JobManagerTest : public ::testing::Test {
 protected:
  std::unique_ptr<JobManager> Open() {
    JobManagerOptions options;
    options.db_path = path_;
    options.now_unix_ms = [this] { return now_.load(); };
    options.metrics_persist_interval_ms = 1000;
    auto manager = JobManager::Open(options);
    EXPECT_TRUE(manager.ok()) << manager.status();
    return manager.ok() ? std::move(*manager) : nullptr;
  }

  static v1::JobSpec Spec(const std::string& name) {
    v1::JobSpec spec;
    spec.set_name(name);
    spec.mutable_training()->set_epochs(3);
    return spec;
  }

  std::string path_ = FreshDbPath();
  std::atomic<int64_t> now_{1'700'000'000'000};
};

TEST_F(JobManagerTest, CreateStoresPendingJobsWithIncreasingIds) {
  auto jobs = Open();
  auto a = jobs->Create(Spec("a"), "name: a\n");
  auto b = jobs->Create(Spec("b"), "name: b\n");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->id(), "job-1");
  EXPECT_EQ(b->id(), "job-2");
  EXPECT_EQ(a->state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(a->name(), "a");
  EXPECT_EQ(a->spec_yaml(), "name: a\n");
  EXPECT_EQ(a->created_unix_ms(), now_.load());
  EXPECT_EQ(a->metrics().epochs(), 3);
  std::vector<std::string> ids;
  for (const v1::Job& j : jobs->List()) ids.push_back(j.id());
  EXPECT_THAT(ids, ElementsAre("job-2", "job-1"));  // newest first
  EXPECT_EQ(jobs->OldestPending(), "job-1");
}

TEST_F(JobManagerTest, CreateStoresThePlanMadeAtSubmission) {
  v1::ParallelPlanSummary plan;
  plan.set_planner("dapple");
  plan.set_predicted_step_ms(7.5);
  plan.add_stages()->set_last_layer(5);
  {
    auto jobs = Open();
    auto a = jobs->Create(Spec("a"), "name: a\n", plan);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_DOUBLE_EQ(a->plan().predicted_step_ms(), 7.5);
    auto b = jobs->Create(Spec("b"), "name: b\n");
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_FALSE(b->has_plan());  // planned when it starts
  }
  auto jobs = Open();  // written before Create returned
  auto a = jobs->Get("job-1");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->plan().planner(), "dapple");
  EXPECT_DOUBLE_EQ(a->plan().predicted_step_ms(), 7.5);
  EXPECT_EQ(a->plan().stages(0).last_layer(), 5);
}

TEST_F(JobManagerTest, TransitionFollowsTheLifecycle) {
  auto jobs = Open();
  ASSERT_TRUE(jobs->Create(Spec("a"), "").ok());
  // PENDING cannot jump to RUNNING or SUCCEEDED.
  auto bad = jobs->Transition("job-1", v1::JOB_STATE_RUNNING, "");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(bad.status().message(), "job job-1 is PENDING: cannot go to RUNNING");
  EXPECT_FALSE(jobs->Transition("job-1", v1::JOB_STATE_SUCCEEDED, "").ok());

  now_ += 10;
  ASSERT_TRUE(jobs->Transition("job-1", v1::JOB_STATE_PLANNING, "").ok());
  now_ += 10;
  auto running = jobs->Transition("job-1", v1::JOB_STATE_RUNNING, "", [](v1::Job* j) {
    j->add_worker_ids("w-1");
    j->mutable_metrics()->set_total_steps(7);
  });
  ASSERT_TRUE(running.ok());
  EXPECT_EQ(running->state(), v1::JOB_STATE_RUNNING);
  EXPECT_THAT(running->worker_ids(), ElementsAre("w-1"));
  EXPECT_EQ(running->metrics().total_steps(), 7);
  EXPECT_EQ(running->updated_unix_ms(), running->created_unix_ms() + 20);

  auto done = jobs->Transition("job-1", v1::JOB_STATE_SUCCEEDED, "");
  ASSERT_TRUE(done.ok());
  // Terminal states are final.
  for (v1::JobState to : {v1::JOB_STATE_FAILED, v1::JOB_STATE_CANCELLED, v1::JOB_STATE_PENDING,
                          v1::JOB_STATE_RUNNING}) {
    auto again = jobs->Transition("job-1", to, "x");
    EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(again.status().message(), "job job-1 already SUCCEEDED");
  }
  EXPECT_EQ(jobs->Get("job-1")->state(), v1::JOB_STATE_SUCCEEDED);

  auto missing = jobs->Transition("job-9", v1::JOB_STATE_CANCELLED, "");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "no job job-9");
  EXPECT_EQ(jobs->Get("job-9").status().message(), "no job job-9");
}

TEST_F(JobManagerTest, PendingAndPlanningCanFailOrBeCancelled) {
  auto jobs = Open();
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(jobs->Create(Spec("x"), "").ok());
  EXPECT_TRUE(jobs->Transition("job-1", v1::JOB_STATE_FAILED, "bad").ok());
  EXPECT_TRUE(jobs->Transition("job-2", v1::JOB_STATE_CANCELLED, "user").ok());
  ASSERT_TRUE(jobs->Transition("job-3", v1::JOB_STATE_PLANNING, "").ok());
  EXPECT_TRUE(jobs->Transition("job-3", v1::JOB_STATE_FAILED, "plan").ok());
  ASSERT_TRUE(jobs->Transition("job-4", v1::JOB_STATE_PLANNING, "").ok());
  EXPECT_TRUE(jobs->Transition("job-4", v1::JOB_STATE_CANCELLED, "user").ok());
  EXPECT_EQ(jobs->Get("job-1")->message(), "bad");
  EXPECT_FALSE(jobs->OldestPending().has_value());
}

TEST_F(JobManagerTest, UpdateOnlyWhileRunningAndPersistsAtMostOncePerInterval) {
  {
    auto jobs = Open();
    ASSERT_TRUE(jobs->Create(Spec("a"), "").ok());
    EXPECT_EQ(jobs->Update("job-1", [](v1::Job*) {}).code(), absl::StatusCode::kFailedPrecondition);
    ASSERT_TRUE(jobs->Transition("job-1", v1::JOB_STATE_PLANNING, "").ok());
    ASSERT_TRUE(jobs->Transition("job-1", v1::JOB_STATE_RUNNING, "").ok());
    now_ += 1000;
    ASSERT_TRUE(jobs->Update("job-1", [](v1::Job* j) { j->mutable_metrics()->set_step(1); }).ok());
    now_ += 200;
    ASSERT_TRUE(jobs->Update("job-1", [](v1::Job* j) { j->mutable_metrics()->set_step(2); }).ok());
    EXPECT_EQ(jobs->Get("job-1")->metrics().step(), 2);
    // Not written yet: a flush within the interval writes nothing...
    ASSERT_TRUE(jobs->FlushDirty(false).ok());
    {
      auto peek = JobStore::Open(path_);
      ASSERT_TRUE(peek.ok());
      EXPECT_EQ((*peek)->LoadAll()->at(0).metrics().step(), 1);
    }
    // ...and one after it does.
    now_ += 800;
    ASSERT_TRUE(jobs->FlushDirty(false).ok());
    auto peek = JobStore::Open(path_);
    EXPECT_EQ((*peek)->LoadAll()->at(0).metrics().step(), 2);
  }
}

std::vector<std::string> EventReasons(const JobManager& jobs, const std::string& id) {
  std::vector<std::string> out;
  absl::StatusOr<std::vector<v1::JobEventRecord>> events = jobs.Events(id);
  EXPECT_TRUE(events.ok()) << events.status();
  if (!events.ok()) return out;
  for (const v1::JobEventRecord& e : *events) out.push_back(e.reason());
  return out;
}

TEST_F(JobManagerTest, ReopeningRecoversJobs) {
  {
    auto jobs = Open();
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(jobs->Create(Spec(absl::StrCat("j", i)), "").ok());
    // job-1 SUCCEEDED with metrics, job-2 RUNNING, job-3 PLANNING, job-4 PENDING, job-5 FAILED,
    // job-6 RESTARTING.
    ASSERT_TRUE(jobs->Create(Spec("j5"), "").ok());
    ASSERT_TRUE(jobs->Transition("job-6", v1::JOB_STATE_PLANNING, "").ok());
    ASSERT_TRUE(jobs->Transition("job-6", v1::JOB_STATE_RUNNING, "").ok());
    ASSERT_TRUE(jobs->Transition("job-6", v1::JOB_STATE_RESTARTING, "restart 1 of 2").ok());
    ASSERT_TRUE(jobs->Transition("job-1", v1::JOB_STATE_PLANNING, "").ok());
    ASSERT_TRUE(jobs->Transition("job-1", v1::JOB_STATE_RUNNING, "").ok());
    ASSERT_TRUE(jobs->Update("job-1",
                             [](v1::Job* j) {
                               j->mutable_metrics()->set_step(9);
                               j->mutable_metrics()->set_test_accuracy(0.8);
                               j->add_step_losses(1.0);
                             })
                    .ok());
    ASSERT_TRUE(jobs->Transition("job-1", v1::JOB_STATE_SUCCEEDED, "").ok());
    ASSERT_TRUE(jobs->Transition("job-2", v1::JOB_STATE_PLANNING, "").ok());
    ASSERT_TRUE(jobs->Transition("job-2", v1::JOB_STATE_RUNNING, "").ok());
    ASSERT_TRUE(jobs->Transition("job-3", v1::JOB_STATE_PLANNING, "").ok());
    ASSERT_TRUE(jobs->Transition("job-5", v1::JOB_STATE_FAILED, "spec was bad").ok());
  }
  now_ += 5000;
  auto jobs = Open();
  auto j1 = jobs->Get("job-1");
  EXPECT_EQ(j1->state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(j1->metrics().step(), 9);
  EXPECT_DOUBLE_EQ(j1->metrics().test_accuracy(), 0.8);
  EXPECT_THAT(j1->step_losses(), ElementsAre(1.0));
  // RUNNING stays RUNNING (its workers re-attach); PLANNING is queued again, ahead of job-4.
  EXPECT_EQ(jobs->Get("job-2")->state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(jobs->Get("job-3")->state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(jobs->Get("job-3")->message(), kRequeuedMessage);
  EXPECT_EQ(jobs->Get("job-3")->updated_unix_ms(), now_.load());
  EXPECT_THAT(EventReasons(*jobs, "job-3"),
              ElementsAre("Submitted", "Scheduled", "CoordinatorRestarted"));
  EXPECT_EQ(jobs->Get("job-4")->state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(jobs->Get("job-5")->message(), "spec was bad");
  // RESTARTING stays RESTARTING: the service waits out its backoff again.
  EXPECT_EQ(jobs->Get("job-6")->state(), v1::JOB_STATE_RESTARTING);
  EXPECT_EQ(jobs->Get("job-6")->message(), "restart 1 of 2");
  EXPECT_EQ(jobs->OldestPending(), "job-3");
  auto next = jobs->Create(Spec("new"), "");
  EXPECT_EQ(next->id(), "job-7");
}

TEST_F(JobManagerTest, LifecycleChangesRecordEventsThatOutliveARestart) {
  v1::ParallelPlanSummary plan;
  plan.set_planner("dapple");
  plan.set_schedule("dapple");
  plan.add_stages()->set_replicas(1);
  {
    auto jobs = Open();
    ASSERT_TRUE(jobs->Create(Spec("a"), "name: a\n", plan).ok());
    ASSERT_TRUE(jobs->Create(Spec("b"), "name: b\n").ok());
    now_ += 1000;
    ASSERT_TRUE(jobs->Transition("job-1", v1::JOB_STATE_PLANNING, "").ok());
    ASSERT_TRUE(jobs->RecordEvent("job-1", JobEventReason::kMeasured, "measured").ok());
    ASSERT_TRUE(jobs->Transition("job-1", v1::JOB_STATE_RUNNING, "").ok());
    ASSERT_TRUE(jobs->Transition("job-2", v1::JOB_STATE_CANCELLED, "cancelled by user").ok());
    EXPECT_EQ(jobs->RecordEvent("job-9", JobEventReason::kMeasured, "x").code(),
              absl::StatusCode::kNotFound);
    EXPECT_EQ(jobs->Events("job-9").status().code(), absl::StatusCode::kNotFound);
    EXPECT_THAT(EventReasons(*jobs, "job-2"), ElementsAre("Submitted", "Cancelled"));
  }
  // The restart keeps the running job RUNNING with its history; its end is recorded after it.
  auto jobs = Open();
  EXPECT_THAT(EventReasons(*jobs, "job-1"),
              ElementsAre("Submitted", "Planned", "Scheduled", "Measured", "Started"));
  ASSERT_TRUE(jobs->Transition("job-1", v1::JOB_STATE_FAILED, "lost").ok());
  absl::StatusOr<std::vector<v1::JobEventRecord>> events = jobs->Events("job-1");
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(events->back().message(), "lost");
  EXPECT_EQ(events->back().type(), "Warning");
  EXPECT_EQ(events->front().first_unix_ms(), 1'700'000'000'000);
}

TEST_F(JobManagerTest, AwaitChangeWakesOnChangeAndTimesOut) {
  auto jobs = Open();
  ASSERT_TRUE(jobs->Create(Spec("a"), "").ok());
  auto snap = jobs->GetSnapshot("job-1");
  ASSERT_TRUE(snap.ok());
  EXPECT_FALSE(jobs->AwaitChange("job-1", snap->version, absl::Now() + absl::Milliseconds(20)));

  std::thread changer([&] {
    absl::SleepFor(absl::Milliseconds(20));
    ASSERT_TRUE(jobs->Transition("job-1", v1::JOB_STATE_CANCELLED, "x").ok());
  });
  EXPECT_TRUE(jobs->AwaitChange("job-1", snap->version, absl::Now() + absl::Seconds(10)));
  changer.join();
  EXPECT_GT(jobs->GetSnapshot("job-1")->version, snap->version);

  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(20));
    jobs->Shutdown();
  });
  auto now = jobs->GetSnapshot("job-1");
  const absl::Time start = absl::Now();
  EXPECT_FALSE(jobs->AwaitChange("job-1", now->version, absl::Now() + absl::Seconds(10)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  stopper.join();
  EXPECT_TRUE(jobs->IsShutdown());
}

}  // namespace
}  // namespace dapple::coordinator

namespace dapple::coordinator {
namespace {

TEST_F(JobManagerTest, ASecondManagerOnTheSameDatabaseIsRefusedBeforeRecovering) {
  auto first = Open();
  ASSERT_TRUE(first->Create(Spec("a"), "").ok());
  ASSERT_TRUE(first->Transition("job-1", v1::JOB_STATE_PLANNING, "").ok());

  JobManagerOptions options;
  options.db_path = path_;
  auto second = JobManager::Open(options);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(second.status().message(),
            absl::StrCat("database ", path_, " is in use by another dapple-coordinator (pid ",
                         getpid(), ")"));
  // The first one's job being planned was not recovered (queued again) by the second, on disk
  // or here.
  {
    auto peek = JobStore::Open(path_);
    ASSERT_TRUE(peek.ok());
    EXPECT_EQ((*peek)->LoadAll()->at(0).state(), v1::JOB_STATE_PLANNING);
  }
  EXPECT_EQ(first->Get("job-1")->state(), v1::JOB_STATE_PLANNING);
  EXPECT_EQ(first->Create(Spec("b"), "")->id(), "job-2");

  // Released with the manager.
  first.reset();
  auto third = Open();
  ASSERT_NE(third, nullptr);
  EXPECT_EQ(third->Get("job-1")->state(), v1::JOB_STATE_PENDING);
}

TEST_F(JobManagerTest, AnEmptyDatabasePathIsRefused) {
  JobManagerOptions options;
  options.db_path = "";
  auto manager = JobManager::Open(options);
  ASSERT_FALSE(manager.ok());
  EXPECT_EQ(manager.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(manager.status().message(), "job database path is empty");
}

TEST_F(JobManagerTest, PendingMessageOnlyWhilePendingAndWrittenUnderTheThrottle) {
  auto jobs = Open();
  ASSERT_TRUE(jobs->Create(Spec("a"), "").ok());
  ASSERT_TRUE(jobs->Create(Spec("b"), "").ok());
  EXPECT_THAT(jobs->PendingIds(), ElementsAre("job-1", "job-2"));
  const int64_t v0 = jobs->GetSnapshot("job-1")->version;

  // Within the interval of the Create write: in memory and to watchers, not on disk yet.
  now_ += 100;
  ASSERT_TRUE(jobs->SetPendingMessage("job-1", "waiting").ok());
  const auto snap = jobs->GetSnapshot("job-1");
  EXPECT_EQ(snap->job.message(), "waiting");
  EXPECT_GT(snap->version, v0);
  EXPECT_TRUE(jobs->AwaitChange("job-1", v0, absl::Now()));
  {
    auto peek = JobStore::Open(path_);
    EXPECT_EQ((*peek)->LoadAll()->at(0).message(), "");
  }
  // The same message again is no change at all.
  ASSERT_TRUE(jobs->SetPendingMessage("job-1", "waiting").ok());
  EXPECT_EQ(jobs->GetSnapshot("job-1")->version, snap->version);
  now_ += 900;
  ASSERT_TRUE(jobs->FlushDirty(false).ok());
  {
    auto peek = JobStore::Open(path_);
    EXPECT_EQ((*peek)->LoadAll()->at(0).message(), "waiting");
  }

  // Starting clears it; a job that is not PENDING takes none.
  ASSERT_TRUE(jobs->Transition("job-1", v1::JOB_STATE_PLANNING, "").ok());
  EXPECT_EQ(jobs->Get("job-1")->message(), "");
  absl::Status s = jobs->SetPendingMessage("job-1", "x");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "job job-1 is PLANNING, not PENDING or RESTARTING");
  EXPECT_EQ(jobs->SetPendingMessage("job-9", "x").code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(jobs->PendingIds(), ElementsAre("job-2"));
}

}  // namespace
}  // namespace dapple::coordinator
