#include "common/schedule/lowering.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/schedule/action.h"
#include "common/schedule/simulator.h"

namespace dapple::schedule {

namespace {

// The one lowering rule, for both program forms: calls keep(i) for compute action i and
// add(kind, micro_batch, stage field) for each inserted action, in program order; the stage
// field is the compute action's (stage_of(i): an Op's may be -1, the program's stage).
template <typename KindOf, typename MicroBatchOf, typename StageOfAction, typename Keep,
          typename Add>
void LowerEach(size_t size, KindOf kind_of, MicroBatchOf micro_batch_of, StageOfAction stage_of,
               int num_stages, int stage, const LowerOptions& options, Keep keep, Add add) {
  const int num_virtual = num_stages * std::max(1, options.chunks);
  auto at = [stage](const std::vector<bool>& per_stage) {
    return stage >= 0 && stage < static_cast<int>(per_stage.size()) && per_stage[stage];
  };
  const bool allreduce = at(options.allreduce_stages);
  const bool tied = at(options.tied_stages);
  for (size_t i = 0; i < size; ++i) {
    const int m = micro_batch_of(i);
    const int field = stage_of(i);
    const int vs = field >= 0 ? field : stage;
    const bool has_prev = vs > 0;
    const bool has_next = vs < num_virtual - 1;
    switch (kind_of(i)) {
      case v1::FORWARD:
        if (has_prev) add(v1::RECV_ACT, m, field);
        keep(i);
        if (has_next) add(v1::SEND_ACT, m, field);
        break;
      case v1::BACKWARD:
      case v1::BACKWARD_INPUT:
        // The input gradient is what the previous stage waits for: it leaves right after the
        // BACKWARD_INPUT, before the (deferrable) BACKWARD_WEIGHT.
        if (has_next) add(v1::RECV_GRAD, m, field);
        keep(i);
        if (has_prev) add(v1::SEND_GRAD, m, field);
        break;
      case v1::OPTIMIZER_STEP:
        // The tied weights' sum comes first: the replicas' AllReduce then leaves them out.
        if (tied) add(v1::TIED_ALLREDUCE, -1, field);
        if (allreduce) add(v1::ALLREDUCE, -1, field);
        // The norm of the final (summed) gradients, which the update then scales.
        if (options.global_norm) {
          add(options.deferred_check ? v1::GLOBAL_NORM_ASYNC : v1::GLOBAL_NORM, -1, field);
        }
        keep(i);
        break;
      case v1::BACKWARD_WEIGHT:  // local: needs no message
      case v1::ACTION_KIND_UNSPECIFIED:
      case v1::SEND_ACT:
      case v1::RECV_ACT:
      case v1::SEND_GRAD:
      case v1::RECV_GRAD:
      case v1::ALLREDUCE:
      case v1::TIED_ALLREDUCE:
      case v1::GLOBAL_NORM:
      case v1::USE_WEIGHTS:
      case v1::RESTORE_WEIGHTS:
      case v1::STASH_WEIGHTS:
      case v1::DROP_WEIGHTS:
      case v1::ALLREDUCE_ASYNC:
      case v1::STALE_OPTIMIZER_STEP:
      case v1::GLOBAL_NORM_ASYNC:
      case v1::ActionKind_INT_MIN_SENTINEL_DO_NOT_USE_:
      case v1::ActionKind_INT_MAX_SENTINEL_DO_NOT_USE_:
        keep(i);
        break;
    }
  }
}

}  // namespace

OpProgram LowerOps(const OpProgram& compute, int num_stages, int stage,
                   const LowerOptions& options) {
  OpProgram program;
  program.reserve(2 * compute.size() + 3);
  LowerEach(
      compute.size(), [&](size_t i) { return compute[i].kind; },
      [&](size_t i) { return compute[i].micro_batch; }, [&](size_t i) { return compute[i].stage; },
      num_stages, stage, options, [&](size_t i) { program.push_back(compute[i]); },
      [&](v1::ActionKind kind, int m, int field) {
        program.push_back({kind, m, field});
      });
  return program;
}

v1::RankProgram Lower(const std::vector<v1::Action>& compute, int num_stages, int stage,
                      const LowerOptions& options) {
  v1::RankProgram program;
  program.set_stage(stage);
  program.set_replica(0);
  LowerEach(
      compute.size(), [&](size_t i) { return compute[i].kind(); },
      [&](size_t i) { return compute[i].micro_batch(); },
      [&](size_t i) { return compute[i].stage(); }, num_stages, stage, options,
      [&](size_t i) { *program.add_actions() = compute[i]; },
      [&](v1::ActionKind kind, int m, int field) {
        *program.add_actions() = MakeAction(field, kind, m);
      });
  return program;
}

absl::StatusOr<std::vector<v1::RankProgram>> BuildPrograms(ScheduleKind kind, int num_stages,
                                                           int num_micro_batches,
                                                           const LowerOptions& options) {
  if (num_stages < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_stages ", num_stages, " must be at least 1"));
  }
  if (num_micro_batches < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_micro_batches ", num_micro_batches, " must be at least 1"));
  }
  if (kind == ScheduleKind::kPipeSgd && num_stages != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipesgd is data parallelism over one stage, got num_stages ", num_stages,
                     ": use one stage (replicated), or schedule dapple for a pipeline"));
  }
  if (options.chunks < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("options.chunks ", options.chunks, " must be at least 1"));
  }
  if (options.chunks > 1 && kind != ScheduleKind::kInterleaved) {
    return absl::InvalidArgumentError(absl::StrCat("options.chunks ", options.chunks,
                                                   " (model chunks per stage) needs schedule "
                                                   "interleaved, not ",
                                                   ScheduleKindName(kind)));
  }
  for (const auto& [name, per_stage] : {std::pair<const char*, const std::vector<bool>*>{
                                            "allreduce_stages", &options.allreduce_stages},
                                        {"tied_stages", &options.tied_stages}}) {
    if (!per_stage->empty() && static_cast<int>(per_stage->size()) != num_stages) {
      return absl::InvalidArgumentError(absl::StrCat("options.", name, " has ", per_stage->size(),
                                                     " entries for ", num_stages, " stages"));
    }
  }
  std::vector<OpProgram> ops;
  ops.reserve(num_stages);
  for (int s = 0; s < num_stages; ++s) {
    ops.push_back(LowerOps(GenerateOps(kind, num_stages, num_micro_batches, s, options.chunks),
                           num_stages, s, options));
  }
  // Whether a program set deadlocks does not depend on costs (sends never block), so unit
  // costs are enough to prove it.
  ActionCosts unit;
  unit.forward = 1.0;
  unit.backward = 1.0;
  unit.send = 0.0;
  unit.recv = 0.0;
  unit.optimizer_step = 1.0;
  SimulateOptions no_grid;
  no_grid.render_grid = false;
  absl::StatusOr<SimulationResult> sim = SimulateOps(ops, unit, no_grid);
  if (!sim.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(ScheduleKindName(kind), " P=", num_stages,
                     options.chunks > 1 ? absl::StrCat(" v=", options.chunks) : "",
                     " M=", num_micro_batches, " does not simulate: ", sim.status().message()));
  }
  std::vector<v1::RankProgram> programs;
  programs.reserve(num_stages);
  for (int s = 0; s < num_stages; ++s) programs.push_back(ToRankProgram(s, ops[s]));
  return programs;
}

}  // namespace dapple::schedule
