#include "common/schedule/generators.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace dapple::schedule {

absl::StatusOr<ScheduleKind> ParseScheduleKind(absl::string_view name) {
  if (name == "gpipe") return ScheduleKind::kGPipe;
  if (name == "dapple") return ScheduleKind::kDapple;
  if (name == "pipedream") return ScheduleKind::kPipeDream;
  if (name == "pipesgd") return ScheduleKind::kPipeSgd;
  if (name == "zb-h1") return ScheduleKind::kZbH1;
  if (name == "zb-h2") return ScheduleKind::kZbH2;
  if (name == "interleaved") return ScheduleKind::kInterleaved;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown schedule \"", name,
                   "\" (known: gpipe, dapple, pipedream, pipesgd, zb-h1, zb-h2, interleaved)"));
}

absl::string_view ScheduleKindName(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kGPipe:
      return "gpipe";
    case ScheduleKind::kDapple:
      return "dapple";
    case ScheduleKind::kPipeDream:
      return "pipedream";
    case ScheduleKind::kPipeSgd:
      return "pipesgd";
    case ScheduleKind::kZbH1:
      return "zb-h1";
    case ScheduleKind::kZbH2:
      return "zb-h2";
    case ScheduleKind::kInterleaved:
      return "interleaved";
  }
  return "unknown";
}

OpProgram GenerateGPipeOps(int num_stages, int num_micro_batches, int stage) {
  OpProgram out;
  out.reserve(2 * static_cast<size_t>(num_micro_batches) + 1);
  for (int m = 0; m < num_micro_batches; ++m) out.push_back({v1::FORWARD, m});
  for (int m = num_micro_batches - 1; m >= 0; --m) out.push_back({v1::BACKWARD, m});
  out.push_back({v1::OPTIMIZER_STEP, -1});
  return out;
}

OpProgram GeneratePipeDreamOps(int num_stages, int num_micro_batches, int stage,
                               int micro_batches_per_update) {
  return GeneratePipeDreamOpsWithWarmUp(num_micro_batches, micro_batches_per_update,
                                        num_stages - stage);
}

OpProgram GeneratePipeDreamOpsWithWarmUp(int num_micro_batches, int micro_batches_per_update,
                                         int warm_up_forwards) {
  const int m = num_micro_batches;
  const int warm_up = std::min(warm_up_forwards, m);
  OpProgram out;
  out.reserve(2 * static_cast<size_t>(m) + static_cast<size_t>(m / micro_batches_per_update) + 1);
  int next_forward = 0;
  int next_backward = 0;
  auto backward = [&] {
    const int mb = next_backward++;
    out.push_back({v1::BACKWARD, mb});
    if ((mb + 1) % micro_batches_per_update == 0 || mb + 1 == m) {
      out.push_back({v1::OPTIMIZER_STEP, -1});
    }
  };
  while (next_forward < warm_up) out.push_back({v1::FORWARD, next_forward++});
  // Steady phase: a backward first ("early backward") frees one activation before the next
  // forward allocates one, which keeps stage i at K_i activations in flight.
  while (next_forward < m) {
    backward();
    out.push_back({v1::FORWARD, next_forward++});
  }
  while (next_backward < m) backward();
  return out;
}

// DAPPLE's early backward is PipeDream's 1F1B order within one flushed step: one update at the
// end is exactly GeneratePipeDream with a single update.
OpProgram GenerateDappleOps(int num_stages, int num_micro_batches, int stage) {
  return GeneratePipeDreamOps(num_stages, num_micro_batches, stage, num_micro_batches);
}

// On one stage 1F1B is F0 B0 F1 B1 ...: one micro-batch's activations in flight. The update is
// Pipe-SGD's: the step's gradient goes to the background AllReduce and the update applies the
// previous step's.
OpProgram GeneratePipeSgdOps(int num_stages, int num_micro_batches, int stage) {
  OpProgram out = GenerateDappleOps(num_stages, num_micro_batches, stage);
  out.back() = {v1::ALLREDUCE_ASYNC, -1};
  out.push_back({v1::STALE_OPTIMIZER_STEP, -1});
  return out;
}

