// dapplectl's process exit codes, in one place: main.cc returns them, --help and
// docs/dapplectl.md list them, and scripts rely on them.
//
//   0  ok; for `watch` and `submit --watch`: the job SUCCEEDED
//   1  the coordinator refused the request (invalid spec, unknown job, wrong job state, ...),
//      or the job spec file could not be read, is over 1 MiB or is not UTF-8 text, or a
//      `plan` profile or cluster file could not be read or parsed
//   2  usage error (unknown command or flag, missing or bad argument or environment value)
//   3  the coordinator could not be reached, or stopped answering (UNAVAILABLE, DEADLINE_EXCEEDED)
//   4  the watched job FAILED
//   5  the watched job was CANCELLED
//   6  not authenticated: no token ("no token: set DAPPLE_TOKEN, --token-file or a context's
//      token-file"), an unreadable token file, or the coordinator refused the token
//      (UNAUTHENTICATED: "the coordinator refused the token: token dpl_<id> expired")
//   7  permission denied (PERMISSION_DENIED: another tenant's job, "admin only")
//   130  (not returned by dapplectl) interrupted by Ctrl-C: SIGINT ends the process, and the
//      shell reports 128 + 2; the job itself keeps running
#ifndef DAPPLE_DAPPLECTL_EXIT_CODES_H_
#define DAPPLE_DAPPLECTL_EXIT_CODES_H_

#include "absl/status/status.h"
#include "dapple/v1/job.pb.h"

namespace dapple::ctl {

inline constexpr int kExitOk = 0;
inline constexpr int kExitRefused = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitUnreachable = 3;
inline constexpr int kExitJobFailed = 4;
inline constexpr int kExitJobCancelled = 5;
inline constexpr int kExitUnauthenticated = 6;
inline constexpr int kExitPermissionDenied = 7;
// What a shell reports for a dapplectl ended by SIGINT (Ctrl-C): 128 + signal 2. dapplectl
// keeps SIGINT's default action, so it never returns this itself; it is listed for scripts.
inline constexpr int kExitInterrupted = 130;

// The exit code for a call that ended with `code` (gRPC and absl codes share their numbers):
// OK -> kExitOk; UNAVAILABLE, DEADLINE_EXCEEDED -> kExitUnreachable; UNAUTHENTICATED ->
// kExitUnauthenticated; PERMISSION_DENIED -> kExitPermissionDenied; every other code (the
// coordinator answered, but with an error) -> kExitRefused.
int ExitCodeForStatusCode(absl::StatusCode code);

// The exit code for a watched job that ended in `state`: SUCCEEDED -> kExitOk,
// FAILED -> kExitJobFailed, CANCELLED -> kExitJobCancelled. A non-terminal state (the stream
// ended early) -> kExitUnreachable.
int ExitCodeForJobState(v1::JobState state);

// The block of text that --help prints after the commands: one line per exit code.
const char* ExitCodesHelp();

}  // namespace dapple::ctl

#endif  // DAPPLE_DAPPLECTL_EXIT_CODES_H_
