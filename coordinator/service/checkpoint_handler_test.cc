// CoordinatorService's checkpoint hooks (docs/operations.md, "Checkpoints"): checkpoint_dir in
// every assignment, CheckpointJob and its delivery through progress acks, publishing on the
// ranks' PROGRESS_CHECKPOINT reports into Job.checkpoints, and SubmitJob with resume_from
// (checks, Job.resumed_from, first_step and resume_manifest of the resumed job's ranks).
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/checkpoint_files.h"
#include "coordinator/auth/test_identities.h"
#include "coordinator/jobs/job_store.h"
#include "coordinator/service/coordinator_service.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr char kSpec[] = R"(name: ckpt
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
  seed: {SEED}
  optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
parallel: {schedule: dapple, planner: balanced, stages: 2, devices: 2}
)";

std::string Spec(int seed = 3) {
  return absl::StrReplaceAll(kSpec, {{"{SEED}", absl::StrCat(seed)}});
}

class CheckpointHandlerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ckpt-svc-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    CoordinatorOptions options;
    options.db_path = dir_ + "/dapple.db";
    options.data_roots.push_back(dir_);  // the emulation profiles are written there
    options.measure_profiles = false;
    options.now_unix_ms = [] { return int64_t{1'700'000'000'000}; };
    auto svc = CoordinatorService::Create(options);
    ASSERT_TRUE(svc.ok()) << svc.status();
    svc_ = std::move(*svc);
    for (int i = 0; i < 2; ++i) {
      v1::RegisterWorkerRequest req;
      req.set_hostname("localhost");
      req.set_pid(100 + i);
      req.add_devices("cpu");
      v1::RegisterWorkerResponse resp;
      ASSERT_TRUE(svc_->RegisterWorker(auth::TestJoin(), req, &resp).ok());
      workers_.push_back(resp.worker_id());
    }
  }
  void TearDown() override {
    svc_.reset();
    fs::remove_all(dir_);
  }

  absl::StatusOr<v1::Job> Submit(const std::string& yaml, const std::string& resume_from = "",
                                 const auth::Identity& who = auth::TestAdmin()) {
    v1::SubmitJobRequest req;
    req.set_spec_yaml(yaml);
    req.set_source_name("job.yaml");
    req.set_resume_from(resume_from);
    v1::SubmitJobResponse resp;
    absl::Status s = svc_->SubmitJob(who, req, &resp);
    if (!s.ok()) return s;
    return resp.job();
  }

  // Starts the oldest pending job; returns the assignments by stage.
  std::vector<v1::StageAssignment> Start() {
    svc_->Tick();
    std::vector<v1::StageAssignment> out(2);
    for (const std::string& w : workers_) {
      v1::HeartbeatRequest req;
      req.set_worker_id(w);
      v1::HeartbeatResponse resp;
      EXPECT_TRUE(svc_->Heartbeat(auth::TestWorker((req).worker_id()), req, &resp).ok());
      EXPECT_TRUE(resp.has_assignment()) << w;
      out[resp.assignment().stage()] = resp.assignment();
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

  // The shard a worker writes, then its report.
  absl::StatusOr<v1::ProgressAck> ReportShard(const v1::StageAssignment& a, int64_t step) {
    const std::string partial = a.checkpoint_dir() + "/" + PartialCheckpointDirName(step);
    fs::create_directories(partial);
    const std::string file = ShardFileName(a.stage(), 0);
    std::ofstream(partial + "/" + file) << "shard of stage " << a.stage();
    return Report(a, v1::PROGRESS_CHECKPOINT, [&](v1::ProgressReport* r) {
      r->set_step(step);
      r->set_checkpoint_file(file);
      r->set_checkpoint_bytes(static_cast<int64_t>(fs::file_size(partial + "/" + file)));
    });
  }

  v1::Job Get(const std::string& id) {
    v1::GetJobRequest req;
    req.set_job_id(id);
    v1::Job job;
    EXPECT_TRUE(svc_->GetJob(auth::TestAdmin(), req, &job).ok());
    return job;
  }

  absl::StatusOr<v1::CheckpointJobResponse> Checkpoint(const std::string& id) {
    v1::CheckpointJobRequest req;
    req.set_job_id(id);
    v1::CheckpointJobResponse resp;
    absl::Status s = svc_->CheckpointJob(auth::TestAdmin(), req, &resp);
    if (!s.ok()) return s;
    return resp;
  }

  std::string dir_;
  std::unique_ptr<CoordinatorService> svc_;
  std::vector<std::string> workers_;
};

TEST_F(CheckpointHandlerTest, OnDemandPublishAndResume) {
  absl::StatusOr<v1::Job> job = Submit(Spec());
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<v1::CheckpointJobResponse> pending = Checkpoint(job->id());
  EXPECT_EQ(pending.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(pending.status().message(),
              HasSubstr("job job-1 is PENDING, not RUNNING: only a running job can be "
                        "checkpointed"));

  std::vector<v1::StageAssignment> a = Start();
  for (const v1::StageAssignment& s : a) {
    EXPECT_EQ(s.checkpoint_dir(), dir_ + "/checkpoints/_admin/job-1");  // next to the database
    EXPECT_EQ(s.first_step(), 0);
    EXPECT_EQ(s.resume_manifest(), "");
  }
  // Step 4 reported, no step time: the checkpoint comes 2 steps later, and every ack asks.
  ASSERT_TRUE(Report(a[0], v1::PROGRESS_STEP, [](v1::ProgressReport* r) { r->set_step(4); }).ok());
  absl::StatusOr<v1::CheckpointJobResponse> asked = Checkpoint(job->id());
  ASSERT_TRUE(asked.ok()) << asked.status();
  EXPECT_EQ(asked->step(), 6);
  EXPECT_EQ(asked->job().id(), "job-1");
  absl::StatusOr<v1::ProgressAck> ack =
      Report(a[1], v1::PROGRESS_STEP, [](v1::ProgressReport* r) { r->set_step(4); });
  ASSERT_TRUE(ack.ok());
  EXPECT_EQ(ack->checkpoint_step(), 6);

  ack = ReportShard(a[1], 6);
  ASSERT_TRUE(ack.ok()) << ack.status();
  EXPECT_EQ(ack->checkpoint_step(), 6);  // stage 0's shard is still missing
  EXPECT_TRUE(Get("job-1").checkpoints().empty());
  ack = ReportShard(a[0], 6);
  ASSERT_TRUE(ack.ok()) << ack.status();
  EXPECT_EQ(ack->checkpoint_step(), 0);
  v1::Job running = Get("job-1");
  ASSERT_EQ(running.checkpoints_size(), 1);
  const std::string ckpt = dir_ + "/checkpoints/_admin/job-1/step-6";
  EXPECT_EQ(running.checkpoints(0).path(), ckpt);
  EXPECT_EQ(running.checkpoints(0).reason(), "on demand");
  EXPECT_TRUE(fs::exists(ckpt + "/manifest.pb"));
  // In the database at once (a restarted coordinator lists it), and a report of it delivered
  // again (a rank's replay after a coordinator restart) changes nothing.
  {
    auto peek = JobStore::Open(dir_ + "/dapple.db");
    ASSERT_TRUE(peek.ok());
    EXPECT_EQ((*peek)->LoadAll()->at(0).checkpoints_size(), 1);
  }
  ASSERT_TRUE(Report(a[0], v1::PROGRESS_CHECKPOINT, [](v1::ProgressReport* r) {
                r->set_step(6);
                r->set_checkpoint_file(ShardFileName(0, 0));
                r->set_checkpoint_bytes(1);
              }).ok());
  EXPECT_EQ(Get("job-1").checkpoints_size(), 1);
  EXPECT_TRUE(fs::exists(ckpt + "/manifest.pb"));

  // A rank's failure abandons a checkpoint; the job keeps running.
  ASSERT_TRUE(ReportShard(a[0], 8).ok());
  ASSERT_TRUE(Report(a[1], v1::PROGRESS_CHECKPOINT, [](v1::ProgressReport* r) {
                r->set_step(8);
                r->set_message("disk full");
              }).ok());
  EXPECT_FALSE(fs::exists(dir_ + "/checkpoints/_admin/job-1/step-8.partial"));
  EXPECT_EQ(Get("job-1").state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Get("job-1").checkpoints_size(), 1);
  // ... and says so beyond the log: a Warning event `dapplectl describe` shows (its metric
  // counts these events: coordinator_metrics_test.cc).
  {
    const v1::Job job = Get("job-1");
    ASSERT_FALSE(job.events().empty());
    const v1::JobEventRecord& failed = *job.events().rbegin();
    EXPECT_EQ(failed.type(), "Warning");
    EXPECT_EQ(failed.reason(), "CheckpointFailed");
    EXPECT_EQ(failed.message(),
              "checkpoint after step 8 of job job-1 abandoned: stage 1 replica 0: disk full");
  }

  // Refusals of resume_from, naming the rule.
  absl::StatusOr<v1::Job> bad = Submit(Spec(), dir_ + "/checkpoints/_admin/job-1/step-8.partial");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("not a published checkpoint"));
  bad = Submit(Spec(4), ckpt);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("cannot resume from '" + ckpt +
                                                "': training.seed differs: checkpoint 3, "
                                                "job 4"));

  // Resume: the job records where from, and its ranks start after step 6 from the manifest.
  absl::StatusOr<v1::Job> resumed = Submit(Spec(), ckpt + "/");
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->resumed_from(), ckpt);
  for (const v1::StageAssignment& s : a) {
    ASSERT_TRUE(Report(s, v1::PROGRESS_DONE, [](v1::ProgressReport*) {}).ok());
  }
  ASSERT_EQ(Get("job-1").state(), v1::JOB_STATE_SUCCEEDED);
  std::vector<v1::StageAssignment> b = Start();
  for (const v1::StageAssignment& s : b) {
    EXPECT_EQ(s.job_id(), "job-2");
    EXPECT_EQ(s.first_step(), 6);
    EXPECT_EQ(s.resume_manifest(), ckpt + "/manifest.pb");
    EXPECT_EQ(s.checkpoint_dir(), dir_ + "/checkpoints/_admin/job-2");
  }
  EXPECT_EQ(Get("job-2").metrics().step(), 6);
  ASSERT_TRUE(Report(b[1], v1::PROGRESS_STEP, [](v1::ProgressReport* r) {
                r->set_step(7);
                r->set_loss(0.5);
              }).ok());
  v1::Job job2 = Get("job-2");
  ASSERT_EQ(job2.step_losses_size(), 7);  // step_losses[i] is step i + 1
  EXPECT_TRUE(std::isnan(job2.step_losses(5)));
  EXPECT_EQ(job2.step_losses(6), 0.5);
}

