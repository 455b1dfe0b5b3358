#include "coordinator/scheduling/quota_store.h"

#include <sqlite3.h>

#include <set>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/job_spec_internal.h"
#include "common/logging.h"
#include "common/status.h"
#include "coordinator/jobs/sqlite_db.h"

namespace dapple::coordinator::scheduling {
namespace {

constexpr char kCreateTables[] =
    "CREATE TABLE IF NOT EXISTS tenant_quotas (tenant TEXT PRIMARY KEY, quota BLOB NOT NULL);"
    "CREATE TABLE IF NOT EXISTS cohorts (name TEXT PRIMARY KEY, cohort BLOB NOT NULL)";
constexpr char kSaveQuotaSql[] =
    "INSERT INTO tenant_quotas (tenant, quota) VALUES (?1, ?2) "
    "ON CONFLICT (tenant) DO UPDATE SET quota = excluded.quota";
constexpr char kSaveCohortSql[] =
    "INSERT INTO cohorts (name, cohort) VALUES (?1, ?2) "
    "ON CONFLICT (name) DO UPDATE SET cohort = excluded.cohort";

// Removes the entries of `entries` whose device type is not a quota's (kQuotaDeviceTypes; a
// database written by a version that took any type), logging each as ignored.
void KnownTypesOnly(google::protobuf::RepeatedPtrField<v1::DeviceQuota>* entries,
                    const std::string& what) {
  for (int i = entries->size() - 1; i >= 0; --i) {
    const std::string& type = entries->Get(i).device_type();
    if (type.empty() || absl::c_linear_search(job_spec_internal::kQuotaDeviceTypes, type)) {
      continue;
    }
    DAPPLE_LOG_WARN(
        "{} entry '{}' ignored: quotas count {} devices (set it again with dapplectl "
        "admin quota set / cohort set)",
        what, type, absl::StrJoin(job_spec_internal::kQuotaDeviceTypes, ", "));
    entries->DeleteSubrange(i, 1);
  }
}

// The quota entries as DeviceCounts, each type once, counts >= 0.
absl::Status Collect(const google::protobuf::RepeatedPtrField<v1::DeviceQuota>& entries,
                     const std::string& field, DeviceCounts* nominal, DeviceCounts* borrowing,
                     DeviceCounts* lending) {
  std::set<std::string> seen;
  for (const v1::DeviceQuota& d : entries) {
    if (d.device_type().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".device_type must not be empty: name the devices (",
                       absl::StrJoin(job_spec_internal::kQuotaDeviceTypes, ", "), ")"));
    }
    if (!absl::c_linear_search(job_spec_internal::kQuotaDeviceTypes, d.device_type())) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".device_type must be one of ",
                       absl::StrJoin(job_spec_internal::kQuotaDeviceTypes, ", "), ", got '",
                       d.device_type(), "'"));
    }
    if (!seen.insert(d.device_type()).second) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".device_type '", d.device_type(),
                                                     "' is given twice: one entry per type"));
    }
    const std::string at = absl::StrCat(field, "[", d.device_type(), "]");
    auto check = [&](const char* name, int64_t n) {
      return n < 0
                 ? absl::InvalidArgumentError(absl::StrCat(at, ".", name, " must be >= 0, got ", n))
                 : absl::OkStatus();
    };
    if (absl::Status s = check("nominal", d.nominal()); !s.ok()) return s;
    (*nominal)[d.device_type()] = d.nominal();
    if (d.has_borrowing_limit()) {
      if (absl::Status s = check("borrowing_limit", d.borrowing_limit()); !s.ok()) return s;
      if (borrowing != nullptr) (*borrowing)[d.device_type()] = d.borrowing_limit();
    }
    if (d.has_lending_limit()) {
      if (absl::Status s = check("lending_limit", d.lending_limit()); !s.ok()) return s;
      if (lending != nullptr) (*lending)[d.device_type()] = d.lending_limit();
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TenantConfig> ToTenantConfig(const std::string& name, const v1::TenantQuota& quota) {
  TenantConfig t;
  t.name = name;
  t.cohort = quota.cohort();
  const std::string field = absl::StrCat("tenant ", name, " quota.devices");
  DeviceCounts borrowing;
  DeviceCounts lending;
  if (absl::Status s = Collect(quota.devices(), field, &t.nominal, &borrowing, &lending); !s.ok()) {
    return s;
  }
  bool any_borrowing = false;
  bool any_lending = false;
  for (const v1::DeviceQuota& d : quota.devices()) {
    any_borrowing |= d.has_borrowing_limit();
    any_lending |= d.has_lending_limit();
  }
  if ((any_borrowing || any_lending) && t.cohort.empty()) {
    // dapplectl's rule for --borrowing-limit / --lending-limit, for every other way in.
    return absl::InvalidArgumentError(
        absl::StrCat("tenant ", name, " has a ", any_borrowing ? "borrowing" : "lending",
                     " limit but no cohort: a tenant outside a cohort neither borrows nor lends"));
  }
  if (any_borrowing) t.borrowing_limit = borrowing;
  if (any_lending) t.lending_limit = lending;
  if (quota.weight() < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tenant %s quota.weight must be > 0 (0: 1), got %g", name, quota.weight()));
  }
  t.weight = quota.weight() == 0 ? kDefaultWeight : quota.weight();
  if (quota.max_queued_jobs() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("tenant ", name,
                                                   " quota.max_queued_jobs must be >= 1 (0: "
                                                   "1000), got ",
                                                   quota.max_queued_jobs()));
  }
  t.max_queued_jobs =
      quota.max_queued_jobs() == 0 ? kDefaultMaxQueuedJobs : quota.max_queued_jobs();
  return t;
}

