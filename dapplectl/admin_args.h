// The values of `dapplectl admin ...`'s flags and arguments, checked before anything is sent:
// a bad one is a usage error (kInvalidArgument, exit 2) that names the flag, the value and the
// rule. Pure functions; thread-safe.
#ifndef DAPPLE_DAPPLECTL_ADMIN_ARGS_H_
#define DAPPLE_DAPPLECTL_ADMIN_ARGS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/job_spec_internal.h"
#include "dapple/v1/admin.pb.h"

namespace dapple::ctl {

// The device types a quota counts (common/job_spec_internal.h, as the coordinator checks them).
using job_spec_internal::kQuotaDeviceTypes;

// The most devices of one type in a TYPE=N value.
inline constexpr int64_t kMaxQuotaDevices = 1'000'000;

// The longest --ttl: ten years.
inline constexpr int64_t kMaxTtlSeconds = int64_t{3650} * 86400;

// Checks a tenant, cohort or user name: 1-63 characters of [a-z0-9-], starting with a letter
// (the coordinator's rule, coordinator/auth/credential_store.h). `what` names it in the error:
// "tenant name \"Team_A\" must be 1-63 characters of a-z, 0-9 and -, starting with a letter".
absl::Status CheckAccountName(absl::string_view what, absl::string_view name);

// Checks a token id (TokenInfo.id): 16 hex digits, e.g. 0123456789abcdef (`admin token list`
// shows them), or "dpl_" and those digits as messages print it (*id_in_out then becomes the
// digits). A whole token ("dpl_<id>_<secret>") is refused without echoing it: it is a secret.
absl::Status CheckTokenId(std::string* id_in_out);

// Parses the values of `flag` ("--nominal"), each TYPE=N or several joined by ',' (CLI11 splits
// them): TYPE one of kQuotaDeviceTypes, N a whole number from 0 to kMaxQuotaDevices, each TYPE
// once. Errors name the flag, the value and the rule: "--nominal must be TYPE=N (e.g. cpu=4),
// got \"cpu\"", "--nominal cpu=4: device type must be one of cpu, cuda, emulated, got
// \"gpu\"",
// "--nominal gives cpu twice".
absl::StatusOr<std::vector<std::pair<std::string, int64_t>>> ParseDeviceCounts(
    absl::string_view flag, const std::vector<std::string>& values);

// Parses --ttl: a whole number and a unit, s, m, h or d ("90s", "30m", "24h", "7d"), greater
// than 0 and at most kMaxTtlSeconds. Returns seconds. Error: "--ttl must be a duration like 30m,
// 24h or 7d (a whole number and s, m, h or d), got \"1 day\"".
absl::StatusOr<int64_t> ParseTtlSeconds(absl::string_view flag, absl::string_view text);

// Parses --weight: a decimal number greater than 0 and at most 1000.
absl::StatusOr<double> ParseWeight(absl::string_view flag, absl::string_view text);

// `--cohort none`: no cohort (so no cohort may be named "none").
inline constexpr char kNoCohort[] = "none";

// The quota flags of `admin tenant create` and `admin quota set`, as given (nullopt or empty:
// not given).
struct QuotaFlags {
  std::optional<std::string> cohort;
  std::vector<std::string> nominal;          // --nominal TYPE=N ...
  std::vector<std::string> borrowing_limit;  // --borrowing-limit TYPE=N ...
  std::vector<std::string> lending_limit;    // --lending-limit TYPE=N ...
  std::optional<std::string> weight;
  std::optional<std::string> max_queued_jobs;
};

// True when any quota flag was given.
bool AnyQuotaFlag(const QuotaFlags& flags);

// The TenantQuota of `flags`: one DeviceQuota per type named by any of the three device flags
// (nominal 0 when only a limit names it), in the order kQuotaDeviceTypes. Besides the values'
// own rules: a lending limit above the type's nominal quota ("--lending-limit cpu=8 is above
// --nominal cpu=4: a tenant lends only its own quota") and a borrowing or lending limit without
// --cohort ("--borrowing-limit needs --cohort: a tenant outside a cohort neither borrows nor
// lends") are refused; --cohort must be a name (CheckAccountName) or "none" (no cohort: the
// quota's cohort stays "", and limits are refused as without --cohort).
// `cohort_kept` (quota set): without --cohort the tenant keeps the cohort it is in, which the
// caller checks the limits against once it has read it.
absl::StatusOr<v1::TenantQuota> BuildTenantQuota(const QuotaFlags& flags, bool cohort_kept = false);

}  // namespace dapple::ctl

#endif  // DAPPLE_DAPPLECTL_ADMIN_ARGS_H_
