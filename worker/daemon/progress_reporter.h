// Sends a rank's progress reports to the coordinator from its own thread, so the interpreter
// loop never waits on the coordinator. Reports are delivered in order; a report that cannot be
// delivered is retried (backoff 100 ms doubling to 2 s) until it is, or until the reporter is
// destroyed (after Flush's deadline). Undelivered reports wait in a bounded ReportBuffer
// (report_buffer.h: what is dropped when it is full), so a rank trains on while the coordinator
// is away (restarting) and catches up when it is back.
//
// Coordinator restarts: a report answered NOT_FOUND ("unknown worker": the coordinator forgot
// this worker) is retried, and `on_unknown_worker` (when set) is called so that the daemon
// registers again at once; once the daemon re-attached the rank it calls Replay, and the
// acknowledged history (losses, evaluations, checkpoints the restarted coordinator may not have
// saved) is delivered again first. A NOT_FOUND while `*abort` is set (the rank is stopping: the
// claim was refused) drops the queue, as do FAILED_PRECONDITION and INVALID_ARGUMENT (the
// coordinator knows the worker but not this rank or report).
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
#include <functional>
#include <memory>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/job_log_capture.h"
#include "dapple/v1/worker.grpc.pb.h"
#include "worker/daemon/call_auth.h"
#include "worker/daemon/report_buffer.h"

namespace dapple::worker {

class ProgressReporter {
 public:
  // `stub` must outlive the reporter. When an ack says abort, `*abort` is set to true. Every
  // ack's checkpoint_step (the on-demand checkpoint the coordinator wants, 0: none) is stored
  // into `*checkpoint_step` when that is not null (it must outlive the reporter).
  static constexpr int kLogLinesPerReport = 200;

  // `logs` (may be null: no lines are sent) must outlive the reporter.
  // `auth` (may be null: no token) adds the worker's credential to every report and must
  // outlive the reporter. `on_unknown_worker` (may be empty) is called from the reporter's
  // thread, without its lock.
  ProgressReporter(v1::WorkerControl::Stub* stub, std::atomic<bool>* abort,
                   std::atomic<int64_t>* checkpoint_step = nullptr, JobLogCapture* logs = nullptr,
                   const CallAuth* auth = nullptr, std::function<void()> on_unknown_worker = {});
  ~ProgressReporter();  // stops the thread; undelivered reports are dropped

  void Report(v1::ProgressReport report);
  // Waits until every queued report was delivered or `timeout` passed; false on timeout.
  bool Flush(absl::Duration timeout);
  // The coordinator re-attached this rank after a restart: deliver the kept history again
  // before the pending reports, and retry at once.
  void Replay();

 private:
  void Loop();

  v1::WorkerControl::Stub* stub_;
  const CallAuth* auth_;
  std::atomic<bool>* abort_;
  std::atomic<int64_t>* checkpoint_step_;
  JobLogCapture* logs_;
  std::function<void()> on_unknown_worker_;
  absl::Mutex mu_;
  ReportBuffer queue_ ABSL_GUARDED_BY(mu_);
  bool in_flight_ ABSL_GUARDED_BY(mu_) = false;
  // The first report that is not a replay took its log lines (replayed ones carry none).
  bool front_has_logs_ ABSL_GUARDED_BY(mu_) = false;
  size_t replays_in_front_ ABSL_GUARDED_BY(mu_) = 0;  // replayed reports still queued first
  bool replay_ ABSL_GUARDED_BY(mu_) = false;          // Replay asked; done by the loop
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_DAEMON_PROGRESS_REPORTER_H_
