// CoordinatorService's per-rank step metrics (Job.stage_metrics), the trace store behind
// GetJobTrace and the trace_every_steps option, through direct handler calls.
#include <atomic>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "coordinator/auth/test_identities.h"
#include "coordinator/jobs/test_db.h"
#include "coordinator/service/coordinator_service.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

constexpr int64_t kStart = 1'700'000'000'000;

constexpr char kSpec[] = R"(name: demo
model:
  input_shape: [1, 28, 28]
  layers:
    - {type: flatten}
    - {type: linear, out: 64}
    - {type: relu}
    - {type: linear, out: 10}
data: {dataset: fashion-mnist, path: /usr/share/datasets/fashion-mnist}
training:
  global_batch: 64
  micro_batch: 16
  epochs: 1
  max_steps: 3
  optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
parallel:
  schedule: dapple
  planner: balanced
  stages: 2
  devices: 2
)";

class TraceHandlerTest : public ::testing::Test {
 protected:
  void SetUp() override { svc_ = Open(); }

  std::unique_ptr<CoordinatorService> Open(int trace_every_steps = 50) {
    CoordinatorOptions options;
    options.measure_profiles = false;
    options.db_path = path_;
    options.trace_every_steps = trace_every_steps;
    options.now_unix_ms = [this] { return now_.load(); };
    auto svc = CoordinatorService::Create(options);
    EXPECT_TRUE(svc.ok()) << svc.status();
    return svc.ok() ? std::move(*svc) : nullptr;
  }

  std::string Register() {
    v1::RegisterWorkerRequest req;
    req.set_hostname("localhost");
    req.set_pid(next_pid_++);
    req.add_devices("cpu");
    v1::RegisterWorkerResponse resp;
    EXPECT_TRUE(svc_->RegisterWorker(auth::TestJoin(), req, &resp).ok());
    return resp.worker_id();
  }

  v1::HeartbeatResponse Heartbeat(const std::string& worker) {
    v1::HeartbeatRequest req;
    req.set_worker_id(worker);
    v1::HeartbeatResponse resp;
    EXPECT_TRUE(svc_->Heartbeat(auth::TestWorker((req).worker_id()), req, &resp).ok());
    return resp;
  }

  // Starts the 2-stage job on two fresh workers; returns its id and the assignments.
  std::string Start(v1::StageAssignment assignments[2]) {
    w_[0] = Register();
    w_[1] = Register();
    v1::SubmitJobRequest req;
    req.set_spec_yaml(kSpec);
    v1::SubmitJobResponse resp;
    EXPECT_TRUE(svc_->SubmitJob(auth::TestAdmin(), req, &resp).ok());
    svc_->Tick();
    for (int s = 0; s < 2; ++s) {
      v1::HeartbeatResponse hb = Heartbeat(w_[s]);
      EXPECT_TRUE(hb.has_assignment());
      assignments[hb.assignment().stage()] = hb.assignment();
    }
    return resp.job().id();
  }

  absl::Status Step(const std::string& job, int stage, int64_t step, bool trace,
                    bool with_loss = true) {
    v1::ProgressReport r;
    r.set_worker_id(w_[stage]);
    r.set_job_id(job);
    r.set_stage(stage);
    r.set_kind(v1::PROGRESS_STEP);
    r.set_step(step);
    r.set_epoch(1);
    r.set_step_seconds(0.5);
    if (stage == 1 && with_loss) r.set_loss(2.0 / step);
    v1::StageStepStats* st = r.mutable_stats();
    st->set_step(step);
    st->set_step_seconds(0.5);
    st->set_forward_seconds(0.1);
    st->set_backward_seconds(0.2);
    st->set_idle_seconds(0.2);
    st->set_samples(64);
    if (trace) {
      v1::StepTrace* t = r.mutable_trace();
      t->set_job_id("someone-else");  // the coordinator sets the identity itself
      t->set_stage(7);
      t->set_worker_id("w-99");
      t->set_device("cpu");
      t->set_step(step);
      t->set_start_us(1000);
      t->set_end_us(501000);
      v1::TraceEvent* e = t->add_events();
      e->set_kind(v1::FORWARD);
      e->set_micro_batch(0);
      e->set_start_us(1000);
      e->set_end_us(101000);
      *t->mutable_stats() = *st;
    }
    v1::ProgressAck ack;
    return svc_->ReportProgress(auth::TestWorker((r).worker_id()), r, &ack);
  }

  absl::StatusOr<v1::JobTrace> Trace(const std::string& job) {
    v1::GetJobTraceRequest req;
    req.set_job_id(job);
    v1::JobTrace out;
    absl::Status s = svc_->GetJobTrace(auth::TestAdmin(), req, &out);
    if (!s.ok()) return s;
    return out;
  }

