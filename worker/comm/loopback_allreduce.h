// The host's link between processes as the gradient AllReduce sees it: two Gloo members in this
// process (two threads, each with its own Gloo TCP device on 127.0.0.1, the path two cpu workers
// of one host take) time AllReduceSum of a small and of a large buffer. A cpu worker measures it
// at registration and a few times in its first seconds (worker_daemon.cc), reports the median
// (RegisterWorkerRequest / HeartbeatRequest.loopback_link), and the coordinator plans the
// host's intra-node transfers and AllReduces with it (coordinator/service/worker_topology.h)
// instead of a default meant for GPUs' links: on this project's 2-vCPU machines the default
// 10 GB/s put a 7.4 MB AllReduce at 0.8 ms where Gloo took 9-20 ms.
// Thread safety: may be called from any thread; it starts and joins its own threads.
#ifndef DAPPLE_WORKER_COMM_LOOPBACK_ALLREDUCE_H_
#define DAPPLE_WORKER_COMM_LOOPBACK_ALLREDUCE_H_

#include <cstddef>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace dapple::worker {

// A link in the planner's terms (ClusterTopology's intra-node link): a transfer of B bytes takes
// latency_ms + B / bandwidth_bytes_per_s seconds.
struct LinkEstimate {
  double latency_ms = 0;
  double bandwidth_bytes_per_s = 0;
};

// The link that reproduces two AllReduce times of 2 members under the planner's ring model
// (coordinator/planner/cost_model.h AllReduceMs: 2 (n - 1) latency + 2 (n - 1) / n bytes /
// bandwidth, so for n = 2: 2 latency + bytes / bandwidth): latency from the small AllReduce
// (small_ms / 2), bandwidth from the difference (large_bytes - small_bytes) / (large_ms -
// small_ms). kInvalidArgument unless 0 < small_bytes < large_bytes and 0 < small_ms < large_ms
// (a large AllReduce no slower than a small one says nothing about the bandwidth).
absl::StatusOr<LinkEstimate> LinkFromAllReduceTimes(double small_bytes, double small_ms,
                                                    double large_bytes, double large_ms);

struct LoopbackOptions {
  size_t small_bytes = 4096;             // the latency probe
  size_t large_bytes = size_t{8} << 20;  // about a small model's gradients (the demo MLP: 7.4 MB)
  // Timed AllReduces of the large size, and 4x as many of the small one (a fraction of a
  // millisecond each, and noisier), after 2 untimed ones of each: a process's first AllReduces
  // read 10x slower (connections, page faults, Gloo's threads waking).
  int trials = 5;
  absl::Duration timeout = absl::Seconds(10);  // the rendezvous and each AllReduce
};

// Measures the loopback link: LinkFromAllReduceTimes of the fastest small AllReduceSum (its
// latency: on a 2-vCPU host the median small one takes 0.2-4 ms, as its four threads wait for a
// time slice, and noise only adds) and the median large one, both members calling at once. Takes
// both threads' worth of CPU for about trials * (large AllReduce time) (0.1-0.2 s on a 2-vCPU
// host); the caller keeps other measurements of the host (MeasureHostComputeCapacity) off that
// time. Errors: Gloo's (kUnavailable, kDeadlineExceeded: the host refuses TCP on 127.0.0.1) and
// LinkFromAllReduceTimes' (a measurement too noisy to give a link).
absl::StatusOr<LinkEstimate> MeasureLoopbackAllReduce(const LoopbackOptions& options = {});

// A worker's estimate of its host's loopback link: per field, the median of its measurements.
// Thread safety: none (the owner locks).
class LinkEstimateMedian {
 public:
  // Records one measurement; one with a latency < 0 or a bandwidth <= 0 (or not finite) is ignored.
  void Add(const LinkEstimate& link);
  // The medians; zeros when nothing was recorded.
  LinkEstimate Median() const;
  int count() const { return static_cast<int>(latency_ms_.size()); }

 private:
  std::vector<double> latency_ms_;
  std::vector<double> bandwidth_;
};

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_COMM_LOOPBACK_ALLREDUCE_H_
