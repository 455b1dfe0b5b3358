// Pipe-SGD's compressed AllReduce (Li et al., "Pipe-SGD: A Decentralized Pipelined SGD
// Framework for Distributed Deep Net Training", NeurIPS 2018, section 4: "lossy compression"
// inside the AllReduce: fp16 truncation and scalar quantization to 8 bits). Every member ends
// with bitwise-identical values, so replicas that apply the result keep identical weights.
//
//   kNone  one Collective::AllReduceSum: data[i] = sum over members of x_r[i] (exact up to
//          fp32 rounding of the sum).
//   kFp16  each member converts its n values to IEEE binary16 (round to nearest even, the IEEE
//          conversion; |x| > 65504 becomes +-inf, NaN stays NaN), AllGather (2n bytes per
//          member), then every member sums the members' halves, converted back to fp32, in rank
//          order (((h_0 + h_1) + h_2) ...). Error per element:
//            |data[i] - sum_r x_r[i]| <= sum_r (2^-11 |x_r[i]| + 2^-25)
//                                        + (D - 1) 2^-24 sum_r |x_r[i]|  (fp32 additions)
//          (2^-11: half's relative rounding error for normal values; 2^-25: half the spacing
//          of its subnormals, |x| < 2^-14).
//   kInt8  each member quantizes with one scale per call: s_r = max_i |x_r[i]| / 127 and
//          q_r[i] = round(x_r[i] / s_r) (nearest, halves away from zero) in [-127, 127];
//          AllGather (4 bytes of s_r + n bytes of q_r per member), then every member sums
//          q_r[i] * s_r in rank order in fp32. Error per element:
//            |data[i] - sum_r x_r[i]| <= sum_r max_i |x_r[i]| / 254 (1 + 2^-20)
//                                        + (D - 1) 2^-24 sum_r |x_r[i]|
//          An all-zero member sends s_r = 0 and zeros. A member with a non-finite value sends
//          s_r = NaN, so every member's whole result is NaN (training visibly diverges on all
//          replicas alike instead of one member failing and the others waiting).
//
// Bytes per member on the wire: 4n (none), 2n (fp16), n + 4 (int8).
// Errors: the collective's (collective.h), unchanged; kInvalidArgument for a null `data` with
// n > 0 (nothing is sent then, so call it on every member with the same n). Thread safety: one
// thread per Collective (collective.h); the function keeps no state.
#ifndef DAPPLE_WORKER_COMM_COMPRESSED_ALLREDUCE_H_
#define DAPPLE_WORKER_COMM_COMPRESSED_ALLREDUCE_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/comm/collective.h"

namespace dapple::worker {

enum class Compression { kNone, kFp16, kInt8 };

// "none" | "fp16" | "int8" (the job spec's parallel.pipesgd.compression; "" means none);
// kInvalidArgument naming the value otherwise.
absl::StatusOr<Compression> ParseCompression(absl::string_view name);
absl::string_view CompressionName(Compression compression);

// In place on `data` (n fp32 values, the same n on every member): the (compressed) sum over
// the collective's members, as described above.
absl::Status CompressedAllReduce(Collective& collective, Compression compression, float* data,
                                 size_t n);

// The conversions kFp16 uses, exposed for tests: IEEE binary16 bits of `x` (round to nearest
// even) and back (exact).
uint16_t FloatToHalf(float x);
float HalfToFloat(uint16_t h);

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_COMM_COMPRESSED_ALLREDUCE_H_
