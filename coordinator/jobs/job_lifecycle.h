// The job lifecycle (v1::JobState), owned by coordinator/jobs. JobManager::Transition is the only
// place a job's state changes; these predicates are the rules it applies.
//
// The rules (drawn as a diagram in job_manager.h):
//   PENDING -> PLANNING -> RUNNING -> SUCCEEDED | FAILED | CANCELLED
//   PENDING | PLANNING -> FAILED | CANCELLED
//   RUNNING -> RESTARTING -> PLANNING | FAILED | CANCELLED (automatic restarts:
//   training.restart, coordinator/jobs/restart_policy.h; PLANNING then leads to RUNNING again)
//   SUCCEEDED, FAILED and CANCELLED are terminal: no transition leaves them.
//
// Pure functions; thread-safe.
#ifndef DAPPLE_COORDINATOR_JOBS_JOB_LIFECYCLE_H_
#define DAPPLE_COORDINATOR_JOBS_JOB_LIFECYCLE_H_

#include <string>

#include "dapple/v1/job.pb.h"

namespace dapple::coordinator {

// True for SUCCEEDED, FAILED and CANCELLED.
bool IsTerminal(v1::JobState state);

// True when the diagram above has the edge `from` -> `to` (never for from == to).
bool IsAllowedTransition(v1::JobState from, v1::JobState to);

// "PENDING", "RUNNING", ... ("UNSPECIFIED" for 0, "STATE_<n>" for values outside the enum).
std::string JobStateName(v1::JobState state);

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_JOBS_JOB_LIFECYCLE_H_
