#include "dapplectl/exit_codes.h"

namespace dapple::ctl {

int ExitCodeForStatusCode(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return kExitOk;
    // Both mean "no usable answer from the coordinator": the connection could not be made,
    // broke, or the coordinator did not answer in time. Retrying later may help.
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return kExitUnreachable;
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kUnimplemented:
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kDataLoss:
      return kExitRefused;
    case absl::StatusCode::kUnauthenticated:
      return kExitUnauthenticated;
    case absl::StatusCode::kPermissionDenied:
      return kExitPermissionDenied;
    default:
      // absl::StatusCode reserves values beyond the 17 gRPC codes; treat them as refusals.
      return kExitRefused;
  }
}

int ExitCodeForJobState(v1::JobState state) {
  switch (state) {
    case v1::JOB_STATE_SUCCEEDED:
      return kExitOk;
    case v1::JOB_STATE_FAILED:
      return kExitJobFailed;
    case v1::JOB_STATE_CANCELLED:
      return kExitJobCancelled;
    case v1::JOB_STATE_UNSPECIFIED:
    case v1::JOB_STATE_PENDING:
    case v1::JOB_STATE_PLANNING:
    case v1::JOB_STATE_RUNNING:
    case v1::JOB_STATE_RESTARTING:
      return kExitUnreachable;
    case v1::JobState_INT_MIN_SENTINEL_DO_NOT_USE_:
    case v1::JobState_INT_MAX_SENTINEL_DO_NOT_USE_:
      break;
  }
  return kExitUnreachable;
}

const char* ExitCodesHelp() {
  return "Exit codes:\n"
         "  0  ok (watch, submit --watch: the job SUCCEEDED)\n"
         "  1  the request was refused (invalid spec, unknown job, wrong job state) or the\n"
         "     spec file could not be read, is over 1 MiB or is not UTF-8 text, or a plan\n"
         "     profile or cluster file could not be read or parsed\n"
         "  2  usage error (unknown command or flag, missing or bad argument, --coordinator\n"
         "     or DAPPLE_COORDINATOR not HOST:PORT)\n"
         "  3  the coordinator could not be reached or stopped answering\n"
         "  4  the job FAILED (watch, submit --watch)\n"
         "  5  the job was CANCELLED (watch, submit --watch)\n"
         "  6  not authenticated: no token, an unreadable token file, or the coordinator\n"
         "     refused the token (revoked, expired, unknown)\n"
         "  7  permission denied (another tenant's job, admin only)\n"
         "  130  interrupted by Ctrl-C (SIGINT: the shell's 128 + 2); a watched job keeps\n"
         "     running\n";
}

}  // namespace dapple::ctl
