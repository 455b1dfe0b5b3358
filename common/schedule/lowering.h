// The lowering pass: adds point-to-point communication to compute-only programs.
#ifndef DAPPLE_COMMON_SCHEDULE_LOWERING_H_
#define DAPPLE_COMMON_SCHEDULE_LOWERING_H_

#include <vector>

#include "absl/status/statusor.h"
#include "common/schedule/generators.h"
#include "dapple/v1/plan.pb.h"

namespace dapple::schedule {

// For stage s of P: RECV_ACT m before each FORWARD m when s > 0; SEND_ACT m after it when
// s < P - 1; RECV_GRAD m before each BACKWARD m when s < P - 1; SEND_GRAD m after it when s > 0.
// Other actions are kept in place. Sends are non-blocking, receives block (simulator.h).
v1::RankProgram Lower(const std::vector<v1::Action>& compute, int num_stages, int stage);

// Generate + Lower for every stage (replica 0), then Simulate with unit costs; returns
// kFailedPrecondition with the simulator's message if the program set is not deadlock-free.
// kInvalidArgument when num_stages < 1 or num_micro_batches < 1.
absl::StatusOr<std::vector<v1::RankProgram>> BuildPrograms(ScheduleKind kind, int num_stages,
                                                           int num_micro_batches);

}  // namespace dapple::schedule

#endif  // DAPPLE_COMMON_SCHEDULE_LOWERING_H_
