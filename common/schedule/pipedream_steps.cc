#include "common/schedule/pipedream_steps.h"

#include <algorithm>

namespace dapple::schedule {

int64_t PipeDreamWarmUp(int num_stages, int num_micro_batches, int stage, int64_t num_steps) {
  return std::min<int64_t>(num_stages - stage, num_steps * num_micro_batches);
}

// The run is F_0..F_{K-1}, then pairs (B_b, F_{b+K}) for b < T - K, then the remaining
// backwards, with OPTIMIZER_STEP right after B_b when (b + 1) % M == 0. Step t therefore starts
// after B_{tM-1}, i.e. with that backward's paired forward, and ends with B_{tM+M-1} and its
// update (that backward's paired forward opens step t + 1).
OpProgram GeneratePipeDreamStepOps(int num_stages, int num_micro_batches, int stage, int64_t step,
                                   int64_t num_steps) {
  const int64_t m = num_micro_batches;
  const int64_t total = num_steps * m;
  const int64_t k = PipeDreamWarmUp(num_stages, num_micro_batches, stage, num_steps);
  const int64_t base = step * m;
  auto rel = [&](int64_t g) { return static_cast<int>(g - base); };
  OpProgram out;
  out.reserve(2 * static_cast<size_t>(m) + static_cast<size_t>(k) + 1);
  if (step == 0) {
    for (int64_t g = 0; g < k; ++g) out.push_back({v1::FORWARD, rel(g)});
  } else if (base - 1 < total - k) {
    out.push_back({v1::FORWARD, rel(base - 1 + k)});
  }
  for (int64_t b = base; b < base + m; ++b) {
    out.push_back({v1::BACKWARD, rel(b)});
    if (b == base + m - 1) break;
    if (b < total - k) out.push_back({v1::FORWARD, rel(b + k)});
  }
  out.push_back({v1::OPTIMIZER_STEP, -1});
  return out;
}

}  // namespace dapple::schedule