OpProgram GenerateZeroBubbleOps(int num_micro_batches, int warm_up, int weight_lag) {
  const int m = num_micro_batches;
  const int w = std::min(warm_up, m);
  OpProgram out;
  out.reserve(3 * static_cast<size_t>(m) + 1);
  int next_forward = 0;
  int next_weight = 0;
  while (next_forward < w) out.push_back({v1::FORWARD, next_forward++});
  for (int k = 0; k < m; ++k) {
    out.push_back({v1::BACKWARD_INPUT, k});
    // W before the next F: the W frees a stashed activation before the F stashes one, which
    // keeps the in-flight count at warm-up + lag.
    if (k >= weight_lag) out.push_back({v1::BACKWARD_WEIGHT, next_weight++});
    if (next_forward < m) out.push_back({v1::FORWARD, next_forward++});
  }
  // The deferred W fill the cool-down, where 1F1B waits for the last gradients.
  while (next_weight < m) out.push_back({v1::BACKWARD_WEIGHT, next_weight++});
  out.push_back({v1::OPTIMIZER_STEP, -1});
  return out;
}

// Lag i keeps P in flight on every stage: the later stages, which 1F1B leaves with fewer
// activations, defer their W instead.
OpProgram GenerateZbH1Ops(int num_stages, int num_micro_batches, int stage) {
  return GenerateZeroBubbleOps(num_micro_batches, num_stages - stage, stage);
}

// Stage i's first BACKWARD_INPUT can start at (2P - 1 - i)T (the first forward down to the last
// stage and its gradient back up) and its first forward at iT: 2P - 1 - 2i forwards fill that
// gap exactly, and 2i deferred W fill the matching gap at the end.
OpProgram GenerateZbH2Ops(int num_stages, int num_micro_batches, int stage) {
  return GenerateZeroBubbleOps(num_micro_batches, 2 * num_stages - 1 - 2 * stage, 2 * stage);
}

std::vector<int> InterleavedGroups(int num_stages, int num_micro_batches) {
  const int groups = num_micro_batches / num_stages;
  if (groups == 0) return {num_micro_batches};
  std::vector<int> sizes(groups, num_stages);
  // The remainder one each onto the first groups (cycling when it exceeds them): the first group
  // is then the largest, and the warm-up it sets covers every later group (a larger later group
  // would need a backward on the last chunk before its forward).
  for (int i = 0; i < num_micro_batches % num_stages; ++i) ++sizes[i % groups];
  return sizes;
}

int InterleavedWarmUp(int num_stages, int chunks, int num_micro_batches, int stage) {
  const int first_group = InterleavedGroups(num_stages, num_micro_batches).front();
  return std::min((num_stages - 1 - stage) * 2 + (chunks - 1) * first_group,
                  chunks * num_micro_batches);
}

int InterleavedInFlight(int num_stages, int chunks, int num_micro_batches, int stage) {
  return std::min(InterleavedWarmUp(num_stages, chunks, num_micro_batches, stage) + 1,
                  chunks * num_micro_batches);
}

std::vector<int> InterleavedChunkSlots(int num_stages, int chunks, int num_micro_batches,
                                       int stage) {
  std::vector<int> live(static_cast<size_t>(std::max(1, chunks)), 0);
  std::vector<int> most = live;
  for (const Op& op : GenerateInterleavedOps(num_stages, chunks, num_micro_batches, stage)) {
    // Chunk c of rank r is virtual stage c * P + r.
    const int c = (op.stage >= 0 ? op.stage : stage) / std::max(1, num_stages);
    if (c < 0 || c >= static_cast<int>(live.size())) continue;
    if (op.kind == v1::FORWARD) {
      most[c] = std::max(most[c], ++live[c]);
    } else if (op.kind == v1::BACKWARD) {
      --live[c];
    }
  }
  return most;
}

namespace {

// Every forward (forward true) or backward of rank `stage` in order: group after group, the
// group's micro-batches through chunk 0, 1, ..., v - 1 (backward: v - 1, ..., 0).
OpProgram InterleavedOrder(int num_stages, int chunks, int num_micro_batches, int stage,
                           bool forward) {
  OpProgram out;
  out.reserve(static_cast<size_t>(chunks) * num_micro_batches);
  int first = 0;
  for (int size : InterleavedGroups(num_stages, num_micro_batches)) {
    for (int i = 0; i < chunks; ++i) {
      const int chunk = forward ? i : chunks - 1 - i;
      for (int mb = first; mb < first + size; ++mb) {
        out.push_back({forward ? v1::FORWARD : v1::BACKWARD, mb, chunk * num_stages + stage});
      }
    }
    first += size;
  }
  return out;
}

}  // namespace

