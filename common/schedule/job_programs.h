// The rank programs a job's ranks run, generated in ONE place: the coordinator hands each rank
// its program from here (coordinator_service.cc), tests build theirs the same way, and the
// worker's interpreter runs whatever it is given (worker/runtime/stage_runtime.h). Every
// schedule's programs are generated (generators.h, pipedream_program.h), lowered with the job's
// collectives (job_lowering.h LowerOptionsFor) and proven deadlock-free by the simulator here.
// Pure functions; thread-safe.
//
// Adding a schedule: a generator (its compute order, in Ops), its ScheduleKind, and -- when
// its programs differ between steps or a step's actions mean something else (asynchronous
// collectives, stale or stashed weights) -- new action kinds (plan.proto) plus their case in
// the interpreter's switch and the simulator. No branch on the schedule goes into the worker.
#ifndef DAPPLE_COMMON_SCHEDULE_JOB_PROGRAMS_H_
#define DAPPLE_COMMON_SCHEDULE_JOB_PROGRAMS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/schedule/pipedream_program.h"
#include "dapple/v1/job.pb.h"
#include "dapple/v1/plan.pb.h"

namespace dapple::schedule {

// PipeDream's run of `spec` on `plan` from global step `first_step` to the spec's last
// (common/steps.h TotalSteps; at least one step): D_s from the plan, M, vertical sync, the
// job's collectives. Errors: LowerOptionsFor's.
absl::StatusOr<PipeDreamProgramOptions> PipeDreamOptionsFor(const v1::JobSpec& spec,
                                                            const v1::ParallelPlanSummary& plan,
                                                            int64_t first_step);

// The program of every rank of `spec` on `plan` (index: RankIndex(plan, stage, replica)) for a
// run from `first_step`: under schedule pipedream BuildPipeDreamProgram's whole run
// per replica (CheckPipeDreamRun proves it), else BuildPrograms' one-step program of the
// rank's stage (the same for all its replicas, replica field set). The schedule is the plan's
// (plan.schedule: what the planner chose under parallel.schedule auto), else the spec's
// parallel.schedule; both empty is dapple. Errors: an unknown schedule (kInvalidArgument),
// LowerOptionsFor's and BuildPrograms' errors, and the simulator's deadlock (kFailedPrecondition).
absl::StatusOr<std::vector<v1::RankProgram>> JobPrograms(const v1::JobSpec& spec,
                                                         const v1::ParallelPlanSummary& plan,
                                                         int64_t first_step);

// JobPrograms' program of one rank (builds only that rank's; kInvalidArgument for a stage or
// replica outside the plan).
absl::StatusOr<v1::RankProgram> JobRankProgram(const v1::JobSpec& spec,
                                               const v1::ParallelPlanSummary& plan, int stage,
                                               int replica, int64_t first_step);

}  // namespace dapple::schedule

#endif  // DAPPLE_COMMON_SCHEDULE_JOB_PROGRAMS_H_
