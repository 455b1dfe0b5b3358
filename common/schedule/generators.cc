#include "common/schedule/generators.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/schedule/action.h"

namespace dapple::schedule {

absl::StatusOr<ScheduleKind> ParseScheduleKind(absl::string_view name) {
  if (name == "gpipe") return ScheduleKind::kGPipe;
  if (name == "dapple") return ScheduleKind::kDapple;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown schedule \"", name, "\" (known: gpipe, dapple)"));
}

absl::string_view ScheduleKindName(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kGPipe:
      return "gpipe";
    case ScheduleKind::kDapple:
      return "dapple";
  }
  return "unknown";
}

std::vector<v1::Action> GenerateGPipe(int num_stages, int num_micro_batches, int stage) {
  std::vector<v1::Action> out;
  out.reserve(2 * static_cast<size_t>(num_micro_batches) + 1);
  for (int m = 0; m < num_micro_batches; ++m) out.push_back(MakeAction(stage, v1::FORWARD, m));
  for (int m = num_micro_batches - 1; m >= 0; --m) {
    out.push_back(MakeAction(stage, v1::BACKWARD, m));
  }
  out.push_back(MakeAction(stage, v1::OPTIMIZER_STEP));
  return out;
}

std::vector<v1::Action> GenerateDapple(int num_stages, int num_micro_batches, int stage) {
  const int m = num_micro_batches;
  const int warm_up = std::min(num_stages - stage, m);
  std::vector<v1::Action> out;
  out.reserve(2 * static_cast<size_t>(m) + 1);
  int next_forward = 0;
  int next_backward = 0;
  while (next_forward < warm_up) out.push_back(MakeAction(stage, v1::FORWARD, next_forward++));
  // Steady phase: a backward first ("early backward") frees one activation before the next
  // forward allocates one, which keeps stage i at K_i activations in flight.
  while (next_forward < m) {
    out.push_back(MakeAction(stage, v1::BACKWARD, next_backward++));
    out.push_back(MakeAction(stage, v1::FORWARD, next_forward++));
  }
  while (next_backward < m) out.push_back(MakeAction(stage, v1::BACKWARD, next_backward++));
  out.push_back(MakeAction(stage, v1::OPTIMIZER_STEP));
  return out;
}

std::vector<v1::Action> Generate(ScheduleKind kind, int num_stages, int num_micro_batches,
                                 int stage) {
  switch (kind) {
    case ScheduleKind::kGPipe:
      return GenerateGPipe(num_stages, num_micro_batches, stage);
    case ScheduleKind::kDapple:
      return GenerateDapple(num_stages, num_micro_batches, stage);
  }
  return {};
}

}  // namespace dapple::schedule
