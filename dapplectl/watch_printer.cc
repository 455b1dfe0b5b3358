#include "dapplectl/watch_printer.h"

#include "dapplectl/format.h"
#include "dapplectl/json_output.h"
#include "dapplectl/views.h"

namespace dapple::ctl {
namespace {

// ANSI "erase to end of line": a shorter line must not leave the tail of a longer one behind.
constexpr char kEraseLine[] = "\033[K";

}  // namespace

WatchPrinter::WatchPrinter(std::ostream* out, Options options)
    : out_(out), options_(std::move(options)) {}

absl::Status WatchPrinter::OnSnapshot(const v1::Job& job) {
  // The watch starts with GetJob and then the stream's first event, usually the same job.
  std::string serialized;
  job.SerializeToString(&serialized);
  if (serialized == last_snapshot_) return absl::OkStatus();
  last_snapshot_ = std::move(serialized);

  if (options_.json) {
    absl::StatusOr<std::string> line = MessageToJson(job, /*pretty=*/false);
    if (!line.ok()) return line.status();
    *out_ << *line << "\n" << std::flush;
    return absl::OkStatus();
  }
  // The final state is shown by the summary line instead.
  if (IsTerminal(job.state())) return absl::OkStatus();
  if (options_.terminal) {
    *out_ << "\r" << FitToWidth(RenderProgressLine(job), options_.columns) << kEraseLine
          << std::flush;
    live_line_drawn_ = true;
    return absl::OkStatus();
  }
  if (throttle_.ShouldPrint(job.state(), options_.now())) {
    *out_ << RenderProgressLine(job, ProgressStyle{.bar = false}) << "\n" << std::flush;
  }
  return absl::OkStatus();
}

void WatchPrinter::Finish(const v1::Job* last) {
  if (live_line_drawn_) {
    if (last != nullptr) {
      *out_ << "\r" << kEraseLine;
    } else {
      *out_ << "\n";
    }
    live_line_drawn_ = false;
  }
  if (last != nullptr && !options_.json) {
    *out_ << RenderSummaryLine(*last) << "\n";
    // A language model's job ends with the text it generated.
    if (IsTerminal(last->state())) *out_ << RenderSample(*last);
  }
  *out_ << std::flush;
}

}  // namespace dapple::ctl
