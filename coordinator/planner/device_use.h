// Why a job's plan uses fewer devices than the job may use (parallel.devices): the one note of
// the plan summary (`dapplectl plan`, `dapplectl get`) that says how many it uses and why.
// Pure; thread-safe.
#ifndef DAPPLE_COORDINATOR_PLANNER_DEVICE_USE_H_
#define DAPPLE_COORDINATOR_PLANNER_DEVICE_USE_H_

#include <string>

#include "absl/status/statusor.h"
#include "coordinator/planner/planners.h"
#include "coordinator/planner/problem.h"

namespace dapple::coordinator {

// The note for `planned` (a plan of `problem` by parallel.planner `planner` and its
// prediction) when it uses fewer than `devices` (parallel.devices) devices; "" when it uses them
// all. "uses N of the D parallel.devices: " and then, in this order:
//   - a limit no plan passes, when the plan is at it: at most P stages (planner dp: one;
//     parallel.stages when fixed; else one per layer) of at most R replicas each (schedule
//     pipedream: M = training.global_batch / training.micro_batch, as 1F1B-RR gives every
//     replica whole micro-batches; the other schedules: the largest divisor of
//     training.micro_batch up to D, as a stage's replicas split every micro-batch evenly,
//     baseline_planners.h MicroBatchSizes), e.g. "no plan can use more: at most 2 stages (one
//     per layer or more), each on at most 1 replica (parallel.schedule pipedream sends whole
//     micro-batches round-robin to a stage's replicas and training.global_batch 4 /
//     training.micro_batch 4 = 1 micro-batch per step)";
//   - else the comparison with the plans within `devices` that differ from `planned` in one
//     stage: the stage on the next replica count the rules allow, or (below the stage limit)
//     the stage split in two at the cut that best balances their compute, both halves on its
//     replica count; each scored by SimulatePlan. "more would not make a step faster on this
//     model: the best plan on 3 devices (stage 1 on 2 replicas) is predicted at 41.2 ms per step
//     vs 38.0 ms for this plan" ("at the same 38.0 ms per step as this plan" when they print
//     alike); or that none fits device memory; or, when one is faster (the planners' searches
//     are heuristics), that one with both times; or, when there is none, that, with the
//     replica counts the rules allow ("no plan within them splits a stage of this one or gives
//     a stage more replicas (a stage's replicas split each micro-batch evenly, so
//     training.micro_batch 8 allows 1, 2, 4 or 8 replicas per stage)").
// `devices_noun` names the `devices` in the note's head ("uses 2 of the 3 parallel.devices: ");
// a restart onto the workers left passes "live workers (parallel.devices 4)".
// Errors: SimulatePlan's (kInvalidArgument for a malformed plan).
absl::StatusOr<std::string> DeviceUseNote(const PlanningProblem& problem, const PlannedJob& planned,
                                          const std::string& planner, int devices,
                                          absl::string_view devices_noun = "parallel.devices");

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_PLANNER_DEVICE_USE_H_
