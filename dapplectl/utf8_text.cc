#include "dapplectl/utf8_text.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/utf8.h"

namespace dapple::ctl {
namespace {

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
