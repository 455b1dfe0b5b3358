// Process-wide logging on spdlog. One line per event, to stderr, with the role and pid.
// Thread safety: every function may be called from any thread.
#ifndef DAPPLE_COMMON_LOGGING_H_
#define DAPPLE_COMMON_LOGGING_H_

#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "common/job_log_capture.h"
#include "spdlog/spdlog.h"

#if !ABSL_USES_STD_STRING_VIEW
// Debian's Abseil has its own string_view type; let log lines format it like a string.
template <>
struct fmt::formatter<absl::string_view> : fmt::formatter<fmt::string_view> {
  auto format(absl::string_view s, fmt::format_context& ctx) const {
    return fmt::formatter<fmt::string_view>::format(fmt::string_view(s.data(), s.size()), ctx);
  }
};
#endif

namespace dapple {

// The --log-level values every binary takes, as its messages list them.
inline constexpr const char* kLogLevels[] = {"trace", "debug", "info", "warn", "error", "off"};
inline constexpr char kLogLevelList[] = "trace, debug, info, warn, error, off";

// Names this process in every log line (e.g. "coordinator", "worker w-2"). Call once at start.
// `level` is one of kLogLevels (unknown values mean info).
// The process's log lines also go to ProcessJobLogCapture().
void InitLogging(const std::string& role, const std::string& level = "info");

// The process-wide capture of a job's log lines (job_log_capture.h), attached to the logger by
// InitLogging (so: nothing is captured in a process that never called it). A worker daemon
// begins and ends it around each rank it runs.
const std::shared_ptr<JobLogCapture>& ProcessJobLogCapture();

}  // namespace dapple

#define DAPPLE_LOG_DEBUG(...) SPDLOG_DEBUG(__VA_ARGS__)
#define DAPPLE_LOG_INFO(...) SPDLOG_INFO(__VA_ARGS__)
#define DAPPLE_LOG_WARN(...) SPDLOG_WARN(__VA_ARGS__)
#define DAPPLE_LOG_ERROR(...) SPDLOG_ERROR(__VA_ARGS__)

#endif  // DAPPLE_COMMON_LOGGING_H_
