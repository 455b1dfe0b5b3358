#include "coordinator/planner/plan_summary.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/profile/cluster_topology.h"
#include "coordinator/planner/cost_model.h"
#include "coordinator/planner/pipesgd_model.h"
#include "coordinator/planner/stage_memory.h"

namespace dapple::coordinator {

v1::ParallelPlanSummary ToSummary(const PlanningProblem& problem, const HybridPlan& plan,
                                  const Prediction& prediction, schedule::ScheduleKind schedule) {
  v1::ParallelPlanSummary summary;
  summary.set_planner(plan.planner);
  summary.set_schedule(std::string(schedule::ScheduleKindName(schedule)));
  summary.set_micro_batches(plan.micro_batches);
  summary.set_micro_batch_size(plan.micro_batch_size);
  summary.set_bubble_fraction(prediction.bubble_fraction);
  summary.set_predicted_step_ms(prediction.step_ms);
  summary.set_predicted_samples_per_second(prediction.samples_per_second);
  summary.set_profile_source(problem.profile.source);
  summary.set_cluster_source(problem.topology.source());
  summary.set_placement_policy(plan.placement_policy);
  // A prediction for another plan (or none) leaves the per-stage prediction fields at 0.
  const bool predicted = prediction.stages.size() == plan.stages.size();
  const ActivationMemory activations(problem.profile);
  int num_devices = 0;
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    const StagePlan& stage = plan.stages[s];
    v1::PlanStageSummary* out = summary.add_stages();
    out->set_first_layer(stage.first_layer);
    out->set_last_layer(stage.last_layer);
    // Interleaved 1F1B: the rank's v layer ranges (chunk c = virtual stage c * P + s), the
    // first being [first_layer, last_layer] (PlanStageSummary.chunks).
    for (const v1::StageRange& chunk : stage.chunks) *out->add_chunks() = chunk;
    out->set_replicas(static_cast<int32_t>(stage.devices.size()));
    num_devices += static_cast<int>(stage.devices.size());
    for (int d : stage.devices) out->add_placement(profile::DeviceName(problem.topology, d));
    out->set_recompute(StageRecomputes(problem, plan, static_cast<int>(s), activations, schedule));
    if (!predicted) continue;
    const StagePrediction& p = prediction.stages[s];
    out->set_forward_ms(p.forward_ms);
    out->set_backward_ms(p.backward_ms);
    out->set_compute_ms(p.compute_ms);
    out->set_idle_ms(p.idle_ms);
    out->set_comm_ms(p.comm_ms);
    out->set_overhead_ms(p.overhead_ms);
    out->set_contention_ms(p.contention_ms);
    out->set_allreduce_ms(p.allreduce_ms);
    out->set_peak_memory_bytes(p.peak_memory_bytes);
    out->set_peak_in_flight(p.peak_in_flight);
    out->set_bubble_fraction(prediction.step_ms > 0 ? p.idle_ms / prediction.step_ms : 0.0);
  }
  summary.set_num_devices(num_devices);
  // Pipe-SGD's timing model for data-parallel plans (one replicated stage): what width-2
  // pipelining of the AllReduce would give this plan, whatever its schedule.
  if (plan.stages.size() == 1 && plan.stages[0].devices.size() > 1 && predicted) {
    const StagePlan& stage = plan.stages[0];
    *summary.mutable_pipesgd() = PipeSgdTimeOn(
        problem.topology, stage.devices, prediction.stages[0].compute_ms,
        static_cast<double>(ParameterBytes(problem.profile, stage.first_layer, stage.last_layer)),
        problem.pipesgd_compression);
    // `dapplectl plan` and `get` print notes: one line saying whether width 2 pays here and,
    // under another schedule, what to set to get it (a reader saw the line under dapple and
    // took it for the schedule that runs).
    std::string line = PipeSgdLine(summary.pipesgd());
    if (schedule != schedule::ScheduleKind::kPipeSgd && summary.pipesgd().pays()) {
      absl::StrAppend(&line, ": set parallel.schedule: pipesgd to use it (updates one step stale)");
    }
    summary.add_notes(std::move(line));
  }
  return summary;
}

}  // namespace dapple::coordinator
