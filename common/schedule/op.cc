#include "common/schedule/op.h"

#include "common/schedule/action.h"

namespace dapple::schedule {

v1::Action ToAction(int stage, const Op& op) {
  return MakeAction(StageOf(op, stage), op.kind, op.micro_batch);
}

std::vector<v1::Action> ToActions(int stage, const OpProgram& ops) {
  std::vector<v1::Action> out;
  out.reserve(ops.size());
  for (const Op& op : ops) out.push_back(ToAction(stage, op));
  return out;
}

v1::RankProgram ToRankProgram(int stage, const OpProgram& ops) {
  v1::RankProgram program;
  program.set_stage(stage);
  program.set_replica(0);
  program.mutable_actions()->Reserve(static_cast<int>(ops.size()));
  for (const Op& op : ops) *program.add_actions() = ToAction(stage, op);
  return program;
}

OpProgram ToOps(const std::vector<v1::Action>& actions) {
  OpProgram ops;
  ops.reserve(actions.size());
  for (const v1::Action& a : actions) ops.push_back({a.kind(), a.micro_batch()});
  return ops;
}

}  // namespace dapple::schedule
