#include "dapplectl/trace_command.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "dapplectl/format.h"
#include "dapplectl/trace_json.h"

namespace dapple::ctl {

absl::StatusOr<std::string> WriteJobTrace(CoordinatorClient& client, const std::string& job_id,
                                          const std::string& path, std::ostream* out) {
  DAPPLE_ASSIGN_OR_RETURN(v1::JobTrace trace, client.Trace(job_id));
  if (trace.steps().empty()) {
    // A job that ended without one never will have one: say so rather than "yet".
    absl::StatusOr<v1::Job> job = client.Get(job_id);
    if (job.ok() && IsTerminal(job->state())) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", job_id, " has no traced steps: it ended (",
                       JobStateName(job->state()), ") before its ranks traced a step"));
    }
    // After a restart the coordinator serves the resumed run's steps only.
    const bool resumed = job.ok() && !job->restart_history().empty() &&
                         job->restart_history().rbegin()->resumed_unix_ms() > 0;
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id, " has no traced steps ", resumed ? "since its restart" : "yet",
        " (workers trace a run's first step and every --trace-every-steps-th step; 0 turns "
        "tracing off)"));
  }
  const std::string json = TraceToChromeJson(trace);
  const TraceCounts counts = CountTrace(trace);
  const std::string what =
      absl::StrCat(counts.steps, " traced step", counts.steps == 1 ? "" : "s", " x ", counts.ranks,
                   " rank", counts.ranks == 1 ? "" : "s", " of ", trace.job_id());
  if (path == "-") {
    *out << json << std::flush;
    if (!*out) return absl::FailedPreconditionError("cannot write the trace to stdout");
    return absl::StrCat("wrote ", what);
  }
  // Not a regular file (a device, a FIFO): written in place. A file beside it renamed over it
  // replaced /dev/full with a regular file (found by a fresh user, running as root).
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    std::ofstream f(path, std::ios::binary);
    if (f) f << json;
    if (f) f.flush();
    if (!f) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
    }
    return absl::StrCat("wrote ", path, ": ", what);
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (f) f << json;
    if (f) f.flush();
    if (!f) {
      const std::string why = std::strerror(errno);
      std::remove(tmp.c_str());
      return absl::FailedPreconditionError(absl::StrCat("cannot write ", path, ": ", why));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    return absl::FailedPreconditionError(absl::StrCat("cannot write ", path, ": ", why));
  }
  return absl::StrCat("wrote ", path, ": ", what,
                      " (open it in https://ui.perfetto.dev or chrome://tracing)");
}

}  // namespace dapple::ctl
