// Validation of dapplectl's flag values and arguments (and of the environment variables that
// stand in for them), done before anything is sent, so that a bad value is a usage error that names
// the flag and the rule rather than a gRPC error or a CLI11 message. Pure functions; thread-safe.
#ifndef DAPPLE_DAPPLECTL_FLAG_VALUES_H_
#define DAPPLE_DAPPLECTL_FLAG_VALUES_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace dapple::ctl {

// The largest value of a duration flag (--timeout), in seconds: one day. Larger values are
// surely a mistake, and far larger ones would overflow the deadline's clock.
inline constexpr double kMaxFlagSeconds = 86400;

// Parses `text`, the value of the duration flag `flag` ("--timeout"): a decimal number of
// seconds ("10", "0.5", "1e2"), greater than 0 and at most kMaxFlagSeconds. Errors
// (kInvalidArgument): "--timeout must be a positive number of seconds, got \"abc\"" for
// anything else (0, negative, nan, inf, hex, trailing text); "--timeout must be at most 86400
// seconds (one day), got \"1e9\"".
absl::StatusOr<absl::Duration> ParsePositiveSeconds(absl::string_view flag, absl::string_view text);

// Parses `text`, the value of the count flag `flag` ("--global-batch"): a whole decimal number
// from 1 to `max`. Error (kInvalidArgument): "--global-batch must be a whole number from 1 to
// 1048576, got \"0\"".
absl::StatusOr<int64_t> ParsePositiveCount(absl::string_view flag, absl::string_view text,
                                           int64_t max);

// Checks that `address`, the value of `source` ("--coordinator" or "DAPPLE_COORDINATOR"), is
// HOST:PORT: HOST a name or IPv4 address (letters, digits, '-', '.', '_') or an IPv6 address
// in brackets ("[::1]:7600"), PORT a decimal number from 1 to 65535. Error (kInvalidArgument):
// "--coordinator must be HOST:PORT (e.g. 127.0.0.1:7600), got \"\" (empty)", the reason in
// parentheses: empty, no port, no host, the port, the character that is not allowed.
absl::Status CheckCoordinatorAddress(absl::string_view source, absl::string_view address);

// Checks a JOB argument (get, cancel, watch): an empty one would reach the coordinator as
// "no job " (an unknown job). Error (kInvalidArgument): "a job id must not be empty (e.g.
// job-3; see dapplectl list)". Other ids go to the coordinator, which knows which exist.
absl::Status CheckJobId(absl::string_view job_id);

// Checks the FILE argument of submit: "" would be reported as a file that cannot be read.
// Error (kInvalidArgument): "a job spec file name must not be empty".
absl::Status CheckSpecFileName(absl::string_view path);

// `value` in double quotes for an error message: invalid UTF-8 and control bytes as "\xHH",
// '"' and '\' escaped with '\'; valid UTF-8 ("café") stays as it is.
std::string QuoteValue(absl::string_view value);

}  // namespace dapple::ctl

#endif  // DAPPLE_DAPPLECTL_FLAG_VALUES_H_