OpProgram GenerateInterleavedOps(int num_stages, int chunks, int num_micro_batches, int stage) {
  const OpProgram forwards = InterleavedOrder(num_stages, chunks, num_micro_batches, stage, true);
  const OpProgram backwards = InterleavedOrder(num_stages, chunks, num_micro_batches, stage, false);
  const int total = static_cast<int>(forwards.size());
  const int warm_up = InterleavedWarmUp(num_stages, chunks, num_micro_batches, stage);
  OpProgram out;
  out.reserve(2 * static_cast<size_t>(total) + 1);
  int next_forward = 0;
  int next_backward = 0;
  while (next_forward < warm_up) out.push_back(forwards[next_forward++]);
  // Megatron's steady phase runs the forward first: the warm-up above is one short of what
  // stays in flight.
  while (next_forward < total) {
    out.push_back(forwards[next_forward++]);
    out.push_back(backwards[next_backward++]);
  }
  while (next_backward < total) out.push_back(backwards[next_backward++]);
  out.push_back({v1::OPTIMIZER_STEP, -1});
  return out;
}

OpProgram GenerateOps(ScheduleKind kind, int num_stages, int num_micro_batches, int stage,
                      int chunks) {
  switch (kind) {
    case ScheduleKind::kGPipe:
      return GenerateGPipeOps(num_stages, num_micro_batches, stage);
    case ScheduleKind::kDapple:
      return GenerateDappleOps(num_stages, num_micro_batches, stage);
    case ScheduleKind::kPipeDream:
      return GeneratePipeDreamOps(num_stages, num_micro_batches, stage, num_micro_batches);
    case ScheduleKind::kPipeSgd:
      return GeneratePipeSgdOps(num_stages, num_micro_batches, stage);
    case ScheduleKind::kZbH1:
      return GenerateZbH1Ops(num_stages, num_micro_batches, stage);
    case ScheduleKind::kZbH2:
      return GenerateZbH2Ops(num_stages, num_micro_batches, stage);
    case ScheduleKind::kInterleaved:
      return GenerateInterleavedOps(num_stages, chunks, num_micro_batches, stage);
  }
  return {};
}

std::vector<v1::Action> GenerateGPipe(int num_stages, int num_micro_batches, int stage) {
  return ToActions(stage, GenerateGPipeOps(num_stages, num_micro_batches, stage));
}

std::vector<v1::Action> GenerateDapple(int num_stages, int num_micro_batches, int stage) {
  return ToActions(stage, GenerateDappleOps(num_stages, num_micro_batches, stage));
}

std::vector<v1::Action> GeneratePipeDream(int num_stages, int num_micro_batches, int stage,
                                          int micro_batches_per_update) {
  return ToActions(
      stage, GeneratePipeDreamOps(num_stages, num_micro_batches, stage, micro_batches_per_update));
}

std::vector<v1::Action> GeneratePipeSgd(int num_stages, int num_micro_batches, int stage) {
  return ToActions(stage, GeneratePipeSgdOps(num_stages, num_micro_batches, stage));
}

std::vector<v1::Action> GenerateZbH1(int num_stages, int num_micro_batches, int stage) {
  return ToActions(stage, GenerateZbH1Ops(num_stages, num_micro_batches, stage));
}

std::vector<v1::Action> GenerateZbH2(int num_stages, int num_micro_batches, int stage) {
  return ToActions(stage, GenerateZbH2Ops(num_stages, num_micro_batches, stage));
}

std::vector<v1::Action> GenerateInterleaved(int num_stages, int chunks, int num_micro_batches,
                                            int stage) {
  return ToActions(stage, GenerateInterleavedOps(num_stages, chunks, num_micro_batches, stage));
}

std::vector<v1::Action> Generate(ScheduleKind kind, int num_stages, int num_micro_batches,
                                 int stage, int chunks) {
  return ToActions(stage, GenerateOps(kind, num_stages, num_micro_batches, stage, chunks));
}

}  // namespace dapple::schedule
