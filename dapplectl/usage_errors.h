// dapplectl's words for CLI11's parse errors: what was wrong with the command line, in terms of
// the command the user typed, instead of the parser library's phrasing ("--tail: At Most 1
// required but received 2", "The following arguments were not expected: c b").
#ifndef DAPPLE_DAPPLECTL_USAGE_ERRORS_H_
#define DAPPLE_DAPPLECTL_USAGE_ERRORS_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace dapple::ctl {

// The message for a CLI11 parse error. `error_name` is the error's CLI11 class ("ExtrasError",
// "ArgumentMismatch", "RequiredError"; anything else is left as it is; by type: get_name() of an
// ExtrasError can be the subcommand's name), `what` its what(), `command` the subcommand that
// was being parsed ("get"; empty before one). Known shapes are rewritten:
//   ArgumentMismatch "--tail: At Most 1 required but received 2"
//     -> "--tail given 2 times: give it once"
//   ArgumentMismatch "--rank: 1 required STAGE/REPLICA missing" -> "--rank needs a value: --rank
//   STAGE/REPLICA" ExtrasError "The following arguments were not expected: c b"
//     -> "get: unexpected arguments b, c" (in the order typed; "unknown flag --bogus" for a flag)
//   RequiredError "JOB is required" -> "get needs JOB"
// Anything else is `what` unchanged. Always ends with the help to read: " (see dapplectl get
// --help)", or " (see dapplectl --help)" without a command. Pure; thread-safe.
// `suggestion` (SuggestFlag's answer for an unknown flag; "" : none) is added as "; did you
// mean --tail?" before the help: "logs: unknown flag --tial; did you mean --tail? (see dapplectl
// logs --help)".
std::string UsageErrorText(absl::string_view error_name, absl::string_view what,
                           absl::string_view command, absl::string_view suggestion = "");

// The largest edit distance at which SuggestFlag proposes a flag.
inline constexpr size_t kMaxSuggestionDistance = 2;

// The flag of `flags` ("--tail", "-o") closest to `unknown` ("--tial", "--tail=3": the part
// before '=' is compared) by edit distance (insertions, deletions, substitutions), if that is at
// most kMaxSuggestionDistance; the first of equally close ones; "" when none is close. Also used
// for a command group's subcommand names ("tokn" -> "token"). Pure.
std::string SuggestFlag(absl::string_view unknown, const std::vector<std::string>& flags);

}  // namespace dapple::ctl

#endif  // DAPPLE_DAPPLECTL_USAGE_ERRORS_H_