  v1::Job Get(const std::string& id) {
    v1::GetJobRequest req;
    req.set_job_id(id);
    v1::Job job;
    EXPECT_TRUE(svc_->GetJob(auth::TestAdmin(), req, &job).ok());
    return job;
  }

  int next_pid_ = 100;
  std::string w_[2];
  std::string path_ = FreshDbPath();
  std::atomic<int64_t> now_{kStart};
  std::unique_ptr<CoordinatorService> svc_;
};

TEST_F(TraceHandlerTest, UnknownJobAndEmptyIdAreErrors) {
  auto t = Trace("job-9");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(t.status().message(), "no job job-9");
  EXPECT_EQ(Trace("").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(TraceHandlerTest, AssignmentsCarryTraceEveryStepsAndAnUntracedJobHasAnEmptyTrace) {
  v1::StageAssignment a[2];
  const std::string id = Start(a);
  EXPECT_EQ(a[0].trace_every_steps(), 50);
  EXPECT_EQ(a[1].trace_every_steps(), 50);
  auto t = Trace(id);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->job_id(), id);
  EXPECT_EQ(t->num_stages(), 2);
  EXPECT_EQ(t->steps_size(), 0);
}

TEST_F(TraceHandlerTest, TheOptionReachesTheAssignment) {
  svc_.reset();
  svc_ = Open(/*trace_every_steps=*/0);
  v1::StageAssignment a[2];
  Start(a);
  EXPECT_EQ(a[0].trace_every_steps(), 0);
}

TEST_F(TraceHandlerTest, EveryRanksStatsFillStageMetricsAndOnlyTheLastStageTheLoss) {
  v1::StageAssignment a[2];
  const std::string id = Start(a);
  now_ += 1000;
  ASSERT_TRUE(Step(id, 0, 1, false).ok());
  v1::Job job = Get(id);
  ASSERT_EQ(job.stage_metrics_size(), 1);
  EXPECT_EQ(job.stage_metrics(0).stage(), 0);
  EXPECT_EQ(job.stage_metrics(0).worker_id(), w_[0]);
  EXPECT_EQ(job.stage_metrics(0).last().step(), 1);
  EXPECT_EQ(job.stage_metrics(0).last_step_unix_ms(), kStart + 1000);
  EXPECT_DOUBLE_EQ(job.stage_metrics(0).samples_per_second(), 128.0);  // 64 / 0.5
  EXPECT_EQ(job.metrics().step(), 0);                                  // stage 0 carries no loss
  now_ += 500;
  ASSERT_TRUE(Step(id, 1, 1, false).ok());
  job = Get(id);
  ASSERT_EQ(job.stage_metrics_size(), 2);
  EXPECT_EQ(job.stage_metrics(1).stage(), 1);
  EXPECT_EQ(job.stage_metrics(1).worker_id(), w_[1]);
  EXPECT_DOUBLE_EQ(job.stage_metrics(1).last().idle_seconds(), 0.2);
  EXPECT_EQ(job.metrics().step(), 1);
  EXPECT_DOUBLE_EQ(job.metrics().loss(), 2.0);
}

TEST_F(TraceHandlerTest, TracesAreKeptAfterTheJobEndsAndAcrossARestart) {
  v1::StageAssignment a[2];
  const std::string id = Start(a);
  for (int s = 0; s < 2; ++s) ASSERT_TRUE(Step(id, s, 1, /*trace=*/true).ok());
  for (int s = 0; s < 2; ++s) ASSERT_TRUE(Step(id, s, 2, /*trace=*/false).ok());
  auto t = Trace(id);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->steps_size(), 2);
  for (int s = 0; s < 2; ++s) {
    const v1::StepTrace& st = t->steps(s);
    EXPECT_EQ(st.job_id(), id);
    EXPECT_EQ(st.stage(), s);
    EXPECT_EQ(st.worker_id(), w_[s]);
    EXPECT_EQ(st.step(), 1);
    EXPECT_EQ(st.events_size(), 1);
    EXPECT_DOUBLE_EQ(st.stats().idle_seconds(), 0.2);
  }
  for (int s = 0; s < 2; ++s) {
    v1::ProgressReport done;
    done.set_worker_id(w_[s]);
    done.set_job_id(id);
    done.set_stage(s);
    done.set_kind(v1::PROGRESS_DONE);
    v1::ProgressAck ack;
    ASSERT_TRUE(svc_->ReportProgress(auth::TestWorker((done).worker_id()), done, &ack).ok());
  }
  ASSERT_EQ(Get(id).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(Trace(id)->steps_size(), 2);
  svc_.reset();
  svc_ = Open();
  auto after = Trace(id);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->num_stages(), 2);
  ASSERT_EQ(after->steps_size(), 2);
  EXPECT_EQ(after->steps(1).worker_id(), w_[1]);
}

}  // namespace
}  // namespace dapple::coordinator
