// CollectiveRefinement: what each collective across processes costs a step beyond the link
// model on this cluster (ClusterTopology.collective_overhead_ms), learned from the jobs' steps.
//
// Why. The link model (intra_node_latency_ms, measured as the fastest of a worker's small
// AllReduces, worker/comm/loopback_allreduce.h) prices a collective by its bytes. In a job, a
// collective is a hand-off between the ranks' compute threads and the transport's threads of
// every member, under load. On this project's 2-vCPU host a 2-stage job's bottleneck rank spends
// 3.5-6 ms per step more outside its layers than simulated, with one collective per step
// (GLOBAL_NORM), and a 2-replica job 10-11 ms with two (ALLREDUCE and GLOBAL_NORM): about 5 ms
// per collective (traces: GLOBAL_NORM on the rank that waits for its peer ends 1-8 ms after the
// peer's last backward, where the model says 1). With the vCPUs kept busy by an idle-priority
// process the excess halves: it is the host's scheduling of the hand-offs, not the bytes.
//
// The rule. A synchronous job (a schedule whose steps end in GLOBAL_NORM: not pipedream nor
// pipesgd) of at least two ranks, planned with overhead c (the topology's then), observes for its
// bottleneck stage b (the largest predicted compute_ms) with n collectives per step
// (schedule::CollectivesPerStep: GLOBAL_NORM, ALLREDUCE when b has replicas, TIED_ALLREDUCE when b
// holds one side of a tied weight whose other side is on another stage):
//
//   observation = c + (measured_b - predicted_b) / n, clamped to [0, kMaxOverheadMs]
//
// measured_b is the median over b's replicas of each rank's median milliseconds per step outside
// its forward, backward and optimizer (StageMetricsTracker::MedianNonComputeMs): its waits,
// transfers and collectives; predicted_b is predicted_step_ms - b's compute_ms. The overhead is
// the median of the last kHistory observations. One value for the cluster: a collective spans
// its members' hosts, and this measures them together.
//
// Thread safety: thread-safe (one internal mutex).
#ifndef DAPPLE_COORDINATOR_CLUSTER_COLLECTIVE_REFINEMENT_H_
#define DAPPLE_COORDINATOR_CLUSTER_COLLECTIVE_REFINEMENT_H_

#include <deque>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "dapple/v1/profile.pb.h"

namespace dapple::coordinator {

class CollectiveRefinement {
 public:
  static constexpr int kHistory = 5;
  static constexpr double kMaxOverheadMs = 100;

  // The median of the last kHistory observations; 0 without any.
  double OverheadMs() const;
  // Observations taken.
  int jobs() const;

  // One job planned with `planned_overhead_ms` whose bottleneck stage measured `excess_ms` per
  // step more outside its layers than predicted (negative: less), with `collectives` per step.
  // Returns the observation taken; takes nothing (and returns -1) when collectives < 1 or the
  // numbers are not finite.
  double Observe(double planned_overhead_ms, double excess_ms, int collectives);

  // The observations (oldest first) and jobs(): what the coordinator's database keeps
  // (profile_store.h).
  v1::CollectiveRefinementState State() const;
  // Replaces the observations by `state`'s. kInvalidArgument naming the value, changing nothing,
  // when it has more than kHistory observations, one outside [0, kMaxOverheadMs] or not finite,
  // or a negative job count.
  absl::Status Restore(const v1::CollectiveRefinementState& state);

 private:
  mutable absl::Mutex mu_;
  std::deque<double> history_ ABSL_GUARDED_BY(mu_);  // oldest first
  int jobs_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_CLUSTER_COLLECTIVE_REFINEMENT_H_
