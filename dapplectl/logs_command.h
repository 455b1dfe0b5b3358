// `dapplectl logs JOB [--rank S/R] [--tail N] [--follow] [--collapse]`: prints the lines the
// job's ranks logged (CoordinatorClient::Logs; log_views.h for the format).
#ifndef DAPPLE_DAPPLECTL_LOGS_COMMAND_H_
#define DAPPLE_DAPPLECTL_LOGS_COMMAND_H_

#include <optional>
#include <ostream>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "dapplectl/client.h"

namespace dapple::ctl {

struct LogsOptions {
  std::string job_id;
  std::optional<std::pair<int, int>> rank;  // (stage, replica); none: every rank
  int tail = 0;                             // > 0: start with the newest `tail` lines
  bool follow = false;    // then print new lines as they arrive until the job has ended
  bool collapse = false;  // identical lines of several ranks once (RenderLogLines)
  absl::Duration poll = absl::Milliseconds(500);  // --follow's polling period
};

// Prints the lines to `out`. With follow, polls for lines after the last one printed every
// options.poll, and returns after the first answer that finds the job in a terminal state (the
// lines in it printed); a follow rides out a coordinator restart (CoordinatorClient::
// AwaitCoordinator: up to the client's timeout for it to answer again). Errors: the client's
// (kNotFound "no job job-9", kInvalidArgument for a rank the job does not have, an unreachable
// coordinator).
absl::Status RunLogs(CoordinatorClient& client, const LogsOptions& options, std::ostream* out);

}  // namespace dapple::ctl

#endif  // DAPPLE_DAPPLECTL_LOGS_COMMAND_H_
