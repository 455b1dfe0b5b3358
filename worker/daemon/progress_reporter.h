// Sends a rank's progress reports to the coordinator from its own thread, so the interpreter
// loop never waits on the coordinator. Reports are delivered in order; a report that cannot be
// delivered is retried until Flush's deadline.
//
// Log lines: with a JobLogCapture, the report about to be sent first takes up to
// kLogLinesPerReport of the lines the process logged (oldest first) and the count of lines the
// capture dropped (ProgressReport.log_lines / log_lines_dropped): the rank's lines reach the
// coordinator piggy-backed on its reports (every step), never holding up the interpreter loop.
//
// Thread safety: Report, Flush and aborted() may be called from any thread.
#ifndef DAPPLE_WORKER_DAEMON_PROGRESS_REPORTER_H_
#define DAPPLE_WORKER_DAEMON_PROGRESS_REPORTER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/job_log_capture.h"
#include "dapple/v1/worker.grpc.pb.h"

namespace dapple::worker {

class ProgressReporter {
 public:
  // `stub` must outlive the reporter. When an ack says abort, `*abort` is set to true. Every
  // ack's checkpoint_step (the on-demand checkpoint the coordinator wants, 0: none) is stored
  // into `*checkpoint_step` when that is not null (it must outlive the reporter).
  static constexpr int kLogLinesPerReport = 200;

  // `logs` (may be null: no lines are sent) must outlive the reporter.
  ProgressReporter(v1::WorkerControl::Stub* stub, std::atomic<bool>* abort,
                   std::atomic<int64_t>* checkpoint_step = nullptr, JobLogCapture* logs = nullptr);
  ~ProgressReporter();  // stops the thread; undelivered reports are dropped

  void Report(v1::ProgressReport report);
  // Waits until every queued report was delivered or `timeout` passed; false on timeout.
  bool Flush(absl::Duration timeout);

 private:
  void Loop();

  v1::WorkerControl::Stub* stub_;
  std::atomic<bool>* abort_;
  std::atomic<int64_t>* checkpoint_step_;
  JobLogCapture* logs_;
  absl::Mutex mu_;
  std::deque<v1::ProgressReport> queue_ ABSL_GUARDED_BY(mu_);
  bool in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool front_has_logs_ ABSL_GUARDED_BY(mu_) = false;  // queue_.front() took its log lines
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_DAEMON_PROGRESS_REPORTER_H_
