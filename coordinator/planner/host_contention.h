// Stages that share one host's cores, or one GPU: a host whose devices compute on its CPUs (cpu
// workers) gives its processes ClusterNode.compute_capacity cores' worth of compute together,
// so when k of them compute at once each runs at min(1, capacity / k) of its own speed
// (processor sharing); a GPU that several processes compute on (ClusterNode.device_group: cuda
// workers reporting one physical device) runs one process's kernels at a time, a capacity of 1.
// The plan simulator (plan_simulator.h) stretches each such stage's compute by its mean
// slowdown, found as a fixed point of simulating the schedule; topologies without
// compute_capacity or device groups (cluster files, every published-profile cluster) are left
// alone.
// Pure functions; thread-safe.
#ifndef DAPPLE_COORDINATOR_PLANNER_HOST_CONTENTION_H_
#define DAPPLE_COORDINATOR_PLANNER_HOST_CONTENTION_H_

#include <vector>

#include "absl/status/statusor.h"
#include "common/schedule/op.h"
#include "common/schedule/simulator.h"
#include "coordinator/planner/problem.h"
#include "dapple/v1/profile.pb.h"

namespace dapple::coordinator {

// One host whose cores the plan oversubscribes, or one GPU it puts several processes on.
struct SharedHost {
  double capacity = 0;         // ClusterNode.compute_capacity (a host), 1 (a GPU); > 0
  std::vector<int> processes;  // per stage of the plan: its replicas on this host (0: none)
};

// The nodes of `topology` with compute_capacity > 0 on which `plan` puts more replicas (each a
// process computing when its stage computes) than compute_capacity, in node order, then the
// GPUs (a node's devices of one device_group) on which it puts more than one, in (node, group)
// order. Empty when no node has a compute_capacity or device groups, or the plan fits every
// one: nothing is slowed down. Devices outside the topology are ignored (SimulatePlan refuses
// such plans first).
std::vector<SharedHost> OversubscribedHosts(const v1::ClusterTopology& topology,
                                            const HybridPlan& plan);

// Per stage: the mean slowdown of its compute under processor sharing, given when every stage
// computes (`intervals`, SimulationResult::compute_intervals, one vector per stage): the
// average over the stage's computing time of max over its shared hosts of
// max(1, n_h(t) / capacity_h), where n_h(t) counts the processes on host h computing at t (a
// stage's replicas compute in lockstep, so each computing stage adds its processes on h).
// 1 for a stage on no shared host or without compute. intervals.size() must be the plan's
// stage count (processes.size() of every host).
std::vector<double> MeanSlowdown(
    const std::vector<SharedHost>& hosts,
    const std::vector<std::vector<schedule::ComputeInterval>>& intervals);

// `costs` with stage s's FORWARD, BACKWARD and OPTIMIZER_STEP costs (the per-stage vectors,
// which must have one entry per stage, or P * v under interleaved 1F1B: entry k is virtual
// stage k, on rank k mod P) multiplied by slowdown[s] (slowdown[k mod P]).
schedule::ActionCosts StretchCompute(const schedule::ActionCosts& costs,
                                     const std::vector<double>& slowdown);

// The per-stage slowdown f that reproduces itself: f = MeanSlowdown(hosts, the compute
// intervals of SimulateOps(programs, StretchCompute(costs, f))), by damped fixed-point
// iteration from f = 1 (each new f is the mean of the previous one and the slowdown it
// produces), until no entry moves by more than 1e-4 or after 50 rounds. Each entry lies in
// [1, max over the stage's hosts of (the host's processes) / capacity]. All ones when `hosts`
// is empty. Errors: SimulateOps' (the programs are the caller's).
absl::StatusOr<std::vector<double>> ContendedSlowdown(
    const std::vector<schedule::OpProgram>& programs, const schedule::ActionCosts& costs,
    const std::vector<SharedHost>& hosts);

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_PLANNER_HOST_CONTENTION_H_
