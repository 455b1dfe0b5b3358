#include "dapplectl/admin_args.h"

#include <cstdlib>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dapplectl/flag_values.h"

namespace dapple::ctl {
namespace {

bool IsQuotaDeviceType(absl::string_view type) {
  for (const absl::string_view t : kQuotaDeviceTypes) {
    if (type == t) return true;
  }
  return false;
}

std::string DeviceTypeList() {
  std::vector<std::string> types(std::begin(kQuotaDeviceTypes), std::end(kQuotaDeviceTypes));
  return absl::StrJoin(types, ", ");
}

bool AllDigits(absl::string_view s) {
  if (s.empty()) return false;
  for (const char c : s) {
    if (!absl::ascii_isdigit(c)) return false;
  }
  return true;
}

}  // namespace

absl::Status CheckAccountName(absl::string_view what, absl::string_view name) {
  bool ok = !name.empty() && name.size() <= 63 && absl::ascii_islower(name.front());
  for (const char c : name) {
    ok = ok && (absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-');
  }
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, " ", QuoteValue(name),
                   " must be 1-63 characters of a-z, 0-9 and -, starting with a letter"));
}

absl::Status CheckTokenId(std::string* id_in_out) {
  // "dpl_<id>", as messages and whoami print it, names the same token.
  absl::string_view id = *id_in_out;
  if (absl::StartsWith(id, "dpl_") && id.size() == 4 + 16) {
    *id_in_out = std::string(id.substr(4));
    id = *id_in_out;
  }
  if (absl::StartsWith(id, "dpl_")) {
    return absl::InvalidArgumentError(
        "give the token's id (16 hex digits, see dapplectl admin token list), not the token "
        "itself: a token is a secret");
  }
  bool ok = id.size() == 16;
  for (const char c : id) ok = ok && absl::ascii_isxdigit(c);
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "a token id must be 16 hex digits (e.g. 0123456789abcdef; see dapplectl admin token "
      "list), got ",
      QuoteValue(id)));
}

absl::StatusOr<std::vector<std::pair<std::string, int64_t>>> ParseDeviceCounts(
    absl::string_view flag, const std::vector<std::string>& values) {
  std::vector<std::pair<std::string, int64_t>> counts;
  for (const std::string& value : values) {
    const size_t eq = value.find('=');
    if (eq == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, " must be TYPE=N (e.g. cpu=4), got ", QuoteValue(value)));
    }
    const std::string type = value.substr(0, eq);
    const std::string n = value.substr(eq + 1);
    if (!IsQuotaDeviceType(type)) {
      return absl::InvalidArgumentError(absl::StrCat(flag, " ", QuoteValue(value),
                                                     ": device type must be one of ",
                                                     DeviceTypeList(), ", got ", QuoteValue(type)));
    }
    int64_t count = -1;
    if (!AllDigits(n) || n.size() > 7 || !absl::SimpleAtoi(n, &count) || count > kMaxQuotaDevices) {
      return absl::InvalidArgumentError(absl::StrCat(flag, " ", QuoteValue(value),
                                                     ": N must be a whole number from 0 to ",
                                                     kMaxQuotaDevices, ", got ", QuoteValue(n)));
    }
    for (const auto& [seen, unused] : counts) {
      if (seen == type) {
        return absl::InvalidArgumentError(
            absl::StrCat(flag, " gives ", type, " twice: give each device type once"));
      }
    }
    counts.emplace_back(type, count);
  }
  return counts;
}

absl::StatusOr<int64_t> ParseTtlSeconds(absl::string_view flag, absl::string_view text) {
  const auto refuse = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, " must be a duration like 30m, 24h or 7d (a whole number and s, m, h or d), got ",
        QuoteValue(text)));
  };
  if (text.size() < 2 || text.size() > 12) return refuse();
  const char unit = text.back();
  const absl::string_view number = text.substr(0, text.size() - 1);
  int64_t per = 0;
  switch (unit) {
    case 's':
      per = 1;
      break;
    case 'm':
      per = 60;
      break;
    case 'h':
      per = 3600;
      break;
    case 'd':
      per = 86400;
      break;
    default:
      return refuse();
  }
  int64_t value = 0;
  if (!AllDigits(number) || !absl::SimpleAtoi(number, &value)) return refuse();
  if (value == 0) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " must be greater than 0, got ",
                                                   QuoteValue(text), " (leave ", flag,
                                                   " out for a token that never expires)"));
  }
  if (value > kMaxTtlSeconds / per) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " must be at most 3650d (ten years), got ", QuoteValue(text)));
  }
  return value * per;
}

