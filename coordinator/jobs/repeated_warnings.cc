#include "coordinator/jobs/repeated_warnings.h"

#include "absl/strings/str_cat.h"

namespace dapple::coordinator {
namespace {

// "3 s", "60 s": whole seconds, at least 1 (a burst within a second reads "1 s").
std::string Seconds(int64_t ms) { return absl::StrCat(ms < 1000 ? 1 : ms / 1000, " s"); }

}  // namespace

std::string RepeatedWarnings::Failed(const std::string& key, const std::string& message,
                                     int64_t now_unix_ms) {
  absl::MutexLock lock(&mu_);
  auto [it, first] = failing_.try_emplace(key);
  State& s = it->second;
  ++s.failures;
  if (first) {
    s.message = message;
    s.first_unix_ms = now_unix_ms;
    s.logged_unix_ms = now_unix_ms;
    return message;
  }
  if (message != s.message) {
    // Something else went wrong: said at once, with what is left of the previous one's count.
    std::string line = message;
    if (s.unlogged > 0) {
      absl::StrAppend(&line, " (the previous warning repeated ", s.unlogged,
                      " more times: ", s.message, ")");
    }
    s.message = message;
    s.unlogged = 0;
    s.logged_unix_ms = now_unix_ms;
    return line;
  }
  ++s.unlogged;
  if (now_unix_ms - s.logged_unix_ms < interval_ms_) return "";
  std::string line = absl::StrCat(message, " (repeated ", s.unlogged, " times in the last ",
                                  Seconds(now_unix_ms - s.logged_unix_ms), ")");
  s.unlogged = 0;
  s.logged_unix_ms = now_unix_ms;
  return line;
}

std::string RepeatedWarnings::Succeeded(const std::string& key, int64_t now_unix_ms) {
  absl::MutexLock lock(&mu_);
  auto it = failing_.find(key);
  if (it == failing_.end()) return "";
  const State& s = it->second;
  std::string line =
      absl::StrCat("after ", s.failures, s.failures == 1 ? " failure" : " failures", " over ",
                   Seconds(now_unix_ms - s.first_unix_ms), "; the last: ", s.message);
  failing_.erase(it);
  return line;
}

bool RepeatedWarnings::Failing(const std::string& key) const {
  absl::MutexLock lock(&mu_);
  return failing_.contains(key);
}

}  // namespace dapple::coordinator
