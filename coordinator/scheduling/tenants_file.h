// The declarative tenants file of dapple-coordinator --tenants-file (docs/scheduling.md,
// "Tenants file"; the Helm chart's `tenants` and `cohorts` values): tenants, cohorts and their
// quotas per device type, applied at every start. Applying is idempotent: a missing tenant is
// created, a cohort or quota that differs from the stored one is set, everything else is left
// alone; nothing is ever deleted (a tenant removed from the file keeps its quota and jobs).
//
//   cohorts:                       # optional
//     - name: research
//       shared: {cpu: 4}           # devices of the cohort itself, per type (>= 0)
//   tenants:
//     - name: team-a               # 1-63 of a-z 0-9 -, starting with a letter
//       cohort: research           # optional: borrows and lends within it
//       weight: 2                  # optional, > 0 (fair share above nominal quota)
//       max_queued_jobs: 100       # optional, >= 1 (default 1000)
//       quota:                     # per device type
//         cuda: {nominal: 8, borrowing_limit: 4, lending_limit: 2}
//         cpu: {nominal: 4}
//
// Thread safety: the functions are pure (Apply calls only its callbacks).
#ifndef DAPPLE_COORDINATOR_SCHEDULING_TENANTS_FILE_H_
#define DAPPLE_COORDINATOR_SCHEDULING_TENANTS_FILE_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "dapple/v1/admin.pb.h"

namespace dapple::coordinator::scheduling {

// The largest tenants file read, in bytes (a page of YAML per few dozen tenants).
inline constexpr size_t kMaxTenantsFileBytes = size_t{1} << 20;

struct TenantsFile {
  std::vector<v1::Cohort> cohorts;                // in file order
  std::map<std::string, v1::TenantQuota> quotas;  // by tenant name
  std::vector<std::string> tenants;               // in file order
};

// Parses and validates `yaml` (`source` names it in messages). kInvalidArgument, one line,
// "<source>:<line>:<column>: <field> <value>: <rule>" (1-based), e.g.
//   "tenants.yaml:7:18: tenants[0].quota.cuda.nominal must be an integer >= 0, got '-1'",
//   "tenants.yaml:3:5: unknown field 'nomnal' in tenants[0].quota.cuda; known: nominal,
//    borrowing_limit, lending_limit",
//   "tenants.yaml:9:9: tenants[1].name 'team-a' is given twice",
// and the scheduling policy's own rules on the whole file (scheduling::QuotaPolicy::Create) at
// the offending tenant or cohort: "tenants.yaml:4:5: tenants[0] (team-a): tenant team-a
// lending_limit.cpu must be at most its nominal quota (2), got 3". Longer than
// kMaxTenantsFileBytes: refused before parsing.
absl::StatusOr<TenantsFile> ParseTenantsFile(absl::string_view yaml, absl::string_view source);

// What Apply acts through (the coordinator binds them to its credential store and service, each
// change audit-logged as the system).
struct TenantsTarget {
  std::function<absl::StatusOr<std::vector<std::string>>()> list_tenants;
  std::function<absl::Status(const std::string& name)> create_tenant;
  // The stored quotas by tenant and cohorts by name.
  std::function<absl::StatusOr<std::map<std::string, v1::TenantQuota>>()> quotas;
  std::function<absl::StatusOr<std::map<std::string, v1::Cohort>>()> cohorts;
  std::function<absl::Status(const v1::Cohort& cohort)> set_cohort;
  std::function<absl::Status(const std::string& tenant, const v1::TenantQuota& quota)> set_quota;
};

struct TenantsApplied {
  int tenants_created = 0;
  int cohorts_set = 0;
  int quotas_set = 0;
};

// Creates the missing tenants, then sets each cohort and each tenant's quota that differs from
// the stored one (compared field by field, so applying the same file twice changes nothing).
// Stops at the first error, naming the tenant or cohort: "tenants file: tenant team-a: <the
// callback's message>" (the changes before it stand; the next start applies the rest).
absl::StatusOr<TenantsApplied> ApplyTenantsFile(const TenantsFile& file,
                                                const TenantsTarget& target);

}  // namespace dapple::coordinator::scheduling

#endif  // DAPPLE_COORDINATOR_SCHEDULING_TENANTS_FILE_H_
