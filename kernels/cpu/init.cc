#include "kernels/cpu/init.h"

#include <cmath>

namespace dapple::kernels {
uint64_t InitStreamKey(uint64_t seed, int layer_index, InitTensor which) {
  // Mixing after each ingredient keeps nearby (seed, layer, which) triples from giving
  // overlapping or correlated sequences: the keys are scattered over the whole 2^64 state space.
  uint64_t k = SplitMix64Mix(seed + kGoldenGamma);
  k = SplitMix64Mix(k ^ (static_cast<uint64_t>(static_cast<uint32_t>(layer_index)) + kGoldenGamma));
  k = SplitMix64Mix(k ^ (static_cast<uint64_t>(which) + 2 * kGoldenGamma));
  return k;
}

float Gpt2InitBound() { return static_cast<float>(0.02 * std::sqrt(3.0)); }

float UnitFloat24(uint64_t bits) { return static_cast<float>(bits >> 40) * (1.0f / 16777216.0f); }

void FillSymmetricUniform(uint64_t seed, int layer_index, InitTensor which, float bound,
                          Tensor* t) {
  const uint64_t key = InitStreamKey(seed, layer_index, which);
  const size_t n = t->data.size();
  for (size_t i = 0; i < n; ++i) {
    // 2k - 2^24 is an integer of magnitude <= 2^24, exact in float; scaling by 2^-24 is exact too.
    const int64_t k = static_cast<int64_t>(SplitMix64At(key, i) >> 40);
    const float centred = static_cast<float>(2 * k - (int64_t{1} << 24)) * (1.0f / 16777216.0f);
    t->data[i] = bound * centred;
  }
}

float FanInInitBound(int64_t fan_in) {
  // Correctly rounded sqrt and division: the bound is the same float everywhere.
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(fan_in)));
}

}  // namespace dapple::kernels
