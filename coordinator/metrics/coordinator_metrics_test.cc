#include "coordinator/metrics/coordinator_metrics.h"

#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "coordinator/cluster/worker_registry.h"
#include "coordinator/jobs/job_manager.h"
#include "coordinator/jobs/test_db.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

// The value of series `name{labels}` in `text` (labels sorted by name, as prometheus-cpp
// writes them), or nullopt when the series is absent.
std::optional<double> Value(const std::string& text, const std::string& name,
                            const prometheus::Labels& labels = {}) {
  std::string series = name;
  if (!labels.empty()) {
    series += "{";
    bool first = true;
    for (const auto& [k, v] : labels) {
      absl::StrAppend(&series, first ? "" : ",", k, "=\"", v, "\"");
      first = false;
    }
    series += "}";
  }
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (absl::StartsWith(line, series + " ")) {
      double v = 0;
      if (absl::SimpleAtod(line.substr(series.size() + 1), &v)) return v;
    }
  }
  return std::nullopt;
}

prometheus::Labels Job(const std::string& id, const std::string& name) {
  return {{"job_id", id}, {"job_name", name}};
}
prometheus::Labels JobState(const std::string& id, const std::string& name,
                            const std::string& state) {
  return {{"job_id", id}, {"job_name", name}, {"state", state}};
}
prometheus::Labels Stage(const std::string& id, int stage, const std::string& worker) {
  return {{"job_id", id},
          {"job_name", "mlp"},
          {"stage", absl::StrCat(stage)},
          {"replica", "0"},
          {"worker", worker}};
}
prometheus::Labels State(const std::string& state) { return {{"state", state}}; }

class CoordinatorMetricsTest : public ::testing::Test {
 protected:
  std::shared_ptr<CoordinatorMetrics> NewMetrics() {
    CoordinatorMetricsOptions options;
    options.now_unix_ms = [this] { return now_; };
    options.ended_job_retention_ms = 60'000;
    return std::make_shared<CoordinatorMetrics>(options);
  }
  std::unique_ptr<JobManager> OpenJobs(const std::string& db,
                                       std::shared_ptr<JobObserver> observer) {
    JobManagerOptions options;
    options.db_path = db;
    options.now_unix_ms = [this] { return now_; };
    options.observer = std::move(observer);
    auto jobs = JobManager::Open(options);
    EXPECT_TRUE(jobs.ok()) << jobs.status();
    return jobs.ok() ? *std::move(jobs) : nullptr;
  }
  static v1::JobSpec Spec(const std::string& name) {
    v1::JobSpec spec;
    spec.set_name(name);
    spec.mutable_training()->set_epochs(2);
    spec.mutable_training()->mutable_optimizer()->set_lr(0.05);
    return spec;
  }
  // A RUNNING job as the service keeps it, with `ranks` filled stage metrics.
  v1::Job RunningJob(int64_t step, int ranks) {
    v1::Job job;
    job.set_id("job-7");
    job.set_name("mlp");
    job.set_state(v1::JOB_STATE_RUNNING);
    job.mutable_spec()->mutable_training()->mutable_optimizer()->set_lr(0.05);
    job.set_updated_unix_ms(now_);
    v1::JobMetrics* jm = job.mutable_metrics();
    jm->set_step(step);
    jm->set_total_steps(100);
    jm->set_epoch(1);
    jm->set_loss(0.75);
    jm->set_samples_per_second(1234.5);
    jm->set_eta_seconds(42);
    for (int s = 0; s < ranks; ++s) {
      v1::StageMetrics* sm = job.add_stage_metrics();
      sm->set_stage(s);
      sm->set_replica(0);
      sm->set_worker_id(absl::StrCat("w-", s + 1));
      sm->set_last_step_unix_ms(now_ - 500);
      sm->set_samples_per_second(1000 + s);
      v1::StageStepStats* st = sm->mutable_last();
      st->set_step(step);
      st->set_step_seconds(0.2);
      st->set_forward_seconds(0.05);
      st->set_backward_seconds(0.08);
      st->set_comm_seconds(0.01);
      st->set_optimizer_seconds(0.01);
      st->set_idle_seconds(0.05);
      st->set_peak_memory_bytes(1000 * (s + 1));
      st->set_peak_activation_bytes(400 * (s + 1));
      st->set_weight_bytes(600 * (s + 1));
      st->set_peak_in_flight(2 - s);
      st->set_gradient_sq_norm(s == 0 ? 9.0 : 16.0);
      st->set_learning_rate(0.025);
    }
    return job;
  }

