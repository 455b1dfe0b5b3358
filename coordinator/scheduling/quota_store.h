// Tenants' quotas and cohorts (admin.proto TenantQuota, Cohort) kept in the coordinator's SQLite
// database, and the SchedulingConfig built from them for QuotaPolicy (quota_policy.h). The store
// does not know which tenants exist (auth/credential_store.h owns tenants): the caller checks.
//
// Schema: the store owns two tables, created when missing:
//   tenant_quotas(tenant TEXT PRIMARY KEY, quota BLOB NOT NULL)  -- a serialized TenantQuota
//   cohorts(name TEXT PRIMARY KEY, cohort BLOB NOT NULL)         -- a serialized Cohort
// Every change is validated first (ToTenantConfig, then QuotaPolicy::Create on the whole
// configuration with the change): a change the policy would refuse is never stored.
//
// Thread safety: thread-safe (one internal mutex); the store has its own connection to the file.
#ifndef DAPPLE_COORDINATOR_SCHEDULING_QUOTA_STORE_H_
#define DAPPLE_COORDINATOR_SCHEDULING_QUOTA_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/scheduling/quota_policy.h"
#include "dapple/v1/admin.pb.h"

struct sqlite3;

namespace dapple::coordinator::scheduling {

// The policy's view of tenant `name`'s quota: an entry's borrowing_limit (lending_limit) set on
// some device types makes a limit map of those types (the others may not be borrowed / are not
// lent); set on none: no limit. weight 0 reads 1, max_queued_jobs 0 reads 1000.
// kInvalidArgument naming the field, value and rule: an empty or repeated device_type, a negative
// count or weight, a negative max_queued_jobs, a borrowing or lending limit without a cohort.
absl::StatusOr<TenantConfig> ToTenantConfig(const std::string& name, const v1::TenantQuota& quota);
// What an unset (0) weight and max_queued_jobs read as.
inline constexpr double kDefaultWeight = 1.0;
inline constexpr int32_t kDefaultMaxQueuedJobs = 1000;
// `quota` with an unset weight and max_queued_jobs replaced by what they read as: what a tenant
// listing shows. Pure.
v1::TenantQuota WithDefaults(v1::TenantQuota quota);
// The policy's view of a cohort (its shared devices: each entry's nominal). Same errors.
absl::StatusOr<CohortConfig> ToCohortConfig(const v1::Cohort& cohort);

class QuotaStore {
 public:
  // Opens (creating if needed) the database at `db_path` and the tables, and reads them.
  // kFailedPrecondition "cannot open quota tables in '<path>': <sqlite message>"; kDataLoss
  // for a stored row that does not parse.
  static absl::StatusOr<std::unique_ptr<QuotaStore>> Open(const std::string& db_path);
  ~QuotaStore();
  QuotaStore(const QuotaStore&) = delete;
  QuotaStore& operator=(const QuotaStore&) = delete;

  // Validates and stores (replaces) tenant `tenant`'s quota; durable when OK. kInvalidArgument
  // (ToTenantConfig's, or QuotaPolicy::Create's on the configuration with it: "tenant team-a
  // lending_limit.cpu must be at most its nominal quota (2), got 3: ..."); kInternal for a
  // write error (nothing changes then).
  absl::Status SetTenantQuota(const std::string& tenant, const v1::TenantQuota& quota);
  // The same for a cohort (creates or replaces it). kInvalidArgument for an empty name.
  absl::Status SetCohort(const v1::Cohort& cohort);

  std::optional<v1::TenantQuota> Quota(const std::string& tenant) const;
  std::map<std::string, v1::TenantQuota> Quotas() const;  // by tenant name
  std::map<std::string, v1::Cohort> Cohorts() const;      // by name, including those only named
                                                          // by a tenant's quota (no shared devices)

  // The configuration of every stored quota and cohort, with `starvation_after_ms`.
  SchedulingConfig Config(int64_t starvation_after_ms) const;

 private:
  QuotaStore(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  absl::Status LoadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  SchedulingConfig ConfigLocked(const std::map<std::string, v1::TenantQuota>& quotas,
                                const std::map<std::string, v1::Cohort>& cohorts,
                                int64_t starvation_after_ms) const;
  absl::Status WriteLocked(const char* sql, const std::string& key, const std::string& blob)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  sqlite3* const db_;
  const std::string path_;
  std::map<std::string, v1::TenantQuota> quotas_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, v1::Cohort> cohorts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dapple::coordinator::scheduling

#endif  // DAPPLE_COORDINATOR_SCHEDULING_QUOTA_STORE_H_
