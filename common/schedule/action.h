// Actions and rank programs: schedules as data (design.md, "Schedules are data").
// Text form: "<stage><code><micro_batch>" with codes F, B, BI (BACKWARD_INPUT), BW
// (BACKWARD_WEIGHT), SEND_ACT, RECV_ACT, SEND_GRAD, RECV_GRAD, ALLREDUCE, TIED_ALLREDUCE,
// GLOBAL_NORM, STEP; e.g. "1F3", "1BI3", "2SEND_ACT0", "0STEP" (no micro-batch for ALLREDUCE,
// TIED_ALLREDUCE, GLOBAL_NORM and STEP). The weight-stash kinds USE_WEIGHTS and DROP_WEIGHTS
// show their weight_version instead ("0USE_WEIGHTS@-1"); RESTORE_WEIGHTS, STASH_WEIGHTS,
// ALLREDUCE_ASYNC and STALE_STEP (STALE_OPTIMIZER_STEP) show nothing after the code. The stage
// is the rank's own
// stage: "2SEND_ACT0" is stage 2 sending micro-batch 0's activation to stage 3, "1RECV_GRAD5" is
// stage 1 receiving micro-batch 5's gradient from stage 2. All functions here are pure and
// thread-safe.
#ifndef DAPPLE_COMMON_SCHEDULE_ACTION_H_
#define DAPPLE_COMMON_SCHEDULE_ACTION_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "dapple/v1/plan.pb.h"

namespace dapple::schedule {

v1::Action MakeAction(int stage, v1::ActionKind kind, int micro_batch = -1);
// Whether actions of `kind` name a micro-batch: FORWARD, BACKWARD, BACKWARD_INPUT,
// BACKWARD_WEIGHT, SEND_* and RECV_* do;
// ALLREDUCE, TIED_ALLREDUCE, GLOBAL_NORM and OPTIMIZER_STEP (once per step) and unnamed kinds
// do not.
bool KindHasMicroBatch(v1::ActionKind kind);
// Whether a rank running an action of `kind` waits for others rather than works: RECV_ACT and
// RECV_GRAD (a neighbour's message) and GLOBAL_NORM (the job-wide barrier; its 16 bytes per
// rank take microseconds). Their time is the bubble (StageStepStats.idle_seconds), as the
// simulator counts it; the runtime's statistics and `dapplectl trace` both ask here.
bool KindIsWait(v1::ActionKind kind);
// The text form above. ALLREDUCE, TIED_ALLREDUCE, GLOBAL_NORM and STEP never show a
// micro-batch. A kind outside the
// named ones prints as "<stage>UNKNOWN(<kind>)<micro_batch>", which ParseAction rejects.
std::string ActionToString(const v1::Action& a);
// The action in words for messages users read, e.g. "receiving the gradients of micro-batch 5",
// "the gradient AllReduce over the stage's replicas" (no stage: the message names it).
std::string DescribeAction(const v1::Action& a);
// Inverse of ActionToString for every named kind (stage, micro-batch >= 0): a decimal stage, the
// code (case-sensitive), then a decimal micro-batch for F/B/BI/BW/SEND_*/RECV_* (none for
// ALLREDUCE, TIED_ALLREDUCE, GLOBAL_NORM and STEP, which get -1). No signs, spaces or surrounding
// text. kInvalidArgument naming the text otherwise.
absl::StatusOr<v1::Action> ParseAction(absl::string_view text);
// Actions separated by single spaces.
std::string ActionsToString(const std::vector<v1::Action>& actions);
// "stage <s> replica <r>:" then " <action>" per action, e.g. "stage 1 replica 0: 1RECV_ACT0 1F0".
std::string ProgramToString(const v1::RankProgram& program);

}  // namespace dapple::schedule

#endif  // DAPPLE_COMMON_SCHEDULE_ACTION_H_