  int64_t now_ = 1'700'000'000'000;
};

TEST_F(CoordinatorMetricsTest, ClusterSeriesExistFromTheStart) {
  auto metrics = NewMetrics();
  const std::string text = metrics->metric_set()->Serialize();
  for (const char* s : {"pending", "planning", "running", "succeeded", "failed", "cancelled"}) {
    EXPECT_EQ(Value(text, "dapple_jobs", State(s)), 0) << s;
  }
  for (const char* s : {"succeeded", "failed", "cancelled"}) {
    EXPECT_EQ(Value(text, "dapple_jobs_finished_total", State(s)), 0) << s;
  }
  EXPECT_EQ(Value(text, "dapple_jobs_finished_total", State("running")), std::nullopt);
  EXPECT_EQ(Value(text, "dapple_job_queue_length"), 0);
  for (const char* s : {"idle", "busy", "dead"})
    EXPECT_EQ(Value(text, "dapple_workers", State(s)), 0);
}

// A help text that lists a label's values (states, reasons, causes) lists every value the
// series take: dapple_job_state's said "(pending, planning, running, succeeded, failed,
// cancelled)" while its series also took state="restarting".
TEST_F(CoordinatorMetricsTest, HelpTextsNameEveryLabelValueTheSeriesTake) {
  auto metrics = NewMetrics();
  auto jobs = OpenJobs(FreshDbPath(), metrics);
  ASSERT_NE(jobs, nullptr);
  ASSERT_TRUE(jobs->Create(Spec("a"), "").ok());  // its dapple_job_state series, every state
  const std::string text = metrics->metric_set()->Serialize();
  std::map<std::string, std::string> help;  // family -> help text
  int checked = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (absl::StartsWith(line, "# HELP ")) {
      const std::string rest = line.substr(7);
      help[rest.substr(0, rest.find(' '))] = rest.substr(rest.find(' ') + 1);
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    const std::string family = line.substr(0, line.find_first_of("{ "));
    for (const char* label : {"state", "reason", "cause"}) {
      const std::string key = absl::StrCat(label, "=\"");
      const size_t at = line.find(key);
      if (at == std::string::npos) continue;
      const size_t from = at + key.size();
      const std::string value = line.substr(from, line.find('"', from) - from);
      ASSERT_TRUE(help.count(family)) << family;
      EXPECT_TRUE(absl::StrContains(help[family], value))
          << family << "'s help does not name " << label << " " << value << ": " << help[family];
      ++checked;
    }
  }
  EXPECT_GT(checked, 20);
}

// Refused authentications by reason (coordinator/auth/authenticator.h), each series from the
// start.
TEST_F(CoordinatorMetricsTest, AuthFailuresAreCountedByReason) {
  auto metrics = NewMetrics();
  for (const char* r : {"missing", "malformed", "unknown", "revoked", "expired"}) {
    EXPECT_EQ(
        Value(metrics->metric_set()->Serialize(), "dapple_auth_failures_total", {{"reason", r}}), 0)
        << r;
  }
  metrics->OnAuthFailure("unknown");
  metrics->OnAuthFailure("unknown");
  metrics->OnAuthFailure("expired");
  const std::string text = metrics->metric_set()->Serialize();
  EXPECT_EQ(Value(text, "dapple_auth_failures_total", {{"reason", "unknown"}}), 2);
  EXPECT_EQ(Value(text, "dapple_auth_failures_total", {{"reason", "expired"}}), 1);
}

