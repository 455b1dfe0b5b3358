#include "dapplectl/logs_command.h"

#include "absl/time/clock.h"
#include "dapplectl/format.h"
#include "dapplectl/log_views.h"

namespace dapple::ctl {

absl::Status RunLogs(CoordinatorClient& client, const LogsOptions& options, std::ostream* out) {
  v1::GetJobLogsRequest request;
  request.set_job_id(options.job_id);
  if (options.rank.has_value()) {
    request.set_one_rank(true);
    request.set_stage(options.rank->first);
    request.set_replica(options.rank->second);
  }
  request.set_tail(options.tail);
  while (true) {
    absl::StatusOr<v1::GetJobLogsResponse> response = client.Logs(request);
    if (!response.ok()) {
      // A follow rides out a coordinator restart as `watch` does: once the coordinator answers
      // again, it asks for the lines after the last one printed (the coordinator keeps them).
      const absl::StatusCode code = response.status().code();
      if (!options.follow || code == absl::StatusCode::kOk || !IsLostConnection(code)) {
        return response.status();
      }
      absl::StatusOr<v1::Job> back = client.AwaitCoordinator(options.job_id);
      if (!back.ok()) return back.status();
      continue;
    }
    std::string rendered = RenderLogLines(response->lines(), options.collapse);
    if (request.tail() > 0) rendered = LastLines(rendered, request.tail());
    *out << rendered << std::flush;
    if (!response->lines().empty()) {
      request.set_after_seq(response->lines(response->lines_size() - 1).seq());
    }
    // Only the first answer is cut to the tail; a follow then prints every new line.
    request.set_tail(0);
    if (!options.follow || IsTerminal(response->state())) return absl::OkStatus();
    absl::SleepFor(options.poll);
  }
}

}  // namespace dapple::ctl
