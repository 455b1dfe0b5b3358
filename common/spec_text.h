// Text helpers of the job spec code (job_spec_parse.cc, job_spec_validate.cc, job_spec_yaml.cc,
// and common/model's layer parameter text): formatting values for messages and YAML, and keeping
// quoted user text on one line. An internal header of common/: nothing outside common/ includes
// it; the public interface is common/job_spec.h. All functions are pure and thread-safe.
#ifndef DAPPLE_COMMON_SPEC_TEXT_H_
#define DAPPLE_COMMON_SPEC_TEXT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/edit_distance.h"  // EditDistance, for the parsers' suggestions
#include "dapple/v1/job.pb.h"
#include "google/protobuf/repeated_field.h"

namespace dapple::job_spec_internal {

// A list of names (known keys, datasets, schedules, ...), usually a constexpr array.
using Names = absl::Span<const absl::string_view>;

// Whether `value` is one of `list` (exact, case-sensitive).
bool Contains(Names list, absl::string_view value);

// Shortest text that reads back to the same double (so messages say 0.05, not 0.050000000000000003,
// and JobSpecToYaml round-trips exactly). NaN and infinities are "nan", "inf" and "-inf".
std::string FormatDouble(double value);

// "[1, 28, 28]"; "[]" for an empty shape.
std::string FormatShape(const google::protobuf::RepeatedField<int64_t>& shape);
std::string FormatShape(const std::vector<int64_t>& shape);

// "1 stage", "2 stages": counts in messages take the singular for 1.
std::string Count(int64_t count, absl::string_view one, absl::string_view many);

// The UTF-8 character at text[pos]: its code point and byte length, or {-1, 1} for a byte that
// does not start a well-formed sequence (stray continuation, overlong form, surrogate, > U+10FFFF,
// truncated). Requires pos < text.size().
struct Utf8Char {
  int32_t code_point;
  size_t length;
};
Utf8Char DecodeUtf8(absl::string_view text, size_t pos);

// Messages are one line of valid UTF-8 even when they quote user text, and show what they quote:
// common/utf8.h QuotableText (control characters, line separators and invisible format
// characters escaped as \xNN / \uNNNN, bytes that are not UTF-8 as \xNN).
std::string OneLine(absl::string_view message);

// A stage's layer range as written in YAML and in messages: "[first_layer, last_layer]".
std::string RangeText(const v1::StageRange& r);

// The divisors of `n` (> 0) for a fix that needs one: all of them in increasing order when
// there are at most 12 ("1, 2, 4, 8, 16, 32, 64, 128, 256"), else the ones nearest to `near`
// between the first and the last ("1, ..., 40, 42, 44, 45, 48, 52, ..., 720720").
std::string DivisorsText(int64_t n, int64_t near);

}  // namespace dapple::job_spec_internal

#endif  // DAPPLE_COMMON_SPEC_TEXT_H_
