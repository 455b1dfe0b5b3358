// The progress reports of one rank that are waiting for the coordinator, and a copy of the ones
// it acknowledged that make up the job's history, so that a restarted coordinator can be given
// them again (docs/coordinator.md, "Coordinator restarts"). Both bounded; no RPC, no clock.
//
// Pending: at most kMaxPending reports. A push beyond it drops the oldest pending report that
// only carries a rank's step statistics (a STEP report with no loss and no trace: a newer one
// of the same rank replaces it on the coordinator); when every pending report carries history
// (losses, traces, evaluations, checkpoints, the final report) the oldest STEP report among them
// is dropped instead (the job then shows NaN for that step's loss); reports of other kinds are
// never dropped. Every drop is counted (dropped()). With the bound, a rank that reports every
// step keeps at most 65536 steps of history (about 16 MB) while the coordinator is away.
//
// History: of every delivered report of kind STEP with a loss, EVAL, SAMPLE or CHECKPOINT the
// newest kMaxHistory are kept, without their log lines and trace (those were stored by the
// coordinator when they arrived: a replay must not add them twice). The coordinator persists a
// job's metrics and losses at most once per --metrics-persist-interval (1 s): 4096 reports cover
// that interval up to 4096 steps per second.
//
// Thread safety: thread-compatible (ProgressReporter guards it with its mutex).
#ifndef DAPPLE_WORKER_DAEMON_REPORT_BUFFER_H_
#define DAPPLE_WORKER_DAEMON_REPORT_BUFFER_H_

#include <cstddef>
#include <cstdint>
#include <deque>

#include "dapple/v1/worker.pb.h"

namespace dapple::worker {

class ReportBuffer {
 public:
  static constexpr size_t kMaxPending = 65536;
  static constexpr size_t kMaxHistory = 4096;

  // Appends a report to deliver (dropping one as said above when kMaxPending are pending).
  void Push(v1::ProgressReport report);
  bool empty() const { return pending_.empty(); }
  size_t pending() const { return pending_.size(); }
  // The oldest pending report (the next to deliver); requires !empty(). The caller may add to it
  // (log lines) before it is delivered.
  v1::ProgressReport& front() { return pending_.front(); }
  // The front report was delivered: removed, and kept in the history when it is history.
  void PopDelivered();
  // Forgets every pending report (the coordinator refused them); returns how many.
  size_t Clear();
  // Puts the history back in front of the pending reports, oldest first, and forgets it: the
  // coordinator (restarted) gets those reports again and ignores what it already has.
  // Returns how many reports were put back.
  size_t Replay();
  // Reports dropped by Push so far.
  int64_t dropped() const { return dropped_; }
  // Reports dropped by Push since the last call of this (for a log line per streak).
  int64_t TakeNewlyDropped();

 private:
  std::deque<v1::ProgressReport> pending_;
  std::deque<v1::ProgressReport> history_;
  int64_t dropped_ = 0;
  int64_t reported_dropped_ = 0;
};

// True for a report whose content the coordinator keeps as the job's history (see above).
bool IsHistoryReport(const v1::ProgressReport& report);

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_DAEMON_REPORT_BUFFER_H_
