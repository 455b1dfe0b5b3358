#include "worker/daemon/report_buffer.h"

#include <utility>

namespace dapple::worker {
namespace {

// Only a rank's newest step statistics matter to the coordinator: the oldest such report is the
// cheapest loss.
bool StatsOnly(const v1::ProgressReport& r) {
  return r.kind() == v1::PROGRESS_STEP && !r.has_loss() && !r.has_trace();
}

}  // namespace

bool IsHistoryReport(const v1::ProgressReport& r) {
  switch (r.kind()) {
    case v1::PROGRESS_STEP:
      return r.has_loss();
    case v1::PROGRESS_EVAL:
    case v1::PROGRESS_SAMPLE:
    case v1::PROGRESS_CHECKPOINT:
      return true;
    default:
      return false;
  }
}

void ReportBuffer::Push(v1::ProgressReport report) {
  if (pending_.size() >= kMaxPending) {
    // The front may be in flight (its delivery is retried as it is): never dropped.
    auto victim = pending_.end();
    for (auto it = pending_.begin() + 1; it != pending_.end(); ++it) {
      if (StatsOnly(*it)) {
        victim = it;
        break;
      }
    }
    if (victim == pending_.end()) {
      for (auto it = pending_.begin() + 1; it != pending_.end(); ++it) {
        if (it->kind() == v1::PROGRESS_STEP) {
          victim = it;
          break;
        }
      }
    }
    if (victim != pending_.end()) {
      pending_.erase(victim);
      ++dropped_;
    }
  }
  pending_.push_back(std::move(report));
}

void ReportBuffer::PopDelivered() {
  v1::ProgressReport delivered = std::move(pending_.front());
  pending_.pop_front();
  if (!IsHistoryReport(delivered)) return;
  delivered.clear_log_lines();
  delivered.clear_log_lines_dropped();
  delivered.clear_trace();
  history_.push_back(std::move(delivered));
  if (history_.size() > kMaxHistory) history_.pop_front();
}

size_t ReportBuffer::Clear() {
  const size_t n = pending_.size();
  pending_.clear();
  return n;
}

size_t ReportBuffer::Replay() {
  const size_t n = history_.size();
  // history_ is oldest first; inserting from the newest keeps that order in front.
  for (auto it = history_.rbegin(); it != history_.rend(); ++it) {
    pending_.push_front(std::move(*it));
  }
  history_.clear();
  return n;
}

int64_t ReportBuffer::TakeNewlyDropped() {
  const int64_t n = dropped_ - reported_dropped_;
  reported_dropped_ = dropped_;
  return n;
}

}  // namespace dapple::worker