// The gauges follow JobManager's lifecycle, including a restart's recovery: the restarted
// coordinator counts every stored job, and the RUNNING job it fails is a failure it reports.
// Abandoned checkpoints were visible only in the logs: each CheckpointFailed event a job records
// counts into its tenant's dapple_checkpoint_failures_total, which exists from 0 once the tenant
// has a job (so the first failure is an increase, and DappleCheckpointsFailing has a signal).
TEST_F(CoordinatorMetricsTest, CheckpointFailuresAreCountedPerTenantFromTheirEvents) {
  auto metrics = NewMetrics();
  auto jobs = OpenJobs(FreshDbPath(), metrics);
  ASSERT_NE(jobs, nullptr);
  auto created = jobs->Create(Spec("a"), "", {}, [](v1::Job* j) { j->set_tenant("team-a"); });
  ASSERT_TRUE(created.ok()) << created.status();
  ASSERT_TRUE(jobs->Create(Spec("b"), "").ok());  // an admin's job
  std::string text = metrics->metric_set()->Serialize();
  EXPECT_EQ(Value(text, "dapple_checkpoint_failures_total", {{"tenant", "team-a"}}), 0);
  EXPECT_EQ(Value(text, "dapple_checkpoint_failures_total", {{"tenant", "_admin"}}), 0);
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(jobs->RecordEvent(created->id(), JobEventReason::kCheckpointFailed,
                                  "checkpoint after step 200 of job job-1 abandoned: stage 0 "
                                  "replica 0: No space left on device")
                    .ok());
  }
  // Other events count nowhere here.
  ASSERT_TRUE(jobs->RecordEvent("job-2", JobEventReason::kCheckpointSaved, "saved").ok());
  text = metrics->metric_set()->Serialize();
  EXPECT_EQ(Value(text, "dapple_checkpoint_failures_total", {{"tenant", "team-a"}}), 2);
  EXPECT_EQ(Value(text, "dapple_checkpoint_failures_total", {{"tenant", "_admin"}}), 0);
}

