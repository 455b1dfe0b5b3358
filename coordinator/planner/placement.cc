#include "coordinator/planner/placement.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "common/profile/cluster_topology.h"

namespace dapple::coordinator {

absl::string_view PlacementPolicyName(PlacementPolicy policy) {
  switch (policy) {
    case PlacementPolicy::kFreshFirst:
      return "fresh_first";
    case PlacementPolicy::kAppendFirst:
      return "append_first";
    case PlacementPolicy::kScatterFirst:
      return "scatter_first";
  }
  return "";
}

int UsableDeviceCount(const PlanningProblem& problem) {
  const int total = profile::NumDevices(problem.topology);
  return problem.max_devices > 0 ? std::min(total, problem.max_devices) : total;
}

std::vector<std::vector<int>> PlaceStages(const v1::ClusterTopology& topology, int usable_devices,
                                          const std::vector<int>& replicas,
                                          PlacementPolicy policy) {
  const int num_nodes = topology.nodes_size();
  std::vector<int> first(num_nodes), capacity(num_nodes), used(num_nodes, 0);
  int offset = 0;
  for (int n = 0; n < num_nodes; ++n) {
    first[n] = offset;
    capacity[n] = std::clamp(usable_devices - offset, 0, topology.nodes(n).devices());
    offset += topology.nodes(n).devices();
  }
  std::vector<std::vector<int>> out;
  out.reserve(replicas.size());
  for (int r : replicas) {
    std::vector<int> devices;
    devices.reserve(r);
    if (policy == PlacementPolicy::kScatterFirst) {
      // Machines with the most free devices first, so consecutive stages also spread out.
      std::vector<int> order;
      for (int n = 0; n < num_nodes; ++n) {
        if (used[n] < capacity[n]) order.push_back(n);
      }
      std::stable_sort(order.begin(), order.end(),
                       [&](int a, int b) { return capacity[a] - used[a] > capacity[b] - used[b]; });
      bool progress = true;
      while (static_cast<int>(devices.size()) < r && progress) {
        progress = false;
        for (int n : order) {
          if (static_cast<int>(devices.size()) == r) break;
          if (used[n] < capacity[n]) {
            devices.push_back(first[n] + used[n]++);
            progress = true;
          }
        }
      }
      std::sort(devices.begin(), devices.end());
    } else {
      std::vector<int> fresh, partly;
      for (int n = 0; n < num_nodes; ++n) {
        if (used[n] == 0 && capacity[n] > 0) fresh.push_back(n);
        if (used[n] > 0 && used[n] < capacity[n]) partly.push_back(n);
      }
      std::vector<int> order = policy == PlacementPolicy::kFreshFirst ? fresh : partly;
      const std::vector<int>& rest = policy == PlacementPolicy::kFreshFirst ? partly : fresh;
      order.insert(order.end(), rest.begin(), rest.end());
      for (int n : order) {
        while (static_cast<int>(devices.size()) < r && used[n] < capacity[n]) {
          devices.push_back(first[n] + used[n]++);
        }
      }
    }
    out.push_back(std::move(devices));
  }
  return out;
}

}  // namespace dapple::coordinator
