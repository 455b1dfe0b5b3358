// Scheduling a shared cluster through CoordinatorService by direct calls (docs/scheduling.md):
// tenants' quotas set by an admin, users of two tenants submitting, fake workers that take their
// assignments, report steps and checkpoint shards, and stop when told; the service's clock is
// the test's. Borrowing, reclaim (checkpoint, stop, queue, resume from the checkpoint), priority
// preemption (with the checkpoint wait running out), all-or-nothing admission, no head-of-line
// blocking, no starvation of a big job, every pending reason, and the submit refusals.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/checkpoint_files.h"
#include "coordinator/auth/test_identities.h"
#include "coordinator/service/coordinator_service.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

namespace fs = std::filesystem;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

constexpr int64_t kStart = 1'700'000'000'000;

constexpr char kSpec[] = R"(name: sched
model:
  input_shape: [1, 28, 28]
  layers:
    - {type: flatten}
    - {type: linear, out: 16}
    - {type: relu}
    - {type: linear, out: 10}
data: {dataset: fashion-mnist, path: /usr/share/datasets/fashion-mnist}
training:
  global_batch: 64
  micro_batch: 16
  max_steps: 20
  optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
parallel: {schedule: dapple, planner: balanced, stages: {P}, devices: {P}, device_type: cpu}
)";

// A job of `devices` stages (one device each); `priority` when not 0.
std::string Spec(int devices, int priority = 0) {
  std::string spec = absl::StrReplaceAll(kSpec, {{"{P}", absl::StrCat(devices)}});
  if (priority != 0) spec = absl::StrCat("priority: ", priority, "\n", spec);
  return spec;
}

class SchedulingScenariosTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sched-svc-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    svc_.reset();
    fs::remove_all(dir_);
  }

  void Open(int workers, bool measure = false) {
    CoordinatorOptions options;
    options.db_path = dir_ + "/dapple.db";
    options.measure_profiles = measure;
    options.stall_grace_ms = 0;
    options.heartbeat_interval_ms = 500;
    options.worker_timeout_ms = 600'000;  // the tests move the clock by minutes
    options.starvation_after_ms = 60'000;
    options.preemption_checkpoint_timeout_ms = 30'000;
    options.now_unix_ms = [this] { return now_; };
    options.scheduling_observer = observer_;
    auto svc = CoordinatorService::Create(options);
    ASSERT_TRUE(svc.ok()) << svc.status();
    svc_ = std::move(*svc);
    for (int i = 0; i < workers; ++i) {
      v1::RegisterWorkerRequest req;
      req.set_hostname("localhost");
      req.set_pid(100 + i);
      req.add_devices("cpu");
      v1::RegisterWorkerResponse resp;
      ASSERT_TRUE(svc_->RegisterWorker(auth::TestJoin(), req, &resp).ok());
    }
  }

  // Tenant `name`'s quota: `nominal` cpu devices, in `cohort` ("": none).
  absl::Status SetQuota(const std::string& name, int nominal, const std::string& cohort = "c",
                        int max_queued = 0, const std::string& type = "cpu") {
    v1::SetTenantQuotaRequest req;
    req.set_tenant(name);
    req.mutable_quota()->set_cohort(cohort);
    req.mutable_quota()->set_max_queued_jobs(max_queued);
    v1::DeviceQuota* d = req.mutable_quota()->add_devices();
    d->set_device_type(type);
    d->set_nominal(nominal);
    v1::Tenant tenant;
    return svc_->SetTenantQuota(auth::TestAdmin(), req, &tenant);
  }

  absl::StatusOr<v1::Job> Submit(const std::string& tenant, const std::string& yaml) {
    v1::SubmitJobRequest req;
    req.set_spec_yaml(yaml);
    req.set_source_name("job.yaml");
    v1::SubmitJobResponse resp;
    const auth::Identity who =
        tenant.empty() ? auth::TestAdmin() : auth::TestUser(tenant, "user-" + tenant);
    absl::Status s = svc_->SubmitJob(who, req, &resp);
    if (!s.ok()) return s;
    return resp.job();
  }

  v1::Job Get(const std::string& id) {
    v1::GetJobRequest req;
    req.set_job_id(id);
    v1::Job job;
    EXPECT_TRUE(svc_->GetJob(auth::TestAdmin(), req, &job).ok()) << id;
    return job;
  }

  v1::HeartbeatResponse Heartbeat(const std::string& worker, const std::string& running) {
    v1::HeartbeatRequest req;
    req.set_worker_id(worker);
    req.set_running_job_id(running);
    v1::HeartbeatResponse resp;
    EXPECT_TRUE(svc_->Heartbeat(auth::TestWorker((req).worker_id()), req, &resp).ok());
    return resp;
  }

  int BusyWorkers() {
    v1::ListWorkersResponse resp;
    EXPECT_TRUE(svc_->ListWorkers(auth::TestAdmin(), {}, &resp).ok());
    int busy = 0;
    for (const v1::WorkerInfo& w : resp.workers()) busy += w.state() == v1::WORKER_STATE_BUSY;
    return busy;
  }

  // Delivers job `id`'s assignments to its workers (their heartbeats); returns them by stage.
  std::vector<v1::StageAssignment> Deliver(const std::string& id) {
    std::vector<v1::StageAssignment> out;
    const v1::Job job = Get(id);
    for (const std::string& w : job.worker_ids()) {
      v1::HeartbeatResponse hb = Heartbeat(w, "");
      EXPECT_TRUE(hb.has_assignment()) << w;
      out.push_back(hb.assignment());
    }
    return out;
  }

  absl::StatusOr<v1::ProgressAck> Report(const v1::StageAssignment& a, v1::ProgressKind kind,
                                         const std::function<void(v1::ProgressReport*)>& fill) {
    v1::ProgressReport req;
    req.set_worker_id(a.plan().stages(a.stage()).worker_ids(0));
    req.set_job_id(a.job_id());
    req.set_stage(a.stage());
    req.set_kind(kind);
    fill(&req);
    v1::ProgressAck ack;
    absl::Status s = svc_->ReportProgress(auth::TestWorker((req).worker_id()), req, &ack);
    if (!s.ok()) return s;
    return ack;
  }

  // Every rank reports `step`; returns the checkpoint step the acks ask for (0: none).
  int64_t Steps(const std::vector<v1::StageAssignment>& ranks, int64_t step) {
    int64_t asked = 0;
    for (const v1::StageAssignment& a : ranks) {
      absl::StatusOr<v1::ProgressAck> ack =
          Report(a, v1::PROGRESS_STEP, [&](v1::ProgressReport* r) {
            r->set_step(step);
            r->set_loss(1.0 / static_cast<double>(step));
          });
      EXPECT_TRUE(ack.ok()) << ack.status();
      if (ack.ok()) asked = ack->checkpoint_step();
    }
    return asked;
  }

  // Every rank writes its shard of the checkpoint after `step` and reports it.
  void Checkpoint(const std::vector<v1::StageAssignment>& ranks, int64_t step) {
    for (const v1::StageAssignment& a : ranks) {
      const std::string partial = a.checkpoint_dir() + "/" + PartialCheckpointDirName(step);
      fs::create_directories(partial);
      const std::string file = ShardFileName(a.stage(), 0);
      std::ofstream(partial + "/" + file) << "shard of stage " << a.stage();
      ASSERT_TRUE(Report(a, v1::PROGRESS_CHECKPOINT, [&](v1::ProgressReport* r) {
                    r->set_step(step);
                    r->set_checkpoint_file(file);
                    r->set_checkpoint_bytes(
                        static_cast<int64_t>(fs::file_size(partial + "/" + file)));
                  }).ok());
    }
  }

  // The ranks get the abort of `id` and stop (their next heartbeat reports no job).
  void StopRanks(const std::vector<v1::StageAssignment>& ranks, const std::string& id) {
    for (const v1::StageAssignment& a : ranks) {
      const std::string w = a.plan().stages(a.stage()).worker_ids(0);
      EXPECT_THAT(Heartbeat(w, id).abort_job_ids(), ElementsAre(id)) << w;
      Heartbeat(w, "");
    }
  }

  void Finish(const std::vector<v1::StageAssignment>& ranks) {
    for (const v1::StageAssignment& a : ranks) {
      ASSERT_TRUE(
          Report(a, v1::PROGRESS_DONE, [](v1::ProgressReport* r) { r->set_step(20); }).ok());
    }
    for (const v1::StageAssignment& a : ranks) {
      Heartbeat(a.plan().stages(a.stage()).worker_ids(0), "");
    }
  }

  bool HasEvent(const std::string& id, const std::string& reason, const std::string& text) {
    const v1::Job job = Get(id);
    for (const v1::JobEventRecord& e : job.events()) {
      if (e.reason() == reason && absl::StrContains(e.message(), text)) return true;
    }
    return false;
  }

  // The last scheduling pass's per-tenant state (what the Prometheus metrics export).
  struct LastPass : scheduling::SchedulingObserver {
    void OnSchedulingPass(const std::map<std::string, scheduling::TenantSchedulingState>& t,
                          int64_t) override {
      tenants = t;
    }
    void OnPreempted(const std::string&, const std::string&) override {}
    std::map<std::string, scheduling::TenantSchedulingState> tenants;
  };

  std::string dir_;
  int64_t now_ = kStart;
  std::shared_ptr<LastPass> observer_ = std::make_shared<LastPass>();
  std::unique_ptr<CoordinatorService> svc_;
};

