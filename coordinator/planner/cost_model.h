// The cost model every planner and the plan simulator share: compute time of a stage at a
// micro-batch size, point-to-point transfer time between device sets, ring AllReduce time, and
// per-device memory. Pure functions; thread-safe. Units: ms and bytes.
#ifndef DAPPLE_COORDINATOR_PLANNER_COST_MODEL_H_
#define DAPPLE_COORDINATOR_PLANNER_COST_MODEL_H_

#include <cstdint>
#include <vector>

#include "common/profile/chain_profile.h"
#include "common/schedule/generators.h"
#include "coordinator/planner/problem.h"
#include "dapple/v1/profile.pb.h"

namespace dapple::coordinator {

// Forward / backward ms of layers [first, last] for `samples` samples on one device: the
// profile's times scaled by samples / profile.batch_size, all but their fixed part
// (ChainProfile::forward_fixed_ms / backward_fixed_ms, when the profile has them): ScaledMs.
double ForwardMs(const profile::ChainProfile& profile, int first, int last, double samples);
double BackwardMs(const profile::ChainProfile& profile, int first, int last, double samples);
// A time of `ms` at the profile's batch of which `fixed_ms` does not shrink with the samples, at
// `scale` = samples / batch_size: fixed_ms + (ms - fixed_ms) * scale.
inline double ScaledMs(double ms, double fixed_ms, double scale) {
  return fixed_ms + (ms - fixed_ms) * scale;
}
// Sum of parameter_bytes of layers [first, last].
int64_t ParameterBytes(const profile::ChainProfile& profile, int first, int last);
// (A stage's activation memory per micro-batch: activation_memory.h.)

// The slowest link between any device of `from` and any of `to` (intra-node when all are on one
// node, else inter-node): bandwidth bytes/s and latency ms.
double LinkBandwidth(const v1::ClusterTopology& topology, const std::vector<int>& from,
                     const std::vector<int>& to);
double LinkLatencyMs(const v1::ClusterTopology& topology, const std::vector<int>& from,
                     const std::vector<int>& to);

// Time to move `bytes` from the replicas `from` to the replicas `to` (split-concat: the bytes
// are spread evenly over the max(|from|, |to|) parallel transfers): latency + bytes / (parallel
// transfers * bandwidth). 0 when bytes == 0 or from == to.
double TransferMs(const v1::ClusterTopology& topology, double bytes, const std::vector<int>& from,
                  const std::vector<int>& to);

// Ring AllReduce of `bytes` over `devices` (Patarasuk and Yuan 2009; the Pipe-SGD timing model,
// Li et al. NeurIPS 2018 section 3): 2 (n - 1) latency + 2 (n - 1) / n * bytes / bandwidth with
// the slowest link among the devices, plus the topology's collective_overhead_ms (measured by
// jobs: the hand-offs the link model misses). 0 for one device.
double AllReduceMs(const v1::ClusterTopology& topology, double bytes,
                   const std::vector<int>& devices);

// Ring AllGather of `bytes` from each of `devices` (Gloo's: n - 1 rounds, each moving one
// member's bytes over the slowest link among the devices): (n - 1) (latency + bytes /
// bandwidth), plus the topology's collective_overhead_ms. 0 for one device.
double AllGatherMs(const v1::ClusterTopology& topology, double bytes,
                   const std::vector<int>& devices);

// The job-wide GLOBAL_NORM of a plan under `kind` (the programs hold one when
// schedule::TakesGlobalNorm says so, job_lowering.h): a barrier of every rank of the plan, then
// an AllGather of each rank's 16-byte record (worker/runtime/gradient_exchange.h NormRecord):
// AllGatherMs over every device of the plan. 0 when the programs hold none or for one rank.
double GlobalNormMs(const PlanningProblem& problem, const HybridPlan& plan,
                    schedule::ScheduleKind kind);

// The rank time each of the sender and the receiver spends on one message of `transfer_ms`
// (TransferMs) over a host-memory link (HostMemoryLink) whose latency is `latency_ms`: the
// copies, half on each side; the link itself then takes only the latency.
inline double HostCopyMsPerSide(double transfer_ms, double latency_ms) {
  return transfer_ms > latency_ms ? (transfer_ms - latency_ms) / 2 : 0.0;
}

// Whether `from` and `to` are processes computing on the CPUs of one host (one node with
// ClusterNode.compute_capacity > 0, which only cpu workers report): their messages go through
// host memory (loopback TCP), copied into and out of the kernel by the sending and receiving
// processes on their own cores, so a transfer's time is theirs rather than a link's.
bool HostMemoryLink(const v1::ClusterTopology& topology, const std::vector<int>& from,
                    const std::vector<int>& to);

// The sum of a tied weight's gradient over the two stages holding copies of it
// (ChainProfile::Tie: the embedding's stage and the lm_head's), once per step before their
// optimizer steps: each replica pair exchanges its `bytes` of gradient both ways at once, a ring
// AllReduce of two, `2 latency + bytes / bandwidth` over the slowest link between the devices
// of `a` and `b`, plus the topology's collective_overhead_ms. 0 when bytes == 0 or a == b.
double TiedGradientSumMs(const v1::ClusterTopology& topology, double bytes,
                         const std::vector<int>& a, const std::vector<int>& b);

// Per stage of `plan`: the TiedGradientSumMs of every tie of problem.profile whose owner and
// copy layers sit on different stages, charged to both of them (each waits for the sum before
// its optimizer step). All zeros without such ties (one stage, or an untied model).
std::vector<double> TiedGradientMsPerStage(const PlanningProblem& problem, const HybridPlan& plan);

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_PLANNER_COST_MODEL_H_
