#include "coordinator/planner/plan_estimator.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/profile/chain_profile.h"
#include "common/profile/cluster_topology.h"
#include "coordinator/planner/cost_model.h"
#include "coordinator/planner/pipesgd_model.h"
#include "coordinator/planner/stage_memory.h"

namespace dapple::coordinator {

PlanEstimator::PlanEstimator(const PlanningProblem& problem)
    : problem_(problem), activation_(problem.profile) {
  for (int n = 0; n < problem.topology.nodes_size(); ++n) {
    for (int d = 0; d < problem.topology.nodes(n).devices(); ++d) {
      node_of_.push_back(n);
      device_memory_.push_back(
          profile::DeviceMemoryBytes(problem.topology, static_cast<int>(device_memory_.size())));
    }
  }
  const profile::ChainProfile& p = problem.profile;
  const int L = p.num_layers();
  forward_prefix_.assign(L + 1, 0.0);
  backward_prefix_.assign(L + 1, 0.0);
  forward_fixed_prefix_.assign(L + 1, 0.0);
  backward_fixed_prefix_.assign(L + 1, 0.0);
  parameter_prefix_.assign(L + 1, 0);
  for (int i = 0; i < L; ++i) {
    forward_prefix_[i + 1] = forward_prefix_[i] + p.forward_ms[i];
    backward_prefix_[i + 1] = backward_prefix_[i] + p.backward_ms[i];
    forward_fixed_prefix_[i + 1] =
        forward_fixed_prefix_[i] +
        (p.forward_fixed_ms.size() == size_t(L) ? p.forward_fixed_ms[i] : 0.0);
    backward_fixed_prefix_[i + 1] =
        backward_fixed_prefix_[i] +
        (p.backward_fixed_ms.size() == size_t(L) ? p.backward_fixed_ms[i] : 0.0);
    parameter_prefix_[i + 1] = parameter_prefix_[i] + p.parameter_bytes[i];
  }
}

bool PlanEstimator::OneNode(const std::vector<int>& a, const std::vector<int>& b) const {
  const int node = node_of_[a.front()];
  for (int d : a) {
    if (node_of_[d] != node) return false;
  }
  for (int d : b) {
    if (node_of_[d] != node) return false;
  }
  return true;
}

bool PlanEstimator::HostMemoryLink(const std::vector<int>& a, const std::vector<int>& b) const {
  return OneNode(a, b) && problem_.topology.nodes(node_of_[a.front()]).compute_capacity() > 0;
}

double PlanEstimator::TransferMs(double bytes, const std::vector<int>& from,
                                 const std::vector<int>& to) const {
  if (bytes == 0 || from == to) return 0;
  const v1::ClusterTopology& t = problem_.topology;
  const bool one = OneNode(from, to);
  const double bandwidth =
      one ? t.intra_node_bandwidth_bytes_per_s() : t.inter_node_bandwidth_bytes_per_s();
  const double latency = one ? t.intra_node_latency_ms() : t.inter_node_latency_ms();
  const double parallel = static_cast<double>(std::max(from.size(), to.size()));
  return latency + bytes / (parallel * bandwidth) * 1000.0;
}

double PlanEstimator::AllReduceMs(double bytes, const std::vector<int>& devices) const {
  return coordinator::AllReduceMs(problem_.topology, bytes, devices);
}

double PlanEstimator::ForwardMs(int first, int last, double samples) const {
  return ScaledMs(forward_prefix_[last + 1] - forward_prefix_[first],
                  forward_fixed_prefix_[last + 1] - forward_fixed_prefix_[first],
                  samples / static_cast<double>(problem_.profile.batch_size));
}

double PlanEstimator::BackwardMs(int first, int last, double samples) const {
  return ScaledMs(backward_prefix_[last + 1] - backward_prefix_[first],
                  backward_fixed_prefix_[last + 1] - backward_fixed_prefix_[first],
                  samples / static_cast<double>(problem_.profile.batch_size));
}

int64_t PlanEstimator::ParameterBytes(int first, int last) const {
  return parameter_prefix_[last + 1] - parameter_prefix_[first];
}

double PlanEstimator::ActivationBytes(int first, int last, double samples) const {
  return activation_.PerMicroBatch(first, last, samples);
}

double PlanEstimator::CutBytes(int last, double samples) const {
  if (last < 0 || last + 1 >= num_layers()) return 0;
  return static_cast<double>(problem_.profile.cut_bytes[last]) * samples /
         static_cast<double>(problem_.profile.batch_size);
}

LatencyEstimate PlanEstimator::Latency(const HybridPlan& plan) const {
  const int P = static_cast<int>(plan.stages.size());
  const double b = static_cast<double>(plan.micro_batch_size);
  const double M = plan.micro_batches;
  // f, g: one micro-batch's forward / backward compute on one replica; x: the transfer across
  // the cut after the stage (activations forward, gradients back: the same bytes).
  std::vector<double> f(P), g(P), x(P, 0.0), AR = TiedGradientMsPerStage(problem_, plan);
  std::vector<double> copy_after(P, 0.0);
  for (int s = 0; s < P; ++s) {
    const StagePlan& st = plan.stages[s];
    const double share = b / static_cast<double>(st.devices.size());
    f[s] = ForwardMs(st.first_layer, st.last_layer, share);
    g[s] = BackwardMs(st.first_layer, st.last_layer, share);
    // Activation recomputation: the forward again before each backward (stage_memory.h).
    if (StageRecomputes(problem_, plan, s, activation_, problem_.schedule)) g[s] += f[s];
    AR[s] +=
        AllReduceMs(static_cast<double>(ParameterBytes(st.first_layer, st.last_layer)), st.devices);
    if (s + 1 < P) {
      const std::vector<int>& next = plan.stages[s + 1].devices;
      x[s] = TransferMs(CutBytes(st.last_layer, b), st.devices, next);
      if (x[s] > 0 && HostMemoryLink(st.devices, next)) {
        // The copies run on the two ranks (cost_model.h HostCopyMsPerSide, as the simulator
        // charges them): both of this cut's messages on each side, in its forward and backward.
        const v1::ClusterTopology& t = problem_.topology;
        const double latency =
            OneNode(st.devices, next) ? t.intra_node_latency_ms() : t.inter_node_latency_ms();
        const double copy = HostCopyMsPerSide(x[s], latency);
        x[s] = std::min(x[s], latency);
        f[s] += copy;
        g[s] += copy;
        copy_after[s] = copy;
      }
    }
  }
  // The receiving side of each host copy: stage s + 1 takes its activation in (forward) and
  // sends its gradient out (backward).
  for (int s = 0; s + 1 < P; ++s) {
    f[s + 1] += copy_after[s];
    g[s + 1] += copy_after[s];
  }
  // The last gradient reaches stage s after the backward path from the pivot; AR_s then ends
  // sum_{s' < s} (g + x) before stage 0's last backward does, so only the excess is exposed.
  double tail = 0, path_back = 0;
  for (int s = 0; s < P; ++s) {
    tail = std::max(tail, AR[s] - path_back);
    path_back += g[s] + x[s];
  }
  LatencyEstimate e;
  if (problem_.schedule == schedule::ScheduleKind::kGPipe) {
    // All forwards stream through the pipeline, then all backwards.
    double sum_f = 0, sum_g = 0, max_f = 0, max_g = 0;
    for (int s = 0; s < P; ++s) {
      sum_f += f[s] + x[s];
      sum_g += g[s] + x[s];
      max_f = std::max({max_f, f[s], x[s]});
      max_g = std::max({max_g, g[s], x[s]});
    }
    e.warmup_ms = sum_f + (M - 1) * max_f;
    e.steady_ms = sum_g + (M - 1) * max_g;
    e.ending_ms = tail + GlobalNormMs(problem_, plan, problem_.schedule);
    e.step_ms = e.warmup_ms + e.steady_ms + e.ending_ms;
    return e;
  }
  // The steady cycle per micro-batch, by the cycles of 1F1B's dependency graph: a stage's own
  // compute, a link's transfers, and for stages s..e the loop F_s -> ... -> F_e -> (program
  // order on e) B_e -> ... -> B_s -> (program order on s) F_s, which carries the compute of
  // s..e and both transfers of each link between them over e - s + 1 micro-batches (stage i
  // holds K_i = min(P - i, M) in flight, one more than stage i + 1). The longest loops are
  // windows ending at the last stage (the round trip) or short ones around a slow link, so
  // deep pipelines (P > 128) look at windows of up to 32 stages and at the round trips.
  std::vector<double> compute_prefix(P + 1, 0.0), link_prefix(P + 1, 0.0);
  for (int s = 0; s < P; ++s) {
    compute_prefix[s + 1] = compute_prefix[s] + f[s] + g[s];
    link_prefix[s + 1] = link_prefix[s] + x[s];
  }
  auto window = [&](int first, int last) {
    return (compute_prefix[last + 1] - compute_prefix[first] +
            2 * (link_prefix[last] - link_prefix[first])) /
           (last - first + 1);
  };
  std::vector<double> cycle(P);
  for (int s = 0; s < P; ++s) {
    double c = std::max(f[s] + g[s], x[s]);
    const int last_end = P > 128 ? std::min(P - 1, s + 31) : P - 1;
    for (int e = s + 1; e <= last_end; ++e) c = std::max(c, window(s, e));
    if (last_end < P - 1) c = std::max(c, window(s, P - 1));
    cycle[s] = c;
  }
  const double round_trip = window(0, P - 1) * P;
  int Q = P - 1;  // walking back from the last stage, a strictly longer cycle takes the pivot
  for (int s = P - 2; s >= 0; --s) {
    if (cycle[s] > cycle[Q]) Q = s;
  }
  e.pivot_stage = Q;
  if (problem_.schedule == schedule::ScheduleKind::kPipeSgd && P == 1) {
    // Pipe-SGD: the AllReduce of the step before overlaps this step's compute
    // (pipesgd_model.h): max(compute, AllReduce), with the compression's wire size and cost.
    e.steady_ms = M * (f[0] + g[0]);
    e.step_ms = PipeSgdTimeOn(problem_.topology, plan.stages[0].devices, e.steady_ms,
                              static_cast<double>(ParameterBytes(plan.stages[0].first_layer,
                                                                 plan.stages[0].last_layer)),
                              problem_.pipesgd_compression)
                    .pipelined_step_ms();
    e.ending_ms = e.step_ms - e.steady_ms;
    return e;
  }
  // The job-wide GLOBAL_NORM's barrier and AllGather end every step (cost_model.h).
  const double norm = GlobalNormMs(problem_, plan, problem_.schedule);
  if (problem_.schedule == schedule::ScheduleKind::kPipeDream) {
    // No flush: M micro-batches per update at the pivot's cycle, plus the exposed AllReduce.
    e.steady_ms = M * cycle[Q];
    e.ending_ms = tail + norm;
  } else {
    for (int s = 0; s <= Q; ++s) e.warmup_ms += f[s] + (s > 0 ? x[s - 1] : 0.0);
    e.steady_ms = (M - 1) * cycle[Q];
    // The rest of one micro-batch's round trip: through the stages after the pivot and back.
    e.ending_ms = round_trip - e.warmup_ms + tail + norm;
  }
  e.step_ms = e.warmup_ms + e.steady_ms + e.ending_ms;
  return e;
}

MemoryEstimate PlanEstimator::Memory(const HybridPlan& plan) const {
  const int P = static_cast<int>(plan.stages.size());
  MemoryEstimate out;
  out.stages.resize(P);
  int64_t worst_excess = std::numeric_limits<int64_t>::min();
  for (int s = 0; s < P; ++s) {
    const StagePlan& st = plan.stages[s];
    StageMemory& m = out.stages[s];
    const memory::ReplicaMemory predicted =
        PredictStageMemory(problem_, plan, s, activation_, problem_.schedule);
    m.in_flight = predicted.in_flight;
    m.weight_bytes = predicted.WeightBytes();
    m.activation_bytes = predicted.activations;
    m.buffer_bytes = predicted.communication + predicted.workspace;
    m.peak_bytes = predicted.PeakBytes();
    m.device_bytes = std::numeric_limits<int64_t>::max();
    for (int d : st.devices) {
      m.device_bytes = std::min(m.device_bytes, device_memory_[d]);
    }
    if (m.peak_bytes > m.device_bytes) out.fits = false;
    out.peak_bytes = std::max(out.peak_bytes, m.peak_bytes);
    if (m.peak_bytes - m.device_bytes > worst_excess) {
      worst_excess = m.peak_bytes - m.device_bytes;
      out.worst_stage = s;
    }
  }
  return out;
}

}  // namespace dapple::coordinator
