// Pipe-SGD's timing model (Li et al., "Pipe-SGD: A Decentralized Pipelined SGD Framework for
// Distributed Deep Net Training", NeurIPS 2018, section 3): the per-step time of synchronous
// data parallelism (compute, then the AllReduce) against AllReduce pipelined with width two (the
// AllReduce of step t overlaps the compute of step t + 1), in latency alpha, bandwidth beta,
// cluster size D and compute time. Pure functions; thread-safe. Units: ms and bytes.
//
// For S gradient bytes (fp32) on D replicas:
//   uncompressed  allreduce = 2 (D - 1) (alpha + S / (D beta))      ring AllReduce, as
//                                                                  cost_model.h AllReduceMs
//   fp16          allreduce = (D - 1) (alpha + (S / 2) / beta)      the runtime's compressed
//   int8          allreduce = (D - 1) (alpha + (S / 4 + 4) / beta)  path is a ring AllGather of
//                                                                  each member's encoded bytes
//                                                                  (compressed_allreduce.h):
//                                                                  D - 1 rounds of one member's
//                                                                  bytes; equal to the ring
//                                                                  AllReduce of S/2 (S/4) at D = 2
//   compression   = (S + D S) / codec_bytes_per_s                  encode S, decode and sum D
//                                                                  members' S (0 uncompressed)
//   sync step     = compute + allreduce + compression
//   pipelined     = max(compute, allreduce + compression)           width 2 (the paper's
//                                                                  max(T_comp, T_comm))
//   pays          = pipelined < 0.95 sync
// Pipelining gains at most 2x (compute == communication); when communication dominates it
// hides the compute and gains (compute + comm) / comm.
#ifndef DAPPLE_COORDINATOR_PLANNER_PIPESGD_MODEL_H_
#define DAPPLE_COORDINATOR_PLANNER_PIPESGD_MODEL_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "dapple/v1/job.pb.h"
#include "dapple/v1/profile.pb.h"

namespace dapple::coordinator {

enum class PipeSgdCompression { kNone, kFp16, kInt8 };

// "none" (or "") | "fp16" | "int8" (parallel.pipesgd.compression); kInvalidArgument naming the
// value otherwise.
absl::StatusOr<PipeSgdCompression> ParsePipeSgdCompression(absl::string_view name);

// Encode/decode throughput of the compression in fp32 bytes per second on one core: a nominal
// figure for a scalar conversion loop (about 2 ns per float), not a measurement.
inline constexpr double kCodecBytesPerSecond = 2e9;

struct PipeSgdInputs {
  int replicas = 1;                  // D
  double compute_ms = 0;             // forward + backward + update of one replica's share
  double gradient_bytes = 0;         // S: fp32 gradient bytes of the replicated stage
  double latency_ms = 0;             // alpha: per message
  double bandwidth_bytes_per_s = 0;  // beta: of the slowest link among the replicas, > 0
  PipeSgdCompression compression = PipeSgdCompression::kNone;
  double codec_bytes_per_s = kCodecBytesPerSecond;
};

// The model above. D <= 1 gives allreduce = compression = 0 and pays = false.
v1::PipeSgdTiming PipeSgdTime(const PipeSgdInputs& in);

// The same for `devices` of `topology` (the slowest link among them, as AllReduceMs takes).
v1::PipeSgdTiming PipeSgdTimeOn(const v1::ClusterTopology& topology,
                                const std::vector<int>& devices, double compute_ms,
                                double gradient_bytes, PipeSgdCompression compression);

// "Pipe-SGD (width 2): 12.3 ms/step vs 20.1 ms synchronous: pipelining pays off" (or "...:
// pipelining does not pay off"; when faster by less than the 5% margin, "...: 2% faster, under
// the 5% that would pay for one-step-stale updates: pipelining does not pay off"), for
// `dapplectl plan` and `get`.
std::string PipeSgdLine(const v1::PipeSgdTiming& timing);

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_PLANNER_PIPESGD_MODEL_H_
