#include "coordinator/planner/plan_simulator.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/profile/cluster_topology.h"
#include "common/schedule/job_lowering.h"
#include "common/schedule/lowering.h"
#include "common/schedule/op.h"
#include "common/schedule/pipedream_steps.h"
#include "common/schedule/simulator.h"
#include "common/status.h"
#include "coordinator/planner/activation_memory.h"
#include "coordinator/planner/cost_model.h"
#include "coordinator/planner/host_contention.h"
#include "coordinator/planner/interleaved_partition.h"
#include "coordinator/planner/pipesgd_model.h"
#include "coordinator/planner/stage_memory.h"

namespace dapple::coordinator {
namespace {

// PipeDream's steady state comes from one run of `updates` updates without a flush, K = stage
// 0's warm-up (P with one replica per stage; the job's workers under 1F1B-RR):
//   fill    updates until stage 0 has finished at least 2K micro-batches (the pipeline filled
//           twice over), not measured;
//   window  `window` updates (even, >= 2, >= fill) whose durations on stage 0 are measured;
//   drain   ceil(K / M) + 1 updates, not measured: in the last K micro-batches stage 0 runs no
//           forwards (cool-down), which would shorten its updates.
// In steady state every stage updates at the same rate, but the rate may be periodic over c > 1
// updates (update durations alternating, for example); SteadyUpdateMs finds the smallest such c.
struct PipeDreamRun {
  int fill;
  int window;
  int updates;
};

PipeDreamRun PlanPipeDreamRun(int warm_up, int micro_batches) {
  PipeDreamRun run;
  run.fill = (2 * warm_up + micro_batches - 1) / micro_batches;
  run.window = std::max(2, run.fill + (run.fill & 1));
  run.updates = run.fill + run.window + (warm_up + micro_batches - 1) / micro_batches + 1;
  return run;
}

// The steady-state time of one update from the update end times `ends` (stage 0's): the mean of
// the last c window durations for the smallest c <= window / 2 at which the window's last 2c
// durations repeat (exact once the run is periodic), else the mean over the whole window (on
// random heterogeneous pipelines within about 1% of a twenty times longer run).
double SteadyUpdateMs(const std::vector<double>& ends, const PipeDreamRun& run) {
  const int last = run.fill + run.window - 1;
  auto duration = [&](int k) { return ends[k] - ends[k - 1]; };
  for (int c = 1; c <= run.window / 2; ++c) {
    bool periodic = true;
    for (int k = last; k > last - c && periodic; --k) {
      periodic =
          std::fabs(duration(k) - duration(k - c)) <= 1e-9 * std::max(1.0, std::fabs(duration(k)));
    }
    if (periodic) return (ends[last] - ends[last - c]) / c;
  }
  return (ends[last] - ends[run.fill - 1]) / run.window;
}

absl::Status Invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

// Steps simulated back to back: the first fills the pipeline, the distance between the last
// two updates is the steady state (ZB-H2 with equal stages is periodic from the second step on).
constexpr int kBackToBackSteps = 3;

bool DefersNonFiniteCheck(const PlanningProblem& problem, schedule::ScheduleKind kind) {
  return schedule::DefersNonFiniteCheck(schedule::ScheduleKindName(kind), problem.max_grad_norm,
                                        problem.max_consecutive_skipped_steps);
}

absl::Status CheckProfile(const profile::ChainProfile& profile) {
  const size_t layers = profile.forward_ms.size();
  if (layers == 0) return Invalid("the profile has no layers");
  if (profile.batch_size <= 0) {
    return Invalid(absl::StrCat("profile batch_size ", profile.batch_size, " must be > 0"));
  }
  auto check_size = [&](const char* field, size_t size, size_t want) -> absl::Status {
    if (size == want) return absl::OkStatus();
    return Invalid(absl::StrCat("profile ", field, " has ", size, " entries for ", layers,
                                " layers (want ", want, ")"));
  };
  DAPPLE_RETURN_IF_ERROR(check_size("backward_ms", profile.backward_ms.size(), layers));
  DAPPLE_RETURN_IF_ERROR(check_size("parameter_bytes", profile.parameter_bytes.size(), layers));
  DAPPLE_RETURN_IF_ERROR(check_size("activation_bytes", profile.activation_bytes.size(), layers));
  DAPPLE_RETURN_IF_ERROR(check_size("saved_bytes", profile.saved_bytes.size(), layers));
  DAPPLE_RETURN_IF_ERROR(check_size("cut_bytes", profile.cut_bytes.size(), layers - 1));
  for (const auto& [field, fixed] : {std::pair{"forward_fixed_ms", &profile.forward_fixed_ms},
                                     std::pair{"backward_fixed_ms", &profile.backward_fixed_ms}}) {
    if (!fixed->empty()) DAPPLE_RETURN_IF_ERROR(check_size(field, fixed->size(), layers));
  }
  auto layer = [&](size_t i) {
    return absl::StrCat("profile layer ", i,
                        i < profile.names.size() ? absl::StrCat(" (", profile.names[i], ")") : "");
  };
  for (size_t i = 0; i < layers; ++i) {
    for (const auto& [field, value] : {std::pair{"forward_ms", profile.forward_ms[i]},
                                       std::pair{"backward_ms", profile.backward_ms[i]}}) {
      if (!(value >= 0) || !std::isfinite(value)) {
        return Invalid(absl::StrCat(layer(i), " ", field, " ", value, " must be finite and >= 0"));
      }
    }
    for (const auto& [field, fixed, whole] :
         {std::tuple{"forward_fixed_ms", &profile.forward_fixed_ms, profile.forward_ms[i]},
          std::tuple{"backward_fixed_ms", &profile.backward_fixed_ms, profile.backward_ms[i]}}) {
      if (!fixed->empty() && !((*fixed)[i] >= 0 && (*fixed)[i] <= whole)) {
        return Invalid(
            absl::StrCat(layer(i), " ", field, " ", (*fixed)[i], " must be in [0, ", whole, "]"));
      }
    }
    for (const auto& [field, value] :
         {std::pair{"parameter_bytes", profile.parameter_bytes[i]},
          std::pair{"activation_bytes", profile.activation_bytes[i]},
          std::pair{"saved_bytes", profile.saved_bytes[i]},
          std::pair{"cut_bytes", i + 1 < layers ? profile.cut_bytes[i] : int64_t{0}}}) {
      if (value < 0)
        return Invalid(absl::StrCat(layer(i), " ", field, " ", value, " must be >= 0"));
    }
  }
  if (profile.input_bytes < 0) {
    return Invalid(absl::StrCat("profile input_bytes ", profile.input_bytes, " must be >= 0"));
  }
  for (const profile::ChainProfile::Tie& tie : profile.ties) {
    if (tie.owner_layer < 0 || tie.copy_layer < 0 || tie.owner_layer >= static_cast<int>(layers) ||
        tie.copy_layer >= static_cast<int>(layers) || tie.bytes < 0) {
      return Invalid(absl::StrCat("profile tie of layer ", tie.copy_layer, " to layer ",
                                  tie.owner_layer, " (", tie.bytes,
                                  " bytes) names a layer outside the profile or negative bytes"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckPlan(const PlanningProblem& problem, const HybridPlan& plan,
                       schedule::ScheduleKind kind) {
  if (!(problem.optimizer_state_factor >= 0) || !std::isfinite(problem.optimizer_state_factor)) {
    return Invalid(absl::StrCat("optimizer_state_factor ", problem.optimizer_state_factor,
                                " must be finite and >= 0"));
  }
  const int layers = problem.profile.num_layers();
  const int stages = static_cast<int>(plan.stages.size());
  if (stages == 0) return Invalid("the plan has no stages");
  const int v = ChunksOf(plan);
  const bool interleaved = kind == schedule::ScheduleKind::kInterleaved;
  for (int s = 0; s < stages; ++s) {
    const std::vector<v1::StageRange>& chunks = plan.stages[s].chunks;
    if (!interleaved && !chunks.empty()) {
      return Invalid(absl::StrCat("stage ", s, " holds ", chunks.size(),
                                  " layer ranges (chunks), which only schedule interleaved runs"));
    }
    if (interleaved && (static_cast<int>(chunks.size()) != v || chunks.empty() ||
                        chunks[0].first_layer() != plan.stages[s].first_layer ||
                        chunks[0].last_layer() != plan.stages[s].last_layer)) {
      return Invalid(absl::StrCat("stage ", s, " holds ", chunks.size(), " chunks but stage 0 ", v,
                                  ": under schedule interleaved every stage holds the same "
                                  "number of chunks, the first being [first_layer, last_layer]"));
    }
  }
  // Contiguity over the pipeline's (virtual) stages: the plan's stages, or its P * v chunks.
  const std::vector<VirtualStage> virtual_stages = VirtualStagesOf(plan);
  const char* unit = v > 1 ? "virtual stage " : "stage ";
  for (int s = 0; s < static_cast<int>(virtual_stages.size()); ++s) {
    const VirtualStage& stage = virtual_stages[s];
    if (stage.first_layer > stage.last_layer) {
      return Invalid(absl::StrCat(unit, s, " is empty (first_layer ", stage.first_layer,
                                  " > last_layer ", stage.last_layer,
                                  "): every stage needs at least one layer"));
    }
    const int expected_first = s == 0 ? 0 : virtual_stages[s - 1].last_layer + 1;
    if (stage.first_layer != expected_first) {
      return Invalid(s == 0 ? absl::StrCat(unit, "0 starts at layer ", stage.first_layer,
                                           ": the first stage must start at layer 0")
                            : absl::StrCat(unit, s, " starts at layer ", stage.first_layer, " but ",
                                           unit, s - 1, " ends at layer ", expected_first - 1,
                                           ": stages must be contiguous"));
    }
    if (stage.last_layer >= layers) {
      return Invalid(absl::StrCat(unit, s, " ends at layer ", stage.last_layer,
                                  " but the model has ", layers, " layers (0..", layers - 1, ")"));
    }
  }
  if (virtual_stages.back().last_layer != layers - 1) {
    return Invalid(absl::StrCat("the last stage ends at layer ", virtual_stages.back().last_layer,
                                " but the model has ", layers, " layers (0..", layers - 1,
                                "): stages must cover every layer"));
  }

  const int devices = profile::NumDevices(problem.topology);
  std::vector<int> owner(devices, -1);
  for (int s = 0; s < stages; ++s) {
    if (plan.stages[s].devices.empty()) {
      return Invalid(absl::StrCat("stage ", s, " has no devices: every stage needs at least one"));
    }
    for (int d : plan.stages[s].devices) {
      if (d < 0 || d >= devices) {
        return Invalid(absl::StrCat("stage ", s, " uses device ", d, " but the topology has ",
                                    devices, " devices (0..", devices - 1, ")"));
      }
      if (owner[d] >= 0) {
        return Invalid(absl::StrCat("device ", d, " is used twice (stage ", owner[d], " and stage ",
                                    s, "): each device runs one replica"));
      }
      owner[d] = s;
    }
  }

  if (problem.global_batch <= 0) {
    return Invalid(absl::StrCat("global_batch ", problem.global_batch, " must be > 0"));
  }
  if (plan.micro_batch_size <= 0) {
    return Invalid(absl::StrCat("micro_batch_size ", plan.micro_batch_size, " must be > 0"));
  }
  if (plan.micro_batches <= 0) {
    return Invalid(absl::StrCat("micro_batches ", plan.micro_batches, " must be > 0"));
  }
  if (plan.micro_batch_size * plan.micro_batches != problem.global_batch) {
    return Invalid(absl::StrCat(
        "micro_batch_size ", plan.micro_batch_size, " x micro_batches ", plan.micro_batches, " = ",
        plan.micro_batch_size * plan.micro_batches, " is not global_batch ", problem.global_batch));
  }
  for (int s = 0; s < stages; ++s) {
    const int replicas = static_cast<int>(plan.stages[s].devices.size());
    if (kind == schedule::ScheduleKind::kPipeDream) {
      // 1F1B-RR never splits a micro-batch: it sends whole ones round-robin to the replicas.
      if (plan.micro_batches < replicas) {
        return Invalid(absl::StrCat("micro_batches ", plan.micro_batches, " is fewer than stage ",
                                    s, "'s ", replicas,
                                    " replicas: schedule pipedream sends whole micro-batches "
                                    "round-robin and each replica needs at least one per step"));
      }
      continue;
    }
    if (plan.micro_batch_size < replicas) {
      return Invalid(absl::StrCat("micro_batch_size ", plan.micro_batch_size,
                                  " is smaller than stage ", s, "'s ", replicas,
                                  " replicas: each replica needs at least one sample"));
    }
    if (replicas > 1 && plan.micro_batch_size / replicas < problem.min_replica_rows) {
      return Invalid(absl::StrCat(
          "micro_batch_size ", plan.micro_batch_size, " gives each of stage ", s, "'s ", replicas,
          " replicas ", plan.micro_batch_size / replicas, " row of a micro-batch, but the model's ",
          "batch norm needs at least ", problem.min_replica_rows,
          " on each: over one value per channel its output is its bias whatever the input"));
    }
  }
  return absl::OkStatus();
}

// A link the plan moves data over must have a bandwidth > 0 and a latency >= 0, or its
// transfer times would be meaningless.
absl::Status CheckLink(const v1::ClusterTopology& topology, const std::vector<int>& from,
                       const std::vector<int>& to, const std::string& what) {
  const double bandwidth = LinkBandwidth(topology, from, to);
  const double latency = LinkLatencyMs(topology, from, to);
  if (bandwidth > 0 && latency >= 0 && std::isfinite(latency)) return absl::OkStatus();
  return Invalid(absl::StrCat("the topology's link for ", what, " has bandwidth ", bandwidth,
                              " bytes/s and latency ", latency,
                              " ms: a link needs bandwidth > 0 and latency >= 0"));
}

}  // namespace

absl::StatusOr<Prediction> SimulatePlan(const PlanningProblem& problem, const HybridPlan& given,
                                        schedule::ScheduleKind kind) {
  const profile::ChainProfile& profile = problem.profile;
  DAPPLE_RETURN_IF_ERROR(CheckProfile(profile));
  DAPPLE_RETURN_IF_ERROR(CheckPlan(problem, given, kind));
  // Which stages recompute (the spec's training.recompute, or the plan's own flags).
  const HybridPlan plan = WithRecompute(problem, given, kind);

  const int p = static_cast<int>(plan.stages.size());
  const int m = plan.micro_batches;
  const double b = static_cast<double>(plan.micro_batch_size);
  const bool pipedream = kind == schedule::ScheduleKind::kPipeDream;
  // Interleaved 1F1B: rank s runs virtual stages s, s + P, ...; the simulator takes the compute
  // and transfer costs per virtual stage (P * v and P * v - 1 entries) and the rank's own
  // actions (OPTIMIZER_STEP, the collectives) from entry s. v = 1 for every other schedule.
  const int v = ChunksOf(plan);
  const std::vector<VirtualStage> virtual_stages = VirtualStagesOf(plan);
  const int vp = static_cast<int>(virtual_stages.size());

  // Per-stage and per-boundary costs, each computed once: O(L + devices) per plan.
  schedule::ActionCosts costs;
  // The interpreter's fixed cost of each send and receive (measured profiles; 0 for files).
  costs.send = profile.action_ms;
  costs.recv = profile.action_ms;
  costs.optimizer_step = 0;
  costs.optimizer_step_per_stage.assign(vp, 0.0);
  costs.forward_per_stage.assign(vp, 0.0);
  costs.backward_per_stage.assign(vp, 0.0);
  costs.recompute_per_stage.assign(vp, 0.0);
  costs.allreduce_per_stage.assign(vp, 0.0);
  costs.act_transfer_per_boundary.resize(vp - 1);
  costs.host_copy_per_boundary.assign(vp - 1, 0.0);
  costs.link_latency_per_boundary.assign(vp - 1, 0.0);
  schedule::LowerOptions lower;
  lower.allreduce_stages.resize(p);
  lower.chunks = v;
  std::vector<int64_t> params(p, 0);
  std::vector<double> per_micro_batch_overhead(p, 0.0);
  const ActivationMemory activations(profile);
  // Tied copies on different stages (the embedding's table on the lm_head's stage) sum their
  // gradients before the optimizer step: charged as (part of) the stage's ALLREDUCE.
  const std::vector<double> tied_ms = TiedGradientMsPerStage(problem, plan);
  for (int k = 0; k < vp; ++k) {
    const VirtualStage& range = virtual_stages[k];
    const StagePlan& stage = plan.stages[range.rank];
    const int replicas = static_cast<int>(stage.devices.size());
    // Split-concat runs b / D samples of every micro-batch on each replica. PipeDream's 1F1B-RR
    // runs whole micro-batches, each on one replica, so the stage as a whole finishes one every
    // (time of b samples) / D: the same per-micro-batch cost, which is PipeDream's own cost
    // model of a replicated stage (Narayanan et al., SOSP 2019, section 3.1: T(i -> j, m) is
    // the stage's compute time / m). Only its memory differs (below).
    const double share = b / replicas;
    costs.forward_per_stage[k] = ForwardMs(profile, range.first_layer, range.last_layer, share);
    costs.backward_per_stage[k] = BackwardMs(profile, range.first_layer, range.last_layer, share);
    // Recomputation runs the layers' forward again before each backward (not the data loading).
    if (stage.recompute) costs.recompute_per_stage[k] = costs.forward_per_stage[k];
    // The first (virtual) stage loads each micro-batch's samples before its forward; the last
    // runs the loss (and its gradient) before its backward (measured profiles; 0 for files).
    const double load_ms = k == 0 ? profile.input_ms_per_sample * share : 0.0;
    const double loss_ms = k == vp - 1 ? profile.loss_ms_per_sample * share : 0.0;
    costs.forward_per_stage[k] += load_ms;
    costs.backward_per_stage[k] += loss_ms;
    per_micro_batch_overhead[range.rank] += load_ms + loss_ms;
    params[range.rank] += ParameterBytes(profile, range.first_layer, range.last_layer);
    // Every replica updates the whole stage's weights once per step (measured profiles only).
    for (int l = range.first_layer;
         l <= range.last_layer && l < static_cast<int>(profile.optimizer_ms.size()); ++l) {
      costs.optimizer_step_per_stage[range.rank] += profile.optimizer_ms[l];
    }
    if (k + 1 < vp) {
      const int next_rank = virtual_stages[k + 1].rank;
      const std::vector<int>& next = plan.stages[next_rank].devices;
      DAPPLE_RETURN_IF_ERROR(CheckLink(problem.topology, stage.devices, next,
                                       absl::StrCat("stages ", range.rank, " -> ", next_rank)));
      const double cut = static_cast<double>(profile.cut_bytes[range.last_layer]) * b /
                         static_cast<double>(profile.batch_size);
      costs.act_transfer_per_boundary[k] = TransferMs(problem.topology, cut, stage.devices, next);
      const double latency = LinkLatencyMs(problem.topology, stage.devices, next);
      if (HostMemoryLink(problem.topology, stage.devices, next)) {
        // Processes of one host: the copies into and out of the kernel are the transfer, done
        // by the sender in its SEND and the receiver in its RECV (a 128 KiB activation on the
        // demo host: about 0.1 ms in each), leaving the link its latency.
        costs.host_copy_per_boundary[k] =
            HostCopyMsPerSide(costs.act_transfer_per_boundary[k], latency);
        costs.act_transfer_per_boundary[k] = std::min(costs.act_transfer_per_boundary[k], latency);
      }
      // Messages in flight overlap: the latency delays each one but does not hold the link (a
      // gpipe warm-up of eight tiny activations on loopback TCP took one latency, not eight).
      costs.link_latency_per_boundary[k] = std::min(costs.act_transfer_per_boundary[k], latency);
    }
  }
  for (int s = 0; s < p; ++s) {
    const StagePlan& stage = plan.stages[s];
    const int replicas = static_cast<int>(stage.devices.size());
    lower.allreduce_stages[s] = replicas > 1 || tied_ms[s] > 0;
    if (replicas > 1) {
      DAPPLE_RETURN_IF_ERROR(CheckLink(problem.topology, stage.devices, stage.devices,
                                       absl::StrCat("stage ", s, "'s AllReduce")));
      costs.allreduce_per_stage[s] =
          AllReduceMs(problem.topology, static_cast<double>(params[s]), stage.devices);
    }
    costs.allreduce_per_stage[s] += tied_ms[s];
  }
  costs.grad_transfer_per_boundary = costs.act_transfer_per_boundary;
  // The job-wide GLOBAL_NORM the workers' programs hold (job_lowering.h LowerOptionsFor, the
  // same rule): a barrier of every rank, then its AllGather.
  lower.global_norm =
      schedule::TakesGlobalNorm(schedule::ScheduleKindName(kind), problem.max_grad_norm);
  lower.clipping = lower.global_norm && problem.max_grad_norm > 0;
  lower.deferred_check = lower.global_norm && DefersNonFiniteCheck(problem, kind);
  costs.global_norm = GlobalNormMs(problem, plan, kind);

  // PipeDream runs `updates` updates of M micro-batches without a flush; the synchronous
  // schedules one step. Under 1F1B-RR stage s as a whole (one simulated rank) runs 1F1B with
  // warm-up K_s = D_s + ... + D_{P-1} (pipedream_steps.h); P - s with one replica per stage.
  schedule::PipeDreamLayout layout;
  for (const StagePlan& stage : plan.stages) {
    layout.replicas.push_back(static_cast<int>(stage.devices.size()));
  }
  layout.num_micro_batches = m;
  std::vector<int> warm_ups(p);
  for (int s = p - 1; s >= 0; --s) {
    warm_ups[s] = layout.replicas[s] + (s + 1 < p ? warm_ups[s + 1] : 0);
  }
  const PipeDreamRun run = PlanPipeDreamRun(warm_ups[0], m);
  // A synchronous schedule whose steps no barrier separates (zb-h2 with the deferred non-finite
  // check) runs kBackToBackSteps steps in a row (micro-batches of step k numbered from k M), and
  // a step is the steady-state distance between the last two updates.
  const bool back_to_back = DefersNonFiniteCheck(problem, kind);
  const int updates = pipedream ? run.updates : back_to_back ? kBackToBackSteps : 1;
  layout.num_steps = updates;
  std::vector<schedule::OpProgram> programs;
  programs.reserve(p);
  for (int s = 0; s < p; ++s) {
    schedule::OpProgram compute;
    if (pipedream) {
      compute = schedule::GeneratePipeDreamOpsWithWarmUp(m * updates, m, warm_ups[s]);
    } else {
      const schedule::OpProgram one = schedule::GenerateOps(kind, p, m, s, v);
      for (int k = 0; k < updates; ++k) {
        for (schedule::Op op : one) {
          if (op.micro_batch >= 0) op.micro_batch += k * m;
          compute.push_back(op);
        }
      }
    }
    programs.push_back(schedule::LowerOps(compute, p, s, lower));
  }
  // Stages whose processes share a host's cores compute slower while others compute
  // (host_contention.h); ordinary topologies have no shared host: a slowdown of 1 everywhere
  // keeps every cost exactly.
  absl::StatusOr<std::vector<double>> contended =
      ContendedSlowdown(programs, costs, OversubscribedHosts(problem.topology, plan));
  if (!contended.ok()) {
    return absl::InternalError(
        absl::StrCat("simulating the plan failed: ", contended.status().message()));
  }
  const std::vector<double> slowdown = *std::move(contended);
  costs = StretchCompute(costs, slowdown);
  schedule::SimulateOptions options;
  options.render_grid = false;
  absl::StatusOr<schedule::SimulationResult> sim = schedule::SimulateOps(programs, costs, options);
  if (!sim.ok()) {
    // Generated programs always simulate; anything else is a bug here, not in the plan.
    return absl::InternalError(
        absl::StrCat("simulating the plan failed: ", sim.status().message()));
  }

  Prediction prediction;
  // Pipe-SGD on one replicated stage: the AllReduce of step t overlaps step t + 1's compute, so
  // a step takes max(compute, AllReduce) (pipesgd_model.h), not the simulated compute +
  // AllReduce of the synchronous program.
  const bool pipesgd = kind == schedule::ScheduleKind::kPipeSgd && p == 1;
  if (pipedream) {
    prediction.step_ms = SteadyUpdateMs(sim->optimizer_step_end[0], run);
  } else if (back_to_back) {
    for (const std::vector<double>& ends : sim->optimizer_step_end) {
      prediction.step_ms = std::max(prediction.step_ms, ends[updates - 1] - ends[updates - 2]);
    }
  } else if (pipesgd) {
    prediction.step_ms = PipeSgdTimeOn(problem.topology, plan.stages[0].devices, sim->busy_time[0],
                                       static_cast<double>(params[0]), problem.pipesgd_compression)
                             .pipelined_step_ms();
  } else {
    prediction.step_ms = sim->step_time;
  }
  prediction.samples_per_second =
      prediction.step_ms > 0 ? static_cast<double>(problem.global_batch) / prediction.step_ms * 1000
                             : 0.0;

  double idle_sum = 0;
  prediction.stages.resize(p);
  for (int s = 0; s < p; ++s) {
    StagePrediction& out = prediction.stages[s];
    out.recompute = plan.stages[s].recompute;
    // A rank's forward and backward of one micro-batch: all its chunks'.
    for (int k = s; k < vp; k += p) {
      out.forward_ms += costs.forward_per_stage[k];
      out.backward_ms += costs.backward_per_stage[k];
    }
    // Every update does the same work, so a per-step share of the run's totals is exact.
    out.compute_ms = sim->busy_time[s] / updates;
    // Busy time scales with the slowdown as a whole: what it adds is (f - 1) of the
    // uncontended busy time.
    out.contention_ms = out.compute_ms * (1.0 - 1.0 / slowdown[s]);
    // Sends and receives occupy the rank (the simulator counts them as neither compute nor
    // collective, so as idle): here they are the per-action overhead, inside compute_ms.
    const double action_ms = sim->message_time[s] / updates;
    out.compute_ms += action_ms;
    out.overhead_ms = per_micro_batch_overhead[s] * m * slowdown[s] + action_ms;
    out.allreduce_ms = sim->allreduce_time[s] / updates;
    out.comm_ms = sim->comm_time[s] / updates;
    // Both are differences of sums of times (step - busy - allreduce), so floating-point
    // cancellation leaves -1e-14 where a stage is never idle; idle time is never negative.
    out.idle_ms = std::max(0.0, pipedream || back_to_back
                                    ? prediction.step_ms - out.compute_ms - out.allreduce_ms
                                : pipesgd ? prediction.step_ms - out.compute_ms
                                          : sim->idle_time[s] - action_ms);
    idle_sum += out.idle_ms;

    // Memory: the one model (common/memory_model.h), as the estimator predicts it.
    const memory::ReplicaMemory predicted = PredictStageMemory(problem, plan, s, activations, kind);
    out.peak_in_flight = predicted.in_flight;
    out.weight_bytes = predicted.WeightBytes();
    out.activation_bytes = predicted.activations;
    out.buffer_bytes = predicted.communication + predicted.workspace;
    out.peak_memory_bytes = predicted.PeakBytes();
    for (int d : plan.stages[s].devices) {
      if (out.peak_memory_bytes > profile::DeviceMemoryBytes(problem.topology, d)) {
        prediction.fits_memory = false;
      }
    }
  }
  prediction.bubble_fraction =
      prediction.step_ms > 0 ? std::max(0.0, idle_sum / (p * prediction.step_ms)) : 0.0;
  return prediction;
}

}  // namespace dapple::coordinator
