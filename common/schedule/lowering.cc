#include "common/schedule/lowering.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/schedule/action.h"
#include "common/schedule/simulator.h"

namespace dapple::schedule {

v1::RankProgram Lower(const std::vector<v1::Action>& compute, int num_stages, int stage) {
  const bool has_prev = stage > 0;
  const bool has_next = stage < num_stages - 1;
  v1::RankProgram program;
  program.set_stage(stage);
  program.set_replica(0);
  auto add = [&](v1::ActionKind kind, int micro_batch) {
    *program.add_actions() = MakeAction(stage, kind, micro_batch);
  };
  for (const v1::Action& a : compute) {
    const int m = a.micro_batch();
    switch (a.kind()) {
      case v1::FORWARD:
        if (has_prev) add(v1::RECV_ACT, m);
        *program.add_actions() = a;
        if (has_next) add(v1::SEND_ACT, m);
        break;
      case v1::BACKWARD:
        if (has_next) add(v1::RECV_GRAD, m);
        *program.add_actions() = a;
        if (has_prev) add(v1::SEND_GRAD, m);
        break;
      case v1::ACTION_KIND_UNSPECIFIED:
      case v1::SEND_ACT:
      case v1::RECV_ACT:
      case v1::SEND_GRAD:
      case v1::RECV_GRAD:
      case v1::ALLREDUCE:
      case v1::OPTIMIZER_STEP:
      case v1::ActionKind_INT_MIN_SENTINEL_DO_NOT_USE_:
      case v1::ActionKind_INT_MAX_SENTINEL_DO_NOT_USE_:
        *program.add_actions() = a;
        break;
    }
  }
  return program;
}

absl::StatusOr<std::vector<v1::RankProgram>> BuildPrograms(ScheduleKind kind, int num_stages,
                                                           int num_micro_batches) {
  if (num_stages < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_stages ", num_stages, " must be at least 1"));
  }
  if (num_micro_batches < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_micro_batches ", num_micro_batches, " must be at least 1"));
  }
  std::vector<v1::RankProgram> programs;
  programs.reserve(num_stages);
  for (int s = 0; s < num_stages; ++s) {
    programs.push_back(Lower(Generate(kind, num_stages, num_micro_batches, s), num_stages, s));
  }
  // Whether a program set deadlocks does not depend on costs (sends never block), so unit
  // costs are enough to prove it.
  ActionCosts unit;
  unit.forward = 1.0;
  unit.backward = 1.0;
  unit.send = 0.0;
  unit.recv = 0.0;
  unit.optimizer_step = 1.0;
  absl::StatusOr<SimulationResult> sim = Simulate(programs, unit);
  if (!sim.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(ScheduleKindName(kind), " P=", num_stages, " M=", num_micro_batches,
                     " does not simulate: ", sim.status().message()));
  }
  return programs;
}

}  // namespace dapple::schedule
