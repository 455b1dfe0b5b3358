// AdminClient: dapplectl's gRPC calls to dapple.v1.Admin (`dapplectl admin ...`: tenants,
// quotas, cohorts, users, tokens, the join token, the audit log; proto/dapple/v1/admin.proto).
// Every call is made exactly like CoordinatorClient's (rpc_call.h): the same channel settings,
// PrepareContext (the bearer token of ClientOptions.token), the deadline options.timeout, and
// the same conversion of errors (client.h's file comment; "does not implement
// dapple.v1.Admin/<method>" for a server without the service). The coordinator answers
// PERMISSION_DENIED ("admin only") to a user's token and UNAUTHENTICATED without a valid one.
//
// Names sent (tenants, users, token ids) have their invalid UTF-8 bytes escaped
// (EscapeInvalidUtf8, utf8_text.h); dapplectl checks them before (admin_args.h).
//
// Thread safety: one thread at a time.
#ifndef DAPPLE_DAPPLECTL_ADMIN_CLIENT_H_
#define DAPPLE_DAPPLECTL_ADMIN_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dapple/v1/admin.grpc.pb.h"
#include "dapplectl/client.h"
#include "grpcpp/grpcpp.h"

namespace dapple::ctl {

class AdminClient {
 public:
  explicit AdminClient(ClientOptions options);

  absl::StatusOr<v1::Tenant> CreateTenant(v1::CreateTenantRequest request);
  // The tenants with their quota and usage, and the cohorts.
  absl::StatusOr<v1::ListTenantsResponse> ListTenants();
  absl::StatusOr<v1::Tenant> SetTenantQuota(v1::SetTenantQuotaRequest request);
  absl::StatusOr<v1::Cohort> SetCohort(v1::Cohort cohort);
  absl::StatusOr<v1::User> CreateUser(v1::CreateUserRequest request);
  // Every user, or `tenant`'s ("" : all).
  absl::StatusOr<v1::ListUsersResponse> ListUsers(const std::string& tenant);
  // A new token of `user`, expiring after `ttl_seconds` (0: never). The answer holds the
  // secret: the caller prints it once and keeps it nowhere.
  absl::StatusOr<v1::IssueTokenResponse> IssueToken(const std::string& user, int64_t ttl_seconds);
  // Every user's tokens, or `user`'s ("" : all); never their secrets.
  absl::StatusOr<v1::ListTokensResponse> ListTokens(const std::string& user);
  absl::StatusOr<v1::RevokeTokenResponse> RevokeToken(const std::string& id);
  // A new cluster join token (the answer holds it, like IssueToken's); the old one stops
  // working.
  absl::StatusOr<v1::IssueTokenResponse> RotateJoinToken();
  absl::StatusOr<v1::ListAuditResponse> ListAudit(v1::ListAuditRequest request);

  const ClientOptions& options() const { return options_; }

 private:
  template <typename Request, typename Response, typename Call>
  absl::Status Unary(const char* method, const Request& request, Response* response, Call call);

  ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Admin::Stub> stub_;
};

}  // namespace dapple::ctl

#endif  // DAPPLE_DAPPLECTL_ADMIN_CLIENT_H_