TEST_F(SchedulingScenariosTest, BorrowingThenReclaimResumesTheBorrowerFromItsCheckpoint) {
  Open(4);
  ASSERT_TRUE(SetQuota("a", 2).ok());
  ASSERT_TRUE(SetQuota("b", 2).ok());
  // a is idle: b borrows its 2 devices.
  ASSERT_TRUE(Submit("b", Spec(4)).ok());  // job-1
  svc_->Tick();
  ASSERT_EQ(Get("job-1").state(), v1::JOB_STATE_RUNNING);
  std::vector<v1::StageAssignment> b = Deliver("job-1");
  v1::ListTenantsResponse tenants;
  tenants.add_tenants()->set_name("a");
  tenants.add_tenants()->set_name("b");
  ASSERT_TRUE(svc_->DescribeTenants(auth::TestAdmin(), &tenants).ok());
  EXPECT_EQ(tenants.tenants(1).usage(0).in_use(), 4);
  EXPECT_EQ(tenants.tenants(1).usage(0).borrowed(), 2);
  EXPECT_EQ(tenants.tenants(0).usage(0).lent(), 2);
  EXPECT_EQ(tenants.tenants(1).admitted_jobs(), 1);
  EXPECT_EQ(Steps(b, 4), 0);

  // a submits within its nominal quota: b's job is asked for a checkpoint first.
  now_ += 1000;
  ASSERT_TRUE(Submit("a", Spec(2)).ok());  // job-2
  svc_->Tick();
  EXPECT_EQ(Get("job-1").state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Get("job-2").pending_reason(), "WaitingForPreemption");
  EXPECT_EQ(Get("job-2").message(),
            "1 preempted job is stopping to make room (saving a checkpoint first); it starts "
            "then");
  EXPECT_TRUE(HasEvent("job-1", "Preempted", "reclaimed: tenant a needs its nominal quota back"));
  const int64_t ckpt = Steps(b, 5);
  ASSERT_GT(ckpt, 5);
  Steps(b, ckpt);
  Checkpoint(b, ckpt);
  ASSERT_EQ(Get("job-1").checkpoints_size(), 1);
  svc_->Tick();
  v1::Job preempted = Get("job-1");
  EXPECT_EQ(preempted.state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(preempted.preemptions(), 1);
  EXPECT_EQ(preempted.last_preemption(), "reclaimed: tenant a needs its nominal quota back");
  EXPECT_TRUE(
      HasEvent("job-1", "Preempted", absl::StrCat("stopped after its checkpoint at step ", ckpt)));
  // Its ranks hold their devices until they stop: job-2 waits for them, job-1 says so.
  EXPECT_EQ(preempted.pending_reason(), "WaitingForPreemption");
  EXPECT_THAT(preempted.message(), HasSubstr("its 4 ranks are stopping"));
  EXPECT_EQ(Get("job-2").state(), v1::JOB_STATE_PENDING);
  StopRanks(b, "job-1");
  svc_->Tick();
  ASSERT_EQ(Get("job-2").state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(BusyWorkers(), 2);  // never a part of job-1 on the 2 left
  EXPECT_EQ(Get("job-1").pending_reason(), "WaitingForQuota");
  EXPECT_EQ(Get("job-1").message(),
            "tenant b uses 0 cpu devices in 0 jobs (nominal quota 2), its cohort has 0 to lend; "
            "this job needs 4");

  // a's job ends: b's job is admitted again and resumes after the checkpoint by itself.
  Finish(Deliver("job-2"));
  ASSERT_EQ(Get("job-2").state(), v1::JOB_STATE_SUCCEEDED);
  svc_->Tick();
  v1::Job resumed = Get("job-1");
  ASSERT_EQ(resumed.state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(resumed.metrics().step(), ckpt);
  EXPECT_LE(resumed.step_losses_size(), ckpt);
  EXPECT_EQ(resumed.steps_redone(), 0);
  // The loss of the step it resumes after, not "nan" until its next report (a fresh SRE's
  // `dapplectl list` after every restart).
  EXPECT_DOUBLE_EQ(resumed.metrics().loss(), 1.0 / static_cast<double>(ckpt));
  for (const v1::StageAssignment& a : Deliver("job-1")) {
    EXPECT_EQ(a.first_step(), ckpt);
    EXPECT_EQ(a.resume_manifest(),
              absl::StrCat(dir_, "/checkpoints/b/job-1/step-", ckpt, "/", kManifestFile));
  }
}

// The signal of DappleTenantStarvedWithinQuota: a job within its tenant's nominal quota waiting
// for a borrower to stop is seen from its submit until it is admitted; the borrower's job, above
// its tenant's quota, never is.
TEST_F(SchedulingScenariosTest, AJobWithinItsNominalQuotaIsSeenWaitingUntilAdmitted) {
  Open(4);
  ASSERT_TRUE(SetQuota("a", 2).ok());
  ASSERT_TRUE(SetQuota("b", 2).ok());
  ASSERT_TRUE(Submit("b", Spec(4)).ok());  // job-1 borrows a's 2 devices
  svc_->Tick();
  std::vector<v1::StageAssignment> b = Deliver("job-1");
  EXPECT_TRUE(observer_->tenants.at("a").oldest_within_quota_unix_ms.empty());
  now_ += 1000;
  const int64_t submitted = now_;
  ASSERT_TRUE(Submit("a", Spec(2)).ok());  // job-2, within a's nominal quota
  svc_->Tick();
  now_ += 5000;
  svc_->Tick();
  ASSERT_EQ(Get("job-2").pending_reason(), "WaitingForPreemption");
  EXPECT_EQ(observer_->tenants.at("a").oldest_within_quota_unix_ms,
            (std::map<std::string, int64_t>{{"cpu", submitted}}));
  EXPECT_TRUE(observer_->tenants.at("b").oldest_within_quota_unix_ms.empty());
  // b's job checkpoints and stops: a's is admitted and nothing waits within quota any more.
  const int64_t ckpt = Steps(b, 5);
  Steps(b, ckpt);
  Checkpoint(b, ckpt);
  svc_->Tick();
  StopRanks(b, "job-1");
  svc_->Tick();
  ASSERT_EQ(Get("job-2").state(), v1::JOB_STATE_RUNNING);
  // A pass reports the state it started from (job-2 still queued); the next one sees it run.
  EXPECT_EQ(observer_->tenants.at("a").oldest_within_quota_unix_ms.size(), 1u);
  now_ += 100;
  svc_->Tick();
  EXPECT_TRUE(observer_->tenants.at("a").oldest_within_quota_unix_ms.empty());
  // job-1 is queued again, above b's nominal quota (it needs 4 of b's 2): not within quota.
  EXPECT_EQ(Get("job-1").state(), v1::JOB_STATE_PENDING);
  EXPECT_TRUE(observer_->tenants.at("b").oldest_within_quota_unix_ms.empty());
}

TEST_F(SchedulingScenariosTest, PriorityPreemptsLowerPriorityAndTheCheckpointWaitIsBounded) {
  Open(2);
  ASSERT_TRUE(SetQuota("a", 2, /*cohort=*/"").ok());
  ASSERT_TRUE(Submit("a", Spec(2)).ok());  // job-1, priority 0
  svc_->Tick();
  std::vector<v1::StageAssignment> low = Deliver("job-1");
  Steps(low, 3);
  ASSERT_TRUE(Submit("a", Spec(2, /*priority=*/10)).ok());  // job-2
  svc_->Tick();
  EXPECT_TRUE(HasEvent("job-1", "Preempted", "preempted by job-2 of priority 10"));
  EXPECT_EQ(Get("job-2").pending_reason(), "WaitingForPreemption");
  // No checkpoint comes within 30 s: stopped anyway, from scratch (none was ever published).
  now_ += 29'000;
  svc_->Tick();
  EXPECT_EQ(Get("job-1").state(), v1::JOB_STATE_RUNNING);
  now_ += 2'000;
  for (const v1::StageAssignment& a : low) {
    Heartbeat(a.plan().stages(a.stage()).worker_ids(0), "job-1");  // still alive
  }
  svc_->Tick();
  v1::Job stopped = Get("job-1");
  ASSERT_EQ(stopped.state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(stopped.last_preemption(), "preempted by job-2 of priority 10");
  EXPECT_TRUE(HasEvent("job-1", "Preempted",
                       "was not saved within 30 s: stopped anyway; it "
                       "resumes from scratch"));
  StopRanks(low, "job-1");
  svc_->Tick();
  EXPECT_EQ(Get("job-2").state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Get("job-1").pending_reason(), "WaitingForQuota");
}

// With no job queued or running, the live workers still count (the note said "more than the
// 0 the live workers have" on a cluster of 2 idle workers).
TEST_F(SchedulingScenariosTest, AnIdleClustersDevicesCountWithoutJobs) {
  Open(2);
  ASSERT_TRUE(SetQuota("a", 1).ok());
  ASSERT_TRUE(SetQuota("b", 1).ok());
  v1::ListTenantsResponse tenants;
  tenants.add_tenants()->set_name("a");
  tenants.add_tenants()->set_name("b");
  ASSERT_TRUE(svc_->DescribeTenants(auth::TestAdmin(), &tenants).ok());
  EXPECT_THAT(tenants.notes(), IsEmpty());
  ASSERT_TRUE(SetQuota("b", 2).ok());
  tenants.clear_notes();
  ASSERT_TRUE(svc_->DescribeTenants(auth::TestAdmin(), &tenants).ok());
  EXPECT_THAT(tenants.notes(),
              ElementsAre("the nominal quotas total 3 cpu devices, more than the 2 the live "
                          "workers have: a nominal quota is guaranteed only as far as those "
                          "devices exist"));
}

TEST_F(SchedulingScenariosTest, NeverAPartialStartAndNoHeadOfLineBlocking) {
  Open(3);
  ASSERT_TRUE(SetQuota("a", 8, /*cohort=*/"").ok());
  ASSERT_TRUE(Submit("a", Spec(4)).ok());  // job-1: 4 of 3 workers
  ASSERT_TRUE(Submit("a", Spec(2)).ok());  // job-2
  svc_->Tick();
  EXPECT_EQ(Get("job-1").state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(Get("job-1").pending_reason(), "WaitingForDevices");
  EXPECT_EQ(Get("job-1").message(), "the cluster has 3 cpu devices free; this job needs 4");
  EXPECT_EQ(Get("job-2").state(), v1::JOB_STATE_RUNNING);  // not blocked by job-1
  EXPECT_EQ(BusyWorkers(), 2);                             // none for job-1
  // The admin sees that a's nominal 8 is more than the 3 live devices: not guaranteed.
  v1::ListTenantsResponse tenants;
  tenants.add_tenants()->set_name("a");
  ASSERT_TRUE(svc_->DescribeTenants(auth::TestAdmin(), &tenants).ok());
  EXPECT_THAT(tenants.notes(),
              ElementsAre("the nominal quotas total 8 cpu devices, more than the 3 the live "
                          "workers have: a nominal quota is guaranteed only as far as those "
                          "devices exist"));
  ASSERT_TRUE(SetQuota("a", 3, /*cohort=*/"").ok());
  tenants.clear_notes();
  ASSERT_TRUE(svc_->DescribeTenants(auth::TestAdmin(), &tenants).ok());
  EXPECT_THAT(tenants.notes(), IsEmpty());
}

// Found by a fresh user: `dapplectl plan` showed a 2-device plan that submit then refused for
// the tenant's quota. The plan says so now, with submit's words.
TEST_F(SchedulingScenariosTest, APlanBeyondTheTenantsQuotaSaysSubmitWouldRefuseIt) {
  Open(2);
  ASSERT_TRUE(SetQuota("a", 1, /*cohort=*/"").ok());
  v1::PlanJobRequest req;
  req.set_spec_yaml(Spec(2));
  req.set_source_name("job.yaml");
  v1::PlanJobResponse resp;
  ASSERT_TRUE(svc_->PlanJob(auth::TestUser("a", "user-a"), req, &resp).ok());
  EXPECT_THAT(resp.plan().notes(),
              Contains("submit would refuse this job: the job needs 2 cpu devices, more than "
                       "tenant a can ever use (its maximum: 1, nominal quota 1 + what it may "
                       "borrow 0): exceeds the tenant's maximum; use fewer parallel.devices"));
  EXPECT_FALSE(Submit("a", Spec(2)).ok());
  // Within the quota, and for an admin (no quota), no such note.
  ASSERT_TRUE(SetQuota("a", 2, /*cohort=*/"").ok());
  for (const auth::Identity& who : {auth::TestUser("a", "user-a"), auth::TestAdmin()}) {
    resp.Clear();
    ASSERT_TRUE(svc_->PlanJob(who, req, &resp).ok());
    EXPECT_THAT(resp.plan().notes(), Not(Contains(HasSubstr("submit would refuse"))));
  }
}

TEST_F(SchedulingScenariosTest, ABigJobIsNotStarvedBySmallOnes) {
  Open(2);
  ASSERT_TRUE(SetQuota("a", 4, /*cohort=*/"").ok());
  ASSERT_TRUE(Submit("a", Spec(1)).ok());  // job-1 takes one worker
  svc_->Tick();
  std::vector<v1::StageAssignment> small = Deliver("job-1");
  ASSERT_TRUE(Submit("a", Spec(2)).ok());  // job-2 needs both
  svc_->Tick();
  EXPECT_EQ(Get("job-2").pending_reason(), "WaitingForDevices");
  // Before the starvation time a small job behind it takes the free worker...
  ASSERT_TRUE(Submit("a", Spec(1)).ok());  // job-3
  svc_->Tick();
  ASSERT_EQ(Get("job-3").state(), v1::JOB_STATE_RUNNING);
  std::vector<v1::StageAssignment> third = Deliver("job-3");
  Finish(small);
  // ...after it, job-2 holds what comes free: job-4 does not take the worker job-1 freed.
  now_ += 61'000;
  for (const v1::StageAssignment& a : third) Heartbeat(a.plan().stages(0).worker_ids(0), "job-3");
  ASSERT_TRUE(Submit("a", Spec(1)).ok());  // job-4
  svc_->Tick();
  EXPECT_EQ(Get("job-4").state(), v1::JOB_STATE_PENDING);
  EXPECT_THAT(Get("job-2").message(), HasSubstr("held for it as they come free"));
  Finish(third);
  svc_->Tick();
  EXPECT_EQ(Get("job-2").state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Get("job-4").state(), v1::JOB_STATE_PENDING);
}

TEST_F(SchedulingScenariosTest, SubmitRefusesWhatCanNeverRunAndAFullQueue) {
  Open(1);
  ASSERT_TRUE(SetQuota("a", 2, /*cohort=*/"", /*max_queued=*/2).ok());
  absl::StatusOr<v1::Job> big = Submit("a", Spec(3));
  EXPECT_EQ(big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(big.status().message(), HasSubstr("exceeds the tenant's maximum"));
  absl::StatusOr<v1::Job> unknown = Submit("z", Spec(1));
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.status().message(), HasSubstr("dapplectl admin quota set z"));
  std::string cuda = absl::StrReplaceAll(Spec(1), {{"device_type: cpu", "device_type: cuda"}});
  absl::StatusOr<v1::Job> typed = Submit("a", cuda);
  EXPECT_THAT(typed.status().message(), HasSubstr("tenant a has no quota for cuda devices"));
  // A job for any device (the README's examples name none) is charged to the cpu quota, the
  // only one tenant a has, and its stored spec says so; it counts like the others.
  std::string any = absl::StrReplaceAll(Spec(1), {{", device_type: cpu", ""}});
  absl::StatusOr<v1::Job> untyped = Submit("a", any);
  ASSERT_TRUE(untyped.ok()) << untyped.status();
  EXPECT_EQ(untyped->spec().parallel().device_type(), "cpu");
  v1::CancelJobRequest cancel;
  cancel.set_job_id(untyped->id());
  v1::Job cancelled;
  ASSERT_TRUE(svc_->CancelJob(auth::TestAdmin(), cancel, &cancelled).ok());
  ASSERT_TRUE(Submit("a", Spec(2)).ok());
  ASSERT_TRUE(Submit("a", Spec(2)).ok());
  absl::StatusOr<v1::Job> full = Submit("a", Spec(1));
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(full.status().message(),
            "tenant a has 2 queued jobs (its max_queued_jobs): wait for some to start or cancel "
            "some");
  EXPECT_TRUE(Submit("", Spec(1)).ok());  // the operator's queue has no limit
  // Quotas are the admins'.
  v1::Tenant t;
  v1::SetTenantQuotaRequest req;
  req.set_tenant("a");
  EXPECT_EQ(svc_->SetTenantQuota(auth::TestUser("a", "u"), req, &t).code(),
            absl::StatusCode::kPermissionDenied);
  req.set_tenant("Bad_Name");
  EXPECT_THAT(svc_->SetTenantQuota(auth::TestAdmin(), req, &t).message(),
              HasSubstr("is not a tenant name"));
}

TEST_F(SchedulingScenariosTest, EveryPendingReason) {
  Open(2);
  ASSERT_TRUE(SetQuota("a", 2).ok());
  ASSERT_TRUE(SetQuota("b", 1).ok());
  ASSERT_TRUE(Submit("a", Spec(2)).ok());  // job-1
  ASSERT_TRUE(Submit("a", Spec(2)).ok());  // job-2
  ASSERT_TRUE(Submit("b", Spec(1)).ok());  // job-3
  ASSERT_TRUE(Submit("", Spec(1)).ok());   // job-4, the operator's
  svc_->Tick();
  EXPECT_EQ(Get("job-1").state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Get("job-2").pending_reason(), "WaitingForQuota");
  EXPECT_EQ(Get("job-2").message(),
            "tenant a uses 2 cpu devices in 1 job (nominal quota 2), its cohort has 1 to lend; "
            "this job needs 2");
  EXPECT_EQ(Get("job-3").pending_reason(), "WaitingForDevices");
  EXPECT_EQ(Get("job-4").pending_reason(), "WaitingForDevices");
  EXPECT_EQ(Get("job-4").message(),
            "waiting for 1 idle worker with cpu devices: 2 registered, 0 idle, 0 idle with cpu "
            "devices");
  // No message of b's names a's jobs.
  EXPECT_THAT(Get("job-3").message(), Not(HasSubstr("job-")));
  // The quota shrinks after submission: Misconfigured and ExceedsMaximum.
  ASSERT_TRUE(SetQuota("a", 1).ok());
  ASSERT_TRUE(SetQuota("b", 1, /*cohort=*/"", 0, "cuda").ok());
  svc_->Tick();
  EXPECT_EQ(Get("job-2").pending_reason(), "ExceedsMaximum");
  EXPECT_THAT(Get("job-2").message(), HasSubstr("more than tenant a can ever use"));
  EXPECT_EQ(Get("job-3").pending_reason(), "Misconfigured");
  EXPECT_EQ(Get("job-3").message(),
            "tenant b has no quota for cpu devices and cannot borrow them; ask an admin: dapplectl "
            "admin quota set b --nominal cpu=N ...");
}

TEST_F(SchedulingScenariosTest, BeingMeasured) {
  Open(1, /*measure=*/true);
  ASSERT_TRUE(SetQuota("a", 1).ok());
  ASSERT_TRUE(Submit("a", Spec(1)).ok());
  svc_->Tick();
  EXPECT_EQ(Get("job-1").pending_reason(), "BeingMeasured");
  EXPECT_THAT(Get("job-1").message(), HasSubstr("measuring the model's layers on cpu"));
  svc_->Tick();  // still measuring: the policy itself says so now
  EXPECT_EQ(Get("job-1").pending_reason(), "BeingMeasured");
  EXPECT_THAT(Get("job-1").message(), HasSubstr("measuring the model's layers on cpu"));
}

}  // namespace
}  // namespace dapple::coordinator
