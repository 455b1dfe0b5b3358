// Interleaved 1F1B (Megatron's virtual stages: v layer ranges per pipeline rank, chunk c of rank
// r is virtual stage c * P + r) in the runtime, every rank a thread (parity::LocalJob, the
// coordinator's programs: schedule::JobPrograms): per-step loss and final weights match the
// single-device reference within 1e-5 relative for P in {2, 4}, v in {2, 3}, M in {P, 2P + 1, 8},
// also with D = 2 replicas per rank (their AllReduce covers every chunk), with gradient clipping
// and AdamW (GLOBAL_NORM and the update cover every chunk), and every rank holds at most
// schedule::InterleavedInFlight chunk activations; a rank's checkpoint state (global layer
// names) loads into a rank of another layout.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/schedule/generators.h"
#include "common/schedule/ranks.h"
#include "gtest/gtest.h"
#include "worker/runtime/chunked_stage_backend.h"
#include "worker/runtime/stage_runtime.h"
#include "worker/runtime/testing/local_job.h"
#include "worker/runtime/testing/parity_testing.h"

namespace dapple::worker {
namespace {

struct Case {
  int stages;  // P
  int chunks;  // v
  int micro_batches;
  int replicas;           // D of every rank
  bool clipping = false;  // AdamW, training.max_grad_norm 0.5 and a learning-rate schedule
};

v1::ParallelPlanSummary InterleavedPlan(int layers, const Case& c) {
  return parity::InterleavedPlan(layers, c.stages, c.chunks, c.replicas);
}

v1::JobSpec InterleavedSpec(const Case& c) {
  const int kMicroBatch = 6;
  parity::SpecOptions o;
  o.global_batch = kMicroBatch * c.micro_batches;
  o.micro_batch = kMicroBatch;
  o.extra_blocks = 3;  // 12 layers: one or more per virtual stage
  if (c.clipping) o.optimizer = "adamw";
  v1::JobSpec spec = parity::ParitySpec(o);
  spec.mutable_parallel()->set_schedule("interleaved");
  spec.mutable_parallel()->set_interleave(c.chunks);
  if (c.clipping) {
    v1::TrainingSpec* t = spec.mutable_training();
    t->set_max_grad_norm(0.5);
    t->mutable_lr_schedule()->set_warmup_steps(1);
    t->mutable_lr_schedule()->set_decay("cosine");
    t->mutable_lr_schedule()->set_min_lr(t->optimizer().lr() / 10);
    t->mutable_lr_schedule()->set_decay_steps(3);
  }
  return spec;
}

class InterleavedParityTest : public ::testing::TestWithParam<Case> {};

TEST_P(InterleavedParityTest, MatchesSingleDevice) {
  const Case c = GetParam();
  const int kSteps = 4;
  const v1::JobSpec spec = InterleavedSpec(c);
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
  // The memory model's figure is what every rank holds (its chunks' slots, backward buffers
  // and messages counted chunk by chunk; a fresh user's interleaved job measured 1.78x the
  // prediction when the chunks were averaged).
  for (int rank = 0; rank < (*job)->num_ranks(); ++rank) {
    const int64_t predicted = (*job)->runtime(rank).predicted_memory().PeakBytes();
    for (const StepResult& r : runs[rank].steps) {
      EXPECT_EQ(r.stats.peak_memory_bytes(), predicted) << "rank " << rank;
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
  // Clipping (the norm over every chunk of every rank) and AdamW's per-chunk state.
  cases.push_back({2, 2, 5, 1, /*clipping=*/true});
  cases.push_back({4, 3, 9, 1, /*clipping=*/true});
  cases.push_back({2, 3, 8, 2, /*clipping=*/true});
  return cases;
}

// A rank's state (ExportState of its chunked backend: every chunk's tensors under global layer
// names) loads into a fresh rank of the same layout, which exports it unchanged, and -- all
// ranks' states together -- into one stage holding the whole model (another layout); a state
// missing a chunk's tensors is refused before anything changes.
TEST(InterleavedCheckpointTest, StateMovesBetweenLayouts) {
  const Case c{2, 2, 4, 1, /*clipping=*/true};
  const v1::JobSpec spec = InterleavedSpec(c);
  const int layers = spec.model().layers_size();
  const v1::ParallelPlanSummary plan = InterleavedPlan(layers, c);
  absl::StatusOr<std::unique_ptr<parity::LocalJob>> job =
      parity::LocalJob::Create(spec, plan, &parity::TrainSet(), &parity::TestSet());
  ASSERT_TRUE(job.ok()) << job.status();
  for (const auto& run : (*job)->Run(0, 2, /*evaluate=*/false)) ASSERT_TRUE(run.status.ok());
  StageState whole;
  for (int s = 0; s < c.stages; ++s) {
    absl::StatusOr<StageState> state = (*job)->runtime(s).backend().ExportState();
    ASSERT_TRUE(state.ok()) << state.status();
    EXPECT_EQ(state->optimizer_steps, 2);
    const std::vector<v1::StageRange> ranges = schedule::StageChunks(plan, s);
    absl::StatusOr<std::unique_ptr<StageBackend>> fresh = MakeChunkedStageBackend(
        ranges, [&](int first, int last) { return MakeCpuStageBackend(spec, first, last); });
    ASSERT_TRUE(fresh.ok()) << fresh.status();
    ASSERT_EQ((*fresh)->num_chunks(), c.chunks);
    ASSERT_TRUE((*fresh)->ImportState(*state).ok());
    absl::StatusOr<StageState> again = (*fresh)->ExportState();
    ASSERT_TRUE(again.ok());
    ASSERT_EQ(again->params.size(), state->params.size());
    for (size_t i = 0; i < state->params.size(); ++i) {
      EXPECT_EQ(again->params[i].name, state->params[i].name);
      EXPECT_EQ(again->params[i].data, state->params[i].data);
    }
    ASSERT_EQ(again->optimizer_state.size(), state->optimizer_state.size());
    for (size_t i = 0; i < state->optimizer_state.size(); ++i) {
      EXPECT_EQ(again->optimizer_state[i].data, state->optimizer_state[i].data);
    }
    EXPECT_EQ(again->optimizer_steps, 2);
    // Without the last chunk's tensors: refused, and the rank keeps what it had.
    StageState partial = *state;
    partial.params.pop_back();
    EXPECT_EQ((*fresh)->ImportState(partial).code(), absl::StatusCode::kInvalidArgument);
    absl::StatusOr<StageState> kept = (*fresh)->ExportState();
    ASSERT_TRUE(kept.ok());
    EXPECT_EQ(kept->params.back().data, state->params.back().data);
    for (NamedTensor& t : state->params) whole.params.push_back(std::move(t));
    for (NamedTensor& t : state->optimizer_state) whole.optimizer_state.push_back(std::move(t));
    whole.optimizer_steps = state->optimizer_steps;
  }
  absl::StatusOr<std::unique_ptr<StageBackend>> one = MakeCpuStageBackend(spec, 0, layers - 1);
  ASSERT_TRUE(one.ok());
  EXPECT_TRUE((*one)->ImportState(whole).ok());
}

INSTANTIATE_TEST_SUITE_P(Cases, InterleavedParityTest, ::testing::ValuesIn(AllCases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           const Case& c = info.param;
                           return absl::StrCat("P", c.stages, "_v", c.chunks, "_M", c.micro_batches,
                                               "_D", c.replicas, c.clipping ? "_clipped" : "");
                         });

}  // namespace
}  // namespace dapple::worker
