// The dropout mask function, shared by the CPU (dropout.h) and the GPU (kernels/cuda/dropout.h)
// so that both drop exactly the same elements and a pipeline may mix CPU and GPU stages. Every
// integer step is here, once, callable from host and device code (host_device.h).
//
// The mask is a pure function of (seed, step, sample, layer, site, element), never of how a
// step's global batch is split into micro-batches, replicas and stages. Exactly (Mix =
// SplitMix64Mix, G = kGoldenGamma, + and * modulo 2^64, splitmix64.h):
//
//   key  = Mix(Mix(seed + G) ^ 0x44524F504F555431)            ("DROPOUT1": apart from init)
//   key  = Mix(key ^ (uint64(step) + G))
//   key  = Mix(key ^ (uint64(sample) + 2G))                   sample = first_sample + row
//   key  = Mix(key ^ (uint64(uint32(layer)) + 3G))            layer = its index in the model
//   key  = Mix(key ^ (uint64(site) + 4G))                     site = which dropout of the layer
//   bits = SplitMix64At(key, element) = Mix(key + (element + 1) G)
//                                      element = index within the sample (row-major)
//   keep = (bits >> 40) >= threshold,  threshold = round(p * 2^24) (dropout.h DropoutThreshold)
//   out  = keep ? in * scale : 0,      scale = float(1 / (1 - p)) (dropout.h DropoutScale)
//
// Thread safety: pure functions.
#ifndef DAPPLE_KERNELS_CPU_DROPOUT_MASK_H_
#define DAPPLE_KERNELS_CPU_DROPOUT_MASK_H_

#include <cstdint>

#include "kernels/cpu/host_device.h"
#include "kernels/cpu/splitmix64.h"

namespace dapple::kernels {

inline constexpr uint64_t kDropoutDomain = 0x44524F504F555431ULL;  // "DROPOUT1"

// The per-sample key above.
DAPPLE_HOST_DEVICE constexpr uint64_t DropoutKey(uint64_t seed, int64_t step, int64_t sample,
                                                 int layer, uint32_t site) {
  // One mixing round per ingredient (as init.h's InitStreamKey): nearby tuples get unrelated
  // keys.
  uint64_t k = SplitMix64Mix(SplitMix64Mix(seed + kGoldenGamma) ^ kDropoutDomain);
  k = SplitMix64Mix(k ^ (static_cast<uint64_t>(step) + kGoldenGamma));
  k = SplitMix64Mix(k ^ (static_cast<uint64_t>(sample) + 2 * kGoldenGamma));
  k = SplitMix64Mix(k ^ (static_cast<uint64_t>(static_cast<uint32_t>(layer)) + 3 * kGoldenGamma));
  k = SplitMix64Mix(k ^ (static_cast<uint64_t>(site) + 4 * kGoldenGamma));
  return k;
}

// Whether element `element` of the sample whose key is `key` is kept (not dropped).
DAPPLE_HOST_DEVICE constexpr bool DropoutKeep(uint64_t key, uint64_t element, uint32_t threshold) {
  return (SplitMix64At(key, element) >> 40) >= threshold;
}

// One dropout site applied to a batch of rows (row r is sample first_sample + r): what a
// kernel needs, by value. Built on the host by MakeDropoutMask (dropout.h).
struct DropoutMask {
  uint64_t seed = 0;
  int64_t step = 0;
  int64_t first_sample = 0;
  int layer = 0;
  uint32_t site = 0;
  uint32_t threshold = 0;  // DropoutThreshold(p)
  float scale = 1.0f;      // DropoutScale(p)

  DAPPLE_HOST_DEVICE constexpr uint64_t RowKey(int64_t row) const {
    return DropoutKey(seed, step, first_sample + row, layer, site);
  }
};

}  // namespace dapple::kernels

#endif  // DAPPLE_KERNELS_CPU_DROPOUT_MASK_H_
