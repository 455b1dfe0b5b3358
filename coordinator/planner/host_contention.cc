#include "coordinator/planner/host_contention.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "common/profile/cluster_topology.h"
#include "common/status.h"

namespace dapple::coordinator {

std::vector<SharedHost> OversubscribedHosts(const v1::ClusterTopology& topology,
                                            const HybridPlan& plan) {
  const int stages = static_cast<int>(plan.stages.size());
  const int devices = profile::NumDevices(topology);
  std::vector<SharedHost> by_node(topology.nodes_size());
  for (int s = 0; s < stages; ++s) {
    for (int d : plan.stages[s].devices) {
      if (d < 0 || d >= devices) continue;
      SharedHost& host = by_node[profile::NodeOfDevice(topology, d)];
      host.processes.resize(stages, 0);
      ++host.processes[s];
    }
  }
  std::vector<SharedHost> shared;
  for (int n = 0; n < topology.nodes_size(); ++n) {
    const double capacity = topology.nodes(n).compute_capacity();
    SharedHost& host = by_node[n];
    int total = 0;
    for (int k : host.processes) total += k;
    if (capacity > 0 && total > capacity) {
      host.capacity = capacity;
      shared.push_back(std::move(host));
    }
  }
  // GPUs that several of the plan's processes compute on: a GPU runs one context's kernels at
  // a time (time-slicing between processes, without MPS), a capacity of one.
  std::map<std::pair<int, int>, SharedHost> by_gpu;  // (node, device_group)
  int first = 0;                                     // the node's first global device
  for (int n = 0; n < topology.nodes_size(); ++n) {
    const v1::ClusterNode& node = topology.nodes(n);
    if (node.device_group_size() == node.devices()) {
      for (int s = 0; s < stages; ++s) {
        for (int d : plan.stages[s].devices) {
          if (d < first || d >= first + node.devices()) continue;
          SharedHost& gpu = by_gpu[{n, node.device_group(d - first)}];
          gpu.processes.resize(stages, 0);
          ++gpu.processes[s];
        }
      }
    }
    first += node.devices();
  }
  for (auto& [key, gpu] : by_gpu) {
    int total = 0;
    for (int k : gpu.processes) total += k;
    if (total > 1) {
      gpu.capacity = 1;
      shared.push_back(std::move(gpu));
    }
  }
  return shared;
}

std::vector<double> MeanSlowdown(
    const std::vector<SharedHost>& hosts,
    const std::vector<std::vector<schedule::ComputeInterval>>& intervals) {
  const int stages = static_cast<int>(intervals.size());
  std::vector<double> slowdown(stages, 1.0);
  for (const SharedHost& host : hosts) {
    // Sweep the host's compute intervals in time order: between two consecutive edges the set
    // of computing stages is fixed, so each segment adds (its length x the slowdown of that
    // moment) to every computing stage.
    struct Edge {
      double time;
      int stage;
      bool start;
    };
    std::vector<Edge> edges;
    for (int s = 0; s < stages; ++s) {
      if (host.processes[s] == 0) continue;
      for (const schedule::ComputeInterval& i : intervals[s]) {
        edges.push_back({i.start, s, true});
        edges.push_back({i.end, s, false});
      }
    }
    // Ends before starts at equal times: back-to-back actions of one stage never overlap.
    std::sort(edges.begin(), edges.end(), [](const Edge& a, const Edge& b) {
      return a.time != b.time ? a.time < b.time : (!a.start && b.start);
    });
    std::vector<char> computing(stages, 0);
    std::vector<double> stretched(stages, 0.0);
    std::vector<double> length(stages, 0.0);
    int running = 0;  // processes computing now
    double previous = 0;
    for (const Edge& e : edges) {
      const double segment = e.time - previous;
      if (segment > 0 && running > 0) {
        const double factor = std::max(1.0, running / host.capacity);
        for (int s = 0; s < stages; ++s) {
          if (!computing[s]) continue;
          stretched[s] += segment * factor;
          length[s] += segment;
        }
      }
      previous = e.time;
      computing[e.stage] = e.start;
      running += (e.start ? 1 : -1) * host.processes[e.stage];
    }
    for (int s = 0; s < stages; ++s) {
      if (length[s] > 0) slowdown[s] = std::max(slowdown[s], stretched[s] / length[s]);
    }
  }
  return slowdown;
}

schedule::ActionCosts StretchCompute(const schedule::ActionCosts& costs,
                                     const std::vector<double>& slowdown) {
  schedule::ActionCosts stretched = costs;
  if (slowdown.empty()) return stretched;
  // Interleaved 1F1B has P * v entries: virtual stage k runs on rank k mod P (simulator.h).
  const size_t p = slowdown.size();
  for (size_t k = 0; k < stretched.forward_per_stage.size(); ++k) {
    stretched.forward_per_stage[k] *= slowdown[k % p];
  }
  for (size_t k = 0; k < stretched.backward_per_stage.size(); ++k) {
    stretched.backward_per_stage[k] *= slowdown[k % p];
  }
  for (size_t k = 0; k < stretched.optimizer_step_per_stage.size(); ++k) {
    stretched.optimizer_step_per_stage[k] *= slowdown[k % p];
  }
  for (size_t k = 0; k < stretched.recompute_per_stage.size(); ++k) {
    stretched.recompute_per_stage[k] *= slowdown[k % p];
  }
  return stretched;
}

absl::StatusOr<std::vector<double>> ContendedSlowdown(
    const std::vector<schedule::OpProgram>& programs, const schedule::ActionCosts& costs,
    const std::vector<SharedHost>& hosts) {
  std::vector<double> slowdown(programs.size(), 1.0);
  if (hosts.empty()) return slowdown;
  constexpr int kMaxRounds = 50;
  constexpr double kTolerance = 1e-4;
  schedule::SimulateOptions options;
  options.render_grid = false;
  options.keep_compute_intervals = true;
  for (int round = 0; round < kMaxRounds; ++round) {
    DAPPLE_ASSIGN_OR_RETURN(
        const schedule::SimulationResult sim,
        schedule::SimulateOps(programs, StretchCompute(costs, slowdown), options));
    const std::vector<double> produced = MeanSlowdown(hosts, sim.compute_intervals);
    double moved = 0;
    for (size_t s = 0; s < slowdown.size(); ++s) {
      // Damped: the undamped map can flip between two states (stretching one stage moves its
      // work out of the other's way, which then shrinks, and back).
      const double next = 0.5 * (slowdown[s] + produced[s]);
      moved = std::max(moved, std::fabs(next - slowdown[s]));
      slowdown[s] = next;
    }
    if (moved <= kTolerance) break;
  }
  return slowdown;
}

}  // namespace dapple::coordinator
