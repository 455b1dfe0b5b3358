#include "common/utf8.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dapple {

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

namespace {

// C0 controls other than tab and line feed, DEL, and the C1 controls (U+0080..U+009F, encoded
// C2 80..C2 9F) of the sequence of `n` bytes at text[i].
bool IsHiddenControl(absl::string_view text, size_t i, size_t n) {
  const uint8_t b0 = static_cast<uint8_t>(text[i]);
  if (n == 1) return (b0 < 0x20 && b0 != '\t' && b0 != '\n') || b0 == 0x7F;
  return n == 2 && b0 == 0xC2 && static_cast<uint8_t>(text[i + 1]) < 0xA0;
}

}  // namespace

std::string DisplayText(absl::string_view bytes, size_t max_bytes) {
  std::string out;
  out.reserve(std::min(bytes.size(), max_bytes));
  const absl::string_view replacement(kReplacementCharacter);
  for (size_t i = 0; i < bytes.size();) {
    const size_t n = Utf8SequenceLength(bytes, i);
    // A bad byte is replaced on its own; the next byte starts the next attempt.
    const bool keep = n > 0 && !IsHiddenControl(bytes, i, n);
    const absl::string_view piece = keep ? bytes.substr(i, n) : replacement;
    if (out.size() + piece.size() > max_bytes) break;
    out.append(piece.data(), piece.size());
    i += keep ? n : (n > 0 ? n : 1);
  }
  return out;
}

namespace {

// The code point of the well-formed sequence of `length` bytes at text[i].
int32_t CodePoint(absl::string_view text, size_t i, size_t length) {
  const auto at = [&](size_t k) { return static_cast<uint8_t>(text[i + k]); };
  if (length == 1) return at(0);
  int32_t cp = at(0) & (0x7f >> length);
  for (size_t k = 1; k < length; ++k) cp = (cp << 6) | (at(k) & 0x3f);
  return cp;
}

bool Invisible(int32_t cp) {
  return (cp >= 0x80 && cp <= 0x9f) || cp == 0xad || (cp >= 0x200b && cp <= 0x200f) ||
         cp == 0x2028 || cp == 0x2029 || (cp >= 0x202a && cp <= 0x202e) ||
         (cp >= 0x2060 && cp <= 0x2064) || (cp >= 0x2066 && cp <= 0x2069) || cp == 0xfeff;
}

}  // namespace

std::string QuotableText(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t length = Utf8SequenceLength(text, i);
    const int32_t cp = length == 0 ? -1 : CodePoint(text, i, length);
    if (cp < 0x20 || cp == 0x7f) {
      absl::StrAppend(&out, absl::StrFormat("\\x%02x", static_cast<unsigned char>(text[i])));
      i += 1;
      continue;
    }
    if (Invisible(cp)) {
      absl::StrAppend(&out, absl::StrFormat("\\u%04x", cp));
    } else {
      out.append(text.data() + i, length);
    }
    i += length;
  }
  return out;
}

}  // namespace dapple