// Issue 16: checkpoint folders are per tenant, and a user of another tenant learns nothing
// about a tenant's checkpoint from --resume-from: its answer is that of a checkpoint that does
// not exist, decided before the manifest (and so the spec's fit) is looked at.
TEST_F(CheckpointHandlerTest, ResumeFromAnotherTenantsCheckpointReadsAsNoCheckpoint) {
  const auth::Identity alice = auth::TestUser("a", "alice");
  const auth::Identity bob = auth::TestUser("b", "bob");
  for (const std::string tenant : {"a", "b"}) {
    v1::SetTenantQuotaRequest req;
    req.set_tenant(tenant);
    v1::DeviceQuota* d = req.mutable_quota()->add_devices();
    d->set_device_type("cpu");
    d->set_nominal(2);
    v1::Tenant t;
    ASSERT_TRUE(svc_->SetTenantQuota(auth::TestAdmin(), req, &t).ok());
  }
  // Tenants' quotas are per device type.
  auto Spec = [](int seed = 3) {
    return absl::StrReplaceAll(::dapple::coordinator::Spec(seed),
                               {{"devices: 2}", "devices: 2, device_type: cpu}"}});
  };
  ASSERT_TRUE(Submit(Spec(), "", alice).ok());
  std::vector<v1::StageAssignment> a = Start();
  for (const v1::StageAssignment& s : a) {
    EXPECT_EQ(s.checkpoint_dir(), dir_ + "/checkpoints/a/job-1");
  }
  ASSERT_TRUE(Report(a[0], v1::PROGRESS_STEP, [](v1::ProgressReport* r) { r->set_step(4); }).ok());
  ASSERT_TRUE(Checkpoint("job-1").ok());
  ASSERT_TRUE(ReportShard(a[0], 6).ok());
  ASSERT_TRUE(ReportShard(a[1], 6).ok());
  const std::string ckpt = dir_ + "/checkpoints/a/job-1/step-6";
  ASSERT_EQ(Get("job-1").checkpoints_size(), 1);
  ASSERT_EQ(Get("job-1").checkpoints(0).path(), ckpt);

  const absl::Status theirs = Submit(Spec(), ckpt, bob).status();
  EXPECT_EQ(theirs.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(theirs.message(), "--resume-from '" + ckpt + "': no checkpoint of tenant b there");
  // A spec that does not fit the checkpoint: the same answer (nothing about the model).
  EXPECT_EQ(Submit(Spec(4), ckpt, bob).status(), theirs);
  // Alice's own: the model check, then the resume.
  EXPECT_THAT(Submit(Spec(4), ckpt, alice).status().message(), HasSubstr("training.seed differs"));
  absl::StatusOr<v1::Job> resumed = Submit(Spec(), ckpt, alice);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->resumed_from(), ckpt);
  // Gone: bob's answer is the same as before.
  fs::remove_all(ckpt);
  EXPECT_EQ(Submit(Spec(), ckpt, bob).status(), theirs);
}

