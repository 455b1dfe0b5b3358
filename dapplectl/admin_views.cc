#include "dapplectl/admin_views.h"

#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "dapplectl/format.h"
#include "dapplectl/text_table.h"

namespace dapple::ctl {
namespace {

std::string OrDash(const std::string& s) { return s.empty() ? "-" : s; }

std::string Age(int64_t then_unix_ms, int64_t now_unix_ms) {
  if (then_unix_ms <= 0) return "-";
  return FormatAge(static_cast<double>(now_unix_ms - then_unix_ms) / 1000.0);
}

// "KEY" padded so values line up in one column (views.cc's width).
void AddField(std::string* out, const std::string& key, const std::string& value) {
  constexpr size_t kKeyWidth = 14;
  std::string line = key;
  line.append(key.size() < kKeyWidth ? kKeyWidth - key.size() : 1, ' ');
  absl::StrAppend(out, line, value, "\n");
}

TextTable TenantTable() {
  return TextTable({"TENANT", "COHORT", "WEIGHT", "DEVICE", "NOMINAL", "BORROW LIMIT", "LEND LIMIT",
                    "IN USE", "BORROWED", "LENT", "QUEUED", "ADMITTED"});
}

// A limit's cell: its value, or what its absence means (admin.proto DeviceQuota).
std::string LimitCell(bool has, int64_t value, bool any_set, bool in_cohort,
                      const char* unset_everywhere) {
  if (has) return absl::StrCat(value);
  if (!in_cohort) return "-";
  return any_set ? "0" : unset_everywhere;
}

void AddTenantRows(const v1::Tenant& tenant, TextTable* table) {
  const v1::TenantQuota& quota = tenant.quota();
  const bool in_cohort = !quota.cohort().empty();
  bool any_borrowing = false;
  bool any_lending = false;
  for (const v1::DeviceQuota& d : quota.devices()) {
    any_borrowing |= d.has_borrowing_limit();
    any_lending |= d.has_lending_limit();
  }
  // Device types of the quota first (in its order), then any only in use.
  std::vector<std::string> types;
  std::map<std::string, const v1::DeviceQuota*> quota_of;
  std::map<std::string, const v1::DeviceUsage*> usage_of;
  for (const v1::DeviceQuota& d : quota.devices()) {
    if (quota_of.emplace(d.device_type(), &d).second) types.push_back(d.device_type());
  }
  for (const v1::DeviceUsage& u : tenant.usage()) {
    if (usage_of.emplace(u.device_type(), &u).second && quota_of.count(u.device_type()) == 0) {
      types.push_back(u.device_type());
    }
  }
  const std::string weight = quota.weight() > 0 ? absl::StrCat(quota.weight()) : "1";
  const std::string queued = absl::StrCat(tenant.queued_jobs());
  const std::string admitted = absl::StrCat(tenant.admitted_jobs());
  if (types.empty()) {
    table->AddRow({tenant.name(), OrDash(quota.cohort()), weight, "-", "-", "-", "-", "-", "-", "-",
                   queued, admitted});
    return;
  }
  for (const std::string& type : types) {
    const auto q = quota_of.find(type);
    const auto u = usage_of.find(type);
    const v1::DeviceQuota* d = q == quota_of.end() ? nullptr : q->second;
    const v1::DeviceUsage* use = u == usage_of.end() ? nullptr : u->second;
    table->AddRow(
        {tenant.name(), OrDash(quota.cohort()), weight, type,
         d == nullptr ? "0" : absl::StrCat(d->nominal()),
         LimitCell(d != nullptr && d->has_borrowing_limit(),
                   d == nullptr ? 0 : d->borrowing_limit(), any_borrowing, in_cohort, "no limit"),
         LimitCell(d != nullptr && d->has_lending_limit(), d == nullptr ? 0 : d->lending_limit(),
                   any_lending, in_cohort, "all"),
         absl::StrCat(use == nullptr ? 0 : use->in_use()),
         absl::StrCat(use == nullptr ? 0 : use->borrowed()),
         absl::StrCat(use == nullptr ? 0 : use->lent()), queued, admitted});
  }
}

std::string SharedDevices(const v1::Cohort& cohort) {
  std::vector<std::string> parts;
  for (const v1::DeviceQuota& d : cohort.shared()) {
    parts.push_back(absl::StrCat(d.device_type(), "=", d.nominal()));
  }
  return absl::StrJoin(parts, ", ");
}

}  // namespace

std::string RenderTenants(const v1::ListTenantsResponse& response) {
  std::string out;
  if (response.tenants().empty()) {
    out = "no tenants\n";
  } else {
    TextTable table = TenantTable();
    for (const v1::Tenant& tenant : response.tenants()) AddTenantRows(tenant, &table);
    out = table.Render();
  }
  if (!response.cohorts().empty()) {
    TextTable cohorts({"COHORT", "SHARED"});
    for (const v1::Cohort& c : response.cohorts())
      cohorts.AddRow({c.name(), OrDash(SharedDevices(c))});
    absl::StrAppend(&out, "\n", cohorts.Render());
  }
  if (!response.notes().empty()) absl::StrAppend(&out, "\n");
  for (const std::string& note : response.notes()) absl::StrAppend(&out, "NOTE  ", note, "\n");
  return out;
}

std::string RenderTenantChanged(const v1::Tenant& tenant, bool created) {
  TextTable table = TenantTable();
  AddTenantRows(tenant, &table);
  return absl::StrCat(created ? "created tenant " : "set the quota of tenant ", tenant.name(), "\n",
                      table.Render());
}

std::string KeptCohortNote(const std::string& cohort) {
  if (cohort.empty()) return "cohort: none (kept: --cohort was not given; --cohort C joins C)";
  return absl::StrCat("cohort: ", cohort,
                      " (kept: --cohort was not given; --cohort none takes the tenant out of it)");
}

std::string RenderCohortSet(const v1::Cohort& cohort) {
  const std::string shared = SharedDevices(cohort);
  return absl::StrCat("set cohort ", cohort.name(), ": shared ",
                      shared.empty() ? "nothing" : shared, "\n");
}

std::string RenderUserCreated(const v1::User& user) {
  if (user.role() == "admin") return absl::StrCat("created admin ", user.name(), "\n");
  return absl::StrCat("created user ", user.name(), " (tenant ", user.tenant(), ")\n");
}

std::string RenderUsers(const google::protobuf::RepeatedPtrField<v1::User>& users,
                        int64_t now_unix_ms) {
  if (users.empty()) return "no users\n";
  TextTable table({"NAME", "TENANT", "ROLE", "AGE"});
  for (const v1::User& u : users) {
    table.AddRow(
        {u.name(), OrDash(u.tenant()), OrDash(u.role()), Age(u.created_unix_ms(), now_unix_ms)});
  }
  return table.Render();
}

std::string ExpiryText(int64_t expires_unix_ms, int64_t now_unix_ms) {
  if (expires_unix_ms <= 0) return "never";
  const double seconds = static_cast<double>(expires_unix_ms - now_unix_ms) / 1000.0;
  if (seconds > 0) return absl::StrCat("in ", FormatRemaining(seconds));
  return absl::StrCat("expired ", FormatAge(-seconds), " ago");
}

std::string RenderTokens(const google::protobuf::RepeatedPtrField<v1::TokenInfo>& tokens,
                         int64_t now_unix_ms) {
  if (tokens.empty()) return "no tokens\n";
  TextTable table({"ID", "USER", "AGE", "EXPIRES", "STATE"});
  for (const v1::TokenInfo& t : tokens) {
    std::string state = "active";
    if (t.revoked_unix_ms() > 0) {
      state = absl::StrCat("revoked ", Age(t.revoked_unix_ms(), now_unix_ms), " ago");
    } else if (t.expires_unix_ms() > 0 && t.expires_unix_ms() <= now_unix_ms) {
      state = "expired";
    }
    table.AddRow({t.id(), t.user(), Age(t.created_unix_ms(), now_unix_ms),
                  ExpiryText(t.expires_unix_ms(), now_unix_ms), state});
  }
  return table.Render();
}

std::string RenderTokenRevoked(const v1::TokenInfo& token) {
  return absl::StrCat("revoked token ", token.id(), " of ", token.user(), "\n");
}

std::string TokenIssuedNote(const v1::TokenInfo& token, int64_t now_unix_ms) {
  const std::string expiry = ExpiryText(token.expires_unix_ms(), now_unix_ms);
  return absl::StrCat("token ", token.id(), " of ", token.user(), " (expires ", expiry,
                      ") is shown only this once: keep it secret, in a file of yours alone, e.g. "
                      "(umask 077; dapplectl admin token issue ",
                      token.user(), " > ", token.user(), ".token)");
}

std::string JoinTokenRotatedNote() {
  return "the new cluster join token is shown only this once: keep it secret (e.g. (umask 077; "
         "dapplectl admin join-token rotate > join.token); dapple-worker --join-token-file "
         "join.token); "
         "the previous one no longer registers workers";
}

std::string RenderAudit(const google::protobuf::RepeatedPtrField<v1::AuditEntry>& entries) {
  if (entries.empty()) return "no audit entries\n";
  TextTable table(
      {"SEQ", "TIME", "USER", "TENANT", "ROLE", "ACTION", "TARGET", "RESULT", "DETAIL"});
  for (const v1::AuditEntry& e : entries) {
    table.AddRow({absl::StrCat(e.seq()),
                  absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixMillis(e.unix_ms()),
                                   absl::UTCTimeZone()),
                  OrDash(e.user()), OrDash(e.tenant()), OrDash(e.role()), OrDash(e.action()),
                  OrDash(e.target()), OrDash(e.result()), OrDash(e.detail())});
  }
  return table.Render();
}

std::string RenderWhoAmI(const v1::WhoAmIResponse& who, int64_t now_unix_ms) {
  std::string out;
  AddField(&out, "USER", OrDash(who.user()));
  AddField(&out, "TENANT", OrDash(who.tenant()));
  AddField(&out, "ROLE", OrDash(who.role()));
  AddField(&out, "TOKEN", who.token_id().empty() ? "-" : absl::StrCat("dpl_", who.token_id()));
  AddField(&out, "EXPIRES", ExpiryText(who.expires_unix_ms(), now_unix_ms));
  return out;
}

}  // namespace dapple::ctl
