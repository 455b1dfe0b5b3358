#include "dapplectl/utf8_text.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dapple::ctl {
namespace {

// Length of the valid UTF-8 sequence at text[i], or 0 if the bytes there are not one
// (RFC 3629, section 4: the well-formed byte sequences table).
size_t Utf8SequenceLength(absl::string_view text, size_t i) {
  const auto at = [&](size_t k) { return static_cast<uint8_t>(text[k]); };
  const uint8_t b0 = at(i);
  if (b0 < 0x80) return 1;
  size_t n;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;  // no overlong forms
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;  // no overlong forms
    if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return 0;  // a continuation byte, C0/C1 (overlong), or F5..FF
  }
  if (i + n > text.size()) return 0;
  if (at(i + 1) < lo || at(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (at(i + k) < 0x80 || at(i + k) > 0xBF) return 0;
  }
  return n;
}

bool IsForbiddenControl(uint8_t b) {
  return (b < 0x20 && b != '\t' && b != '\n' && b != '\r') || b == 0x7F;
}

}  // namespace

std::optional<TextFault> FindTextFault(absl::string_view text) {
  int line = 1;
  int column = 1;
  for (size_t i = 0; i < text.size();) {
    const size_t n = Utf8SequenceLength(text, i);
    const uint8_t b = static_cast<uint8_t>(text[i]);
    if (n == 0 || (n == 1 && IsForbiddenControl(b))) {
      return TextFault{.kind = n == 0 ? TextFault::Kind::kInvalidUtf8 : TextFault::Kind::kControl,
                       .byte = b,
                       .offset = i,
                       .line = line,
                       .column = column};
    }
    if (b == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
    i += n;
  }
  return std::nullopt;
}

bool IsValidUtf8(absl::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const size_t n = Utf8SequenceLength(text, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string DescribeTextFault(const TextFault& fault) {
  return absl::StrFormat("%s byte 0x%02X at line %d, column %d",
                         fault.kind == TextFault::Kind::kControl ? "control" : "invalid",
                         fault.byte, fault.line, fault.column);
}

std::string EscapeInvalidUtf8(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t n = Utf8SequenceLength(text, i);
    if (n == 0) {
      absl::StrAppendFormat(&out, "\\x%02X", static_cast<uint8_t>(text[i]));
      ++i;
    } else {
      out.append(text.data() + i, n);
      i += n;
    }
  }
  return out;
}

}  // namespace dapple::ctl
