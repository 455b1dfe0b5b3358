// The planner's choice of schedule and activation recomputation (parallel.schedule: auto;
// docs/planner.md, "Choosing the schedule"): the job is planned once per (schedule, recompute)
// option, each with its own partition, replicas and M searched under the device memory limit by
// the job's planner, all scored by the same simulator (plan_simulator.h); the fastest that fits
// wins. Ties (a step within a relative 1e-9) go to the smaller peak memory, then to the option
// listed first: the simplest schedule (dapple's 1F1B) and no recomputation first, so a schedule
// that only matches 1F1B is never chosen over it, and gpipe (last) only when it is faster.
// Interleaved 1F1B (Megatron-LM, SC'21, section 2.2.2) is one option per v the job allows
// (ChoiceLimits::interleave), each planned by InterleavedPlan (interleaved_partition.h).
// Pure; thread-safe.
#ifndef DAPPLE_COORDINATOR_PLANNER_SCHEDULE_CHOICE_H_
#define DAPPLE_COORDINATOR_PLANNER_SCHEDULE_CHOICE_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/job_spec.h"
#include "common/schedule/generators.h"
#include "coordinator/planner/planners.h"
#include "coordinator/planner/problem.h"
#include "dapple/v1/job.pb.h"

namespace dapple::coordinator {

// One synchronous schedule parallel.schedule auto chooses among.
struct CandidateSchedule {
  schedule::ScheduleKind kind = schedule::ScheduleKind::kDapple;
  // It splits the backward into BACKWARD_INPUT / BACKWARD_WEIGHT (the zero-bubble schedules):
  // never with recomputation (a recomputing stage replays one micro-batch's forward right before
  // its backward).
  bool splits_backward = false;
};

// The candidates, in the order ties go: dapple (1F1B), zb-h1, zb-h2, interleaved, gpipe. A new
// synchronous schedule is one more entry here (and its memory and time in the simulator).
// interleaved stands for one option per v of ChoiceLimits::interleave (none when it is empty).
const std::vector<CandidateSchedule>& CandidateSchedules();

// What the spec allows the choice to range over.
struct ChoiceLimits {
  // parallel.schedule auto: every CandidateSchedules() entry; otherwise `schedule` alone.
  bool choose_schedule = false;
  schedule::ScheduleKind schedule = schedule::ScheduleKind::kDapple;
  // training.recompute as written: "" (unset), "none", "all" or "auto". An explicit none or all
  // is kept; auto, or unset with the schedule chosen, tries none and auto.
  std::string recompute;
  // With choose_schedule: the v's of interleaved 1F1B to try (ascending, each >= 2), never with
  // recomputation; empty: interleaved is not considered, and interleave_left_out says why (one
  // clause, "the model has 3 layers, fewer than 2 per stage"; empty: no note).
  std::vector<int> interleave;
  std::string interleave_left_out;
};

struct ScheduleOption {
  schedule::ScheduleKind schedule = schedule::ScheduleKind::kDapple;
  RecomputeMode recompute = RecomputeMode::kNone;
  int interleave = 1;  // v under kInterleaved (PlanningProblem::interleave); 1 otherwise
};

// The options `limits` allows, in tie order (schedules as CandidateSchedules, each with
// recompute none before auto; interleaved once per v of limits.interleave, ascending). Never
// empty: a fixed schedule with its recompute at least.
std::vector<ScheduleOption> ScheduleOptions(const ChoiceLimits& limits);

// "none" | "all" | "auto".
absl::string_view RecomputeModeName(RecomputeMode mode);

// "zb-h1", "dapple with recompute auto", "interleaved v=2": the option as the reason and the
// docs name it.
std::string OptionName(const ScheduleOption& option);

struct Alternative {
  ScheduleOption option;
  absl::Status status;  // the planner's error when it found no plan (kResourceExhausted: none fits)
  PlannedJob planned;   // status.ok() only
};

struct ScheduleChoice {
  std::vector<Alternative> alternatives;  // one per option, in the options' order
  int chosen = -1;                        // index into alternatives; -1: none found a plan
};

// Plans `problem` under every option (problem.schedule, problem.recompute and
// problem.interleave replaced by the option's) with `plan` (the job's planner, which plans
// kInterleaved with InterleavedPlan) and picks the fastest plan that fits, ties as the
// file comment says. The result holds every alternative, failed ones with their status; it is
// an error only when `options` is empty (kInvalidArgument).
absl::StatusOr<ScheduleChoice> ChooseSchedule(
    const PlanningProblem& problem, const std::vector<ScheduleOption>& options,
    const std::function<absl::StatusOr<PlannedJob>(const PlanningProblem&)>& plan);

// The largest peak memory of one replica over the prediction's stages (bytes).
int64_t MaxPeakMemory(const Prediction& prediction);

// "4x2 6x1r": per stage its layer count x replicas, "r" after a stage that recomputes; an
// interleaved stage's count is that of all its chunks.
std::string LayoutText(const HybridPlan& plan);

// The one sentence saying why choice.chosen won, against the first alternative (the baseline:
// dapple, or the spec's fixed schedule, without recomputation where it is allowed):
//   "zb-h1: 12.0% faster than dapple at the same peak memory"
//   "dapple with recompute auto: 8.1% faster than dapple at 0.62x its peak memory"
//   "dapple with recompute auto: the fastest that fits; dapple fits no plan in device memory"
//   "dapple: no alternative is faster (next: zb-h1, 2.3% slower)"
// Empty when nothing was chosen.
std::string ChoiceReason(const ScheduleChoice& choice);

// Notes for the plan on what parallel.schedule auto left out and why, so that a missing row of
// the alternatives is explained: the zero-bubble schedules under training.recompute all (a
// replayed forward does not outlive a split backward), and interleaved 1F1B with
// limits.interleave_left_out (on CUDA: not implemented there). Empty when the schedule is fixed
// or nothing was left out.
std::vector<std::string> LeftOutNotes(const ChoiceLimits& limits);

// When nothing was chosen among several alternatives, the sentence a refusal ends with, so that
// a user knows every option was tried, not only `reported`, whose need the refusal states:
// " (parallel.schedule auto planned dapple, zb-h1, zb-h2 and gpipe with recompute auto: none
// fits; the need above is dapple with recompute auto's)"; "training.recompute auto planned" when
// the alternatives are one schedule with and without recomputation. Empty with one alternative
// or a chosen one.
std::string NoneFitsNote(const ScheduleChoice& choice, const Alternative& reported);

// Writes choice's alternatives (PlanAlternative, the chosen one marked) and ChoiceReason into
// `summary`; nothing when there is only one alternative.
void AddAlternatives(const ScheduleChoice& choice, v1::ParallelPlanSummary* summary);

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_PLANNER_SCHEDULE_CHOICE_H_