TEST_F(CoordinatorMetricsTest, JobsByStateFollowJobManagerAcrossARestart) {
  const std::string db = FreshDbPath();
  std::string text;
  {
    auto metrics = NewMetrics();
    auto jobs = OpenJobs(db, metrics);
    ASSERT_NE(jobs, nullptr);
    for (const char* name : {"a", "b", "c", "d"}) ASSERT_TRUE(jobs->Create(Spec(name), "").ok());
    text = metrics->metric_set()->Serialize();
    EXPECT_EQ(Value(text, "dapple_jobs", State("pending")), 4);
    EXPECT_EQ(Value(text, "dapple_job_queue_length"), 4);
    EXPECT_EQ(Value(text, "dapple_job_state", JobState("job-1", "a", "pending")), 1);
    EXPECT_EQ(Value(text, "dapple_job_state", JobState("job-1", "a", "running")), 0);
    // Progress gauges only once a job ran.
    EXPECT_EQ(Value(text, "dapple_job_step", Job("job-1", "a")), std::nullopt);

    ASSERT_TRUE(jobs->Transition("job-1", v1::JOB_STATE_PLANNING, "").ok());
    ASSERT_TRUE(jobs->Transition("job-1", v1::JOB_STATE_RUNNING, "").ok());
    ASSERT_TRUE(jobs->Transition("job-2", v1::JOB_STATE_PLANNING, "").ok());
    ASSERT_TRUE(jobs->Transition("job-2", v1::JOB_STATE_RUNNING, "").ok());
    ASSERT_TRUE(jobs->Transition("job-2", v1::JOB_STATE_SUCCEEDED, "").ok());
    ASSERT_TRUE(jobs->Transition("job-3", v1::JOB_STATE_CANCELLED, "by user").ok());
    EXPECT_FALSE(jobs->Transition("job-3", v1::JOB_STATE_RUNNING, "").ok());  // not counted
    text = metrics->metric_set()->Serialize();
    EXPECT_EQ(Value(text, "dapple_jobs", State("pending")), 1);
    EXPECT_EQ(Value(text, "dapple_job_queue_length"), 1);
    EXPECT_EQ(Value(text, "dapple_jobs", State("planning")), 0);
    EXPECT_EQ(Value(text, "dapple_jobs", State("running")), 1);
    EXPECT_EQ(Value(text, "dapple_jobs", State("succeeded")), 1);
    EXPECT_EQ(Value(text, "dapple_jobs", State("cancelled")), 1);
    EXPECT_EQ(Value(text, "dapple_jobs_finished_total", State("succeeded")), 1);
    EXPECT_EQ(Value(text, "dapple_jobs_finished_total", State("cancelled")), 1);
    EXPECT_EQ(Value(text, "dapple_jobs_finished_total", State("failed")), 0);
    EXPECT_EQ(Value(text, "dapple_job_state", JobState("job-1", "a", "running")), 1);
    EXPECT_EQ(Value(text, "dapple_job_state", JobState("job-1", "a", "pending")), 0);
    EXPECT_EQ(Value(text, "dapple_job_step", Job("job-1", "a")), 0);
    EXPECT_EQ(Value(text, "dapple_job_learning_rate", Job("job-1", "a")), 0.05);
    EXPECT_EQ(Value(text, "dapple_job_last_step_timestamp_seconds", Job("job-1", "a")),
              now_ / 1000.0);
    // Cancelled before it ran: its state, no progress.
    EXPECT_EQ(Value(text, "dapple_job_state", JobState("job-3", "c", "cancelled")), 1);
    EXPECT_EQ(Value(text, "dapple_job_step", Job("job-3", "c")), std::nullopt);
  }
  // Restart 2 minutes later: job-1 (RUNNING) stays RUNNING (its workers re-attach), job-4 stays
  // PENDING; job-2 and job-3 ended longer ago than the retention (60 s) and get no per-job
  // series.
  now_ += 120'000;
  auto metrics = NewMetrics();
  auto jobs = OpenJobs(db, metrics);
  ASSERT_NE(jobs, nullptr);
  text = metrics->metric_set()->Serialize();
  EXPECT_EQ(Value(text, "dapple_jobs", State("pending")), 1);
  EXPECT_EQ(Value(text, "dapple_job_queue_length"), 1);
  EXPECT_EQ(Value(text, "dapple_jobs", State("running")), 1);
  EXPECT_EQ(Value(text, "dapple_jobs", State("failed")), 0);
  EXPECT_EQ(Value(text, "dapple_jobs", State("succeeded")), 1);
  EXPECT_EQ(Value(text, "dapple_jobs", State("cancelled")), 1);
  EXPECT_EQ(Value(text, "dapple_jobs_finished_total", State("succeeded")), 0);
  EXPECT_EQ(Value(text, "dapple_job_state", JobState("job-1", "a", "running")), 1);
  EXPECT_EQ(Value(text, "dapple_job_state", JobState("job-4", "d", "pending")), 1);
  EXPECT_EQ(Value(text, "dapple_job_state", JobState("job-2", "b", "succeeded")), std::nullopt);
  EXPECT_EQ(Value(text, "dapple_job_state", JobState("job-3", "c", "cancelled")), std::nullopt);
  // Its workers do not come back: it fails, counted once.
  ASSERT_TRUE(jobs->Transition("job-1", v1::JOB_STATE_FAILED, "workers lost").ok());
  text = metrics->metric_set()->Serialize();
  EXPECT_EQ(Value(text, "dapple_jobs", State("running")), 0);
  EXPECT_EQ(Value(text, "dapple_jobs", State("failed")), 1);
  EXPECT_EQ(Value(text, "dapple_jobs_finished_total", State("failed")), 1);
  EXPECT_EQ(Value(text, "dapple_job_state", JobState("job-1", "a", "failed")), 1);
}

