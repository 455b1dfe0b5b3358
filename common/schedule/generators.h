// Pure schedule generators: (P, M, stage) -> the compute actions of one training step.
// Compute actions are FORWARD, BACKWARD and a final OPTIMIZER_STEP; communication is added by
// lowering.h, never here. Every function here is pure and thread-safe.
//
// Preconditions of the Generate* functions (unchecked; BuildPrograms in lowering.h validates):
// num_stages P >= 1, 0 <= stage < P, num_micro_batches M >= 1. Every result holds each
// micro-batch's FORWARD and BACKWARD exactly once (backward after forward), then one
// OPTIMIZER_STEP with micro_batch -1, all with `stage` as their stage.
#ifndef DAPPLE_COMMON_SCHEDULE_GENERATORS_H_
#define DAPPLE_COMMON_SCHEDULE_GENERATORS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "dapple/v1/plan.pb.h"

namespace dapple::schedule {

enum class ScheduleKind { kGPipe, kDapple };

// "gpipe" | "dapple"; kInvalidArgument naming the value and the known names otherwise.
absl::StatusOr<ScheduleKind> ParseScheduleKind(absl::string_view name);
absl::string_view ScheduleKindName(ScheduleKind kind);

// GPipe (Huang et al., NeurIPS 2019): all M forwards, then all M backwards in reverse
// order (B M-1 ... B 0), then OPTIMIZER_STEP (flush). Peak in-flight activations: M.
std::vector<v1::Action> GenerateGPipe(int num_stages, int num_micro_batches, int stage);

// DAPPLE early-backward 1F1B (Fan et al., PPoPP 2021, section 4): stage i (0-based) runs
// K_i = min(P - i, M) warm-up forwards, then alternates one backward / one forward while
// forwards remain (steady), then the remaining backwards (cool-down), in micro-batch order,
// then OPTIMIZER_STEP. Peak in-flight activations on stage i: K_i.
std::vector<v1::Action> GenerateDapple(int num_stages, int num_micro_batches, int stage);

std::vector<v1::Action> Generate(ScheduleKind kind, int num_stages, int num_micro_batches,
                                 int stage);

}  // namespace dapple::schedule

#endif  // DAPPLE_COMMON_SCHEDULE_GENERATORS_H_
