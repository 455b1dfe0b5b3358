#include "worker/daemon/progress_reporter.h"

#include <chrono>

#include "common/logging.h"
#include "grpcpp/grpcpp.h"

namespace dapple::worker {

ProgressReporter::ProgressReporter(v1::WorkerControl::Stub* stub, std::atomic<bool>* abort,
                                   std::atomic<int64_t>* checkpoint_step, JobLogCapture* logs)
    : stub_(stub), abort_(abort), checkpoint_step_(checkpoint_step), logs_(logs), thread_([this] {
        Loop();
      }) {}

ProgressReporter::~ProgressReporter() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void ProgressReporter::Report(v1::ProgressReport report) {
  absl::MutexLock l(&mu_);
  queue_.push_back(std::move(report));
}

bool ProgressReporter::Flush(absl::Duration timeout) {
  absl::MutexLock l(&mu_);
  auto drained = [this]()
                     ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return queue_.empty() && !in_flight_; };
  return mu_.AwaitWithTimeout(absl::Condition(&drained), timeout);
}

void ProgressReporter::Loop() {
  int failures = 0;
  while (true) {
    v1::ProgressReport report;
    {
      absl::MutexLock l(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !queue_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (stop_) return;
      if (logs_ != nullptr && !front_has_logs_) {
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
    v1::ProgressAck ack;
    grpc::Status s = stub_->ReportProgress(&ctx, report, &ack);
    absl::MutexLock l(&mu_);
    in_flight_ = false;
    if (s.ok()) {
      queue_.pop_front();
      front_has_logs_ = false;
      failures = 0;
      if (ack.abort()) abort_->store(true);
      if (checkpoint_step_ != nullptr) checkpoint_step_->store(ack.checkpoint_step());
    } else if (s.error_code() == grpc::StatusCode::NOT_FOUND ||
               s.error_code() == grpc::StatusCode::FAILED_PRECONDITION ||
               s.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
      // The coordinator no longer knows the job or this worker: nothing queued can be delivered.
      DAPPLE_LOG_WARN("progress reports for {} refused ({}); dropping {} queued", report.job_id(),
                      s.error_message(), queue_.size());
      queue_.clear();
      front_has_logs_ = false;
      abort_->store(true);
    } else {
      if (++failures == 1) {
        DAPPLE_LOG_WARN("progress report failed ({}), retrying", s.error_message());
      }
      // Back off without holding up Flush's deadline logic.
      mu_.AwaitWithTimeout(absl::Condition(&stop_), absl::Milliseconds(200));
    }
  }
}

}  // namespace dapple::worker
