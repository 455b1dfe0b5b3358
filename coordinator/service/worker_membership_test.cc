// CoordinatorService and its workers: dead and silent workers, heartbeats carrying the host's
// measurements, retention of dead workers, device types, why pending jobs wait, and
// deregistration; through direct handler calls.

#include <atomic>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/job_spec.h"
#include "common/profile/model_profile.h"
#include "coordinator/auth/test_identities.h"
#include "coordinator/jobs/job_store.h"
#include "coordinator/jobs/test_db.h"
#include "coordinator/service/coordinator_service.h"
#include "coordinator/service/coordinator_service_test_fixture.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST_F(CoordinatorServiceTest, DeadWorkerFailsItsJobNamingWorkerAndStage) {
  std::string w1, w2;
  const std::string id = StartTwoStageJob(&w1, &w2);  // heartbeats at kStart
  now_ += 4000;
  Heartbeat(w1, id);
  now_ += 999;
  svc_->Tick();
  EXPECT_EQ(Get(id).state(), v1::JOB_STATE_RUNNING);
  now_ += 1;  // w-2 silent for exactly the timeout
  svc_->Tick();
  v1::Job job = Get(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(job.message(),
            "worker w-2 (stage 1 of job job-1) stopped heartbeating (no heartbeat for 5.0 s)");
  EXPECT_EQ(Worker(w2).state(), v1::WORKER_STATE_DEAD);
  EXPECT_EQ(Worker(w1).state(), v1::WORKER_STATE_BUSY);
  EXPECT_THAT(Heartbeat(w1, id).abort_job_ids(), ElementsAre(id));

  // The dead worker must register again.
  EXPECT_TRUE(Heartbeat(w2, id).unknown_worker());
  auto report = Report(w2, id, 1, v1::PROGRESS_STEP);
  EXPECT_EQ(report.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(report.status().message(), "unknown worker w-2: register again");
  EXPECT_TRUE(Heartbeat("w-99").unknown_worker());
  // An idle worker that goes silent just dies.
  Heartbeat(w1, "");
  now_ += 5000;
  svc_->Tick();
  EXPECT_EQ(Worker(w1).state(), v1::WORKER_STATE_DEAD);
}

// The coordinator's own stall (its passes late) makes every worker look silent at once; their
// queued heartbeats land within the grace, and nobody is declared DEAD. A worker still silent
// after the grace is.
TEST_F(CoordinatorServiceTest, ACoordinatorStallDoesNotKillHealthyWorkers) {
  svc_.reset();
  svc_ = Open(600'000, /*stall_grace_ms=*/1000);
  std::string w1, w2;
  const std::string id = StartTwoStageJob(&w1, &w2);  // heartbeats at kStart
  svc_->Tick();
  now_ += 7000;  // the next pass 7 s late: both silent past the 5 s timeout
  svc_->Tick();
  EXPECT_EQ(Worker(w1).state(), v1::WORKER_STATE_BUSY);
  EXPECT_EQ(Worker(w2).state(), v1::WORKER_STATE_BUSY);
  EXPECT_EQ(Get(id).state(), v1::JOB_STATE_RUNNING);
  Heartbeat(w1, id);  // w-1's queued heartbeat lands; w-2's never comes
  now_ += 100;
  svc_->Tick();
  EXPECT_EQ(Get(id).state(), v1::JOB_STATE_RUNNING);
  for (int i = 0; i < 10; ++i) {  // the grace passes at 100 ms a pass
    now_ += 100;
    Heartbeat(w1, id);
    svc_->Tick();
  }
  EXPECT_EQ(Worker(w1).state(), v1::WORKER_STATE_BUSY);
  EXPECT_EQ(Worker(w2).state(), v1::WORKER_STATE_DEAD);
  EXPECT_EQ(Get(id).state(), v1::JOB_STATE_FAILED);
}

std::vector<std::string> WorkerIds(CoordinatorService& svc) {
  v1::ListWorkersResponse resp;
  EXPECT_TRUE(svc.ListWorkers(auth::TestAdmin(), {}, &resp).ok());
  std::vector<std::string> ids;
  for (const v1::WorkerInfo& w : resp.workers()) ids.push_back(w.id());
  return ids;
}

// A cpu worker refines its host's capacity after registering (host_capacity.h) and sends the
// estimate in its heartbeats: the coordinator plans with the newest valid one.
TEST_F(CoordinatorServiceTest, HeartbeatsUpdateTheHostComputeCapacity) {
  v1::RegisterWorkerRequest reg;
  reg.set_hostname("localhost");
  reg.set_pid(next_pid_++);
  reg.add_devices("cpu");
  reg.set_host_compute_capacity(1.05);  // measured while other processes started
  v1::RegisterWorkerResponse registered;
  ASSERT_TRUE(svc_->RegisterWorker(auth::TestJoin(), reg, &registered).ok());
  const std::string w = registered.worker_id();
  EXPECT_DOUBLE_EQ(Worker(w).host_compute_capacity(), 1.05);
  auto beat = [&](double capacity) {
    v1::HeartbeatRequest req;
    req.set_worker_id(w);
    req.set_host_compute_capacity(capacity);
    v1::HeartbeatResponse resp;
    EXPECT_TRUE(svc_->Heartbeat(auth::TestWorker(w), req, &resp).ok());
  };
  beat(1.9);
  EXPECT_DOUBLE_EQ(Worker(w).host_compute_capacity(), 1.9);
  // No estimate, or none a capacity can be (below one core, not finite): the last one stays.
  for (double bad : {0.0, 0.5, -2.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    beat(bad);
    EXPECT_DOUBLE_EQ(Worker(w).host_compute_capacity(), 1.9) << bad;
  }
}

TEST_F(CoordinatorServiceTest, RegistrationAndHeartbeatsCarryTheHostsLoopbackLink) {
  v1::RegisterWorkerRequest reg;
  reg.set_hostname("localhost");
  reg.set_pid(next_pid_++);
  reg.add_devices("cpu");
  reg.mutable_loopback_link()->set_latency_ms(0.05);
  reg.mutable_loopback_link()->set_bandwidth_bytes_per_s(4e8);
  v1::RegisterWorkerResponse registered;
  ASSERT_TRUE(svc_->RegisterWorker(auth::TestJoin(), reg, &registered).ok());
  const std::string w = registered.worker_id();
  EXPECT_DOUBLE_EQ(Worker(w).loopback_link().bandwidth_bytes_per_s(), 4e8);
  auto beat = [&](double latency_ms, double bandwidth) {
    v1::HeartbeatRequest req;
    req.set_worker_id(w);
    req.mutable_loopback_link()->set_latency_ms(latency_ms);
    req.mutable_loopback_link()->set_bandwidth_bytes_per_s(bandwidth);
    v1::HeartbeatResponse resp;
    EXPECT_TRUE(svc_->Heartbeat(auth::TestWorker(w), req, &resp).ok());
  };
  beat(0.04, 6e8);
  EXPECT_DOUBLE_EQ(Worker(w).loopback_link().latency_ms(), 0.04);
  EXPECT_DOUBLE_EQ(Worker(w).loopback_link().bandwidth_bytes_per_s(), 6e8);
  // A link no host has (what any peer may send): the last one stays.
  for (const auto& [latency, bandwidth] :
       {std::pair{-1.0, 6e8}, std::pair{0.04, 0.0}, std::pair{std::nan(""), 6e8},
        std::pair{0.04, std::numeric_limits<double>::infinity()}, std::pair{1e9, 6e8}}) {
    beat(latency, bandwidth);
    EXPECT_DOUBLE_EQ(Worker(w).loopback_link().latency_ms(), 0.04) << latency;
    EXPECT_DOUBLE_EQ(Worker(w).loopback_link().bandwidth_bytes_per_s(), 6e8) << bandwidth;
  }
  // A heartbeat without one keeps it too.
  v1::HeartbeatRequest plain;
  plain.set_worker_id(w);
  v1::HeartbeatResponse resp;
  ASSERT_TRUE(svc_->Heartbeat(auth::TestWorker(w), plain, &resp).ok());
  EXPECT_DOUBLE_EQ(Worker(w).loopback_link().bandwidth_bytes_per_s(), 6e8);
}

TEST_F(CoordinatorServiceTest, DeadWorkersAreForgottenAfterTheRetentionPeriod) {
  const std::string w1 = Register();
  const std::string w2 = Register();
  now_ += 4000;
  Heartbeat(w1);
  now_ += 1000;  // w-2 silent for the timeout: DEAD at kStart + 5 s
  svc_->Tick();
  ASSERT_EQ(Worker(w2).state(), v1::WORKER_STATE_DEAD);
  // Listed (DEAD) for the whole default retention of 600 s, while w-1 stays alive.
  for (int i = 0; i < 200; ++i) {
    now_ += 2999;
    Heartbeat(w1);
    svc_->Tick();
  }
  now_ += 600'000 - 200 * 2999 - 1;  // 1 ms before the end of the retention
  Heartbeat(w1);
  svc_->Tick();
  EXPECT_THAT(WorkerIds(*svc_), ElementsAre(w1, w2));
  now_ += 1;
  Heartbeat(w1);
  svc_->Tick();
  EXPECT_THAT(WorkerIds(*svc_), ElementsAre(w1));
  // Forgotten like a deregistered worker: its heartbeat says register again, and it gets a new
  // id (generated ids are never handed out twice).
  EXPECT_TRUE(Heartbeat(w2).unknown_worker());
  EXPECT_EQ(Register(), "w-3");
}

TEST_F(CoordinatorServiceTest, ADeadWorkerThatRegistersAgainIsNotForgotten) {
  const std::string named = Register("gpu-node");
  now_ += 5000;
  svc_->Tick();
  ASSERT_EQ(Worker(named).state(), v1::WORKER_STATE_DEAD);
  now_ += 599'000;
  EXPECT_EQ(Register("gpu-node"), named);  // back, IDLE, before the retention ended
  now_ += 2000;
  Heartbeat(named);
  svc_->Tick();
  EXPECT_EQ(Worker(named).state(), v1::WORKER_STATE_IDLE);
}

TEST_F(CoordinatorServiceTest, ZeroRetentionForgetsADeadWorkerInTheSamePass) {
  svc_.reset();
  svc_ = Open(/*dead_worker_retention_ms=*/0);
  const std::string w1 = Register();
  now_ += 5000;
  svc_->Tick();
  EXPECT_TRUE(WorkerIds(*svc_).empty());
  EXPECT_TRUE(Heartbeat(w1).unknown_worker());
}

TEST_F(CoordinatorServiceTest, DeviceTypeChoosesWhichWorkersRunTheJob) {
  ASSERT_TRUE(Submit(Spec(2) + "  device_type: cuda\n").ok());
  Register("c1");
  Register("c2");
  svc_->Tick();
  EXPECT_EQ(Get("job-1").state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(Get("job-1").message(),
            "waiting for 2 idle workers with cuda devices: 2 registered, 2 idle, 0 idle with "
            "cuda devices");
  Register("g1", "cuda:0");
  Register("g2", "cuda:1");
  svc_->Tick();
  const v1::Job job = Get("job-1");
  ASSERT_EQ(job.state(), v1::JOB_STATE_RUNNING);
  EXPECT_THAT(job.worker_ids(), ElementsAre("g1", "g2"));
  EXPECT_THAT(job.plan().stages(0).devices(), ElementsAre("cuda:0"));
  EXPECT_THAT(job.plan().stages(1).devices(), ElementsAre("cuda:1"));
  EXPECT_THAT(job.plan().stages(1).hostnames(), ElementsAre("localhost"));
  EXPECT_EQ(Heartbeat("g2").assignment().device(), "cuda:1");

  // A cpu job takes the CPU workers; an "any" job whatever is idle.
  ASSERT_TRUE(Submit(Spec(1) + "  device_type: cpu\n").ok());
  svc_->Tick();
  EXPECT_THAT(Get("job-2").worker_ids(), ElementsAre("c1"));
  ASSERT_TRUE(Submit(Spec(1)).ok());
  svc_->Tick();
  EXPECT_THAT(Get("job-3").worker_ids(), ElementsAre("c2"));
}

TEST_F(CoordinatorServiceTest, PendingJobsSayWhyTheyWait) {
  ASSERT_TRUE(Submit(Spec(3)).ok());  // job-1 needs 3
  ASSERT_TRUE(Submit(Spec(1)).ok());  // job-2 fits one worker
  ASSERT_TRUE(Submit(Spec(1)).ok());  // job-3
  svc_->Tick();
  EXPECT_EQ(Get("job-1").message(), "waiting for 3 idle workers: 0 registered, 0 idle");
  EXPECT_EQ(Get("job-1").pending_reason(), "WaitingForDevices");
  EXPECT_EQ(Get("job-2").message(), "waiting for 1 idle worker: 0 registered, 0 idle");
  EXPECT_EQ(Get("job-3").message(), "waiting for 1 idle worker: 0 registered, 0 idle");
  v1::ListJobsResponse list;
  ASSERT_TRUE(svc_->ListJobs(auth::TestAdmin(), {}, &list).ok());
  EXPECT_EQ(list.jobs(2).message(), "waiting for 3 idle workers: 0 registered, 0 idle");

  // No head-of-line blocking: job-1 does not fit, so job-2 and job-3 behind it start.
  Register();
  Register();
  svc_->Tick();
  EXPECT_EQ(Get("job-2").state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Get("job-3").state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Get("job-2").message(), "");  // cleared when it starts
  EXPECT_EQ(Get("job-2").pending_reason(), "");
  EXPECT_EQ(Get("job-1").state(), v1::JOB_STATE_PENDING);
  // A busy worker counts as registered, not idle.
  EXPECT_EQ(Get("job-1").message(), "waiting for 3 idle workers: 2 registered, 0 idle");
  Register();
  Register();
  svc_->Tick();
  EXPECT_EQ(Get("job-1").message(), "waiting for 3 idle workers: 4 registered, 2 idle");

  // Watchers see the explanation, then its clearing when the job starts.
  v1::WatchJobRequest watch;
  watch.set_job_id("job-1");
  absl::Mutex mu;
  std::vector<std::string> seen;
  std::atomic<bool> stop{false};
  std::thread watcher([&] {
    (void)svc_->WatchJob(
        auth::TestAdmin(), watch,
        [&](const v1::JobEvent& e) {
          absl::MutexLock lock(&mu);
          seen.push_back(e.job().message());
          return seen.size() < 2;
        },
        [&] { return stop.load(); });
  });
  auto seen_at_least = [&](size_t n) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline) {
      {
        absl::MutexLock lock(&mu);
        if (seen.size() >= n) return true;
      }
      absl::SleepFor(absl::Milliseconds(2));
    }
    return false;
  };
  const bool first = seen_at_least(1);
  Register();
  svc_->Tick();
  const bool second = seen_at_least(2);
  stop = true;  // ends the watch within 100 ms should the second snapshot never come
  watcher.join();
  ASSERT_TRUE(first && second);
  EXPECT_EQ(Get("job-1").state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(seen[0], "waiting for 3 idle workers: 4 registered, 2 idle");
  EXPECT_EQ(seen[1], "");
}

TEST_F(CoordinatorServiceTest, PendingMessageWritesStayUnderTheThrottle) {
  ASSERT_TRUE(Submit(Spec(2)).ok());
  svc_->Tick();
  // Registrations within the persist interval change the message in memory only.
  Register();
  svc_->Tick();
  EXPECT_EQ(Get("job-1").message(), "waiting for 2 idle workers: 1 registered, 1 idle");
  svc_.reset();  // flushes at shutdown
  {
    auto store = JobStore::Open(path_);
    ASSERT_TRUE(store.ok());
    EXPECT_EQ((*store)->LoadAll()->at(0).message(),
              "waiting for 2 idle workers: 1 registered, 1 idle");
  }
  svc_ = Open();
  ASSERT_NE(svc_, nullptr);
  svc_->Tick();  // the old workers are gone after a restart
  EXPECT_EQ(Get("job-1").message(), "waiting for 2 idle workers: 0 registered, 0 idle");
}

TEST_F(CoordinatorServiceTest, DeregisteringABusyWorkerFailsItsJobAtOnce) {
  std::string w1, w2;
  const std::string id = StartTwoStageJob(&w1, &w2);
  v1::DeregisterWorkerRequest req;
  req.set_worker_id(w2);
  v1::DeregisterWorkerResponse resp;
  ASSERT_TRUE(svc_->DeregisterWorker(auth::TestWorker((req).worker_id()), req, &resp).ok());
  v1::Job job = Get(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(job.message(), "worker w-2 (stage 1 of job job-1) shut down");
  v1::ListWorkersResponse workers;
  ASSERT_TRUE(svc_->ListWorkers(auth::TestAdmin(), {}, &workers).ok());
  ASSERT_EQ(workers.workers_size(), 1);
  EXPECT_EQ(workers.workers(0).id(), w1);
  // The other rank is told to stop; the gone worker is unknown from now on.
  EXPECT_THAT(Heartbeat(w1, id).abort_job_ids(), ElementsAre(id));
  EXPECT_TRUE(Heartbeat(w2, id).unknown_worker());
  absl::Status again = svc_->DeregisterWorker(auth::TestWorker((req).worker_id()), req, &resp);
  EXPECT_EQ(again.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(again.message(), "unknown worker w-2");
}

TEST_F(CoordinatorServiceTest, DeregisteringBeforeDeliveryFailsTheJobAndFreesTheOthers) {
  const std::string w1 = Register();
  const std::string w2 = Register();
  ASSERT_TRUE(Submit(Spec(2)).ok());
  svc_->Tick();
  ASSERT_EQ(Get("job-1").state(), v1::JOB_STATE_RUNNING);
  // Neither assignment delivered yet.
  v1::DeregisterWorkerRequest req;
  req.set_worker_id(w1);
  v1::DeregisterWorkerResponse resp;
  ASSERT_TRUE(svc_->DeregisterWorker(auth::TestWorker((req).worker_id()), req, &resp).ok());
  EXPECT_EQ(Get("job-1").state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(Get("job-1").message(), "worker w-1 (stage 0 of job job-1) shut down");
  EXPECT_EQ(Worker(w2).state(), v1::WORKER_STATE_IDLE);
  EXPECT_FALSE(Heartbeat(w2).has_assignment());
}

TEST_F(CoordinatorServiceTest, DeregisteringAnIdleWorkerIsNeverScheduledAgain) {
  const std::string w1 = Register();
  v1::DeregisterWorkerRequest req;
  req.set_worker_id(w1);
  v1::DeregisterWorkerResponse resp;
  ASSERT_TRUE(svc_->DeregisterWorker(auth::TestWorker((req).worker_id()), req, &resp).ok());
  ASSERT_TRUE(Submit(Spec(1)).ok());
  svc_->Tick();
  EXPECT_EQ(Get("job-1").state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(Get("job-1").message(), "waiting for 1 idle worker: 0 registered, 0 idle");
  req.set_worker_id("w-9");
  absl::Status unknown = svc_->DeregisterWorker(auth::TestWorker((req).worker_id()), req, &resp);
  EXPECT_EQ(unknown.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(unknown.message(), "unknown worker w-9");
}

}  // namespace
}  // namespace dapple::coordinator