TEST_F(CoordinatorMetricsTest, ProgressAndStageSeriesFromTheJob) {
  auto metrics = NewMetrics();
  v1::Job job = RunningJob(/*step=*/0, /*ranks=*/0);
  job.set_state(v1::JOB_STATE_PENDING);
  metrics->OnJobState(job, v1::JOB_STATE_UNSPECIFIED);
  job.set_state(v1::JOB_STATE_RUNNING);
  metrics->OnJobState(job, v1::JOB_STATE_PENDING);
  const double started = now_ / 1000.0;
  now_ += 5000;
  job = RunningJob(/*step=*/12, /*ranks=*/2);
  job.mutable_stage_metrics(1)->set_skipped_steps(2);
  // Rank 0 on a GPU with a stated peak (MFU), rank 1 on a CPU (achieved TFLOP/s only).
  job.mutable_stage_metrics(0)->mutable_last()->set_achieved_tflops(400);
  job.mutable_stage_metrics(0)->mutable_last()->set_mfu(0.4);
  job.mutable_stage_metrics(1)->mutable_last()->set_achieved_tflops(0.05);
  metrics->OnJobUpdate(job);
  std::string text = metrics->metric_set()->Serialize();
  const auto j = Job("job-7", "mlp");
  EXPECT_EQ(Value(text, "dapple_job_step", j), 12);
  EXPECT_EQ(Value(text, "dapple_job_total_steps", j), 100);
  EXPECT_EQ(Value(text, "dapple_job_epoch", j), 1);
  EXPECT_EQ(Value(text, "dapple_job_loss", j), 0.75);
  EXPECT_EQ(Value(text, "dapple_job_samples_per_second", j), 1234.5);
  EXPECT_EQ(Value(text, "dapple_job_eta_seconds", j), 42);
  EXPECT_EQ(Value(text, "dapple_job_learning_rate", j), 0.025);  // the ranks' rate wins
  EXPECT_EQ(Value(text, "dapple_job_gradient_norm", j), 5.0);    // sqrt(9 + 16)
  EXPECT_EQ(Value(text, "dapple_job_test_accuracy_ratio", j), std::nullopt);  // no eval yet
  const double stepped = now_ / 1000.0;
  EXPECT_EQ(Value(text, "dapple_job_last_step_timestamp_seconds", j), stepped);
  EXPECT_GT(stepped, started);

  const auto s0 = Stage("job-7", 0, "w-1");
  const auto s1 = Stage("job-7", 1, "w-2");
  EXPECT_EQ(Value(text, "dapple_stage_step", s1), 12);
  EXPECT_EQ(Value(text, "dapple_stage_step_seconds", s0), 0.2);
  EXPECT_EQ(Value(text, "dapple_stage_forward_seconds", s0), 0.05);
  EXPECT_EQ(Value(text, "dapple_stage_backward_seconds", s0), 0.08);
  EXPECT_EQ(Value(text, "dapple_stage_idle_seconds", s0), 0.05);
  EXPECT_EQ(Value(text, "dapple_stage_comm_seconds", s0), 0.01);
  EXPECT_EQ(Value(text, "dapple_stage_allreduce_seconds", s0), 0);
  EXPECT_EQ(Value(text, "dapple_stage_optimizer_seconds", s0), 0.01);
  EXPECT_EQ(Value(text, "dapple_stage_bubble_ratio", s0), 0.25);
  EXPECT_EQ(Value(text, "dapple_stage_samples_per_second", s1), 1001);
  EXPECT_EQ(Value(text, "dapple_stage_gradient_norm", s0), 3);
  EXPECT_EQ(Value(text, "dapple_stage_gradient_norm", s1), 4);
  EXPECT_EQ(Value(text, "dapple_stage_skipped_steps_total", s0), 0);
  EXPECT_EQ(Value(text, "dapple_stage_skipped_steps_total", s1), 2);
  EXPECT_EQ(Value(text, "dapple_stage_peak_memory_bytes", s1), 2000);
  EXPECT_EQ(Value(text, "dapple_stage_peak_activation_bytes", s1), 800);
  EXPECT_EQ(Value(text, "dapple_stage_weight_bytes", s1), 1200);
  EXPECT_EQ(Value(text, "dapple_stage_peak_in_flight_micro_batches", s0), 2);
  EXPECT_EQ(Value(text, "dapple_stage_achieved_tflops", s0), 400);
  EXPECT_EQ(Value(text, "dapple_stage_mfu_ratio", s0), 0.4);
  EXPECT_EQ(Value(text, "dapple_stage_achieved_tflops", s1), 0.05);
  EXPECT_EQ(Value(text, "dapple_stage_mfu_ratio", s1), std::nullopt);
  EXPECT_EQ(Value(text, "dapple_stage_last_step_timestamp_seconds", s0), (now_ - 500) / 1000.0);

  // Same step again: the timestamp stays; skipped steps count the increase only.
  now_ += 1000;
  job.mutable_stage_metrics(1)->set_skipped_steps(3);
  // A rank that stopped measuring its gradient: no job norm (it would be too small).
  job.mutable_stage_metrics(0)->mutable_last()->set_gradient_sq_norm(-1);
  metrics->OnJobUpdate(job);
  text = metrics->metric_set()->Serialize();
  EXPECT_EQ(Value(text, "dapple_job_last_step_timestamp_seconds", j), stepped);
  EXPECT_EQ(Value(text, "dapple_stage_skipped_steps_total", s1), 3);
  EXPECT_EQ(Value(text, "dapple_job_gradient_norm", j), 5.0);  // last value kept, not lowered
  EXPECT_EQ(Value(text, "dapple_stage_gradient_norm", s0), 3);

  // Stage 1 moves to worker w-9: w-2's series go.
  job.mutable_stage_metrics(1)->set_worker_id("w-9");
  job.mutable_metrics()->set_test_accuracy(0.8);
  metrics->OnJobUpdate(job);
  text = metrics->metric_set()->Serialize();
  EXPECT_EQ(Value(text, "dapple_stage_step_seconds", s1), std::nullopt);
  EXPECT_EQ(Value(text, "dapple_stage_step_seconds", Stage("job-7", 1, "w-9")), 0.2);
  EXPECT_EQ(Value(text, "dapple_job_test_accuracy_ratio", j), 0.8);

  // The job fails: per-stage series go at once, the per-job ones after the retention.
  job.set_state(v1::JOB_STATE_FAILED);
  job.set_updated_unix_ms(now_);
  metrics->OnJobState(job, v1::JOB_STATE_RUNNING);
  text = metrics->metric_set()->Serialize();
  EXPECT_FALSE(absl::StrContains(text, "dapple_stage_")) << text;
  EXPECT_EQ(Value(text, "dapple_job_state", JobState("job-7", "mlp", "failed")), 1);
  EXPECT_EQ(Value(text, "dapple_job_state", JobState("job-7", "mlp", "running")), 0);
  EXPECT_EQ(Value(text, "dapple_jobs_finished_total", State("failed")), 1);
  EXPECT_EQ(Value(text, "dapple_job_step", j), 12);
  // Updates after the end are ignored (the JobManager refuses them anyway).
  metrics->OnJobUpdate(job);
  now_ += 59'999;
  text = metrics->metric_set()->Serialize();  // collection runs the expiry
  EXPECT_EQ(Value(text, "dapple_job_step", j), 12);
  now_ += 1;
  text = metrics->metric_set()->Serialize();
  EXPECT_FALSE(absl::StrContains(text, "job-7")) << text;
  EXPECT_EQ(Value(text, "dapple_jobs", State("failed")), 1);  // still counted
}

