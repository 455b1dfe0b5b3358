// CoordinatorService's admin handlers for quotas (admin.proto SetTenantQuota, SetCohort,
// ListTenants' usage).
#include "coordinator/service/coordinator_service.h"

namespace dapple::coordinator {

absl::Status CoordinatorService::SetTenantQuota(const auth::Identity&,
                                                const v1::SetTenantQuotaRequest&, v1::Tenant*) {
  return absl::UnimplementedError("quotas are not scheduled yet");
}

absl::Status CoordinatorService::SetCohort(const auth::Identity&, const v1::SetCohortRequest&,
                                           v1::Cohort*) {
  return absl::UnimplementedError("quotas are not scheduled yet");
}

absl::Status CoordinatorService::DescribeTenants(const auth::Identity&, v1::ListTenantsResponse*) {
  return absl::OkStatus();
}

}  // namespace dapple::coordinator
