#include "dapplectl/format.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace dapple::ctl {
namespace {

std::string StripPrefix(const std::string& name, absl::string_view prefix, int value) {
  if (name.empty()) return absl::StrCat("STATE_", value);
  if (absl::StartsWith(name, prefix)) return name.substr(prefix.size());
  return name;
}

}  // namespace

std::string JobStateName(v1::JobState state) {
  // JobState_Name returns "" for numbers the generated code does not know (a newer server).
  return StripPrefix(v1::JobState_IsValid(state) ? v1::JobState_Name(state) : std::string(),
                     "JOB_STATE_", static_cast<int>(state));
}

std::string WorkerStateName(v1::WorkerState state) {
  return StripPrefix(v1::WorkerState_IsValid(state) ? v1::WorkerState_Name(state) : std::string(),
                     "WORKER_STATE_", static_cast<int>(state));
}

bool IsTerminal(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

std::string FormatClock(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "-";
  const int64_t total = std::llround(seconds);
  const int64_t h = total / 3600;
  const int64_t m = (total / 60) % 60;
  const int64_t s = total % 60;
  if (h > 0) return absl::StrFormat("%d:%02d:%02d", h, m, s);
  return absl::StrFormat("%d:%02d", m, s);
}

std::string FormatAge(double seconds) {
  if (std::isnan(seconds)) return "-";
  if (seconds < 0) seconds = 0;
  if (seconds < 60) return absl::StrCat(static_cast<int64_t>(seconds), "s");
  if (seconds < 3600) return absl::StrCat(static_cast<int64_t>(seconds / 60), "m");
  if (seconds < 86400) return absl::StrCat(static_cast<int64_t>(seconds / 3600), "h");
  if (!std::isfinite(seconds)) return "-";
  return absl::StrCat(static_cast<int64_t>(seconds / 86400), "d");
}

std::string FormatRemaining(double seconds) {
  if (!std::isfinite(seconds)) return "-";
  const int64_t total = std::max<int64_t>(0, std::llround(seconds));
  // Each unit's threshold is where the nearest count of the next unit is 1.
  if (total < 60) return absl::StrCat(total, "s");
  if (total < 3600 - 30) return absl::StrCat(std::max<int64_t>(1, (total + 30) / 60), "m");
  if (total < 86400 - 1800) return absl::StrCat((total + 1800) / 3600, "h");
  return absl::StrCat((total + 43200) / 86400, "d");
}

std::string FormatPercent(double fraction) { return absl::StrFormat("%.2f%%", fraction * 100.0); }

std::string FormatLoss(double loss) {
  if (std::isnan(loss)) return "nan";
  if (std::isinf(loss)) return loss > 0 ? "inf" : "-inf";
  return absl::StrFormat("%.4f", loss);
}

std::string FormatRate(double samples_per_second) {
  if (samples_per_second >= 100) return absl::StrFormat("%.0f", samples_per_second);
  return absl::StrFormat("%.1f", samples_per_second);
}

std::string FormatSteps(int64_t step, int64_t total_steps) {
  if (total_steps > 0) return absl::StrCat(step, "/", total_steps);
  return absl::StrCat(step);
}

namespace {

// The binary unit for `bytes` (>= 1024) and its size: switched before rounding would print
// "1024.0 KiB".
const char* BinaryUnit(int64_t bytes, double* divisor) {
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  *divisor = 1024;
  int unit = 0;
  while (unit < 3 && static_cast<double>(bytes) / *divisor >= 1023.95) {
    *divisor *= 1024;
    ++unit;
  }
  return units[unit];
}

}  // namespace

std::string FormatBytes(int64_t bytes) {
  if (bytes < 0) return "-";
  if (bytes < 1024) return absl::StrCat(bytes, bytes == 1 ? " byte" : " bytes");
  double divisor = 1;
  const char* unit = BinaryUnit(bytes, &divisor);
  return absl::StrFormat("%.1f %s", static_cast<double>(bytes) / divisor, unit);
}

std::string FormatByteList(const std::vector<int64_t>& bytes) {
  if (bytes.empty()) return "-";
  std::vector<std::string> values;
  for (int64_t b : bytes) values.push_back(FormatBytes(b));
  return absl::StrJoin(values, ", ");
}

}  // namespace dapple::ctl
