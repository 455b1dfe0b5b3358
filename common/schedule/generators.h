// Pure schedule generators: (P, M, stage) -> the compute actions of one training step.
// Compute actions are FORWARD, BACKWARD and a final OPTIMIZER_STEP (Pipe-SGD: ALLREDUCE_ASYNC and
// STALE_OPTIMIZER_STEP); communication is added by lowering.h, never here. Every function here is
// pure and thread-safe.
//
// Preconditions of the Generate* functions (unchecked; BuildPrograms in lowering.h validates):
// num_stages P >= 1, 0 <= stage < P, num_micro_batches M >= 1. Every result holds each
// micro-batch's FORWARD and BACKWARD exactly once (backward after forward), then one
// OPTIMIZER_STEP with micro_batch -1, all with `stage` as their stage. (GeneratePipeDream with
// a run of several updates is the one exception: it holds one OPTIMIZER_STEP per update.)
//
// Each generator has an Op form (op.h) for callers that build many programs; the v1::Action
// forms convert it.
#ifndef DAPPLE_COMMON_SCHEDULE_GENERATORS_H_
#define DAPPLE_COMMON_SCHEDULE_GENERATORS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/schedule/op.h"
#include "dapple/v1/plan.pb.h"

namespace dapple::schedule {

enum class ScheduleKind { kGPipe, kDapple, kPipeDream, kPipeSgd };

// "gpipe" | "dapple" | "pipedream" | "pipesgd"; kInvalidArgument naming the value and the known
// names otherwise. (Job submission still refuses "pipedream": common/job_spec.cc.)
absl::StatusOr<ScheduleKind> ParseScheduleKind(absl::string_view name);
absl::string_view ScheduleKindName(ScheduleKind kind);

// GPipe (Huang et al., NeurIPS 2019): all M forwards, then all M backwards in reverse
// order (B M-1 ... B 0), then OPTIMIZER_STEP (flush). Peak in-flight activations: M.
std::vector<v1::Action> GenerateGPipe(int num_stages, int num_micro_batches, int stage);

// DAPPLE early-backward 1F1B (Fan et al., PPoPP 2021, section 4): stage i (0-based) runs
// K_i = min(P - i, M) warm-up forwards, then alternates one backward / one forward while
// forwards remain (steady), then the remaining backwards (cool-down), in micro-batch order,
// then OPTIMIZER_STEP. Peak in-flight activations on stage i: K_i.
std::vector<v1::Action> GenerateDapple(int num_stages, int num_micro_batches, int stage);

// PipeDream's 1F1B (Narayanan et al., SOSP 2019, section 3.2) over one continuous run of
// num_micro_batches micro-batches, with no flush anywhere: stage i runs min(P - i, M) warm-up
// forwards, then strictly one backward / one forward, then the remaining backwards (the order
// of GenerateDapple over the whole run). Weight updates: an OPTIMIZER_STEP right after every
// micro_batches_per_update-th backward (micro-batches k*n - 1) and after the last backward.
// PipeDream's runtime updates after every micro-batch (n = 1); dapple's pipedream mode keeps
// the job's global batch of M micro-batches per update (n = M: gradients of M micro-batches
// accumulate, one AllReduce and one update per M), which keeps the same number of updates per
// epoch as gpipe and dapple. Either way, forwards of the next update's micro-batches run before
// the previous update is applied, with the weights that were current then; PipeDream's weight
// stashing keeps, per in-flight micro-batch, the weights its forward used, so its backward uses
// them too (up to min(P - i, M) - 1 versions besides the current one). Precondition:
// micro_batches_per_update >= 1. Peak in-flight activations on stage i: min(P - i, M).
std::vector<v1::Action> GeneratePipeDream(int num_stages, int num_micro_batches, int stage,
                                          int micro_batches_per_update);

// Pipe-SGD (Li et al., NeurIPS 2018): data parallelism, one stage (P = 1) replicated. Its rank
// program is M x (FORWARD m, BACKWARD m) in micro-batch order, then ALLREDUCE_ASYNC (the
// step's gradient AllReduce, overlapping step t + 1) and STALE_OPTIMIZER_STEP (the update with
// the previous step's reduced gradient: worker/runtime/pipesgd_updater.h), in place of
// OPTIMIZER_STEP (so the lowering adds no synchronous ALLREDUCE). Precondition:
// num_stages == 1 (BuildPrograms refuses more).
std::vector<v1::Action> GeneratePipeSgd(int num_stages, int num_micro_batches, int stage);

// Dispatch. kPipeDream here is one update of M micro-batches
// (GeneratePipeDream(P, M, stage, M)): with a single update and no later one to overlap, its
// order equals GenerateDapple's; PipeDream differs only across updates, so simulate its steady
// state with GeneratePipeDream over several updates.
std::vector<v1::Action> Generate(ScheduleKind kind, int num_stages, int num_micro_batches,
                                 int stage);

// The Op forms of the generators above (same preconditions and order).
OpProgram GenerateGPipeOps(int num_stages, int num_micro_batches, int stage);
OpProgram GenerateDappleOps(int num_stages, int num_micro_batches, int stage);
OpProgram GeneratePipeDreamOps(int num_stages, int num_micro_batches, int stage,
                               int micro_batches_per_update);
// The same order with `warm_up` (>= 1) forwards before the first backward instead of
// min(P - i, M), capped at M: a stage of D_s replicas under 1F1B-RR runs as a whole with warm-up
// D_s + ... + D_{P-1} (pipedream_steps.h). Non-increasing warm-ups over the stages keep a
// program set deadlock-free.
OpProgram GeneratePipeDreamOpsWithWarmUp(int num_micro_batches, int micro_batches_per_update,
                                         int warm_up);
OpProgram GeneratePipeSgdOps(int num_stages, int num_micro_batches, int stage);
OpProgram GenerateOps(ScheduleKind kind, int num_stages, int num_micro_batches, int stage);

}  // namespace dapple::schedule

#endif  // DAPPLE_COMMON_SCHEDULE_GENERATORS_H_
