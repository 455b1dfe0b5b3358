// A discrete-event simulator of a set of rank programs (one per stage).
//
// Semantics, the same as the worker runtime's: an action starts when its rank is free; a SEND
// is non-blocking (its rank moves on after `send` cost); a RECV blocks until the matching SEND
// (same micro-batch, same kind, from the neighbouring stage) has been issued, and ends `recv`
// cost after max(its start, the send's end). FORWARD / BACKWARD / OPTIMIZER_STEP take their cost.
// ALLREDUCE costs 0 (replicas are not simulated). Pairing: SEND_ACT m on stage s goes to
// RECV_ACT m on stage s + 1; SEND_GRAD m on stage s goes to RECV_GRAD m on stage s - 1.
// Because sends never block, whether a program set deadlocks does not depend on the costs.
//
// Grid format (SimulationResult::grid and deadlock messages): a line "one column = <q> time
// unit(s)", a header "t | 0 1 2 ..." of column numbers, then one line "stage <s> | cells" per
// stage. Column c covers time [c*q, (c+1)*q), q = the smallest positive compute cost (so unit-ish
// costs give one column per unit; a BACKWARD of cost 2 fills two columns), widened so there are
// at most 240 columns. A cell shows what the rank was doing at the middle of its slot: F<m>,
// B<m>, ST (OPTIMIZER_STEP), sa<m>/ra<m>/sg<m>/rg<m> (send/recv of an activation/gradient, only
// when they cost time) or "." (idle, including waiting on a receive). Cells are left-aligned and
// padded to one width; trailing blanks are trimmed. In a deadlock message each stage line ends
// with "  <- waits on <action>" or "  <- finished". Example (P=2, M=1, default costs):
//   one column = 1 time unit
//         t | 0  1  2  3  4  5
//   stage 0 | F0 .  .  .  B0 B0
//   stage 1 | .  F0 B0 B0 .  .
//
// Thread safety: pure functions of their arguments.
#ifndef DAPPLE_COMMON_SCHEDULE_SIMULATOR_H_
#define DAPPLE_COMMON_SCHEDULE_SIMULATOR_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dapple/v1/plan.pb.h"

namespace dapple::schedule {

// Costs in abstract time units (or ms); per-stage vectors override the scalars when non-empty.
struct ActionCosts {
  double forward = 1.0;
  double backward = 2.0;
  double send = 0.0;
  double recv = 0.0;
  double optimizer_step = 0.0;
  std::vector<double> forward_per_stage;
  std::vector<double> backward_per_stage;
};

struct SimulationResult {
  double step_time = 0;             // makespan of the step
  std::vector<double> busy_time;    // per stage: compute (F, B, STEP)
  std::vector<double> idle_time;    // per stage: step_time - busy (the bubble)
  double bubble_fraction = 0;       // sum(idle) / (P * step_time)
  std::vector<int> peak_in_flight;  // per stage: max forwards whose backward is not done
  std::string grid;                 // time-slot by rank table (text), for messages and docs
};

// Runs `programs` (programs[s] is stage s) against each other. M is 1 + the largest micro-batch
// of any FORWARD/BACKWARD.
// kFailedPrecondition "deadlock: stage <s> waits on <action> (action <i>) for <peer send>; ...;
// what ran:" followed by the grid, when no rank can move.
// kInvalidArgument (naming the action, its stage and index) for: an unpaired send/recv, a
// BACKWARD before its FORWARD, a micro-batch not forwarded and backwarded exactly once per stage,
// and also: programs[s].stage() != s or an action whose stage is not its program's, an
// unspecified kind, a negative micro-batch, a micro-batch >= M, a send/recv toward a stage that
// does not exist, a FORWARD on stage > 0 before its RECV_ACT, a BACKWARD on stage < P-1 before its
// RECV_GRAD, a SEND_ACT/SEND_GRAD before the FORWARD/BACKWARD that computes it, an empty
// `programs`, or a cost that is negative / not finite / a per-stage vector whose size is not P.
absl::StatusOr<SimulationResult> Simulate(const std::vector<v1::RankProgram>& programs,
                                          const ActionCosts& costs = {});

}  // namespace dapple::schedule

#endif  // DAPPLE_COMMON_SCHEDULE_SIMULATOR_H_
