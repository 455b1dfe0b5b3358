#include "coordinator/auth/access.h"

#include "absl/strings/str_cat.h"

namespace dapple::coordinator::auth {

absl::Status CheckService(const Identity& caller, Service service) {
  switch (service) {
    case Service::kAdmin:
      if (caller.role == Role::kAdmin) return absl::OkStatus();
      return absl::PermissionDeniedError("admin only");
    case Service::kCoordinator:
      if (caller.role == Role::kAdmin || caller.role == Role::kUser) return absl::OkStatus();
      return absl::PermissionDeniedError(absl::StrCat(
          RoleWithArticle(caller.role), " credential may not call the Coordinator service"));
    case Service::kWorkerControl:
      if (caller.role == Role::kWorker || caller.role == Role::kJoin) return absl::OkStatus();
      return absl::PermissionDeniedError(
          absl::StrCat("only workers call the WorkerControl service, not ",
                       RoleWithArticle(caller.role), " token"));
  }
  return absl::PermissionDeniedError("unknown service");
}

bool CanAccessJob(const Identity& caller, const v1::Job& job) {
  if (caller.role == Role::kAdmin) return true;
  return caller.role == Role::kUser && !caller.tenant.empty() && job.tenant() == caller.tenant;
}

absl::Status CheckJobAccess(const Identity& caller, const v1::Job& job) {
  if (CanAccessJob(caller, job)) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat("job ", job.id(), " belongs to another tenant"));
}

absl::Status CheckWorker(const Identity& caller, absl::string_view worker_id) {
  if (caller.role != Role::kWorker) {
    return absl::PermissionDeniedError(
        absl::StrCat("only a worker's credential may act for worker ", worker_id, ", not ",
                     RoleWithArticle(caller.role), " token"));
  }
  if (caller.user != worker_id) {
    return absl::PermissionDeniedError(absl::StrCat("the credential of worker ", caller.user,
                                                    " may not act for worker ", worker_id));
  }
  return absl::OkStatus();
}

std::string TenantCheckpointDir(const std::string& root, const std::string& tenant) {
  return absl::StrCat(root, "/", tenant.empty() ? "_admin" : tenant);
}

}  // namespace dapple::coordinator::auth
