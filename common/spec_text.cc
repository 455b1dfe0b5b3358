// Text helpers of the job spec code: see spec_text.h.
#include "common/spec_text.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/utf8.h"

namespace dapple::job_spec_internal {

bool Contains(Names list, absl::string_view value) {
  for (absl::string_view item : list) {
    if (item == value) return true;
  }
  return false;
}

std::string FormatDouble(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  if (ec != std::errc()) return absl::StrFormat("%.17g", value);
  return std::string(buffer, end);
}

std::string FormatShape(const google::protobuf::RepeatedField<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}
std::string FormatShape(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

std::string Count(int64_t count, absl::string_view one, absl::string_view many) {
  return absl::StrCat(count, " ", count == 1 ? one : many);
}

Utf8Char DecodeUtf8(absl::string_view text, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(pos);
  if (lead < 0x80) return {lead, 1};
  size_t length = 0;
  int32_t cp = 0;
  int32_t min = 0;
  if ((lead & 0xe0) == 0xc0) {
    length = 2, cp = lead & 0x1f, min = 0x80;
  } else if ((lead & 0xf0) == 0xe0) {
    length = 3, cp = lead & 0x0f, min = 0x800;
  } else if ((lead & 0xf8) == 0xf0) {
    length = 4, cp = lead & 0x07, min = 0x10000;
  } else {
    return {-1, 1};
  }
  if (pos + length > text.size()) return {-1, 1};
  for (size_t i = 1; i < length; ++i) {
    if ((byte(pos + i) & 0xc0) != 0x80) return {-1, 1};
    cp = (cp << 6) | (byte(pos + i) & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return {-1, 1};
  return {cp, length};
}

std::string OneLine(absl::string_view message) { return QuotableText(message); }

std::string RangeText(const v1::StageRange& r) {
  return absl::StrFormat("[%d, %d]", r.first_layer(), r.last_layer());
}

std::string DivisorsText(int64_t n, int64_t near) {
  constexpr size_t kAll = 12;  // list every divisor up to this many
  constexpr size_t kSide = 3;  // else this many on each side of `near`
  std::vector<int64_t> low, high;
  for (int64_t d = 1; d <= n / d; ++d) {
    if (n % d != 0) continue;
    low.push_back(d);
    if (d != n / d) high.push_back(n / d);
  }
  std::vector<int64_t> all(low.begin(), low.end());
  all.insert(all.end(), high.rbegin(), high.rend());
  if (all.size() <= kAll) return absl::StrJoin(all, ", ");
  const size_t at = std::lower_bound(all.begin(), all.end(), near) - all.begin();
  // No "..." for a single divisor left out: it is shown instead.
  size_t first = at > kSide ? at - kSide : 0;
  if (first == 1) first = 0;
  size_t last = std::min(all.size(), at + kSide);  // exclusive
  if (last + 1 == all.size()) last = all.size();
  std::vector<std::string> parts;
  if (first > 0) parts = {"1", "..."};
  for (size_t i = first; i < last; ++i) parts.push_back(absl::StrCat(all[i]));
  if (last < all.size()) {
    parts.push_back("...");
    parts.push_back(absl::StrCat(n));
  }
  return absl::StrJoin(parts, ", ");
}

}  // namespace dapple::job_spec_internal
