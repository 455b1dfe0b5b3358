// Byte counts in messages: an adaptive binary unit with three significant digits ("812 KiB",
// "1.03 GiB", "512 B"), and a pair of them printed apart when they differ. Pure; thread-safe.
#ifndef DAPPLE_COMMON_PROFILE_FORMAT_BYTES_H_
#define DAPPLE_COMMON_PROFILE_FORMAT_BYTES_H_

#include <cstdint>
#include <string>
#include <utility>

namespace dapple::profile {

// `bytes` in the largest of B, KiB, MiB, GiB, TiB, PiB, EiB that keeps the number >= 1, with
// three significant digits: "0 B", "512 B", "1.00 KiB", "812 KiB", "1.03 GiB", "16.0 GiB".
// Counts under 1 KiB are exact; a negative count gets a leading '-'.
std::string FormatBytes(int64_t bytes);

// FormatBytes(a) and FormatBytes(b), except that when a != b would print the same, both get
// more decimals in a's unit until they differ ("16.0001 GiB" vs "16.0000 GiB"), or, past four
// extra decimals, the exact counts ("16.0 GiB (17179869185 B)"). For messages that compare two
// sizes ("needs X but devices have Y").
std::pair<std::string, std::string> FormatBytesApart(int64_t a, int64_t b);

}  // namespace dapple::profile

#endif  // DAPPLE_COMMON_PROFILE_FORMAT_BYTES_H_
