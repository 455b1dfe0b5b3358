#include "coordinator/service/grpc_admin.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace dapple::coordinator {
namespace {

// At most this many bytes of a request's name reach the audit log and messages.
std::string Short(const std::string& text) { return text.substr(0, 64); }

absl::StatusOr<auth::Role> ParseRole(const std::string& role) {
  if (role.empty() || role == "user") return auth::Role::kUser;
  if (role == "admin") return auth::Role::kAdmin;
  return absl::InvalidArgumentError(
      absl::StrCat("role '", Short(role), "' must be \"user\" or \"admin\""));
}

}  // namespace

// The caller of an Admin RPC, or the RPC's refusal.
#define DAPPLE_ADMIN_CALLER(caller, context, action, target)                         \
  absl::StatusOr<auth::Identity> caller##_or = Admin((context), (action), (target)); \
  if (!caller##_or.ok()) return ToGrpcStatus(caller##_or.status());                  \
  [[maybe_unused]] const auth::Identity& caller = *caller##_or

absl::StatusOr<auth::Identity> GrpcAdmin::Admin(grpc::ServerContext* context, const char* action,
                                                const std::string& target) {
  absl::StatusOr<auth::Identity> caller = auth_.authenticator->Authenticate(*context);
  if (!caller.ok()) return caller;
  if (absl::Status s = auth::CheckService(*caller, auth::Service::kAdmin); !s.ok()) {
    (void)Changed(*caller, action, target, s, "refused: not an admin");
    return s;
  }
  return caller;
}

grpc::Status GrpcAdmin::Changed(const auth::Identity& caller, const char* action,
                                const std::string& target, const absl::Status& result,
                                const std::string& detail) {
  if (auth_.audit != nullptr) {
    if (absl::Status s = auth_.audit->Record(
            caller, action, target, result,
            result.ok() ? detail
                        : absl::StrCat(detail, detail.empty() ? "" : ": ", result.message()));
        !s.ok()) {
      DAPPLE_LOG_WARN("audit log: {}", s.message());
    }
  }
  return ToGrpcStatus(result);
}

grpc::Status GrpcAdmin::CreateTenant(grpc::ServerContext* context,
                                     const v1::CreateTenantRequest* request, v1::Tenant* response) {
  const std::string target = "tenant " + Short(request->name());
  DAPPLE_ADMIN_CALLER(caller, context, "CreateTenant", target);
  absl::Status s = auth_.credentials->CreateTenant(request->name());
  if (s.ok()) {
    response->set_name(request->name());
    if (request->has_quota()) {
      v1::SetTenantQuotaRequest quota;
      quota.set_tenant(request->name());
      *quota.mutable_quota() = request->quota();
      s = service_->SetTenantQuota(caller, quota, response);
      if (!s.ok()) {
        s = absl::Status(s.code(),
                         absl::StrCat("tenant ", request->name(),
                                      " created, but its quota was not set: ", s.message()));
      }
    }
  }
  return Changed(caller, "CreateTenant", target, s, request->has_quota() ? "with a quota" : "");
}

grpc::Status GrpcAdmin::ListTenants(grpc::ServerContext* context, const v1::ListTenantsRequest*,
                                    v1::ListTenantsResponse* response) {
  DAPPLE_ADMIN_CALLER(caller, context, "ListTenants", "");
  absl::StatusOr<std::vector<v1::Tenant>> tenants = auth_.credentials->ListTenants();
  if (!tenants.ok()) return ToGrpcStatus(tenants.status());
  for (v1::Tenant& t : *tenants) *response->add_tenants() = std::move(t);
  return ToGrpcStatus(service_->DescribeTenants(caller, response));
}

grpc::Status GrpcAdmin::SetTenantQuota(grpc::ServerContext* context,
                                       const v1::SetTenantQuotaRequest* request,
                                       v1::Tenant* response) {
  const std::string target = "tenant " + Short(request->tenant());
  DAPPLE_ADMIN_CALLER(caller, context, "SetTenantQuota", target);
  return Changed(caller, "SetTenantQuota", target,
                 service_->SetTenantQuota(caller, *request, response), "");
}

grpc::Status GrpcAdmin::SetCohort(grpc::ServerContext* context, const v1::SetCohortRequest* request,
                                  v1::Cohort* response) {
  const std::string target = "cohort " + Short(request->cohort().name());
  DAPPLE_ADMIN_CALLER(caller, context, "SetCohort", target);
  return Changed(caller, "SetCohort", target, service_->SetCohort(caller, *request, response), "");
}

grpc::Status GrpcAdmin::CreateUser(grpc::ServerContext* context,
                                   const v1::CreateUserRequest* request, v1::User* response) {
  const std::string target = "user " + Short(request->name());
  DAPPLE_ADMIN_CALLER(caller, context, "CreateUser", target);
  absl::StatusOr<auth::Role> role = ParseRole(request->role());
  absl::Status s = role.status();
  if (s.ok()) s = auth_.credentials->CreateUser(request->tenant(), request->name(), *role);
  if (s.ok()) {
    response->set_name(request->name());
    response->set_tenant(request->tenant());
    response->set_role(auth::RoleName(*role));
  }
  return Changed(
      caller, "CreateUser", target, s,
      absl::StrCat("role ", Short(request->role().empty() ? "user" : request->role()),
                   request->tenant().empty() ? "" : ", tenant ", Short(request->tenant())));
}

grpc::Status GrpcAdmin::ListUsers(grpc::ServerContext* context, const v1::ListUsersRequest* request,
                                  v1::ListUsersResponse* response) {
  DAPPLE_ADMIN_CALLER(caller, context, "ListUsers", "");
  if (!request->tenant().empty()) {
    if (absl::Status s = auth_.credentials->CheckTenant(request->tenant()); !s.ok()) {
      return ToGrpcStatus(s);
    }
  }
  absl::StatusOr<std::vector<v1::User>> users = auth_.credentials->ListUsers(request->tenant());
  if (!users.ok()) return ToGrpcStatus(users.status());
  for (v1::User& u : *users) *response->add_users() = std::move(u);
  return grpc::Status::OK;
}

grpc::Status GrpcAdmin::IssueToken(grpc::ServerContext* context,
                                   const v1::IssueTokenRequest* request,
                                   v1::IssueTokenResponse* response) {
  const std::string target = "user " + Short(request->user());
  DAPPLE_ADMIN_CALLER(caller, context, "IssueToken", target);
  if (request->ttl_seconds() < 0) {
    return Changed(
        caller, "IssueToken", target,
        absl::InvalidArgumentError(absl::StrCat("ttl_seconds must be >= 0 (0: never expires), got ",
                                                request->ttl_seconds())),
        "");
  }
  std::optional<int64_t> ttl_ms;
  if (request->ttl_seconds() > 0) ttl_ms = request->ttl_seconds() * 1000;
  absl::StatusOr<auth::CredentialStore::IssuedToken> token =
      auth_.credentials->IssueToken(request->user(), ttl_ms);
  if (!token.ok()) return Changed(caller, "IssueToken", target, token.status(), "");
  response->set_token(token->token);
  absl::StatusOr<v1::TokenInfo> info = auth_.credentials->GetToken(token->id);
  if (info.ok()) *response->mutable_info() = *std::move(info);
  return Changed(caller, "IssueToken", target, absl::OkStatus(),
                 absl::StrCat("token ", token->id,
                              request->ttl_seconds() > 0
                                  ? absl::StrCat(", expires in ", request->ttl_seconds(), " s")
                                  : ", never expires"));
}

grpc::Status GrpcAdmin::ListTokens(grpc::ServerContext* context,
                                   const v1::ListTokensRequest* request,
                                   v1::ListTokensResponse* response) {
  DAPPLE_ADMIN_CALLER(caller, context, "ListTokens", "");
  absl::StatusOr<std::vector<v1::TokenInfo>> tokens =
      auth_.credentials->ListTokens(request->user());
  if (!tokens.ok()) return ToGrpcStatus(tokens.status());
  for (v1::TokenInfo& t : *tokens) *response->add_tokens() = std::move(t);
  return grpc::Status::OK;
}

grpc::Status GrpcAdmin::RevokeToken(grpc::ServerContext* context,
                                    const v1::RevokeTokenRequest* request,
                                    v1::RevokeTokenResponse* response) {
  const std::string target = "token " + Short(request->id());
  DAPPLE_ADMIN_CALLER(caller, context, "RevokeToken", target);
  absl::Status s = auth_.credentials->RevokeToken(request->id());
  if (s.ok()) {
    absl::StatusOr<v1::TokenInfo> info = auth_.credentials->GetToken(request->id());
    if (info.ok()) *response->mutable_info() = *std::move(info);
  }
  return Changed(caller, "RevokeToken", target, s, "");
}

grpc::Status GrpcAdmin::RotateJoinToken(grpc::ServerContext* context,
                                        const v1::RotateJoinTokenRequest*,
                                        v1::IssueTokenResponse* response) {
  DAPPLE_ADMIN_CALLER(caller, context, "RotateJoinToken", "join token");
  absl::StatusOr<auth::CredentialStore::IssuedToken> token = auth_.credentials->RotateJoinToken();
  if (!token.ok()) return Changed(caller, "RotateJoinToken", "join token", token.status(), "");
  response->set_token(token->token);
  absl::StatusOr<v1::TokenInfo> info = auth_.credentials->GetToken(token->id);
  if (info.ok()) *response->mutable_info() = *std::move(info);
  return Changed(caller, "RotateJoinToken", "join token", absl::OkStatus(),
                 absl::StrCat("new join token ", token->id, "; the previous one is revoked"));
}

grpc::Status GrpcAdmin::ListAudit(grpc::ServerContext* context, const v1::ListAuditRequest* request,
                                  v1::ListAuditResponse* response) {
  DAPPLE_ADMIN_CALLER(caller, context, "ListAudit", "");
  if (!request->tenant().empty()) {
    if (absl::Status s = auth_.credentials->CheckTenant(request->tenant()); !s.ok()) {
      return ToGrpcStatus(s);
    }
  }
  absl::StatusOr<std::vector<v1::AuditEntry>> entries =
      auth_.audit->List(request->after_seq(), request->limit(), request->tenant());
  if (!entries.ok()) return ToGrpcStatus(entries.status());
  for (v1::AuditEntry& e : *entries) *response->add_entries() = std::move(e);
  return grpc::Status::OK;
}

#undef DAPPLE_ADMIN_CALLER

}  // namespace dapple::coordinator
