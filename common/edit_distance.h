// The edit distance behind every "did you mean" suggestion: a job spec's misspelt keys and
// values (common/job_spec_parse*.cc) and dapplectl's unknown flags and commands
// (dapplectl/usage_errors.cc). Pure and thread-safe.
#ifndef DAPPLE_COMMON_EDIT_DISTANCE_H_
#define DAPPLE_COMMON_EDIT_DISTANCE_H_

#include <cstddef>

#include "absl/strings/string_view.h"

namespace dapple {

// The Levenshtein distance between `a` and `b`: the fewest insertions, deletions and
// substitutions of bytes that turn one into the other. O(|a| |b|) time, O(|b|) memory: meant for
// short names.
size_t EditDistance(absl::string_view a, absl::string_view b);

}  // namespace dapple

#endif  // DAPPLE_COMMON_EDIT_DISTANCE_H_
