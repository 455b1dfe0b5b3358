// Bounds that keep every size the system derives from a model (buffers, byte counts, FLOPs) far
// from int64 overflow and a worker's memory. Internal to common/model.
#ifndef DAPPLE_COMMON_MODEL_LIMITS_H_
#define DAPPLE_COMMON_MODEL_LIMITS_H_

#include <cstdint>

namespace dapple {

// At most 2^24 floats (64 MiB) per sample for the input and for any layer's output or
// parameter dimension.
inline constexpr int64_t kMaxSampleElements = int64_t{1} << 24;
// At most 2^28 parameters in all (1 GiB of fp32 weights; the optimizer keeps up to three more
// copies).
inline constexpr int64_t kMaxParams = int64_t{1} << 28;
// At most 2^28 floats a layer keeps per sample for its backward (attention probabilities grow
// with heads x T^2).
inline constexpr int64_t kMaxSavedElements = int64_t{1} << 28;
inline constexpr int kMaxLayers = 4096;

}  // namespace dapple

#endif  // DAPPLE_COMMON_MODEL_LIMITS_H_