TEST_F(CoordinatorMetricsTest, RanksWithoutAStepExportNothingYet) {
  auto metrics = NewMetrics();
  v1::Job job = RunningJob(/*step=*/0, /*ranks=*/2);
  for (v1::StageMetrics& sm : *job.mutable_stage_metrics()) sm.mutable_last()->set_step(0);
  metrics->OnJobState(job, v1::JOB_STATE_UNSPECIFIED);
  const std::string text = metrics->metric_set()->Serialize();
  EXPECT_FALSE(absl::StrContains(text, "dapple_stage_")) << text;
  EXPECT_EQ(Value(text, "dapple_job_loss", Job("job-7", "mlp")), std::nullopt);   // no step yet
  EXPECT_EQ(Value(text, "dapple_job_learning_rate", Job("job-7", "mlp")), 0.05);  // the spec's
}

TEST_F(CoordinatorMetricsTest, ValidationMetricsOfATextDataset) {
  auto metrics = NewMetrics();
  v1::Job job = RunningJob(/*step=*/12, /*ranks=*/2);
  job.mutable_spec()->mutable_data()->set_dataset("text");
  metrics->OnJobState(job, v1::JOB_STATE_UNSPECIFIED);
  const auto j = Job("job-7", "mlp");
  std::string text = metrics->metric_set()->Serialize();
  EXPECT_EQ(Value(text, "dapple_job_validation_loss", j), std::nullopt);  // no eval yet
  EXPECT_EQ(Value(text, "dapple_job_validation_bpb", j), std::nullopt);

  job.mutable_metrics()->set_validation_loss(1.25);
  job.mutable_metrics()->set_validation_bits_per_byte(1.8);
  metrics->OnJobUpdate(job);
  text = metrics->metric_set()->Serialize();
  EXPECT_EQ(Value(text, "dapple_job_validation_loss", j), 1.25);
  EXPECT_EQ(Value(text, "dapple_job_validation_bpb", j), 1.8);
  EXPECT_EQ(Value(text, "dapple_job_test_accuracy_ratio", j), std::nullopt);
  EXPECT_EQ(Value(text, "dapple_job_test_loss", j), std::nullopt);

  // The last evaluation's values stay after the end, and go with the job's other series.
  job.set_state(v1::JOB_STATE_SUCCEEDED);
  job.set_updated_unix_ms(now_);
  metrics->OnJobState(job, v1::JOB_STATE_RUNNING);
  text = metrics->metric_set()->Serialize();
  EXPECT_EQ(Value(text, "dapple_job_validation_loss", j), 1.25);
  now_ += 15 * 60 * 1000;
  text = metrics->metric_set()->Serialize();
  EXPECT_FALSE(absl::StrContains(text, "dapple_job_validation")) << text;
}

