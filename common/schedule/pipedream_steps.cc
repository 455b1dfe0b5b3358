#include "common/schedule/pipedream_steps.h"

#include <algorithm>

namespace dapple::schedule {
namespace {

PipeDreamLayout Unreplicated(int num_stages, int num_micro_batches, int64_t num_steps) {
  PipeDreamLayout layout;
  layout.replicas.assign(static_cast<size_t>(num_stages), 1);
  layout.num_micro_batches = num_micro_batches;
  layout.num_steps = num_steps;
  return layout;
}

}  // namespace

int64_t PipeDreamWarmUp(const PipeDreamLayout& layout, int stage) {
  const int64_t total = layout.num_steps * layout.num_micro_batches;
  if (!layout.warm_ups.empty()) return std::min(layout.warm_ups[stage], total);
  int64_t workers = 0;
  for (size_t s = static_cast<size_t>(stage); s < layout.replicas.size(); ++s) {
    workers += layout.replicas[s];
  }
  return std::min(workers, total);
}

int64_t PipeDreamReplicaInFlight(const PipeDreamLayout& layout, int stage) {
  const int64_t d = layout.replicas[stage];
  return (PipeDreamWarmUp(layout, stage) + d - 1) / d;
}

int64_t PipeDreamReplicaVersions(const PipeDreamLayout& layout, int stage) {
  const int64_t d = layout.replicas[stage];
  return (PipeDreamWarmUp(layout, stage) - 1 + d - 1) / d + 1;
}

// The stage's run is F_0..F_{K-1}, then pairs (B_b, F_{b+K}) for b < T - K, then the remaining
// backwards, with OPTIMIZER_STEP right after B_b when (b + 1) % M == 0. Step t therefore starts
// after B_{tM-1}, i.e. with that backward's paired forward, and ends with B_{tM+M-1} and its
// update (that backward's paired forward opens step t + 1). A replica keeps its own
// micro-batches' actions and every update.
OpProgram GeneratePipeDreamStepOps(const PipeDreamLayout& layout, int stage, int replica,
                                   int64_t step) {
  const int64_t m = layout.num_micro_batches;
  const int64_t total = layout.num_steps * m;
  const int64_t k = PipeDreamWarmUp(layout, stage);
  const int d = layout.replicas[stage];
  const int64_t base = step * m;
  OpProgram out;
  out.reserve((2 * static_cast<size_t>(m) + static_cast<size_t>(k)) / static_cast<size_t>(d) + 3);
  auto add = [&](v1::ActionKind kind, int64_t g) {
    if (PipeDreamReplicaOf(layout.first_micro_batch + g, d) != replica) return;
    out.push_back({kind, static_cast<int>(g - base)});
  };
  if (step == 0) {
    for (int64_t g = 0; g < k; ++g) add(v1::FORWARD, g);
  } else if (base - 1 < total - k) {
    add(v1::FORWARD, base - 1 + k);
  }
  for (int64_t b = base; b < base + m; ++b) {
    add(v1::BACKWARD, b);
    if (b == base + m - 1) break;
    if (b < total - k) add(v1::FORWARD, b + k);
  }
  out.push_back({v1::OPTIMIZER_STEP, -1});
  return out;
}

OpProgram GeneratePipeDreamStepOps(int num_stages, int num_micro_batches, int stage, int64_t step,
                                   int64_t num_steps) {
  return GeneratePipeDreamStepOps(Unreplicated(num_stages, num_micro_batches, num_steps), stage,
                                  /*replica=*/0, step);
}

int64_t PipeDreamWarmUp(int num_stages, int num_micro_batches, int stage, int64_t num_steps) {
  return PipeDreamWarmUp(Unreplicated(num_stages, num_micro_batches, num_steps), stage);
}

}  // namespace dapple::schedule
