#include "worker/daemon/progress_reporter.h"

#include <algorithm>
#include <chrono>

#include "common/logging.h"
#include "grpcpp/grpcpp.h"

namespace dapple::worker {
namespace {

constexpr absl::Duration kFirstBackoff = absl::Milliseconds(100);
constexpr absl::Duration kMaxBackoff = absl::Seconds(2);

}  // namespace

ProgressReporter::ProgressReporter(v1::WorkerControl::Stub* stub, std::atomic<bool>* abort,
                                   std::atomic<int64_t>* checkpoint_step, JobLogCapture* logs,
                                   const CallAuth* auth, std::function<void()> on_unknown_worker)
    : stub_(stub),
      auth_(auth),
      abort_(abort),
      checkpoint_step_(checkpoint_step),
      logs_(logs),
      on_unknown_worker_(std::move(on_unknown_worker)),
      thread_([this] { Loop(); }) {}

ProgressReporter::~ProgressReporter() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void ProgressReporter::Report(v1::ProgressReport report) {
  absl::MutexLock l(&mu_);
  queue_.Push(std::move(report));
  if (const int64_t dropped = queue_.TakeNewlyDropped(); dropped > 0) {
    DAPPLE_LOG_WARN(
        "progress reports for {}: {} undelivered reports dropped ({} in all; {} waiting, the "
        "most kept)",
        queue_.front().job_id(), dropped, queue_.dropped(), queue_.pending());
  }
}

bool ProgressReporter::Flush(absl::Duration timeout) {
  absl::MutexLock l(&mu_);
  auto drained = [this]()
                     ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return queue_.empty() && !in_flight_; };
  return mu_.AwaitWithTimeout(absl::Condition(&drained), timeout);
}

void ProgressReporter::Replay() {
  absl::MutexLock l(&mu_);
  replay_ = true;
}

void ProgressReporter::Loop() {
  int failures = 0;
  absl::Duration backoff = kFirstBackoff;
  while (true) {
    v1::ProgressReport report;
    {
      absl::MutexLock l(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || replay_ || !queue_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (stop_) return;
      if (replay_) {
        // Done here, between two deliveries, so that nothing in flight is reordered.
        replay_ = false;
        const size_t n = queue_.Replay();
        replays_in_front_ += n;
        backoff = kFirstBackoff;
        DAPPLE_LOG_INFO(
            "delivering {} acknowledged progress reports again to the restarted "
            "coordinator",
            n);
        if (queue_.empty()) continue;
      }
      if (logs_ != nullptr && replays_in_front_ == 0 && !front_has_logs_) {
        // Taken once per report: a retried report keeps the lines it carries.
        v1::ProgressReport& front = queue_.front();
        int64_t dropped = 0;
        for (CapturedLogLine& line : logs_->TakeLines(kLogLinesPerReport, &dropped)) {
          v1::JobLogLine* out = front.add_log_lines();
          out->set_unix_ms(line.unix_ms);
          out->set_level(std::move(line.level));
          out->set_text(std::move(line.text));
        }
        front.set_log_lines_dropped(dropped);
        front_has_logs_ = true;
      }
      report = queue_.front();
      in_flight_ = true;
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    if (auth_ != nullptr) auth_->Attach(&ctx);
    v1::ProgressAck ack;
    grpc::Status s = stub_->ReportProgress(&ctx, report, &ack);
    bool unknown_worker = false;
    {
      absl::MutexLock l(&mu_);
      in_flight_ = false;
      const bool refused = s.error_code() == grpc::StatusCode::FAILED_PRECONDITION ||
                           s.error_code() == grpc::StatusCode::PERMISSION_DENIED ||
                           s.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
                           (s.error_code() == grpc::StatusCode::NOT_FOUND && abort_->load());
      if (s.ok()) {
        queue_.PopDelivered();
        if (replays_in_front_ > 0) {
          --replays_in_front_;
        } else {
          front_has_logs_ = false;
        }
        if (failures > 0) {
          DAPPLE_LOG_INFO("progress reports for {} delivered again after {} failed attempts",
                          report.job_id(), failures);
        }
        failures = 0;
        backoff = kFirstBackoff;
        if (ack.abort()) abort_->store(true);
        if (checkpoint_step_ != nullptr) checkpoint_step_->store(ack.checkpoint_step());
        continue;
      }
      if (refused) {
        // The coordinator no longer runs the job with this worker: nothing queued can be
        // delivered.
        DAPPLE_LOG_WARN("progress reports for {} refused ({}); dropping {} queued", report.job_id(),
                        s.error_message(), queue_.pending());
        queue_.Clear();
        replays_in_front_ = 0;
        front_has_logs_ = false;
        abort_->store(true);
        continue;
      }
      unknown_worker = s.error_code() == grpc::StatusCode::NOT_FOUND;
      if (++failures == 1) {
        DAPPLE_LOG_WARN("progress report failed ({}), retrying; training goes on",
                        s.error_message());
      }
    }
    if (unknown_worker && on_unknown_worker_) on_unknown_worker_();
    absl::MutexLock l(&mu_);
    // Backs off without holding up Flush's deadline logic; Replay and stop end the wait.
    auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || replay_; };
    mu_.AwaitWithTimeout(absl::Condition(&woken), backoff);
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
}

}  // namespace dapple::worker
