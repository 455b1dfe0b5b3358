// The lowering pass: adds point-to-point communication (and, on request, the AllReduce among a
// stage's replicas) to compute-only programs. Pure functions; thread-safe.
#ifndef DAPPLE_COMMON_SCHEDULE_LOWERING_H_
#define DAPPLE_COMMON_SCHEDULE_LOWERING_H_

#include <vector>

#include "absl/status/statusor.h"
#include "common/schedule/generators.h"
#include "common/schedule/op.h"
#include "dapple/v1/plan.pb.h"

namespace dapple::schedule {

struct LowerOptions {
  // Empty, or one entry per stage: true for the stages that have replicas, whose programs get
  // one ALLREDUCE (of the stage's gradients among its replicas) right before each
  // OPTIMIZER_STEP. Empty (the default): no ALLREDUCE is added.
  std::vector<bool> allreduce_stages;
};

// For stage s of P: RECV_ACT m before each FORWARD m when s > 0; SEND_ACT m after it when
// s < P - 1; RECV_GRAD m before each BACKWARD m when s < P - 1; SEND_GRAD m after it when s > 0;
// ALLREDUCE before each OPTIMIZER_STEP when options.allreduce_stages[s] (an entry beyond the
// vector counts as false). Other actions are kept in place. Sends are non-blocking, receives
// block (simulator.h).
v1::RankProgram Lower(const std::vector<v1::Action>& compute, int num_stages, int stage,
                      const LowerOptions& options = {});
// The same pass on Ops (op.h).
OpProgram LowerOps(const OpProgram& compute, int num_stages, int stage,
                   const LowerOptions& options = {});

// Generate + Lower for every stage (replica 0), then Simulate with unit costs; returns
// kFailedPrecondition with the simulator's message if the program set is not deadlock-free.
// kInvalidArgument when num_stages < 1, num_micro_batches < 1, options.allreduce_stages is
// neither empty nor of num_stages entries, or kind is kPipeSgd with num_stages != 1.
absl::StatusOr<std::vector<v1::RankProgram>> BuildPrograms(ScheduleKind kind, int num_stages,
                                                           int num_micro_batches,
                                                           const LowerOptions& options = {});

}  // namespace dapple::schedule

#endif  // DAPPLE_COMMON_SCHEDULE_LOWERING_H_
