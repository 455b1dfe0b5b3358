// What a job's rank programs hold besides its schedule, decided from the job spec and the plan
// in ONE place: the coordinator lowers every program it hands out with LowerOptionsFor, and the
// runtime lowers PipeDream's step programs with it too. Pure functions; thread-safe.
//
// Tied weights (common/model ParamInfo::tied_to: an lm_head tied to the model's embedding).
// When the owner's layer and the copy's layer are on the same stage they are one parameter
// (kernels/cpu/model.h BuildLayers) and nothing is exchanged. When they are on different stages,
// each of those stages holds its own copy, as Megatron-LM and DeepSpeed do (Shoeybi et al.,
// "Megatron-LM", arXiv 1909.08053; DeepSpeed's TiedLayerSpec): both start bitwise equal, and
// before every update the tied group -- every replica of every stage that holds one side --
// sums its members' LOCAL partial gradients of the tied tensor (TIED_ALLREDUCE, before the
// replicas' ALLREDUCE, which then leaves tied tensors out), so every copy gets the gradient of
// both uses over the whole global batch and the copies stay bitwise equal after each update.
#ifndef DAPPLE_COMMON_SCHEDULE_JOB_LOWERING_H_
#define DAPPLE_COMMON_SCHEDULE_JOB_LOWERING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/model/layer_type.h"
#include "common/schedule/lowering.h"
#include "dapple/v1/job.pb.h"

