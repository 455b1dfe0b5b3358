// The Admin service's gRPC adapter (`dapplectl admin ...`; admin.proto, docs/security.md):
// authenticates every call, refuses every caller but an admin ("admin only", written to the
// audit log), and implements tenants, users, tokens, the join token and the audit log on the
// credential store; quotas and cohorts go to CoordinatorService (SetTenantQuota, SetCohort,
// DescribeTenants). Every change and every refused call is written to the audit log, never a
// secret (tokens by id).
#ifndef DAPPLE_COORDINATOR_SERVICE_GRPC_ADMIN_H_
#define DAPPLE_COORDINATOR_SERVICE_GRPC_ADMIN_H_

#include <grpcpp/grpcpp.h>

#include <string>

#include "coordinator/service/coordinator_service.h"
#include "coordinator/service/grpc_auth.h"
#include "dapple/v1/admin.grpc.pb.h"

namespace dapple::coordinator {

class GrpcAdmin final : public v1::Admin::Service {
 public:
  GrpcAdmin(CoordinatorService* service, GrpcAuth auth) : service_(service), auth_(auth) {}

  grpc::Status CreateTenant(grpc::ServerContext* context, const v1::CreateTenantRequest* request,
                            v1::Tenant* response) override;
  grpc::Status ListTenants(grpc::ServerContext* context, const v1::ListTenantsRequest* request,
                           v1::ListTenantsResponse* response) override;
  grpc::Status SetTenantQuota(grpc::ServerContext* context,
                              const v1::SetTenantQuotaRequest* request,
                              v1::Tenant* response) override;
  grpc::Status SetCohort(grpc::ServerContext* context, const v1::SetCohortRequest* request,
                         v1::Cohort* response) override;
  grpc::Status CreateUser(grpc::ServerContext* context, const v1::CreateUserRequest* request,
                          v1::User* response) override;
  grpc::Status ListUsers(grpc::ServerContext* context, const v1::ListUsersRequest* request,
                         v1::ListUsersResponse* response) override;
  grpc::Status IssueToken(grpc::ServerContext* context, const v1::IssueTokenRequest* request,
                          v1::IssueTokenResponse* response) override;
  grpc::Status ListTokens(grpc::ServerContext* context, const v1::ListTokensRequest* request,
                          v1::ListTokensResponse* response) override;
  grpc::Status RevokeToken(grpc::ServerContext* context, const v1::RevokeTokenRequest* request,
                           v1::RevokeTokenResponse* response) override;
  grpc::Status RotateJoinToken(grpc::ServerContext* context,
                               const v1::RotateJoinTokenRequest* request,
                               v1::IssueTokenResponse* response) override;
  grpc::Status ListAudit(grpc::ServerContext* context, const v1::ListAuditRequest* request,
                         v1::ListAuditResponse* response) override;

 private:
  // The admin calling `action` on `target`, or the refusal (recorded in the audit log when the
  // caller was authenticated but is no admin).
  absl::StatusOr<auth::Identity> Admin(grpc::ServerContext* context, const char* action,
                                       const std::string& target);
  // Records a change's outcome and returns it as a grpc::Status.
  grpc::Status Changed(const auth::Identity& caller, const char* action, const std::string& target,
                       const absl::Status& result, const std::string& detail);

  CoordinatorService* service_;  // not owned
  GrpcAuth auth_;
};

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_SERVICE_GRPC_ADMIN_H_
