#include "common/schedule/job_programs.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/schedule/generators.h"
#include "common/schedule/job_lowering.h"
#include "common/schedule/lowering.h"
#include "common/schedule/ranks.h"
#include "common/status.h"
#include "common/steps.h"

namespace dapple::schedule {
namespace {

absl::StatusOr<ScheduleKind> KindOf(const v1::JobSpec& spec, const v1::ParallelPlanSummary& plan) {
  return ParseScheduleKind(RunningSchedule(spec, plan));
}

int MicroBatches(const v1::JobSpec& spec) {
  const int64_t micro_batch = std::max<int64_t>(1, spec.training().micro_batch());
  return static_cast<int>(spec.training().global_batch() / micro_batch);
}

absl::Status CheckRank(const v1::ParallelPlanSummary& plan, int stage, int replica) {
  if (stage < 0 || stage >= plan.stages_size() || replica < 0 ||
      replica >= StageReplicas(plan, stage)) {
    return absl::InvalidArgumentError(absl::StrCat("stage ", stage, " replica ", replica,
                                                   " is not a rank of a plan of ",
                                                   plan.stages_size(), " stages"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::RankProgram>> StagePrograms(const v1::JobSpec& spec,
                                                           const v1::ParallelPlanSummary& plan,
                                                           ScheduleKind kind) {
  DAPPLE_ASSIGN_OR_RETURN(const LowerOptions lower, LowerOptionsFor(spec, plan));
  return BuildPrograms(kind, plan.stages_size(), MicroBatches(spec), lower);
}

}  // namespace

absl::StatusOr<PipeDreamProgramOptions> PipeDreamOptionsFor(const v1::JobSpec& spec,
                                                            const v1::ParallelPlanSummary& plan,
                                                            int64_t first_step) {
  PipeDreamProgramOptions o;
  DAPPLE_ASSIGN_OR_RETURN(o.lower, LowerOptionsFor(spec, plan));
  for (int s = 0; s < plan.stages_size(); ++s) o.layout.replicas.push_back(StageReplicas(plan, s));
  o.layout.num_micro_batches = MicroBatches(spec);
  o.layout.num_steps = std::max<int64_t>(1, TotalSteps(spec) - first_step);
  o.layout.first_micro_batch = first_step * o.layout.num_micro_batches;
  o.first_step = first_step;
  o.vertical_sync = spec.parallel().pipedream().vertical_sync();
  return o;
}

absl::StatusOr<std::vector<v1::RankProgram>> JobPrograms(const v1::JobSpec& spec,
                                                         const v1::ParallelPlanSummary& plan,
                                                         int64_t first_step) {
  DAPPLE_ASSIGN_OR_RETURN(const ScheduleKind kind, KindOf(spec, plan));
  std::vector<v1::RankProgram> out(static_cast<size_t>(NumRanks(plan)));
  if (kind == ScheduleKind::kPipeDream) {
    DAPPLE_ASSIGN_OR_RETURN(const PipeDreamProgramOptions o,
                            PipeDreamOptionsFor(spec, plan, first_step));
    DAPPLE_RETURN_IF_ERROR(CheckPipeDreamRun(o));
    for (int s = 0; s < plan.stages_size(); ++s) {
      for (int r = 0; r < StageReplicas(plan, s); ++r) {
        out[RankIndex(plan, s, r)] = BuildPipeDreamProgram(o, s, r);
      }
    }
    return out;
  }
  DAPPLE_ASSIGN_OR_RETURN(std::vector<v1::RankProgram> stages, StagePrograms(spec, plan, kind));
  for (int s = 0; s < plan.stages_size(); ++s) {
    for (int r = 0; r < StageReplicas(plan, s); ++r) {
      v1::RankProgram& p = out[RankIndex(plan, s, r)];
      p = stages[s];
      p.set_replica(r);
    }
  }
  return out;
}

absl::StatusOr<v1::RankProgram> JobRankProgram(const v1::JobSpec& spec,
                                               const v1::ParallelPlanSummary& plan, int stage,
                                               int replica, int64_t first_step) {
  DAPPLE_RETURN_IF_ERROR(CheckRank(plan, stage, replica));
  DAPPLE_ASSIGN_OR_RETURN(const ScheduleKind kind, KindOf(spec, plan));
  if (kind == ScheduleKind::kPipeDream) {
    DAPPLE_ASSIGN_OR_RETURN(const PipeDreamProgramOptions o,
                            PipeDreamOptionsFor(spec, plan, first_step));
    DAPPLE_RETURN_IF_ERROR(CheckPipeDreamRun(o));
    return BuildPipeDreamProgram(o, stage, replica);
  }
  DAPPLE_ASSIGN_OR_RETURN(std::vector<v1::RankProgram> stages, StagePrograms(spec, plan, kind));
  v1::RankProgram p = std::move(stages[stage]);
  p.set_replica(replica);
  return p;
}

}  // namespace dapple::schedule
