// A discrete-event simulator of a set of rank programs (one per stage).
//
// Semantics, the same as the worker runtime's: an action starts when its rank is free; a SEND
// is non-blocking (its rank moves on after `send` cost); a RECV blocks until the matching SEND
// (same micro-batch, same kind, from the neighbouring stage) has been issued, and ends `recv`
// cost after max(its start, the send's end). FORWARD / BACKWARD / OPTIMIZER_STEP take their cost.
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
  double step_time = 0;                // makespan of the step
  std::vector<double> busy_time;       // per stage: compute (F, B, STEP)
  std::vector<double> idle_time;       // per stage: step_time - busy (the bubble)
  double bubble_fraction = 0;          // sum(idle) / (P * step_time)
  std::vector<int> peak_in_flight;     // per stage: max forwards whose backward is not done
  std::string grid;                    // time-slot by rank table (text), for messages and docs
};

// Runs `programs` (programs[s] is stage s) against each other.
// kFailedPrecondition "deadlock: ..." with the grid of what ran and what each rank waits for,
// when no rank can move; kInvalidArgument for an unpaired send/recv, a BACKWARD before its
// FORWARD, or a micro-batch not forwarded and backwarded exactly once per stage.
absl::StatusOr<SimulationResult> Simulate(const std::vector<v1::RankProgram>& programs,
                                          const ActionCosts& costs = {});

}  // namespace dapple::schedule

#endif  // DAPPLE_COMMON_SCHEDULE_SIMULATOR_H_
