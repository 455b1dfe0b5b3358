// UTF-8 structure (RFC 3629) shared by every role: dapplectl's checks of what it sends
// (dapplectl/utf8_text.h) and the text the workers report for display (a language model's
// generated sample: raw bytes that need not be UTF-8, while protobuf `string` fields must be).
// Pure functions; thread-safe.
#ifndef DAPPLE_COMMON_UTF8_H_
#define DAPPLE_COMMON_UTF8_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace dapple {

// Length (1 to 4) of the well-formed UTF-8 sequence that starts at text[i], or 0 when the bytes
// there are not one: a continuation byte, C0 / C1 (overlong forms), F5..FF, a surrogate, a code
// point above U+10FFFF or a sequence cut off by the end (RFC 3629, section 4). Requires
// i < text.size().
size_t Utf8SequenceLength(absl::string_view text, size_t i);

// U+FFFD REPLACEMENT CHARACTER, in UTF-8.
inline constexpr char kReplacementCharacter[] = "\xEF\xBF\xBD";

// `bytes` as text a terminal can show: well-formed UTF-8 sequences are kept, except control
// characters (C0 other than tab and line feed, DEL, and C1 U+0080..U+009F: a carriage return or
// an escape sequence would redraw the terminal); every byte that does not start a well-formed
// sequence and every such control character becomes U+FFFD. The result is valid UTF-8 of at most
// `max_bytes` bytes: it ends before the first character that would not fit (never inside one).
// Valid text without those controls is returned unchanged when it fits.
std::string DisplayText(absl::string_view bytes, size_t max_bytes);

// `text` to quote in a one-line message: valid UTF-8 in which what a terminal would not show as
// written is escaped: control characters (C0, DEL) and bytes that do not start a well-formed
// sequence as \xNN; C1 controls, the line and paragraph separators U+2028 / U+2029 and the
// invisible format characters (soft hyphen U+00AD, zero-width and direction marks U+200B..U+200F,
// bidirectional embeddings and overrides U+202A..U+202E, U+2060..U+2064, isolates
// U+2066..U+2069, the byte order mark U+FEFF: a U+202E in a quoted name reversed the rest of the
// line) as \uNNNN. Everything else is copied unchanged.
std::string QuotableText(absl::string_view text);

}  // namespace dapple

#endif  // DAPPLE_COMMON_UTF8_H_
