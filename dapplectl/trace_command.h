// `dapplectl trace JOB -o FILE`: fetches a job's traced steps (CoordinatorClient::Trace) and
// writes them as Chrome trace-event JSON (trace_json.h).
#ifndef DAPPLE_DAPPLECTL_TRACE_COMMAND_H_
#define DAPPLE_DAPPLECTL_TRACE_COMMAND_H_

#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "dapplectl/client.h"

namespace dapple::ctl {

// Writes the trace of `job_id` to `path` (through "<path>.tmp" and a rename, so a failed write
// leaves no partial file), or to `out` when `path` is "-". Returns the one-line summary for
// the user: "wrote trace.json: 3 traced steps x 2 ranks of job-1 (open it in
// https://ui.perfetto.dev or chrome://tracing)". Errors: the client's (kNotFound "no job
// job-9", unreachable coordinator); kFailedPrecondition "job job-3 has no traced steps yet
// (workers trace a run's first step and every --trace-every-steps-th step; 0 turns tracing
// off)" ("since its restart" for a resumed job: the coordinator serves the resumed run's steps);
// kFailedPrecondition "cannot write trace.json: <reason>".
absl::StatusOr<std::string> WriteJobTrace(CoordinatorClient& client, const std::string& job_id,
                                          const std::string& path, std::ostream* out);

}  // namespace dapple::ctl

#endif  // DAPPLE_DAPPLECTL_TRACE_COMMAND_H_
