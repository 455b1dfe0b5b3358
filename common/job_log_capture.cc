#include "common/job_log_capture.h"

#include <chrono>
#include <utility>

namespace dapple {

void JobLogCapture::Begin() {
  std::lock_guard<std::mutex> lock(mutex_);
  capturing_ = true;
  lines_.clear();
  dropped_ = 0;
}

void JobLogCapture::End() {
  std::lock_guard<std::mutex> lock(mutex_);
  capturing_ = false;
}

std::vector<CapturedLogLine> JobLogCapture::TakeLines(int max_lines, int64_t* dropped) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<CapturedLogLine> out;
  while (!lines_.empty() && static_cast<int>(out.size()) < max_lines) {
    out.push_back(std::move(lines_.front()));
    lines_.pop_front();
  }
  if (dropped != nullptr) {
    *dropped = dropped_;
    dropped_ = 0;
  }
  return out;
}

// Called by base_sink::log under mutex_.
void JobLogCapture::sink_it_(const spdlog::details::log_msg& msg) {
  if (!capturing_) return;
  if (static_cast<int>(lines_.size()) >= kCapacity) {
    ++dropped_;
    return;
  }
  CapturedLogLine line;
  line.unix_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(msg.time.time_since_epoch()).count();
  const auto level = spdlog::level::to_string_view(msg.level);
  line.level.assign(level.data(), level.size());
  const size_t size = std::min(msg.payload.size(), kMaxLineBytes);
  line.text.assign(msg.payload.data(), size);
  lines_.push_back(std::move(line));
}

}  // namespace dapple