TEST_F(CoordinatorMetricsTest, WorkersFollowTheRegistry) {
  auto metrics = NewMetrics();
  WorkerRegistry registry;
  registry.SetObserver(metrics);
  v1::RegisterWorkerRequest a;
  a.set_hostname("host-a");
  a.set_pid(11);
  a.set_name("gpu-0");
  v1::RegisterWorkerRequest b;
  b.set_hostname("host-b");
  b.set_pid(12);
  WorkerRecord& wa = registry.Register(a, now_);
  WorkerRecord& wb = registry.Register(b, now_);
  ASSERT_EQ(wb.info.id(), "w-1");
  ASSERT_TRUE(registry.Transition(wa, v1::WORKER_STATE_BUSY, "job", "job-1", 0).ok());
  ASSERT_TRUE(registry.Transition(wb, v1::WORKER_STATE_DEAD, "silent").ok());
  EXPECT_FALSE(registry.Transition(wb, v1::WORKER_STATE_BUSY, "no", "job-1").ok());
  std::string text = metrics->metric_set()->Serialize();
  EXPECT_EQ(Value(text, "dapple_workers", State("idle")), 0);
  EXPECT_EQ(Value(text, "dapple_workers", State("busy")), 1);
  EXPECT_EQ(Value(text, "dapple_workers", State("dead")), 1);
  const auto w = [](const char* id, const char* host, const char* state) {
    return prometheus::Labels{{"worker", id}, {"hostname", host}, {"state", state}};
  };
  EXPECT_EQ(Value(text, "dapple_worker_state", w("gpu-0", "host-a", "busy")), 1);
  EXPECT_EQ(Value(text, "dapple_worker_state", w("gpu-0", "host-a", "idle")), 0);
  EXPECT_EQ(Value(text, "dapple_worker_state", w("w-1", "host-b", "dead")), 1);
  EXPECT_EQ(Value(text, "dapple_worker_state", w("w-1", "host-b", "busy")), 0);

  // gpu-0 dies and comes back on another host under the same name.
  ASSERT_TRUE(registry.Transition(wa, v1::WORKER_STATE_DEAD, "silent").ok());
  a.set_hostname("host-c");
  registry.Register(a, now_);
  ASSERT_TRUE(registry.Remove("w-1", "retention").ok());
  text = metrics->metric_set()->Serialize();
  EXPECT_EQ(Value(text, "dapple_workers", State("idle")), 1);
  EXPECT_EQ(Value(text, "dapple_workers", State("busy")), 0);
  EXPECT_EQ(Value(text, "dapple_workers", State("dead")), 0);
  EXPECT_EQ(Value(text, "dapple_worker_state", w("gpu-0", "host-c", "idle")), 1);
  EXPECT_FALSE(absl::StrContains(text, "host-a")) << text;
  EXPECT_FALSE(absl::StrContains(text, "w-1")) << text;
}

}  // namespace
}  // namespace dapple::coordinator