v1::TenantQuota WithDefaults(v1::TenantQuota quota) {
  if (quota.weight() == 0) quota.set_weight(kDefaultWeight);
  if (quota.max_queued_jobs() == 0) quota.set_max_queued_jobs(kDefaultMaxQueuedJobs);
  return quota;
}

absl::StatusOr<CohortConfig> ToCohortConfig(const v1::Cohort& cohort) {
  if (cohort.name().empty()) return absl::InvalidArgumentError("cohort.name must not be empty");
  CohortConfig c;
  c.name = cohort.name();
  if (absl::Status s = Collect(cohort.shared(), absl::StrCat("cohort ", c.name, " shared"),
                               &c.shared, nullptr, nullptr);
      !s.ok()) {
    return s;
  }
  return c;
}

absl::StatusOr<std::unique_ptr<QuotaStore>> QuotaStore::Open(const std::string& db_path) {
  DAPPLE_ASSIGN_OR_RETURN(sqlite3 * db, OpenSqliteTables(db_path, kCreateTables, "quota tables"));
  std::unique_ptr<QuotaStore> store(new QuotaStore(db, db_path));
  absl::MutexLock lock(&store->mu_);
  if (absl::Status s = store->LoadLocked(); !s.ok()) return s;
  return store;
}

QuotaStore::~QuotaStore() { sqlite3_close(db_); }

absl::Status QuotaStore::LoadLocked() {
  auto read = [&](const char* sql, auto* out) -> absl::Status {
    SqliteStatement stmt;
    if (sqlite3_prepare_v2(db_, sql, -1, &stmt.stmt, nullptr) != SQLITE_OK) {
      return absl::InternalError(
          absl::StrCat("reading quotas from '", path_, "': ", sqlite3_errmsg(db_)));
    }
    int rc;
    while ((rc = sqlite3_step(stmt.stmt)) == SQLITE_ROW) {
      const std::string key(reinterpret_cast<const char*>(sqlite3_column_text(stmt.stmt, 0)));
      const void* blob = sqlite3_column_blob(stmt.stmt, 1);
      const int bytes = sqlite3_column_bytes(stmt.stmt, 1);
      typename std::remove_pointer_t<decltype(out)>::mapped_type value;
      if (!value.ParseFromArray(blob, bytes)) {
        return absl::DataLossError(
            absl::StrCat("quota row '", key, "' in '", path_, "' does not parse"));
      }
      (*out)[key] = std::move(value);
    }
    if (rc != SQLITE_DONE) {
      return absl::InternalError(
          absl::StrCat("reading quotas from '", path_, "': ", sqlite3_errmsg(db_)));
    }
    return absl::OkStatus();
  };
  if (absl::Status s = read("SELECT tenant, quota FROM tenant_quotas", &quotas_); !s.ok()) {
    return s;
  }
  return read("SELECT name, cohort FROM cohorts", &cohorts_);
}

