// JobLogCapture: an spdlog sink that keeps the lines a worker process logs while it runs a
// job's rank, so that the worker can ship them to the coordinator (`dapplectl logs`;
// docs/worker.md, "Job logs"). A worker runs one rank at a time, so every line logged between
// Begin and End belongs to that rank's job (its start, evaluation lines, warnings, errors; also
// the daemon's own lines meanwhile, e.g. a failed heartbeat).
//
// Never blocks the logging thread beyond a short mutex: at most kCapacity lines wait to be
// taken; a line logged while the buffer is full is dropped and counted (TakeLines reports the
// count), so a slow coordinator costs lines, never training time. A line's text is cut to
// kMaxLineBytes.
//
// Thread safety: thread-safe (spdlog's base_sink mutex guards every member).
#ifndef DAPPLE_COMMON_JOB_LOG_CAPTURE_H_
#define DAPPLE_COMMON_JOB_LOG_CAPTURE_H_

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "spdlog/sinks/base_sink.h"

namespace dapple {

struct CapturedLogLine {
  int64_t unix_ms = 0;
  std::string level;  // spdlog's name: "info", "warning", "error", "critical", "debug"
  std::string text;   // the message alone (no time, level or process prefix)
};

class JobLogCapture : public spdlog::sinks::base_sink<std::mutex> {
 public:
  static constexpr int kCapacity = 2000;
  static constexpr size_t kMaxLineBytes = 4096;

  // Starts keeping lines (those left from an earlier job and the drop count are discarded).
  void Begin();
  // Stops keeping lines; lines kept so far can still be taken.
  void End();

  // Removes and returns up to `max_lines` of the oldest kept lines; `*dropped` (when not null)
  // gets the lines dropped since the previous call (then reset to 0).
  std::vector<CapturedLogLine> TakeLines(int max_lines, int64_t* dropped);

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override;
  void flush_() override {}

 private:
  bool capturing_ = false;
  std::deque<CapturedLogLine> lines_;
  int64_t dropped_ = 0;
};

}  // namespace dapple

#endif  // DAPPLE_COMMON_JOB_LOG_CAPTURE_H_
