#include "coordinator/planner/cost_model.h"

#include <algorithm>
#include <vector>

#include "common/schedule/job_lowering.h"

namespace dapple::coordinator {
namespace {

constexpr double kMsPerSecond = 1000.0;

double SumRange(const std::vector<double>& values, int first, int last) {
  double sum = 0;
  for (int i = first; i <= last; ++i) sum += values[i];
  return sum;
}

double Scale(const profile::ChainProfile& profile, double samples) {
  return profile.batch_size > 0 ? samples / static_cast<double>(profile.batch_size) : 0.0;
}

// The node every device of `from` and `to` sits on, or -1 when they span nodes (or name no node).
// One pass over the nodes to find the first device's node range, then one comparison per
// device: O(nodes + devices), so the planner can price AllReduces over a thousand devices in its
// inner loops. Both empty: node 0 (nothing to move).
int CommonNode(const v1::ClusterTopology& topology, const std::vector<int>& from,
               const std::vector<int>& to) {
  const int first = !from.empty() ? from.front() : (!to.empty() ? to.front() : -1);
  if (first < 0) return 0;
  int begin = 0;
  int end = 0;
  int node = 0;
  for (; node < topology.nodes_size(); ++node) {
    end = begin + topology.nodes(node).devices();
    if (first < end) break;
    begin = end;
  }
  auto inside = [&](int d) { return d >= begin && d < end; };
  const bool one =
      std::all_of(from.begin(), from.end(), inside) && std::all_of(to.begin(), to.end(), inside);
  return one && node < topology.nodes_size() ? node : (one ? 0 : -1);
}

bool AllOnOneNode(const v1::ClusterTopology& topology, const std::vector<int>& from,
                  const std::vector<int>& to) {
  return CommonNode(topology, from, to) >= 0;
}

}  // namespace

double ForwardMs(const profile::ChainProfile& profile, int first, int last, double samples) {
  return ScaledMs(SumRange(profile.forward_ms, first, last),
                  profile.forward_fixed_ms.size() == profile.forward_ms.size()
                      ? SumRange(profile.forward_fixed_ms, first, last)
                      : 0.0,
                  Scale(profile, samples));
}

double BackwardMs(const profile::ChainProfile& profile, int first, int last, double samples) {
  return ScaledMs(SumRange(profile.backward_ms, first, last),
                  profile.backward_fixed_ms.size() == profile.backward_ms.size()
                      ? SumRange(profile.backward_fixed_ms, first, last)
                      : 0.0,
                  Scale(profile, samples));
}

int64_t ParameterBytes(const profile::ChainProfile& profile, int first, int last) {
  int64_t sum = 0;
  for (int i = first; i <= last; ++i) sum += profile.parameter_bytes[i];
  return sum;
}

double LinkBandwidth(const v1::ClusterTopology& topology, const std::vector<int>& from,
                     const std::vector<int>& to) {
  return AllOnOneNode(topology, from, to) ? topology.intra_node_bandwidth_bytes_per_s()
                                          : topology.inter_node_bandwidth_bytes_per_s();
}

double LinkLatencyMs(const v1::ClusterTopology& topology, const std::vector<int>& from,
                     const std::vector<int>& to) {
  return AllOnOneNode(topology, from, to) ? topology.intra_node_latency_ms()
                                          : topology.inter_node_latency_ms();
}

double TransferMs(const v1::ClusterTopology& topology, double bytes, const std::vector<int>& from,
                  const std::vector<int>& to) {
  if (bytes == 0 || from == to) return 0.0;
  const bool intra = AllOnOneNode(topology, from, to);
  const double bandwidth = intra ? topology.intra_node_bandwidth_bytes_per_s()
                                 : topology.inter_node_bandwidth_bytes_per_s();
  const double latency =
      intra ? topology.intra_node_latency_ms() : topology.inter_node_latency_ms();
  // Split-concat: each of the max(|from|, |to|) pairs carries an equal share at once.
  const double parallel = static_cast<double>(std::max(from.size(), to.size()));
  return latency + bytes / (parallel * bandwidth) * kMsPerSecond;
}

double AllReduceMs(const v1::ClusterTopology& topology, double bytes,
                   const std::vector<int>& devices) {
  const double n = static_cast<double>(devices.size());
  if (devices.size() <= 1) return 0.0;
  const bool intra = AllOnOneNode(topology, devices, {});
  const double bandwidth = intra ? topology.intra_node_bandwidth_bytes_per_s()
                                 : topology.inter_node_bandwidth_bytes_per_s();
  const double latency =
      intra ? topology.intra_node_latency_ms() : topology.inter_node_latency_ms();
  // Ring: a reduce-scatter and an all-gather of n - 1 rounds each, every round moving bytes / n
  // per device over the slowest link of the ring.
  return 2 * (n - 1) * latency + 2 * (n - 1) / n * bytes / bandwidth * kMsPerSecond +
         topology.collective_overhead_ms();
}

double AllGatherMs(const v1::ClusterTopology& topology, double bytes,
                   const std::vector<int>& devices) {
  const double n = static_cast<double>(devices.size());
  if (devices.size() <= 1) return 0.0;
  return (n - 1) * (LinkLatencyMs(topology, devices, {}) +
                    bytes / LinkBandwidth(topology, devices, {}) * kMsPerSecond) +
         topology.collective_overhead_ms();
}

double GlobalNormMs(const PlanningProblem& problem, const HybridPlan& plan,
                    schedule::ScheduleKind kind) {
  if (!schedule::TakesGlobalNorm(schedule::ScheduleKindName(kind), problem.max_grad_norm)) {
    return 0.0;
  }
  std::vector<int> ranks;
  for (const StagePlan& stage : plan.stages) {
    ranks.insert(ranks.end(), stage.devices.begin(), stage.devices.end());
  }
  constexpr double kNormRecordBytes = 16;
  return AllGatherMs(problem.topology, kNormRecordBytes, ranks);
}

bool HostMemoryLink(const v1::ClusterTopology& topology, const std::vector<int>& from,
                    const std::vector<int>& to) {
  const int node = CommonNode(topology, from, to);
  return node >= 0 && node < topology.nodes_size() && topology.nodes(node).compute_capacity() > 0;
}

double TiedGradientSumMs(const v1::ClusterTopology& topology, double bytes,
                         const std::vector<int>& a, const std::vector<int>& b) {
  if (bytes == 0 || a == b) return 0.0;
  // A ring of two: one round of the reduce-scatter and one of the all-gather, each moving half
  // the bytes per direction; the replica pairs run side by side.
  return 2 * LinkLatencyMs(topology, a, b) + bytes / LinkBandwidth(topology, a, b) * kMsPerSecond +
         topology.collective_overhead_ms();
}

std::vector<double> TiedGradientMsPerStage(const PlanningProblem& problem, const HybridPlan& plan) {
  const int p = static_cast<int>(plan.stages.size());
  std::vector<double> ms(p, 0.0);
  if (problem.profile.ties.empty() || p < 2) return ms;
  for (const profile::ChainProfile::Tie& tie : problem.profile.ties) {
    const int owner = StageOfLayer(plan, tie.owner_layer);
    const int copy = StageOfLayer(plan, tie.copy_layer);
    if (owner < 0 || copy < 0 || owner == copy) continue;
    const double t = TiedGradientSumMs(problem.topology, static_cast<double>(tie.bytes),
                                       plan.stages[owner].devices, plan.stages[copy].devices);
    ms[owner] += t;
    ms[copy] += t;
  }
  return ms;
}

}  // namespace dapple::coordinator
