#include "common/schedule/job_lowering.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/model_info.h"
#include "common/schedule/ranks.h"
#include "common/status.h"

namespace dapple::schedule {

std::vector<TiedWeight> TiedWeights(const std::vector<LayerInfo>& layers) {
  std::vector<TiedWeight> out;
  for (const LayerInfo& layer : layers) {
    for (const ParamInfo& p : layer.params) {
      if (p.tied_to.empty()) continue;
      TiedWeight w;
      w.owner = p.tied_to;
      w.owner_layer = layer.tied_layer;
      w.copy = ParamName(layer.index, p.name);
      w.copy_layer = layer.index;
      w.shape = p.shape;
      out.push_back(std::move(w));
    }
  }
  return out;
}

int StageOfLayer(const v1::ParallelPlanSummary& plan, int layer) {
  for (int s = 0; s < plan.stages_size(); ++s) {
    for (const v1::StageRange& r : StageChunks(plan, s)) {
      if (layer >= r.first_layer() && layer <= r.last_layer()) return s;
    }
  }
  return -1;
}

std::vector<TiedWeight> SplitTiedWeights(const std::vector<TiedWeight>& tied,
                                         const v1::ParallelPlanSummary& plan) {
  std::vector<TiedWeight> out;
  for (const TiedWeight& w : tied) {
    if (StageOfLayer(plan, w.owner_layer) != StageOfLayer(plan, w.copy_layer)) out.push_back(w);
  }
  return out;
}

std::vector<bool> TiedStages(const std::vector<TiedWeight>& split,
                             const v1::ParallelPlanSummary& plan) {
  std::vector<bool> tied(plan.stages_size(), false);
  for (const TiedWeight& w : split) {
    for (int layer : {w.owner_layer, w.copy_layer}) {
      const int s = StageOfLayer(plan, layer);
      if (s >= 0) tied[s] = true;
    }
  }
  return tied;
}

std::vector<int> TiedGroupRanks(const std::vector<bool>& tied_stages,
                                const v1::ParallelPlanSummary& plan) {
  std::vector<int> ranks;
  for (int s = 0; s < static_cast<int>(tied_stages.size()) && s < plan.stages_size(); ++s) {
    if (!tied_stages[s]) continue;
    for (int r = 0; r < StageReplicas(plan, s); ++r) ranks.push_back(RankIndex(plan, s, r));
  }
  return ranks;
}

std::string RunningSchedule(const v1::JobSpec& spec, const v1::ParallelPlanSummary& plan) {
  if (!plan.schedule().empty()) return plan.schedule();
  if (!spec.parallel().schedule().empty()) return spec.parallel().schedule();
  return "dapple";
}

bool NonFiniteCheckOnlyFails(double max_grad_norm, int64_t max_consecutive_skipped_steps) {
  return !(max_grad_norm > 0) && max_consecutive_skipped_steps == 0;
}

bool DefersNonFiniteCheck(absl::string_view schedule, double max_grad_norm,
                          int64_t max_consecutive_skipped_steps) {
  // A decision that can only fail the job need not hold the update (3 T M per zb-h2 step
  // instead of 3 T M + (P - 1) T).
  return schedule == "zb-h2" &&
         NonFiniteCheckOnlyFails(max_grad_norm, max_consecutive_skipped_steps);
}

bool TakesGlobalNorm(absl::string_view schedule, double max_grad_norm) {
  // Every synchronous program takes the step's job-wide decision (the norm for clipping and the
  // non-finite check: worker/runtime/gradient_exchange.h); PipeDream only when it clips.
  const bool synchronous = schedule == "dapple" || schedule == "gpipe" || schedule == "zb-h1" ||
                           schedule == "zb-h2" || schedule == "interleaved";
  return synchronous || (max_grad_norm > 0 && schedule != "pipesgd");
}

int LossReplicas(const v1::ParallelPlanSummary& plan) {
  if (plan.schedule() != "pipesgd" || plan.stages().empty()) return 1;
  return std::max(1, plan.stages(plan.stages_size() - 1).replicas());
}

bool ReportsLoss(const v1::ParallelPlanSummary& plan, int stage, int replica) {
  return stage == plan.stages_size() - 1 && replica < LossReplicas(plan);
}

absl::StatusOr<LowerOptions> LowerOptionsFor(const v1::JobSpec& spec,
                                             const v1::ParallelPlanSummary& plan) {
  DAPPLE_ASSIGN_OR_RETURN(const std::vector<LayerInfo> layers, InferLayers(spec.model()));
  const int num_layers = static_cast<int>(layers.size());
  LowerOptions options;
  for (int s = 0; s < plan.stages_size(); ++s) {
    for (const v1::StageRange& stage : StageChunks(plan, s)) {
      if (stage.first_layer() < 0 || stage.last_layer() < stage.first_layer() ||
          stage.last_layer() >= num_layers) {
        return absl::InvalidArgumentError(
            absl::StrCat("plan stage ", s, " covers layers [", stage.first_layer(), ", ",
                         stage.last_layer(), "] but the model has ", num_layers, " layers"));
      }
    }
    options.allreduce_stages.push_back(StageReplicas(plan, s) > 1);
  }
  options.tied_stages = TiedStages(SplitTiedWeights(TiedWeights(layers), plan), plan);
  const std::string schedule = RunningSchedule(spec, plan);
  options.global_norm = TakesGlobalNorm(schedule, spec.training().max_grad_norm());
  options.clipping = options.global_norm && spec.training().max_grad_norm() > 0;
  options.deferred_check =
      options.global_norm && DefersNonFiniteCheck(schedule, spec.training().max_grad_norm(),
                                                  spec.training().max_consecutive_skipped_steps());
  // The interleaved schedule's v (1 for every other schedule: BuildPrograms refuses chunks
  // under them): the plan's chunks, which parallel.schedule auto chose; the spec's
  // parallel.interleave for a plan without them (built by hand).
  if (schedule == "interleaved") {
    options.chunks = plan.stages_size() > 0 && plan.stages(0).chunks_size() > 0
                         ? plan.stages(0).chunks_size()
                         : std::max(1, spec.parallel().interleave());
  }
  return options;
}

int CollectivesPerStep(const LowerOptions& lower, int stage) {
  auto holds = [stage](const std::vector<bool>& stages) {
    return stage >= 0 && stage < static_cast<int>(stages.size()) && stages[stage];
  };
  return holds(lower.tied_stages) + holds(lower.allreduce_stages) + lower.global_norm;
}

int CountActions(const v1::RankProgram& program, v1::ActionKind kind) {
  int n = 0;
  for (const v1::Action& a : program.actions()) n += a.kind() == kind;
  for (const v1::ProgramPhase& phase : program.phases()) {
    for (const v1::StepActions& step : phase.cycle()) {
      for (const v1::Action& a : step.actions()) n += a.kind() == kind;
    }
  }
  return n;
}

bool HoldsNonFiniteCheck(const v1::RankProgram& program) {
  return CountActions(program, v1::GLOBAL_NORM) > 0 ||
         CountActions(program, v1::GLOBAL_NORM_ASYNC) > 0;
}

absl::Status CheckProgramCollectives(const v1::RankProgram& program, int stage,
                                     const LowerOptions& lower) {
  const bool tied =
      stage >= 0 && stage < static_cast<int>(lower.tied_stages.size()) && lower.tied_stages[stage];
  if ((CountActions(program, v1::TIED_ALLREDUCE) > 0) != tied) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stage ", stage,
        tied ? " holds a tied weight whose other copy is on another stage, but its program has "
               "no TIED_ALLREDUCE before OPTIMIZER_STEP"
             : " holds no tied weight split across stages, but its program has a TIED_ALLREDUCE",
        " (lower it with schedule::LowerOptionsFor)"));
  }
  if (CountActions(program, v1::GLOBAL_NORM_ASYNC) > 0 && !lower.deferred_check) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stage ", stage,
        "'s program has a GLOBAL_NORM_ASYNC, but the job's decision may change the update "
        "(gradient clipping, skipped steps) or the job takes none: it needs GLOBAL_NORM or "
        "nothing",
        " (lower it with schedule::LowerOptionsFor)"));
  }
  if (HoldsNonFiniteCheck(program) ? !lower.global_norm : lower.clipping) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stage ", stage,
        lower.clipping
            ? "'s program has no GLOBAL_NORM before OPTIMIZER_STEP, but training.max_grad_norm "
              "clips gradients by their global norm"
            : "'s program has a GLOBAL_NORM, but the job takes no job-wide decision per step "
              "(schedule pipedream without training.max_grad_norm, or schedule pipesgd)",
        " (lower it with schedule::LowerOptionsFor)"));
  }
  return absl::OkStatus();
}

}  // namespace dapple::schedule
