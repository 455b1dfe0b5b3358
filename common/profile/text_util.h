// Small text helpers shared by the profile and cluster readers: decimal numbers without the
// surprises of strtod (no hex, inf, nan or leading spaces), quoting user text in one-line
// messages, and reading a whole file with a Status that names it. Pure except ReadTextFile;
// thread-safe.
#ifndef DAPPLE_COMMON_PROFILE_TEXT_UTIL_H_
#define DAPPLE_COMMON_PROFILE_TEXT_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dapple::profile {

// Length of the longest prefix of `text` that is a decimal number: [+-] digits [. digits]
// [e [+-] digits] (digits on at least one side of the point). 0 when there is none.
size_t DecimalPrefixLength(absl::string_view text);

// `text` as a number when all of it is a decimal number (DecimalPrefixLength == size);
// nullopt otherwise. The value may be +-infinity when it overflows a double.
std::optional<double> ParseDecimal(absl::string_view text);

// `text` in single quotes for an error message: control characters become \xNN so the message
// stays one line, and text longer than 60 bytes is cut with "...".
std::string Quote(absl::string_view text);

// The shortest decimal text that reads back as exactly `value` (std::to_chars).
std::string ShortestDouble(double value);

// The bytes of the regular file at `path`, at most `max_bytes` (> 0) of them. kNotFound /
// kPermissionDenied / kInvalidArgument (a directory; "<path>: not a regular file" for devices
// like /dev/zero, FIFOs and sockets) / kUnavailable (another read error), each naming the path;
// kResourceExhausted "<path>: <size> bytes is more than the <cap> limit (<max_bytes> bytes)"
// when the file is larger, checked before reading (its size); "<path>: grew past the <cap> limit
// (<max_bytes> bytes) while being read" when more bytes come than its size said (a file that
// grows, or /proc files, whose size is 0). Never blocks on a FIFO: it is opened non-blocking and
// refused.
absl::StatusOr<std::string> ReadTextFile(const std::string& path, int64_t max_bytes);

}  // namespace dapple::profile

#endif  // DAPPLE_COMMON_PROFILE_TEXT_UTIL_H_
