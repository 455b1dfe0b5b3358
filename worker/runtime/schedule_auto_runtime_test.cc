// parallel.schedule auto end to end in one process: the coordinator's planner (MakePlan)
// chooses the schedule and recomputation, the programs are what the coordinator hands out
// (schedule::JobPrograms on the plan: the spec still says "auto"), every rank a thread
// (testing/local_job.h), and training matches the single-device reference (per-step loss and
// final weights within 1e-5 relative): once with memory to spare (a zero-bubble schedule wins)
// and once under a limit only recomputation meets.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/schedule/ranks.h"
#include "coordinator/planner/planner.h"
#include "gtest/gtest.h"
#include "worker/runtime/stage_runtime.h"
#include "worker/runtime/testing/local_job.h"
#include "worker/runtime/testing/parity_testing.h"

namespace dapple::worker {
namespace {

constexpr int kSteps = 3;

v1::JobSpec AutoSpec() {
  parity::SpecOptions o;
  o.global_batch = 64;
  o.micro_batch = 8;  // M = 8
  o.hidden1 = 256;
  o.hidden2 = 256;
  v1::JobSpec spec = parity::ParitySpec(o);
  spec.mutable_parallel()->set_schedule("auto");
  spec.mutable_parallel()->set_planner("balanced");
  spec.mutable_parallel()->set_stages(2);
  spec.mutable_parallel()->set_devices(2);
  spec.mutable_training()->set_recompute("");
  return spec;
}

// Plans `spec` as the coordinator does, runs it on threads and checks it against the reference.
v1::ParallelPlanSummary PlanAndRun(const v1::JobSpec& spec, int64_t device_memory_bytes) {
  coordinator::PlanInputs inputs;
  inputs.max_replicas = 1;
  inputs.defaults.device_memory_bytes = device_memory_bytes;
  absl::StatusOr<v1::ParallelPlan> plan = coordinator::MakePlan(spec, inputs);
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return {};
  const v1::ParallelPlanSummary& summary = plan->summary();
  absl::StatusOr<std::unique_ptr<parity::LocalJob>> job =
      parity::LocalJob::Create(spec, summary, &parity::TrainSet(), &parity::TestSet());
  EXPECT_TRUE(job.ok()) << job.status();
  if (!job.ok()) return summary;
  const std::vector<parity::LocalJob::RankRun> runs = (*job)->Run(0, kSteps, /*evaluate=*/true);
  const int stages = summary.stages_size();
  for (int rank = 0; rank < (*job)->num_ranks(); ++rank) {
    EXPECT_TRUE(runs[rank].status.ok()) << "rank " << rank << ": " << runs[rank].status;
  }
  parity::PipelineRun run;
  const int last = schedule::RankIndex(summary, stages - 1, 0);
  for (const StepResult& r : runs[last].steps) run.losses.push_back(r.loss);
  run.eval_accuracy = runs[last].eval.accuracy;
  run.status.assign(stages, absl::OkStatus());
  std::vector<std::unique_ptr<StageRuntime>> firsts;
  for (int s = 0; s < stages; ++s) {
    firsts.push_back((*job)->TakeRuntime(schedule::RankIndex(summary, s, 0)));
  }
  parity::ExpectMatchesReference(spec, kSteps, firsts, run);
  return summary;
}

int64_t MaxPeak(const v1::ParallelPlanSummary& s) {
  int64_t peak = 0;
  for (const v1::PlanStageSummary& stage : s.stages()) {
    peak = std::max(peak, stage.peak_memory_bytes());
  }
  return peak;
}

TEST(ScheduleAutoRuntimeTest, TheChosenScheduleTrainsLikeOneDevice) {
  const v1::ParallelPlanSummary s = PlanAndRun(AutoSpec(), int64_t{16} << 30);
  EXPECT_NE(s.schedule(), "auto");
  EXPECT_TRUE(s.schedule() == "zb-h1" || s.schedule() == "zb-h2") << s.schedule();
  // The six schedules, and interleaved 1F1B for each v the model's layers allow (2 here).
  EXPECT_EQ(s.alternatives_size(), 8);
  int interleaved = 0;
  for (const v1::PlanAlternative& a : s.alternatives()) interleaved += a.interleave() > 1;
  EXPECT_EQ(interleaved, 2);
}

TEST(ScheduleAutoRuntimeTest, RecomputationChosenWhenOnlyItFitsTrainsLikeOneDevice) {
  // The limit: below dapple's peak without recomputation, at or above its peak with it.
  v1::JobSpec dapple = AutoSpec();
  dapple.mutable_parallel()->set_schedule("dapple");
  coordinator::PlanInputs inputs;
  inputs.max_replicas = 1;
  const v1::ParallelPlanSummary keep = coordinator::MakePlan(dapple, inputs).value().summary();
  dapple.mutable_training()->set_recompute("all");
  const v1::ParallelPlanSummary all = coordinator::MakePlan(dapple, inputs).value().summary();
  int64_t keep_min = MaxPeak(keep);
  for (const v1::PlanStageSummary& stage : keep.stages()) {
    keep_min = std::min(keep_min, stage.peak_memory_bytes());
  }
  const int64_t limit = std::max(MaxPeak(all), keep_min);
  ASSERT_LT(limit, MaxPeak(keep));
  const v1::ParallelPlanSummary s = PlanAndRun(AutoSpec(), limit);
  int recomputing = 0;
  for (const v1::PlanStageSummary& stage : s.stages()) recomputing += stage.recompute();
  EXPECT_GE(recomputing, 1) << s.choice_reason();
}

}  // namespace
}  // namespace dapple::worker