namespace dapple::schedule {

// One tied copy and the parameter it copies (names as checkpoints and kernels::Param use them).
struct TiedWeight {
  std::string owner;  // "layer0.token_embedding"
  int owner_layer = -1;
  std::string copy;  // "layer5.weight"
  int copy_layer = -1;
  std::vector<int64_t> shape;  // of both
};

// Every tied copy among `layers` (InferLayers' result), in layer order.
std::vector<TiedWeight> TiedWeights(const std::vector<LayerInfo>& layers);

// The stage (pipeline rank) of `plan` whose layer range -- one of its chunks under schedule
// interleaved (StageChunks) -- holds `layer`; -1 when none does.
int StageOfLayer(const v1::ParallelPlanSummary& plan, int layer);

// The tied weights of `tied` whose owner and copy lie on different stages of `plan` (the ones
// TIED_ALLREDUCE exchanges), in the same order.
std::vector<TiedWeight> SplitTiedWeights(const std::vector<TiedWeight>& tied,
                                         const v1::ParallelPlanSummary& plan);

// One entry per stage of `plan`: true for a stage that holds the owner or the copy of one of
// `split` (SplitTiedWeights).
std::vector<bool> TiedStages(const std::vector<TiedWeight>& split,
                             const v1::ParallelPlanSummary& plan);

// The tied group: the global ranks (schedule::RankIndex) of every replica of every stage with
// tied_stages[s], ascending. Member i of the TIED_ALLREDUCE collective is rank ranks[i]; empty
// when no stage is tied.
std::vector<int> TiedGroupRanks(const std::vector<bool>& tied_stages,
                                const v1::ParallelPlanSummary& plan);

// The schedule `spec`'s workers run on `plan`: the plan's (under parallel.schedule auto the
// planner chose it), else the spec's, else "dapple" (the job spec's default; a plan or spec
// built by hand may leave both empty). Every decision that depends on the schedule reads it here.
std::string RunningSchedule(const v1::JobSpec& spec, const v1::ParallelPlanSummary& plan);

// Whether the job-wide non-finite decision can only fail the job, never change an update: no
// gradient clipping (max_grad_norm not > 0) and no step to skip (max_consecutive_skipped_steps
// 0). The condition of GLOBAL_NORM_ASYNC (DefersNonFiniteCheck, and the runtime's own check of
// it: worker/runtime/gradient_exchange.h).
bool NonFiniteCheckOnlyFails(double max_grad_norm, int64_t max_consecutive_skipped_steps);

// Whether a job under `schedule` (a RunningSchedule name) takes its job-wide non-finite check
// without a barrier (GLOBAL_NORM_ASYNC, plan.proto): zb-h2, whose stages end a step (P - 1) T_F
// apart and, not held, start the next one at once, when the decision cannot change the update
// (training.max_grad_norm 0: no clipping; training.max_consecutive_skipped_steps 0: no step is
// skipped, a non-finite one fails the job). Under the other synchronous schedules the first
// stage ends each step last, so their barrier costs nothing. The one rule LowerOptionsFor and
// the planner's step model (coordinator/planner/plan_simulator.h) follow.
bool DefersNonFiniteCheck(absl::string_view schedule, double max_grad_norm,
                          int64_t max_consecutive_skipped_steps);

// Whether a job under `schedule` (a RunningSchedule name) takes the job-wide GLOBAL_NORM (or
// its asynchronous form): every synchronous schedule (gpipe, dapple, zb-h1, zb-h2,
// interleaved), whose GLOBAL_NORM carries the step's non-finite check and clipping norm;
// pipedream only with max_grad_norm > 0; never pipesgd. The one rule LowerOptionsFor and the
// planner's step model (coordinator/planner/plan_simulator.h) follow.
bool TakesGlobalNorm(absl::string_view schedule, double max_grad_norm);

// Who reports each step's loss, the one rule the worker (which ranks send it) and the
// coordinator (how many reports make a step: coordinator/jobs/progress_tracker.h) follow.
// LossReplicas: how many replicas of the last stage report, each the loss over its own share of
// the batch: under pipesgd all of them (its replicas reduce gradients only, so each knows only
// its share), else 1 (replica 0: the replicas' AllReduce already added their loss sums into
// it). ReportsLoss: whether replica `replica` of stage `stage` is one of them.
int LossReplicas(const v1::ParallelPlanSummary& plan);
bool ReportsLoss(const v1::ParallelPlanSummary& plan, int stage, int replica);

// The LowerOptions of every rank of `spec` on `plan` (its schedule: RunningSchedule):
//   allreduce_stages[s]  stage s has replicas (its gradient AllReduce);
//   tied_stages          TiedStages(SplitTiedWeights(TiedWeights(the model), plan), plan);
//   global_norm          TakesGlobalNorm: GLOBAL_NORM carries the step's job-wide decision,
//                        the non-finite check and, with training.max_grad_norm > 0, the
//                        clipping norm (worker/runtime/gradient_exchange.h); never under
//                        pipesgd, whose updater clips the reduced gradient it applies locally
//                        (worker/runtime/pipesgd_updater.h);
//   clipping             global_norm and training.max_grad_norm > 0;
//   deferred_check       global_norm and DefersNonFiniteCheck: GLOBAL_NORM_ASYNC, the check
//                        without its barrier, so that consecutive steps overlap;
//   chunks               under schedule interleaved the plan's chunks per stage
//                        (PlanStageSummary.chunks, also when parallel.schedule auto chose
//                        interleaved), else parallel.interleave (at least 1); else 1.
// kInvalidArgument: the model's InferLayers error, or a plan stage whose layer range lies
// outside the model ("plan stage 1 covers layers [3, 9] but the model has 6 layers").
absl::StatusOr<LowerOptions> LowerOptionsFor(const v1::JobSpec& spec,
                                             const v1::ParallelPlanSummary& plan);

// The collectives across processes each step of stage `stage` runs under `lower`: its tied
// weights' TIED_ALLREDUCE (tied_stages), its replicas' ALLREDUCE (allreduce_stages) and the
// job-wide GLOBAL_NORM (global_norm; GLOBAL_NORM_ASYNC counts too). 0 to 3; a stage beyond the
// per-stage vectors has neither of the first two.
int CollectivesPerStep(const LowerOptions& lower, int stage);

// The actions of `kind` in `program`: its actions and every step of its phases' cycles.
int CountActions(const v1::RankProgram& program, v1::ActionKind kind);
// Whether `program` takes the job-wide decision: a GLOBAL_NORM or a GLOBAL_NORM_ASYNC.
bool HoldsNonFiniteCheck(const v1::RankProgram& program);

// Whether stage `stage`'s `program` holds the collectives `lower` gives it: a TIED_ALLREDUCE
// exactly when lower.tied_stages[stage] (without it tied copies would drift apart; with it the
// rank would wait for a group that does not expect it); a GLOBAL_NORM only when
// lower.global_norm, and always when lower.clipping (without it clipping would be skipped). A
// synchronous program without GLOBAL_NORM (what the coordinator never hands out, but tests
// build) runs without the job-wide non-finite decision. kInvalidArgument naming the stage and
// the action.
absl::Status CheckProgramCollectives(const v1::RankProgram& program, int stage,
                                     const LowerOptions& lower);

}  // namespace dapple::schedule

#endif  // DAPPLE_COMMON_SCHEDULE_JOB_LOWERING_H_
