// Actions and rank programs: schedules as data (design.md, "Schedules are data").
// Text form: "<stage><code><micro_batch>" with codes F, B, SEND_ACT, RECV_ACT, SEND_GRAD,
// RECV_GRAD, ALLREDUCE, STEP; e.g. "1F3", "2SEND_ACT0", "0STEP" (no micro-batch for
// ALLREDUCE and STEP).
#ifndef DAPPLE_COMMON_SCHEDULE_ACTION_H_
#define DAPPLE_COMMON_SCHEDULE_ACTION_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "dapple/v1/plan.pb.h"

namespace dapple::schedule {

v1::Action MakeAction(int stage, v1::ActionKind kind, int micro_batch = -1);
std::string ActionToString(const v1::Action& a);
// Inverse of ActionToString; kInvalidArgument naming the text otherwise.
absl::StatusOr<v1::Action> ParseAction(absl::string_view text);
// Actions separated by single spaces.
std::string ActionsToString(const std::vector<v1::Action>& actions);
std::string ProgramToString(const v1::RankProgram& program);

}  // namespace dapple::schedule

#endif  // DAPPLE_COMMON_SCHEDULE_ACTION_H_
