// Compact actions for hot paths: the planner builds and simulates many candidate plans, and
// protobuf messages per action would dominate its time. An Op is an action without its stage
// (the program it sits in names the stage); generators.h, lowering.h and simulator.h offer Op
// versions of their functions, and the v1::Action versions are thin conversions of them, so
// every schedule exists once. Pure data and pure functions; thread-safe.
#ifndef DAPPLE_COMMON_SCHEDULE_OP_H_
#define DAPPLE_COMMON_SCHEDULE_OP_H_

#include <vector>

#include "dapple/v1/plan.pb.h"

namespace dapple::schedule {

struct Op {
  v1::ActionKind kind = v1::ACTION_KIND_UNSPECIFIED;
  int micro_batch = -1;  // -1 for ALLREDUCE and OPTIMIZER_STEP
  // -1: the stage of the program it sits in. Otherwise the virtual stage it runs (interleaved
  // 1F1B, GenerateInterleavedOps: chunk c of rank r of P is virtual stage c * P + r), which
  // becomes the v1::Action's stage.
  int stage = -1;
};

// The (virtual) stage `op` runs in the program of stage (rank) `program_stage`.
inline int StageOf(const Op& op, int program_stage) {
  return op.stage >= 0 ? op.stage : program_stage;
}

// One stage's program, in execution order.
using OpProgram = std::vector<Op>;

inline bool operator==(const Op& a, const Op& b) {
  return a.kind == b.kind && a.micro_batch == b.micro_batch && a.stage == b.stage;
}

// The action `op` on `stage` (MakeAction(StageOf(op, stage), op.kind, op.micro_batch)).
v1::Action ToAction(int stage, const Op& op);
std::vector<v1::Action> ToActions(int stage, const OpProgram& ops);
// A RankProgram for `stage`, replica 0 (its actions' stages: StageOf(op, stage)).
v1::RankProgram ToRankProgram(int stage, const OpProgram& ops);
// The kinds and micro-batches of `actions` (their stage fields are dropped: stage -1).
OpProgram ToOps(const std::vector<v1::Action>& actions);

}  // namespace dapple::schedule

#endif  // DAPPLE_COMMON_SCHEDULE_OP_H_
