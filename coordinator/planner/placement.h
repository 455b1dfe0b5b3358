// DAPPLE's device placement policies (Fan et al., "DAPPLE: A Pipelined Data Parallel Approach
// for Training Large Models", PPoPP 2021, section 5.3): which devices each stage's replicas
// get. docs/planner.md, "Placement policies". Pure functions; thread-safe.
#ifndef DAPPLE_COORDINATOR_PLANNER_PLACEMENT_H_
#define DAPPLE_COORDINATOR_PLANNER_PLACEMENT_H_

#include <vector>

#include "absl/strings/string_view.h"
#include "coordinator/planner/problem.h"
#include "dapple/v1/profile.pb.h"

namespace dapple::coordinator {

// How a new stage's replicas are put on devices, given the devices earlier stages took
// (DAPPLE section 5.3). Within a node, devices are always taken in local index order.
//   kFreshFirst    machines no earlier stage uses first, then partly used ones (node order):
//                  a stage's replicas share a machine (fast AllReduce), stages get their own.
//   kAppendFirst   partly used machines first, then fresh ones: stages are contiguous device
//                  ranges in stage order, neighbours share a machine (fast activation transfer).
//   kScatterFirst  one device at a time from every machine with a free device, round robin in
//                  node order: replicas spread evenly over the machines.
enum class PlacementPolicy { kFreshFirst, kAppendFirst, kScatterFirst };

// Every policy, in the order searches try them.
inline constexpr PlacementPolicy kPlacementPolicies[] = {
    PlacementPolicy::kFreshFirst, PlacementPolicy::kAppendFirst, PlacementPolicy::kScatterFirst};

// "fresh_first" | "append_first" | "scatter_first".
absl::string_view PlacementPolicyName(PlacementPolicy policy);

// The devices plans may use: global devices 0 .. UsableDeviceCount(problem) - 1 (node order),
// i.e. every device of the topology, or the first problem.max_devices when that is smaller.
int UsableDeviceCount(const PlanningProblem& problem);

// Devices (global indices, node order) for stages with replicas[s] devices each, placed in
// stage order by `policy` among the first `usable_devices` devices of `topology`; one list per
// stage, replicas[s] entries each. Precondition: the sum of replicas is at most usable_devices
// and every entry is >= 1.
std::vector<std::vector<int>> PlaceStages(const v1::ClusterTopology& topology, int usable_devices,
                                          const std::vector<int>& replicas, PlacementPolicy policy);

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_PLANNER_PLACEMENT_H_
