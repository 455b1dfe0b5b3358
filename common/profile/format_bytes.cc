#include "common/profile/format_bytes.h"

#include <cmath>
#include <cstdint>
#include <iterator>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dapple::profile {
namespace {

constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
constexpr int kMaxExtraDecimals = 4;

// The unit index for `bytes` and the value in it. Unsigned magnitude so INT64_MIN works.
std::pair<int, double> Scale(int64_t bytes) {
  uint64_t magnitude = bytes < 0 ? 0 - static_cast<uint64_t>(bytes) : static_cast<uint64_t>(bytes);
  int unit = 0;
  while (unit + 1 < static_cast<int>(std::size(kUnits)) &&
         magnitude >= (uint64_t{1024} << (10 * unit))) {
    ++unit;
  }
  const double value = static_cast<double>(bytes) / static_cast<double>(uint64_t{1} << (10 * unit));
  return {unit, value};
}

// Decimals that give three significant digits for |value| in [1, 1024).
int Decimals(double value) {
  const double magnitude = std::abs(value);
  // Round first: 9.996 prints as "10.0", not "10.00".
  if (std::round(magnitude * 100) < 1000) return 2;
  if (std::round(magnitude * 10) < 1000) return 1;
  return 0;
}

std::string InUnit(int64_t bytes, int unit, int decimals) {
  const double value = static_cast<double>(bytes) / static_cast<double>(uint64_t{1} << (10 * unit));
  return absl::StrFormat("%.*f %s", decimals, value, kUnits[unit]);
}

}  // namespace

std::string FormatBytes(int64_t bytes) {
  const auto [unit, value] = Scale(bytes);
  if (unit == 0) return absl::StrCat(bytes, " B");
  return InUnit(bytes, unit, Decimals(value));
}

std::pair<std::string, std::string> FormatBytesApart(int64_t a, int64_t b) {
  std::pair<std::string, std::string> out(FormatBytes(a), FormatBytes(b));
  if (a == b || out.first != out.second) return out;
  // Equal text means the same unit and value to three digits; widen both in that unit.
  const auto [unit, value] = Scale(a);
  const int decimals = Decimals(value);
  for (int extra = 1; extra <= kMaxExtraDecimals; ++extra) {
    std::pair<std::string, std::string> wider(InUnit(a, unit, decimals + extra),
                                              InUnit(b, unit, decimals + extra));
    if (wider.first != wider.second) return wider;
  }
  return {absl::StrCat(out.first, " (", a, " B)"), absl::StrCat(out.second, " (", b, " B)")};
}

}  // namespace dapple::profile
