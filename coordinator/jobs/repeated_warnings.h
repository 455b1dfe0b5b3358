// RepeatedWarnings: keeps a warning that can repeat many times a second with the same text from
// flooding the coordinator's log. A full database disk made every progress report's write fail:
// ~65 identical "change not saved yet" lines a second for one job.
//
// Per key (who failed at what: "job-5 write"), independently: the first failure is logged as it
// is; repeats of the same text are only counted, and at most one line per `interval_ms` says how
// many there were ("... (repeated 3900 times in the last 60 s)"); a different text is logged at
// once (with the count of the previous one's repeats not logged yet); the first success after
// failures is logged too, with how many failed and for how long. So neither the first
// occurrence nor the recovery is ever hidden.
//
// Pure: callers pass the time and log the lines returned ("" : log nothing).
// Thread safety: thread-safe (one internal mutex).
#ifndef DAPPLE_COORDINATOR_JOBS_REPEATED_WARNINGS_H_
#define DAPPLE_COORDINATOR_JOBS_REPEATED_WARNINGS_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace dapple::coordinator {

class RepeatedWarnings {
 public:
  // One summary line per minute at most, per key.
  static constexpr int64_t kDefaultIntervalMs = 60 * 1000;

  explicit RepeatedWarnings(int64_t interval_ms = kDefaultIntervalMs) : interval_ms_(interval_ms) {}

  // A failure of `key` whose warning is `message`, at `now_unix_ms`: the line to log (the
  // message itself, or a summary of its repeats), or "" when this one is only counted.
  std::string Failed(const std::string& key, const std::string& message, int64_t now_unix_ms);

  // A success of `key` at `now_unix_ms`: "" when it was not failing, else what the failures
  // were, for the caller's recovery line: "after 3900 failures over 60 s; the last: <message>".
  // Forgets the key's failures.
  std::string Succeeded(const std::string& key, int64_t now_unix_ms);

  // Whether `key` failed since its last success (for tests and status).
  bool Failing(const std::string& key) const;

 private:
  struct State {
    std::string message;         // the last failure's text
    int64_t first_unix_ms = 0;   // the first failure since the last success
    int64_t logged_unix_ms = 0;  // the last line logged
    int64_t failures = 0;        // since the last success
    int64_t unlogged = 0;        // repeats since the last line logged
  };

  const int64_t interval_ms_;
  mutable absl::Mutex mu_;
  std::map<std::string, State> failing_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_JOBS_REPEATED_WARNINGS_H_
