// UTF-8 checks for what dapplectl sends: protobuf `string` fields must hold valid UTF-8 (a
// message with invalid bytes fails to parse on the coordinator and comes back as a bare
// INTERNAL), so dapplectl checks job specs before sending them and escapes names it only
// passes along. Pure functions; thread-safe.
#ifndef DAPPLE_DAPPLECTL_UTF8_TEXT_H_
#define DAPPLE_DAPPLECTL_UTF8_TEXT_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace dapple::ctl {

// The first byte that makes a text not UTF-8 text, and where it is.
struct TextFault {
  enum class Kind {
    kInvalidUtf8,  // starts a byte sequence that is not UTF-8 (bad lead or continuation
                   // byte, overlong form, surrogate, > U+10FFFF, cut off at the end)
    kControl,      // a C0 control byte other than tab, LF and CR, or DEL (0x7F): YAML does
                   // not allow them, and they mark binary data
  };
  Kind kind = Kind::kInvalidUtf8;
  uint8_t byte = 0;   // the offending byte (the first byte of a bad sequence)
  size_t offset = 0;  // its byte offset in the text
  int line = 1;       // 1-based; lines end at '\n'
  int column = 1;     // 1-based, in characters (code points) since the line's start
};

// The first fault of `text` as text (see TextFault), or nullopt for valid UTF-8 text.
std::optional<TextFault> FindTextFault(absl::string_view text);

// True when `text` is valid UTF-8 (control bytes allowed): what a protobuf string field takes.
bool IsValidUtf8(absl::string_view text);

// "invalid byte 0xE9 at line 3, column 5" / "control byte 0x00 at line 1, column 1".
std::string DescribeTextFault(const TextFault& fault);

// `text` with every byte that does not belong to a valid UTF-8 sequence replaced by "\xHH"
// (upper-case hex), so the result is valid UTF-8: "caf\xE9.yaml". Valid text is returned
// unchanged (control bytes included).
std::string EscapeInvalidUtf8(absl::string_view text);

}  // namespace dapple::ctl

#endif  // DAPPLE_DAPPLECTL_UTF8_TEXT_H_
