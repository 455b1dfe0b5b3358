#include "worker/runtime/token_sampler.h"

#include <cmath>
#include <vector>

#include "kernels/cpu/init.h"

namespace dapple::worker {
namespace {

// Separates the sampling stream from the initialisation streams keyed by the same seed
// (kernels/cpu/init.h InitStreamKey): "sample" in ASCII.
constexpr uint64_t kSampleStream = 0x73616D706C65ULL;

int64_t Argmax(const float* logits, int64_t vocab) {
  int64_t best = 0;
  bool found = false;
  for (int64_t k = 0; k < vocab; ++k) {
    if (std::isnan(logits[k])) continue;
    if (!found || logits[k] > logits[best]) best = k;
    found = true;
  }
  return best;
}

}  // namespace

double SampleUniform(uint64_t seed, int64_t position) {
  const uint64_t key = kernels::SplitMix64Mix(seed ^ kSampleStream);
  const uint64_t bits = kernels::SplitMix64At(key, static_cast<uint64_t>(position));
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

int64_t SampleToken(const float* logits, int64_t vocab, double temperature, uint64_t seed,
                    int64_t position) {
  const int64_t best = Argmax(logits, vocab);
  if (!(temperature > 0) || !std::isfinite(logits[best])) return best;
  std::vector<double> weights(static_cast<size_t>(vocab));
  double total = 0;
  for (int64_t k = 0; k < vocab; ++k) {
    // exp of a value <= 0: no overflow; NaN logits weigh nothing.
    const double w = std::isnan(logits[k])
                         ? 0.0
                         : std::exp((static_cast<double>(logits[k]) - logits[best]) / temperature);
    weights[k] = w;
    total += w;
  }
  const double target = SampleUniform(seed, position) * total;
  double cumulative = 0;
  for (int64_t k = 0; k < vocab; ++k) {
    cumulative += weights[k];
    if (cumulative > target) return k;
  }
  return best;  // rounding left target at the total: the largest weight is as good as any
}

}  // namespace dapple::worker