absl::StatusOr<double> ParseWeight(absl::string_view flag, absl::string_view text) {
  // ParsePositiveSeconds' number syntax, without its unit in the message.
  absl::StatusOr<absl::Duration> seconds = ParsePositiveSeconds(flag, text);
  const double value = seconds.ok() ? absl::ToDoubleSeconds(*seconds) : 0;
  if (!seconds.ok() || value > 1000) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, " must be a number greater than 0 and at most 1000, got ", QuoteValue(text)));
  }
  return value;
}

bool AnyQuotaFlag(const QuotaFlags& flags) {
  return flags.cohort.has_value() || !flags.nominal.empty() || !flags.borrowing_limit.empty() ||
         !flags.lending_limit.empty() || flags.weight.has_value() ||
         flags.max_queued_jobs.has_value();
}

absl::StatusOr<v1::TenantQuota> BuildTenantQuota(const QuotaFlags& flags, bool cohort_kept) {
  v1::TenantQuota quota;
  const bool in_cohort = flags.cohort.has_value() && *flags.cohort != kNoCohort;
  if (in_cohort) {
    if (absl::Status s = CheckAccountName("--cohort", *flags.cohort); !s.ok()) return s;
    quota.set_cohort(*flags.cohort);
  }
  absl::StatusOr<std::vector<std::pair<std::string, int64_t>>> nominal =
      ParseDeviceCounts("--nominal", flags.nominal);
  if (!nominal.ok()) return nominal.status();
  absl::StatusOr<std::vector<std::pair<std::string, int64_t>>> borrowing =
      ParseDeviceCounts("--borrowing-limit", flags.borrowing_limit);
  if (!borrowing.ok()) return borrowing.status();
  absl::StatusOr<std::vector<std::pair<std::string, int64_t>>> lending =
      ParseDeviceCounts("--lending-limit", flags.lending_limit);
  if (!lending.ok()) return lending.status();
  for (const char* flag : {"--borrowing-limit", "--lending-limit"}) {
    const bool given = flag[2] == 'b' ? !borrowing->empty() : !lending->empty();
    if (given && !in_cohort && !(cohort_kept && !flags.cohort.has_value())) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag, " needs --cohort: a tenant outside a cohort neither borrows nor lends"));
    }
  }
  const std::map<std::string, int64_t> nominal_of(nominal->begin(), nominal->end());
  const std::map<std::string, int64_t> borrowing_of(borrowing->begin(), borrowing->end());
  const std::map<std::string, int64_t> lending_of(lending->begin(), lending->end());
  for (const auto& [type, limit] : lending_of) {
    const auto it = nominal_of.find(type);
    const int64_t own = it == nominal_of.end() ? 0 : it->second;
    if (limit > own) {
      return absl::InvalidArgumentError(
          absl::StrCat("--lending-limit ", type, "=", limit, " is above --nominal ", type, "=", own,
                       ": a tenant lends only its own nominal quota"));
    }
  }
  for (const absl::string_view view : kQuotaDeviceTypes) {
    const std::string type(view);
    const bool named =
        nominal_of.count(type) + borrowing_of.count(type) + lending_of.count(type) > 0;
    if (!named) continue;
    v1::DeviceQuota* d = quota.add_devices();
    d->set_device_type(type);
    if (const auto it = nominal_of.find(type); it != nominal_of.end()) d->set_nominal(it->second);
    if (const auto it = borrowing_of.find(type); it != borrowing_of.end()) {
      d->set_borrowing_limit(it->second);
    }
    if (const auto it = lending_of.find(type); it != lending_of.end()) {
      d->set_lending_limit(it->second);
    }
  }
  if (flags.weight.has_value()) {
    absl::StatusOr<double> weight = ParseWeight("--weight", *flags.weight);
    if (!weight.ok()) return weight.status();
    quota.set_weight(*weight);
  }
  if (flags.max_queued_jobs.has_value()) {
    absl::StatusOr<int64_t> max =
        ParsePositiveCount("--max-queued-jobs", *flags.max_queued_jobs, 1'000'000);
    if (!max.ok()) return max.status();
    quota.set_max_queued_jobs(static_cast<int32_t>(*max));
  }
  return quota;
}

}  // namespace dapple::ctl
