// splitmix64 (Steele, Lea & Flood, "Fast splittable pseudorandom number generators", OOPSLA
// 2014) as a counter-based generator: the integer hash behind deterministic initialisation
// (init.h) and dropout masks (dropout_mask.h). Host and device code (host_device.h) use these
// same definitions. Arithmetic is modulo 2^64.
//
// Thread safety: pure functions.
#ifndef DAPPLE_KERNELS_CPU_SPLITMIX64_H_
#define DAPPLE_KERNELS_CPU_SPLITMIX64_H_

#include <cstdint>

#include "kernels/cpu/host_device.h"

namespace dapple::kernels {

// The golden-ratio increment of splitmix64's state.
inline constexpr uint64_t kGoldenGamma = 0x9E3779B97F4A7C15ULL;

// The splitmix64 output function (a bijective 64-bit mixer).
DAPPLE_HOST_DEVICE constexpr uint64_t SplitMix64Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// The i-th (0-based) output of the splitmix64 sequence whose state starts at `key`:
// Mix(key + (i + 1) * kGoldenGamma).
DAPPLE_HOST_DEVICE constexpr uint64_t SplitMix64At(uint64_t key, uint64_t i) {
  return SplitMix64Mix(key + (i + 1) * kGoldenGamma);
}

}  // namespace dapple::kernels

#endif  // DAPPLE_KERNELS_CPU_SPLITMIX64_H_