// The same job with parallel.device_type `type` ("emulated": on a profile of one entry per
// model layer, written into `dir`).
std::string SpecOn(const std::string& type, const std::string& dir) {
  std::string parallel = absl::StrCat("device_type: ", type);
  if (type == "emulated") {
    const std::string profile = dir + "/equal4-pbs-16.txt";
    std::ofstream f(profile);
    f << "node0 -- Input -- forward_compute_time=0.00, backward_compute_time=0.00, "
         "activation_size=1, parameter_size=0\n";
    for (int k = 1; k <= 4; ++k) {
      f << "node" << k << " -- Layer(" << k << ") -- forward_compute_time=1.0, "
        << "backward_compute_time=2.0, activation_size=1, parameter_size=1\n";
    }
    for (int k = 0; k < 4; ++k) f << "\tnode" << k << " -- node" << k + 1 << "\n";
    absl::StrAppend(&parallel, ", emulation: {profile: ", profile, "}");
  }
  return absl::StrReplaceAll(Spec(),
                             {{"devices: 2}", absl::StrCat("devices: 2, ", parallel, "}")}});
}

// An emulated job's weights are never trained: its checkpoints resume only into emulated jobs;
// an emulated job may start from a real checkpoint (it only measures time).
TEST_F(CheckpointHandlerTest, EmulatedCheckpointsResumeOnlyIntoEmulatedJobs) {
  // job-1 (real) publishes step 6 and ends.
  ASSERT_TRUE(Submit(Spec()).ok());
  std::vector<v1::StageAssignment> a = Start();
  ASSERT_TRUE(Report(a[0], v1::PROGRESS_STEP, [](v1::ProgressReport* r) { r->set_step(4); }).ok());
  ASSERT_TRUE(Checkpoint("job-1").ok());
  ASSERT_TRUE(ReportShard(a[0], 6).ok());
  ASSERT_TRUE(ReportShard(a[1], 6).ok());
  const std::string real = dir_ + "/checkpoints/_admin/job-1/step-6";
  ASSERT_TRUE(fs::exists(real + "/manifest.pb"));
  for (const v1::StageAssignment& s : a) {
    ASSERT_TRUE(Report(s, v1::PROGRESS_DONE, [](v1::ProgressReport*) {}).ok());
  }

  // job-2 (emulated) resumes from it, publishes step 10 and ends.
  absl::StatusOr<v1::Job> emulated = Submit(SpecOn("emulated", dir_), real);
  ASSERT_TRUE(emulated.ok()) << emulated.status();
  EXPECT_TRUE(emulated->plan().emulated());
  EXPECT_EQ(emulated->resumed_from(), real);
  std::vector<v1::StageAssignment> b = Start();
  EXPECT_EQ(b[0].job_id(), "job-2");
  ASSERT_TRUE(Report(b[0], v1::PROGRESS_STEP, [](v1::ProgressReport* r) { r->set_step(8); }).ok());
  absl::StatusOr<v1::CheckpointJobResponse> asked = Checkpoint("job-2");
  ASSERT_TRUE(asked.ok()) << asked.status();
  ASSERT_EQ(asked->step(), 10);
  ASSERT_TRUE(ReportShard(b[0], 10).ok());
  ASSERT_TRUE(ReportShard(b[1], 10).ok());
  const std::string fake = dir_ + "/checkpoints/_admin/job-2/step-10";
  ASSERT_TRUE(fs::exists(fake + "/manifest.pb"));
  for (const v1::StageAssignment& s : b) {
    ASSERT_TRUE(Report(s, v1::PROGRESS_DONE, [](v1::ProgressReport*) {}).ok());
  }

  // A real job (device_type any, the default, or cpu) is refused, naming the rule.
  for (const char* name : {"any", "cpu"}) {
    const std::string type = name;
    absl::StatusOr<v1::Job> refused =
        Submit(type == "any" ? Spec() : SpecOn(type, dir_), fake + "/");
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << type;
    EXPECT_EQ(refused.status().message(),
              absl::StrCat("cannot resume from '", fake,
                           "': it was written by an emulated job (job-2, parallel.device_type "
                           "emulated: its weights are not trained) and this job has "
                           "parallel.device_type ",
                           type, "; resume it only into an emulated job"));
  }
  // Another emulated job may.
  absl::StatusOr<v1::Job> again = Submit(SpecOn("emulated", dir_), fake);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->id(), "job-3");
  EXPECT_EQ(again->resumed_from(), fake);
}

}  // namespace
}  // namespace dapple::coordinator
