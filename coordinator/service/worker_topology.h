// The cluster topology (profile.proto ClusterTopology) of the registered workers, for plans
// made without a cluster file: `dapplectl plan` without --cluster and jobs planned at
// submission. Pure functions; thread-safe.
#ifndef DAPPLE_COORDINATOR_SERVICE_WORKER_TOPOLOGY_H_
#define DAPPLE_COORDINATOR_SERVICE_WORKER_TOPOLOGY_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "coordinator/planner/planner.h"
#include "dapple/v1/job.pb.h"
#include "dapple/v1/profile.pb.h"
#include "dapple/v1/worker.pb.h"

namespace dapple::coordinator {

// Workers a job needs to start: one per device of its stored plan; a job stored without a
// plan (by an older version) is planned with one stage per device.
int WorkersNeeded(const v1::Job& job);

// " with cuda devices" for a typed job, "" for any.
std::string DeviceTypeClause(const v1::Job& job);

// Whether `worker` may run a stage of a job whose parallel.device_type is `device_type`:
// "cpu" / "cuda" take only workers whose first device (the one a stage computes on) is of that
// type; "any" (or empty) and "emulated" (nothing is computed) take every worker.
bool WorkerFitsDeviceType(absl::string_view device_type, const v1::WorkerInfo& worker);

// The device kind a job's layers run on, for its profile: "cpu" or "cuda" as device_type says;
// for "any" (or empty), "cuda" when every live worker computes on a cuda device and there is
// at least one, else "cpu".
std::string JobDeviceKind(absl::string_view device_type,
                          const std::vector<v1::WorkerInfo>& workers);

// RegisterWorkerRequest.physical_device, which any peer may set: kept when it is 1 to 64
// characters of letters, digits and '-' (a GPU's UUID as nvidia-smi prints it), else "" (as if
// not reported).
std::string ValidPhysicalDevice(absl::string_view physical_device);

// A link a worker reported (RegisterWorkerRequest / HeartbeatRequest.loopback_link), which any peer
// may set: present with a latency in [0, 10 s] and a bandwidth in [1 KB/s, 10 TB/s]
// (cluster_topology.h's bounds on a cluster file's links), else not usable.
bool ValidLink(const v1::LinkMeasurement& link);

// The workers that are IDLE or BUSY and fit `device_type`.
std::vector<v1::WorkerInfo> LiveFittingWorkers(const std::vector<v1::WorkerInfo>& workers,
                                               absl::string_view device_type);

// The topology of the live workers that fit `device_type`, in registration order: one node per
// hostname (in order of first appearance), one device per worker (a worker runs one rank, on
// its first device). A node's device memory is the smallest of its workers': the reported
// device_memory_bytes, divided by the number of live workers on that host that report
// device_memory_shared and the worker's physical_device (cpu workers: "", they share its RAM;
// cuda workers: their GPU's memory) when the worker reports it shared, or
// defaults.device_memory_bytes when it reported 0; memory_note says so for each host whose
// workers differ. A node's device_group is set when two of its
// fitting workers report one physical_device (not for "emulated"): devices of one GPU get one
// group, numbered in order of first appearance, every other device a group of its own; it stays
// empty when no GPU is shared. A node's compute_capacity is the smallest
// host_compute_capacity its workers reported, 0 when any of them reported none (cuda workers)
// and 0 for every node when device_type is "emulated" (emulated stages wait, using no cores).
// Links and latencies come from `defaults`, except the intra-node link when every fitting worker
// reported its host's loopback link (cpu workers: WorkerInfo.loopback_link, measured as a Gloo
// AllReduce sees it) and device_type is not "emulated" (emulated stages exchange their real
// messages, but the jobs measure schedules, not links, and expect the defaults' links): then the
// smallest bandwidth and the largest latency reported. A link outside ValidLink's bounds counts
// as not reported.
// source: "3 registered workers (cpu) on 2 hosts", with "; 2 of them share GPUs (one process's
// kernels at a time, the memory split)" when device groups are set and "; intra-node link
// measured: 850 MB/s, 0.05 ms" when the measured link is used.
// kFailedPrecondition when no worker fits: "no registered workers with cpu devices to plan on:
// start workers, or give a cluster file (dapplectl plan --cluster CLUSTER.yaml)".
absl::StatusOr<v1::ClusterTopology> TopologyFromWorkers(const std::vector<v1::WorkerInfo>& workers,
                                                        absl::string_view device_type,
                                                        const PlanDefaults& defaults);

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_SERVICE_WORKER_TOPOLOGY_H_