absl::Status QuotaStore::WriteLocked(const char* sql, const std::string& key,
                                     const std::string& blob) {
  SqliteStatement save;
  if (sqlite3_prepare_v2(db_, sql, -1, &save.stmt, nullptr) != SQLITE_OK ||
      (BindText(save.stmt, 1, key),
       sqlite3_bind_blob(save.stmt, 2, blob.data(), static_cast<int>(blob.size()),
                         SQLITE_TRANSIENT) != SQLITE_OK) ||
      sqlite3_step(save.stmt) != SQLITE_DONE) {
    return absl::InternalError(
        absl::StrCat("saving the quota of '", key, "' to '", path_, "': ", sqlite3_errmsg(db_)));
  }
  return absl::OkStatus();
}

SchedulingConfig QuotaStore::ConfigLocked(const std::map<std::string, v1::TenantQuota>& quotas,
                                          const std::map<std::string, v1::Cohort>& cohorts,
                                          int64_t starvation_after_ms) const {
  SchedulingConfig config;
  config.starvation_after_ms = starvation_after_ms;
  for (const auto& [name, cohort] : cohorts) {
    // Stored rows were validated when written, but earlier versions took any device type: an
    // entry of another type is left out (logged), not the whole cohort or tenant.
    v1::Cohort known = cohort;
    KnownTypesOnly(known.mutable_shared(), absl::StrCat("cohort ", name, " shared"));
    if (absl::StatusOr<CohortConfig> c = ToCohortConfig(known); c.ok()) {
      config.cohorts.push_back(*std::move(c));
    }
  }
  for (const auto& [name, quota] : quotas) {
    v1::TenantQuota known = quota;
    KnownTypesOnly(known.mutable_devices(), absl::StrCat("tenant ", name, " quota"));
    // Earlier versions stored limits on a tenant without a cohort, where they never did
    // anything: dropped (ToTenantConfig now refuses them), not the tenant's quota.
    if (known.cohort().empty()) {
      for (v1::DeviceQuota& d : *known.mutable_devices()) {
        d.clear_borrowing_limit();
        d.clear_lending_limit();
      }
    }
    if (absl::StatusOr<TenantConfig> t = ToTenantConfig(name, known); t.ok()) {
      config.tenants.push_back(*std::move(t));
    }
  }
  return config;
}

absl::Status QuotaStore::SetTenantQuota(const std::string& tenant, const v1::TenantQuota& quota) {
  if (tenant.empty()) return absl::InvalidArgumentError("tenant must not be empty");
  if (absl::Status s = ToTenantConfig(tenant, quota).status(); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  std::map<std::string, v1::TenantQuota> quotas = quotas_;
  quotas[tenant] = quota;
  if (absl::Status s = QuotaPolicy::Create(ConfigLocked(quotas, cohorts_, 0)).status(); !s.ok()) {
    return s;
  }
  if (absl::Status s = WriteLocked(kSaveQuotaSql, tenant, quota.SerializeAsString()); !s.ok()) {
    return s;
  }
  quotas_ = std::move(quotas);
  return absl::OkStatus();
}

absl::Status QuotaStore::SetCohort(const v1::Cohort& cohort) {
  if (absl::Status s = ToCohortConfig(cohort).status(); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  std::map<std::string, v1::Cohort> cohorts = cohorts_;
  cohorts[cohort.name()] = cohort;
  if (absl::Status s = QuotaPolicy::Create(ConfigLocked(quotas_, cohorts, 0)).status(); !s.ok()) {
    return s;
  }
  if (absl::Status s = WriteLocked(kSaveCohortSql, cohort.name(), cohort.SerializeAsString());
      !s.ok()) {
    return s;
  }
  cohorts_ = std::move(cohorts);
  return absl::OkStatus();
}

std::optional<v1::TenantQuota> QuotaStore::Quota(const std::string& tenant) const {
  absl::MutexLock lock(&mu_);
  auto it = quotas_.find(tenant);
  if (it == quotas_.end()) return std::nullopt;
  return it->second;
}

std::map<std::string, v1::TenantQuota> QuotaStore::Quotas() const {
  absl::MutexLock lock(&mu_);
  return quotas_;
}

std::map<std::string, v1::Cohort> QuotaStore::Cohorts() const {
  absl::MutexLock lock(&mu_);
  std::map<std::string, v1::Cohort> out = cohorts_;
  for (const auto& [name, quota] : quotas_) {
    if (!quota.cohort().empty() && !out.contains(quota.cohort())) {
      out[quota.cohort()].set_name(quota.cohort());
    }
  }
  return out;
}

SchedulingConfig QuotaStore::Config(int64_t starvation_after_ms) const {
  absl::MutexLock lock(&mu_);
  return ConfigLocked(quotas_, cohorts_, starvation_after_ms);
}

}  // namespace dapple::coordinator::scheduling