namespace dapple::coordinator {
namespace {

TEST(CoordinatorMetricsTenantTest, PerTenantSeriesFollowTheSchedulingPasses) {
  CoordinatorMetrics metrics;
  std::map<std::string, scheduling::TenantSchedulingState> tenants;
  scheduling::TenantSchedulingState& a = tenants["team-a"];
  a.devices["cpu"] = scheduling::TenantUsage{4, 6, 2, 0};
  a.pending_by_reason["WaitingForQuota"] = 2;
  a.pending_devices = 3;
  metrics.OnSchedulingPass(tenants, 1'000);
  metrics.OnSchedulingPass(tenants, 11'000);  // 3 devices waited 10 s
  metrics.OnPreempted("team-a", "reclaim");
  std::string text = metrics.metric_set()->Serialize();
  const prometheus::Labels cpu = {{"device_type", "cpu"}, {"tenant", "team-a"}};
  EXPECT_EQ(Value(text, "dapple_tenant_nominal_devices", cpu), 4);
  EXPECT_EQ(Value(text, "dapple_tenant_in_use_devices", cpu), 6);
  EXPECT_EQ(Value(text, "dapple_tenant_borrowed_devices", cpu), 2);
  EXPECT_EQ(Value(text, "dapple_tenant_lent_devices", cpu), 0);
  EXPECT_EQ(Value(text, "dapple_tenant_pending_jobs",
                  {{"reason", "WaitingForQuota"}, {"tenant", "team-a"}}),
            2);
  EXPECT_EQ(Value(text, "dapple_tenant_pending_jobs",
                  {{"reason", "Misconfigured"}, {"tenant", "team-a"}}),
            0);
  EXPECT_EQ(Value(text, "dapple_tenant_waited_device_seconds_total", {{"tenant", "team-a"}}), 30);
  EXPECT_EQ(
      Value(text, "dapple_tenant_preemptions_total", {{"reason", "reclaim"}, {"tenant", "team-a"}}),
      1);
  EXPECT_EQ(Value(text, "dapple_tenant_within_quota_wait_seconds", cpu), 0);
  // A job within a's nominal quota queued at 5 s, on a type a neither holds nor uses yet.
  a.oldest_within_quota_unix_ms["cuda"] = 5'000;
  metrics.OnSchedulingPass(tenants, 11'500);
  text = metrics.metric_set()->Serialize();
  EXPECT_EQ(Value(text, "dapple_tenant_within_quota_wait_seconds",
                  {{"device_type", "cuda"}, {"tenant", "team-a"}}),
            6.5);
  EXPECT_EQ(Value(text, "dapple_tenant_within_quota_wait_seconds", cpu), 0);
  // A tenant gone from the passes reads 0.
  metrics.OnSchedulingPass({}, 12'000);
  text = metrics.metric_set()->Serialize();
  EXPECT_EQ(Value(text, "dapple_tenant_in_use_devices", cpu), 0);
  EXPECT_EQ(Value(text, "dapple_tenant_within_quota_wait_seconds",
                  {{"device_type", "cuda"}, {"tenant", "team-a"}}),
            0);
  EXPECT_EQ(Value(text, "dapple_tenant_pending_jobs",
                  {{"reason", "WaitingForQuota"}, {"tenant", "team-a"}}),
            0);
}

}  // namespace
}  // namespace dapple::coordinator
