#include "worker/daemon/worker_metrics.h"

#include <optional>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace dapple::worker {
namespace {

std::optional<double> Value(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (absl::StartsWith(line, series + " ")) {
      double v = 0;
      if (absl::SimpleAtod(line.substr(series.size() + 1), &v)) return v;
    }
  }
  return std::nullopt;
}

v1::ProgressReport Step(int64_t step, double forward, double idle) {
  v1::ProgressReport r;
  r.set_kind(v1::PROGRESS_STEP);
  r.set_job_id("job-3");
  r.set_stage(1);
  r.set_step(step);
  v1::StageStepStats* st = r.mutable_stats();
  st->set_step(step);
  st->set_forward_seconds(forward);
  st->set_backward_seconds(2 * forward);
  st->set_comm_seconds(0.25);
  st->set_optimizer_seconds(0.125);
  st->set_idle_seconds(idle);
  st->set_peak_memory_bytes(4096 * step);
  st->set_peak_activation_bytes(1024 * step);
  st->set_achieved_tflops(100.0 * step);
  if (step == 1) st->set_mfu(0.1);  // step 2: a device without a stated peak
  return r;
}

TEST(WorkerMetricsTest, FollowsTheDaemon) {
  int64_t now = 1'700'000'000'000;
  WorkerMetrics metrics([&] { return now; });
  std::string text = metrics.metric_set()->Serialize();
  EXPECT_EQ(Value(text, "dapple_worker_busy"), 0);
  EXPECT_EQ(Value(text, "dapple_worker_steps_total"), 0);
  EXPECT_EQ(Value(text, "dapple_worker_action_seconds_total{kind=\"idle\"}"), 0);
  EXPECT_EQ(Value(text, "dapple_worker_jobs_total{state=\"failed\"}"), 0);
  EXPECT_FALSE(absl::StrContains(text, "dapple_worker_info{")) << text;

  metrics.OnRegistered("w-2", "node-a");
  v1::StageAssignment a;
  a.set_job_id("job-3");
  a.set_stage(1);
  a.set_replica(0);
  metrics.OnRankStarted(a);
  metrics.OnReport(Step(1, 0.5, 1.0));
  now += 2000;
  metrics.OnReport(Step(2, 0.25, 0.5));
  v1::ProgressReport eval;
  eval.set_kind(v1::PROGRESS_EVAL);
  metrics.OnReport(eval);  // not a step
  text = metrics.metric_set()->Serialize();
  EXPECT_EQ(Value(text, "dapple_worker_info{hostname=\"node-a\",worker=\"w-2\"}"), 1);
  EXPECT_EQ(Value(text, "dapple_worker_busy"), 1);
  EXPECT_EQ(Value(text, "dapple_worker_rank{job_id=\"job-3\",replica=\"0\",stage=\"1\"}"), 1);
  EXPECT_EQ(Value(text, "dapple_worker_steps_total"), 2);
  EXPECT_EQ(Value(text, "dapple_worker_action_seconds_total{kind=\"forward\"}"), 0.75);
  EXPECT_EQ(Value(text, "dapple_worker_action_seconds_total{kind=\"backward\"}"), 1.5);
  EXPECT_EQ(Value(text, "dapple_worker_action_seconds_total{kind=\"comm\"}"), 0.5);
  EXPECT_EQ(Value(text, "dapple_worker_action_seconds_total{kind=\"optimizer\"}"), 0.25);
  EXPECT_EQ(Value(text, "dapple_worker_action_seconds_total{kind=\"allreduce\"}"), 0);
  EXPECT_EQ(Value(text, "dapple_worker_action_seconds_total{kind=\"idle\"}"), 1.5);
  EXPECT_EQ(Value(text, "dapple_worker_peak_memory_bytes"), 8192);
  EXPECT_EQ(Value(text, "dapple_worker_peak_activation_bytes"), 2048);
  EXPECT_EQ(Value(text, "dapple_worker_achieved_tflops"), 200);
  EXPECT_EQ(Value(text, "dapple_worker_mfu_ratio"), std::nullopt);  // removed: no peak at step 2
  EXPECT_EQ(Value(text, "dapple_worker_last_step_timestamp_seconds"), now / 1000.0);

  // The rank fails: idle again, its rank series gone, the totals stay.
  v1::ProgressReport failed;
  failed.set_kind(v1::PROGRESS_FAILED);
  metrics.OnReport(failed);
  // Registered again (the coordinator restarted) under another id.
  metrics.OnRegistered("w-5", "node-a");
  text = metrics.metric_set()->Serialize();
  EXPECT_EQ(Value(text, "dapple_worker_busy"), 0);
  EXPECT_FALSE(absl::StrContains(text, "dapple_worker_rank{")) << text;
  EXPECT_EQ(Value(text, "dapple_worker_jobs_total{state=\"failed\"}"), 1);
  EXPECT_EQ(Value(text, "dapple_worker_jobs_total{state=\"done\"}"), 0);
  EXPECT_EQ(Value(text, "dapple_worker_steps_total"), 2);
  EXPECT_EQ(Value(text, "dapple_worker_info{hostname=\"node-a\",worker=\"w-5\"}"), 1);
  EXPECT_EQ(Value(text, "dapple_worker_info{hostname=\"node-a\",worker=\"w-2\"}"), std::nullopt);

  // A new rank replaces the previous one's series; DONE ends it.
  a.set_job_id("job-4");
  a.set_stage(0);
  metrics.OnRankStarted(a);
  text = metrics.metric_set()->Serialize();
  EXPECT_EQ(Value(text, "dapple_worker_rank{job_id=\"job-4\",replica=\"0\",stage=\"0\"}"), 1);
  v1::ProgressReport done;
  done.set_kind(v1::PROGRESS_DONE);
  metrics.OnReport(done);
  text = metrics.metric_set()->Serialize();
  EXPECT_EQ(Value(text, "dapple_worker_jobs_total{state=\"done\"}"), 1);
  EXPECT_EQ(Value(text, "dapple_worker_busy"), 0);
}

TEST(WorkerMetricsTest, CountsCheckpointStallsAndLoadsBySource) {
  WorkerMetrics metrics([] { return int64_t{0}; });
  std::string text = metrics.metric_set()->Serialize();
  EXPECT_EQ(Value(text, "dapple_worker_checkpoint_saves_total"), 0);
  EXPECT_EQ(Value(text, "dapple_worker_checkpoint_shard_loads_total{source=\"memory\"}"), 0);
  metrics.OnCheckpointStall(0.002, 0.1);
  metrics.OnCheckpointStall(0.004, 0.1);
  metrics.OnCheckpointLoad(1, 0);
  metrics.OnCheckpointLoad(0, 2);
  text = metrics.metric_set()->Serialize();
  EXPECT_EQ(Value(text, "dapple_worker_checkpoint_saves_total"), 2);
  EXPECT_NEAR(*Value(text, "dapple_worker_checkpoint_stall_seconds_total"), 0.006, 1e-12);
  EXPECT_NEAR(*Value(text, "dapple_worker_checkpoint_last_stall_ratio"), 0.04, 1e-12);
  EXPECT_EQ(Value(text, "dapple_worker_checkpoint_shard_loads_total{source=\"memory\"}"), 1);
  EXPECT_EQ(Value(text, "dapple_worker_checkpoint_shard_loads_total{source=\"disk\"}"), 2);
}

}  // namespace
}  // namespace dapple::worker
