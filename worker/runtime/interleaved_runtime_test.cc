// Interleaved 1F1B (Megatron's virtual stages: v layer ranges per pipeline rank, chunk c of rank
// r is virtual stage c * P + r) in the runtime, every rank a thread (parity::LocalJob, the
// coordinator's programs: schedule::JobPrograms): per-step loss and final weights match the
// single-device reference within 1e-5 relative for P in {2, 4}, v in {2, 3}, M in {P, 2P + 1, 8},
// also with D = 2 replicas per rank (their AllReduce covers every chunk), and every rank holds at
// most schedule::InterleavedInFlight chunk activations.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/schedule/generators.h"
#include "common/schedule/ranks.h"
#include "gtest/gtest.h"
#include "worker/runtime/stage_runtime.h"
#include "worker/runtime/testing/local_job.h"
#include "worker/runtime/testing/parity_testing.h"

namespace dapple::worker {
namespace {

struct Case {
  int stages;  // P
  int chunks;  // v
  int micro_batches;
  int replicas;  // D of every rank
};

// The P * v virtual stages cut the model's layers evenly; rank r holds virtual stages c * P + r.
v1::ParallelPlanSummary InterleavedPlan(int layers, const Case& c) {
  const int virtual_stages = c.stages * c.chunks;
  v1::ParallelPlanSummary plan;
  plan.set_schedule("interleaved");
  for (int r = 0; r < c.stages; ++r) {
    v1::PlanStageSummary* st = plan.add_stages();
    st->set_replicas(c.replicas);
    for (int ch = 0; ch < c.chunks; ++ch) {
      const int k = ch * c.stages + r;
      v1::StageRange* range = st->add_chunks();
      range->set_first_layer(k * layers / virtual_stages);
      range->set_last_layer((k + 1) * layers / virtual_stages - 1);
    }
    st->set_first_layer(st->chunks(0).first_layer());
    st->set_last_layer(st->chunks(0).last_layer());
  }
  return plan;
}

class InterleavedParityTest : public ::testing::TestWithParam<Case> {};

TEST_P(InterleavedParityTest, MatchesSingleDevice) {
  const Case c = GetParam();
  const int kMicroBatch = 6, kSteps = 3;
  parity::SpecOptions o;
  o.global_batch = kMicroBatch * c.micro_batches;
  o.micro_batch = kMicroBatch;
  o.extra_blocks = 3;  // 12 layers: one or more per virtual stage
  v1::JobSpec spec = parity::ParitySpec(o);
  spec.mutable_parallel()->set_schedule("interleaved");
  spec.mutable_parallel()->set_interleave(c.chunks);
  const v1::ParallelPlanSummary plan = InterleavedPlan(spec.model().layers_size(), c);
  absl::StatusOr<std::unique_ptr<parity::LocalJob>> job =
      parity::LocalJob::Create(spec, plan, &parity::TrainSet(), &parity::TestSet());
  ASSERT_TRUE(job.ok()) << job.status();
  const std::vector<parity::LocalJob::RankRun> runs = (*job)->Run(0, kSteps, /*evaluate=*/true);
  for (int rank = 0; rank < (*job)->num_ranks(); ++rank) {
    ASSERT_TRUE(runs[rank].status.ok()) << "rank " << rank << ": " << runs[rank].status;
  }
  for (int s = 0; s < c.stages; ++s) {
    const int rank = schedule::RankIndex(plan, s, 0);
    for (const StepResult& r : runs[rank].steps) {
      EXPECT_EQ(r.peak_in_flight,
                schedule::InterleavedInFlight(c.stages, c.chunks, c.micro_batches, s))
          << "stage " << s;
    }
  }
  parity::PipelineRun run;
  const int last = schedule::RankIndex(plan, c.stages - 1, 0);
  for (const StepResult& r : runs[last].steps) run.losses.push_back(r.loss);
  run.eval_accuracy = runs[last].eval.accuracy;
  run.eval_loss = runs[last].eval.loss;
  run.status.assign(c.stages, absl::OkStatus());
  std::vector<std::unique_ptr<StageRuntime>> firsts;
  for (int s = 0; s < c.stages; ++s) {
    firsts.push_back((*job)->TakeRuntime(schedule::RankIndex(plan, s, 0)));
  }
  parity::ExpectMatchesReference(spec, kSteps, firsts, run);
}

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (int p : {2, 4}) {
    for (int v : {2, 3}) {
      for (int m : {p, 2 * p + 1, 8}) cases.push_back({p, v, m, 1});
    }
  }
  // Replicas: the rank's AllReduce and the job-wide norm cover all its chunks.
  cases.push_back({2, 2, 5, 2});
  cases.push_back({2, 3, 4, 2});
  cases.push_back({4, 2, 8, 2});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, InterleavedParityTest, ::testing::ValuesIn(AllCases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           const Case& c = info.param;
                           return absl::StrCat("P", c.stages, "_v", c.chunks, "_M", c.micro_batches,
                                               "_D", c.replicas);
                         });

}  // namespace
}  // namespace dapple::worker
