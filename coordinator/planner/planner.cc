#include "coordinator/planner/planner.h"

#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/schedule/generators.h"
#include "common/schedule/lowering.h"
#include "common/schedule/simulator.h"
#include "common/status.h"
#include "coordinator/planner/partition.h"

namespace dapple::coordinator {
namespace {

constexpr char kBalanced[] = "balanced";
constexpr char kUniform[] = "uniform";
constexpr char kManual[] = "manual";

// Simulator costs in MFLOP keep the numbers in a readable range; only their ratios matter.
constexpr double kFlopsPerSimUnit = 1e6;

std::string PlannerName(const v1::JobSpec& spec) {
  return spec.parallel().planner().empty() ? kBalanced : spec.parallel().planner();
}

}  // namespace

std::vector<double> LayerCosts(const std::vector<LayerInfo>& layers) {
  std::vector<double> costs;
  costs.reserve(layers.size());
  for (const LayerInfo& l : layers) {
    costs.push_back(l.forward_flops + l.backward_flops + kLayerOverheadFlops);
  }
  return costs;
}

absl::StatusOr<int> ResolveNumStages(const v1::JobSpec& spec) {
  const v1::ParallelSpec& par = spec.parallel();
  if (par.devices() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("parallel.devices ", par.devices(), " must be >= 1"));
  }
  int stages = 0;
  std::string field;
  if (PlannerName(spec) == kManual) {
    stages = par.stage_ranges_size();
    field = absl::StrCat("parallel.stage_ranges has ", stages, " ranges");
  } else if (par.stages() != 0) {
    stages = par.stages();
    field = absl::StrCat("parallel.stages ", stages);
  } else {
    return par.devices();
  }
  if (stages < 1) return absl::InvalidArgumentError(absl::StrCat(field, ": need at least 1"));
  if (stages > par.devices()) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " but parallel.devices is ", par.devices(), ": each stage needs its own device"));
  }
  return stages;
}

absl::StatusOr<v1::ParallelPlan> MakePlan(const v1::JobSpec& spec) {
  DAPPLE_ASSIGN_OR_RETURN(std::vector<LayerInfo> layers, InferLayers(spec.model()));
  DAPPLE_ASSIGN_OR_RETURN(const int num_stages, ResolveNumStages(spec));
  const int num_layers = static_cast<int>(layers.size());

  const std::string planner = PlannerName(spec);
  std::vector<v1::StageRange> ranges;
  if (planner == kBalanced) {
    DAPPLE_ASSIGN_OR_RETURN(ranges, PartitionBalanced(LayerCosts(layers), num_stages));
  } else if (planner == kUniform) {
    DAPPLE_ASSIGN_OR_RETURN(ranges, PartitionUniform(num_layers, num_stages));
  } else if (planner == kManual) {
    ranges.assign(spec.parallel().stage_ranges().begin(), spec.parallel().stage_ranges().end());
    DAPPLE_RETURN_IF_ERROR(CheckPartition(ranges, num_layers));
  } else {
    return absl::InvalidArgumentError(absl::StrCat("parallel.planner '", planner,
                                                   "' is unknown; known: balanced, uniform, "
                                                   "manual"));
  }

  const int64_t global_batch = spec.training().global_batch();
  const int64_t micro_batch = spec.training().micro_batch();
  if (micro_batch <= 0 || global_batch <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("training.global_batch ", global_batch,
                                                   " and training.micro_batch ", micro_batch,
                                                   " must be > 0"));
  }
  if (global_batch % micro_batch != 0) {
    return absl::InvalidArgumentError(absl::StrCat("training.global_batch ", global_batch,
                                                   " is not divisible by training.micro_batch ",
                                                   micro_batch));
  }
  const int64_t micro_batches = global_batch / micro_batch;
  if (micro_batches > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("training.global_batch / training.micro_batch = ", micro_batches,
                     " micro-batches is too many"));
  }

  DAPPLE_ASSIGN_OR_RETURN(const schedule::ScheduleKind kind,
                          schedule::ParseScheduleKind(spec.parallel().schedule()));
  DAPPLE_ASSIGN_OR_RETURN(
      std::vector<v1::RankProgram> programs,
      schedule::BuildPrograms(kind, num_stages, static_cast<int>(micro_batches)));

  v1::ParallelPlan plan;
  v1::ParallelPlanSummary* summary = plan.mutable_summary();
  summary->set_planner(planner);
  summary->set_schedule(std::string(schedule::ScheduleKindName(kind)));
  summary->set_micro_batches(static_cast<int32_t>(micro_batches));
  summary->set_micro_batch_size(micro_batch);

  schedule::ActionCosts costs;
  for (const v1::StageRange& r : ranges) {
    double forward = 0;
    double backward = 0;
    double flops = 0;
    for (int i = r.first_layer(); i <= r.last_layer(); ++i) {
      forward += layers[i].forward_flops + kLayerOverheadFlops / 2;
      backward += layers[i].backward_flops + kLayerOverheadFlops / 2;
      flops += layers[i].forward_flops + layers[i].backward_flops;
    }
    costs.forward_per_stage.push_back(forward / kFlopsPerSimUnit);
    costs.backward_per_stage.push_back(backward / kFlopsPerSimUnit);
    v1::PlanStageSummary* stage = summary->add_stages();
    stage->set_first_layer(r.first_layer());
    stage->set_last_layer(r.last_layer());
    stage->set_replicas(1);
    stage->set_compute_flops(flops);
  }
  DAPPLE_ASSIGN_OR_RETURN(const schedule::SimulationResult sim,
                          schedule::Simulate(programs, costs));
  summary->set_bubble_fraction(sim.bubble_fraction);
  for (v1::RankProgram& program : programs) *plan.add_programs() = std::move(program);
  return plan;
}

}  // namespace dapple::coordinator
