// WatchPrinter: how `dapplectl watch` shows the snapshots it receives.
//
//   table, terminal      one live line, redrawn in place with "\r" (cut to the terminal width),
//                        replaced at the end by the summary line (and the generated text
//                        of a language model's job: views.h RenderSample)
//   table, not terminal  a plain line for the first snapshot, each state change, and otherwise
//                        at most one every 2 s (PlainProgressThrottle), then the summary line
//                        (and the generated text)
//   json                 one compact JSON line per distinct snapshot (JSON Lines), no summary
//
// Writes only to `out`. Not thread-safe: call from the watching thread.
#ifndef DAPPLE_DAPPLECTL_WATCH_PRINTER_H_
#define DAPPLE_DAPPLECTL_WATCH_PRINTER_H_

#include <functional>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "dapple/v1/job.pb.h"
#include "dapplectl/progress.h"

namespace dapple::ctl {

class WatchPrinter {
 public:
  struct Options {
    bool json = false;
    bool terminal = false;  // stdout is a TTY
    int columns = 0;        // terminal width; 0 = unknown
    std::function<absl::Time()> now = [] { return absl::Now(); };
  };

  WatchPrinter(std::ostream* out, Options options);

  // Shows one snapshot. Returns an error only if a snapshot cannot be printed as JSON.
  absl::Status OnSnapshot(const v1::Job& job);

  // Ends the output: clears the live line, then prints the summary of `last` (table mode).
  // `last` is the final snapshot; pass nullptr when the watch ended in an error (the live line
  // is then ended with a newline so the error message starts on its own line).
  void Finish(const v1::Job* last);

 private:
  std::ostream* out_;
  Options options_;
  PlainProgressThrottle throttle_;
  std::string last_snapshot_;  // serialized, to skip repeats
  bool live_line_drawn_ = false;
};

}  // namespace dapple::ctl

#endif  // DAPPLE_DAPPLECTL_WATCH_PRINTER_H_
