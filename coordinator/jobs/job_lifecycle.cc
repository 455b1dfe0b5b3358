#include "coordinator/jobs/job_lifecycle.h"

#include "absl/strings/str_cat.h"

namespace dapple::coordinator {

bool IsTerminal(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

bool IsAllowedTransition(v1::JobState from, v1::JobState to) {
  switch (from) {
    case v1::JOB_STATE_PENDING:
      return to == v1::JOB_STATE_PLANNING || to == v1::JOB_STATE_FAILED ||
             to == v1::JOB_STATE_CANCELLED;
    case v1::JOB_STATE_PLANNING:
      return to == v1::JOB_STATE_RUNNING || to == v1::JOB_STATE_FAILED ||
             to == v1::JOB_STATE_CANCELLED;
    case v1::JOB_STATE_RUNNING:
      // PENDING: preempted by the scheduler (checkpointed, stopped, queued again).
      return to == v1::JOB_STATE_SUCCEEDED || to == v1::JOB_STATE_FAILED ||
             to == v1::JOB_STATE_CANCELLED || to == v1::JOB_STATE_RESTARTING ||
             to == v1::JOB_STATE_PENDING;
    case v1::JOB_STATE_RESTARTING:
      return to == v1::JOB_STATE_PLANNING || to == v1::JOB_STATE_FAILED ||
             to == v1::JOB_STATE_CANCELLED;
    case v1::JOB_STATE_UNSPECIFIED:
    case v1::JOB_STATE_SUCCEEDED:
    case v1::JOB_STATE_FAILED:
    case v1::JOB_STATE_CANCELLED:
    case v1::JobState_INT_MIN_SENTINEL_DO_NOT_USE_:
    case v1::JobState_INT_MAX_SENTINEL_DO_NOT_USE_:
      return false;
  }
  return false;
}

std::string JobStateName(v1::JobState state) {
  switch (state) {
    case v1::JOB_STATE_UNSPECIFIED:
      return "UNSPECIFIED";
    case v1::JOB_STATE_PENDING:
      return "PENDING";
    case v1::JOB_STATE_PLANNING:
      return "PLANNING";
    case v1::JOB_STATE_RUNNING:
      return "RUNNING";
    case v1::JOB_STATE_SUCCEEDED:
      return "SUCCEEDED";
    case v1::JOB_STATE_FAILED:
      return "FAILED";
    case v1::JOB_STATE_CANCELLED:
      return "CANCELLED";
    case v1::JOB_STATE_RESTARTING:
      return "RESTARTING";
    case v1::JobState_INT_MIN_SENTINEL_DO_NOT_USE_:
    case v1::JobState_INT_MAX_SENTINEL_DO_NOT_USE_:
      break;
  }
  return absl::StrCat("STATE_", static_cast<int>(state));
}

}  // namespace dapple::coordinator
