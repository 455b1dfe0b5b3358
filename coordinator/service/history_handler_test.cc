// CoordinatorService's job history: the events in GetJob (recorded by JobManager and the
// service), the ranks' log lines behind GetJobLogs, and the straggler rule's verdicts, through
// direct handler calls.
#include <atomic>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/auth/test_identities.h"
#include "coordinator/jobs/log_store.h"
#include "coordinator/jobs/straggler_detector.h"
#include "coordinator/jobs/test_db.h"
#include "coordinator/service/coordinator_service.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kStart = 1'700'000'000'000;

// 2 stages x 2 replicas (balanced: devices / stages replicas per stage).
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
  max_steps: 40
  optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
parallel:
  schedule: dapple
  planner: balanced
  stages: 2
  devices: 4
)";

class HistoryHandlerTest : public ::testing::Test {
 protected:
  void SetUp() override { svc_ = Open(); }

  std::unique_ptr<CoordinatorService> Open() {
    CoordinatorOptions options;
    options.measure_profiles = false;
    options.stall_grace_ms = 0;
    options.db_path = path_;
    options.worker_timeout_ms = 5000;
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

  v1::HeartbeatResponse Heartbeat(const std::string& worker, const std::string& running = "") {
    v1::HeartbeatRequest req;
    req.set_worker_id(worker);
    req.set_running_job_id(running);
    v1::HeartbeatResponse resp;
    EXPECT_TRUE(svc_->Heartbeat(auth::TestWorker((req).worker_id()), req, &resp).ok());
    return resp;
  }

  // Starts the job on four fresh workers (w_[rank], rank = 2 * stage + replica).
  std::string Start() {
    for (int i = 0; i < 4; ++i) w_.push_back(Register());
    v1::SubmitJobRequest req;
    req.set_spec_yaml(kSpec);
    v1::SubmitJobResponse resp;
    EXPECT_TRUE(svc_->SubmitJob(auth::TestAdmin(), req, &resp).ok());
    now_ += 1000;
    svc_->Tick();
    for (int i = 0; i < 4; ++i) {
      v1::HeartbeatResponse hb = Heartbeat(w_[i]);
      EXPECT_TRUE(hb.has_assignment());
      EXPECT_EQ(hb.assignment().stage() * 2 + hb.assignment().replica(), i);
    }
    return resp.job().id();
  }

  absl::Status Report(const std::string& job, int rank, v1::ProgressKind kind,
                      const std::function<void(v1::ProgressReport*)>& fill = {}) {
    v1::ProgressReport r;
    r.set_worker_id(w_[rank]);
    r.set_job_id(job);
    r.set_stage(rank / 2);
    r.set_replica(rank % 2);
    r.set_kind(kind);
    if (fill) fill(&r);
    v1::ProgressAck ack;
    return svc_->ReportProgress(auth::TestWorker((r).worker_id()), r, &ack);
  }

  absl::Status Step(const std::string& job, int rank, int64_t step, double compute_s) {
    return Report(job, rank, v1::PROGRESS_STEP, [&](v1::ProgressReport* r) {
      r->set_step(step);
      if (rank == 2) r->set_loss(1.0);
      v1::StageStepStats* st = r->mutable_stats();
      st->set_step(step);
      st->set_forward_seconds(compute_s / 2);
      st->set_backward_seconds(compute_s / 2);
      st->set_step_seconds(0.5);
      st->set_samples(32);
    });
  }

  static void AddLine(v1::ProgressReport* r, const std::string& level, const std::string& text) {
    v1::JobLogLine* line = r->add_log_lines();
    line->set_unix_ms(kStart);
    line->set_level(level);
    line->set_text(text);
  }

  v1::Job Get(const std::string& id) {
    v1::GetJobRequest req;
    req.set_job_id(id);
    v1::Job job;
    absl::Status s = svc_->GetJob(auth::TestAdmin(), req, &job);
    EXPECT_TRUE(s.ok()) << s;
    return job;
  }

  std::vector<std::string> Reasons(const std::string& id) {
    std::vector<std::string> out;
    const v1::Job job = Get(id);
    for (const v1::JobEventRecord& e : job.events()) out.push_back(e.reason());
    return out;
  }

  absl::StatusOr<v1::GetJobLogsResponse> Logs(
      const std::string& id, const std::function<void(v1::GetJobLogsRequest*)>& fill = {}) {
    v1::GetJobLogsRequest req;
    req.set_job_id(id);
    if (fill) fill(&req);
    v1::GetJobLogsResponse resp;
    absl::Status s = svc_->GetJobLogs(auth::TestAdmin(), req, &resp);
    if (!s.ok()) return s;
    return resp;
  }

  static std::vector<std::string> Texts(const v1::GetJobLogsResponse& resp) {
    std::vector<std::string> out;
    for (const v1::JobLogLine& l : resp.lines()) {
      out.push_back(absl::StrCat(l.stage(), "/", l.replica(), " ", l.worker_id(), " ", l.text()));
    }
    return out;
  }

  int next_pid_ = 100;
  std::vector<std::string> w_;
  std::string path_ = FreshDbPath();
  std::atomic<int64_t> now_{kStart};
  std::unique_ptr<CoordinatorService> svc_;
};

TEST_F(HistoryHandlerTest, AJobsEventsRunFromSubmittedToSucceededAndOutliveARestart) {
  const std::string job = Start();
  for (int rank = 0; rank < 4; ++rank) {
    ASSERT_TRUE(Report(job, rank, v1::PROGRESS_DONE).ok());
  }
  v1::Job done = Get(job);
  ASSERT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_THAT(Reasons(job),
              ElementsAre("Submitted", "Planned", "Scheduled", "Started", "Succeeded"));
  EXPECT_THAT(done.events(1).message(),
              HasSubstr("2 stages x 2 replicas by the balanced planner (schedule dapple, M=4)"));
  EXPECT_EQ(done.events(3).message(),
            "started: stage 0 replica 0 on w-1 (cpu), stage 0 replica 1 on w-2 (cpu), stage 1 "
            "replica 0 on w-3 (cpu), stage 1 replica 1 on w-4 (cpu)");
  EXPECT_EQ(done.events(0).first_unix_ms(), kStart);
  EXPECT_EQ(done.events(3).first_unix_ms(), kStart + 1000);
  // Not in the listing, nor in the stored row: only GetJob reads them.
  v1::ListJobsResponse list;
  ASSERT_TRUE(svc_->ListJobs(auth::TestAdmin(), {}, &list).ok());
  EXPECT_TRUE(list.jobs(0).events().empty());
  svc_.reset();
  svc_ = Open();
  EXPECT_THAT(Reasons(job),
              ElementsAre("Submitted", "Planned", "Scheduled", "Started", "Succeeded"));
}

TEST_F(HistoryHandlerTest, ALostWorkerIsAWarningBeforeTheFailure) {
  const std::string job = Start();
  now_ += 3000;
  for (int i : {0, 1, 3}) Heartbeat(w_[i], job);
  now_ += 3000;  // w-3 (stage 1 replica 0) silent for 6 s
  svc_->Tick();
  v1::Job failed = Get(job);
  ASSERT_EQ(failed.state(), v1::JOB_STATE_FAILED);
  ASSERT_GE(failed.events_size(), 2);
  const v1::JobEventRecord& lost = failed.events(failed.events_size() - 2);
  EXPECT_EQ(lost.reason(), "WorkerLost");
  EXPECT_EQ(lost.type(), "Warning");
  EXPECT_THAT(lost.message(), HasSubstr("worker w-3 (stage 1 replica 0 of job job-1) stopped "
                                        "heartbeating"));
  EXPECT_EQ(failed.events().rbegin()->reason(), "Failed");
  EXPECT_EQ(failed.events().rbegin()->message(), failed.message());
}

TEST_F(HistoryHandlerTest, SkippedStepsAreOneCoalescedWarningPerRank) {
  const std::string job = Start();
  for (int step = 1; step <= 3; ++step) {
    ASSERT_TRUE(Report(job, 1, v1::PROGRESS_STEP, [&](v1::ProgressReport* r) {
                  r->set_step(step);
                  r->mutable_stats()->set_step(step);
                  r->mutable_stats()->set_skipped(true);
                }).ok());
  }
  const v1::Job after = Get(job);
  const v1::JobEventRecord& skipped = *after.events().rbegin();
  EXPECT_EQ(skipped.reason(), "SkippedStep");
  EXPECT_EQ(skipped.count(), 3);
  EXPECT_EQ(skipped.message(),
            "stage 0 replica 1 (worker w-2) skipped a step's update (non-finite loss or "
            "gradient)");
}

TEST_F(HistoryHandlerTest, LogLinesOfEveryRankAreKeptAndServedByRankAndSeq) {
  const std::string job = Start();
  ASSERT_TRUE(Step(job, 0, 1, 0.01).ok());  // no lines: nothing kept
  ASSERT_TRUE(Report(job, 0, v1::PROGRESS_STEP, [&](v1::ProgressReport* r) {
                r->set_step(2);
                AddLine(r, "info", "starting stage 0");
                AddLine(r, "info", "links up");
              }).ok());
  ASSERT_TRUE(Report(job, 3, v1::PROGRESS_EVAL, [&](v1::ProgressReport* r) {
                AddLine(r, "warning", "slow");
                r->set_log_lines_dropped(5);
              }).ok());
  absl::StatusOr<v1::GetJobLogsResponse> all = Logs(job);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_THAT(Texts(*all),
              ElementsAre("0/0 w-1 starting stage 0", "0/0 w-1 links up", "1/1 w-4 slow",
                          "1/1 w-4 5 log lines dropped by worker w-4 (its buffer of "
                          "unsent lines was full)"));
  EXPECT_EQ(all->lines(3).level(), "warning");
  EXPECT_EQ(all->state(), v1::JOB_STATE_RUNNING);
  absl::StatusOr<v1::GetJobLogsResponse> rank = Logs(job, [](v1::GetJobLogsRequest* r) {
    r->set_one_rank(true);
    r->set_stage(0);
    r->set_replica(0);
    r->set_tail(1);
  });
  ASSERT_TRUE(rank.ok());
  EXPECT_THAT(Texts(*rank), ElementsAre("0/0 w-1 links up"));
  const int64_t after = all->lines(1).seq();
  absl::StatusOr<v1::GetJobLogsResponse> newer =
      Logs(job, [&](v1::GetJobLogsRequest* r) { r->set_after_seq(after); });
  ASSERT_TRUE(newer.ok());
  EXPECT_EQ(newer->lines_size(), 2);

  // A failing rank's last lines come with its report after the job ended; they are kept.
  ASSERT_TRUE(Report(job, 2, v1::PROGRESS_FAILED, [&](v1::ProgressReport* r) {
                r->set_message("boom");
                AddLine(r, "error", "stage 1 failed: boom");
              }).ok());
  ASSERT_TRUE(Report(job, 1, v1::PROGRESS_ABORTED, [&](v1::ProgressReport* r) {
                AddLine(r, "info", "aborted");
              }).ok());
  // Lines sent under another rank's name are not the job's.
  ASSERT_TRUE(Report(job, 0, v1::PROGRESS_ABORTED, [&](v1::ProgressReport* r) {
                r->set_replica(1);
                AddLine(r, "info", "not mine");
              }).ok());
  svc_.reset();
  svc_ = Open();
  all = Logs(job);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(Texts(*all), ::testing::Contains("1/0 w-3 stage 1 failed: boom"));
  EXPECT_THAT(Texts(*all), ::testing::Contains("0/1 w-2 aborted"));
  EXPECT_THAT(Texts(*all), ::testing::Not(::testing::Contains("0/1 w-1 not mine")));

  absl::StatusOr<v1::GetJobLogsResponse> bad = Logs(job, [](v1::GetJobLogsRequest* r) {
    r->set_one_rank(true);
    r->set_stage(2);
  });
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "job job-1 has no rank 2/0: its stages are 0..1");
  bad = Logs(job, [](v1::GetJobLogsRequest* r) {
    r->set_one_rank(true);
    r->set_stage(0);
    r->set_replica(2);
  });
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "job job-1 has no rank 0/2: stage 0 has replicas 0..1");
  // A rank of an earlier layout (a restart re-planned the job onto fewer stages) that logged:
  // its lines are served, though the current plan has no such rank.
  {
    std::unique_ptr<LogStore> store = *LogStore::Open(path_);
    v1::JobLogLine line;
    line.set_unix_ms(5000);
    line.set_level("info");
    line.set_text("before the restart");
    ASSERT_TRUE(store->Append(job, 2, 0, "w-4", {line}).ok());
  }
  absl::StatusOr<v1::GetJobLogsResponse> earlier = Logs(job, [](v1::GetJobLogsRequest* r) {
    r->set_one_rank(true);
    r->set_stage(2);
  });
  ASSERT_TRUE(earlier.ok()) << earlier.status();
  EXPECT_THAT(Texts(*earlier), ElementsAre("2/0 w-4 before the restart"));
  EXPECT_EQ(Logs("job-9").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Logs("").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(HistoryHandlerTest, AStragglerIsMarkedInStageMetricsAndRecordedAsAnEvent) {
  const std::string job = Start();
  const int steps = StragglerDetector::kWindow + StragglerDetector::kConsecutive - 1;
  for (int step = 1; step <= steps; ++step) {
    for (int rank = 0; rank < 4; ++rank) {
      // Stage 1 replica 1 computes 3x its peer; stage 0's replicas alike.
      ASSERT_TRUE(Step(job, rank, step, rank == 3 ? 0.03 : 0.01).ok());
    }
  }
  v1::Job running = Get(job);
  ASSERT_EQ(running.stage_metrics_size(), 4);
  for (const v1::StageMetrics& m : running.stage_metrics()) {
    EXPECT_EQ(m.straggler(), m.stage() == 1 && m.replica() == 1) << m.stage() << m.replica();
  }
  EXPECT_NEAR(running.stage_metrics(3).compute_ratio(), 3.0, 1e-9);
  const v1::JobEventRecord& e = *running.events().rbegin();
  EXPECT_EQ(e.reason(), "Straggler");
  EXPECT_EQ(e.type(), "Warning");
  EXPECT_EQ(e.message(),
            "stage 1 replica 1 computes 3.00x its stage's other replicas: median 30.0 ms vs 10.0 "
            "ms of compute per step over the last 10 steps (worker w-4)");
}

}  // namespace
}  // namespace dapple::coordinator
