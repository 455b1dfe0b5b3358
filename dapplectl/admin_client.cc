#include "dapplectl/admin_client.h"

#include <utility>

#include "common/status.h"
#include "dapplectl/rpc_call.h"
#include "dapplectl/utf8_text.h"

namespace dapple::ctl {
namespace {

constexpr char kService[] = "dapple.v1.Admin";

}  // namespace

AdminClient::AdminClient(ClientOptions options)
    : options_(std::move(options)),
      channel_(MakeChannel(options_)),
      stub_(v1::Admin::NewStub(channel_)) {}

template <typename Request, typename Response, typename Call>
absl::Status AdminClient::Unary(const char* method, const Request& request, Response* response,
                                Call call) {
  return CallUnary(options_, *channel_, kService, method, *stub_, request, response, call);
}

absl::StatusOr<v1::Tenant> AdminClient::CreateTenant(v1::CreateTenantRequest request) {
  request.set_name(EscapeInvalidUtf8(request.name()));
  v1::Tenant tenant;
  DAPPLE_RETURN_IF_ERROR(Unary("CreateTenant", request, &tenant, &v1::Admin::Stub::CreateTenant));
  return tenant;
}

absl::StatusOr<v1::ListTenantsResponse> AdminClient::ListTenants() {
  v1::ListTenantsResponse response;
  DAPPLE_RETURN_IF_ERROR(
      Unary("ListTenants", v1::ListTenantsRequest(), &response, &v1::Admin::Stub::ListTenants));
  return response;
}

absl::StatusOr<v1::Tenant> AdminClient::SetTenantQuota(v1::SetTenantQuotaRequest request) {
  request.set_tenant(EscapeInvalidUtf8(request.tenant()));
  v1::Tenant tenant;
  DAPPLE_RETURN_IF_ERROR(
      Unary("SetTenantQuota", request, &tenant, &v1::Admin::Stub::SetTenantQuota));
  return tenant;
}

absl::StatusOr<v1::Cohort> AdminClient::SetCohort(v1::Cohort cohort) {
  v1::SetCohortRequest request;
  cohort.set_name(EscapeInvalidUtf8(cohort.name()));
  *request.mutable_cohort() = std::move(cohort);
  v1::Cohort response;
  DAPPLE_RETURN_IF_ERROR(Unary("SetCohort", request, &response, &v1::Admin::Stub::SetCohort));
  return response;
}

absl::StatusOr<v1::User> AdminClient::CreateUser(v1::CreateUserRequest request) {
  request.set_name(EscapeInvalidUtf8(request.name()));
  request.set_tenant(EscapeInvalidUtf8(request.tenant()));
  v1::User user;
  DAPPLE_RETURN_IF_ERROR(Unary("CreateUser", request, &user, &v1::Admin::Stub::CreateUser));
  return user;
}

absl::StatusOr<v1::ListUsersResponse> AdminClient::ListUsers(const std::string& tenant) {
  v1::ListUsersRequest request;
  request.set_tenant(EscapeInvalidUtf8(tenant));
  v1::ListUsersResponse response;
  DAPPLE_RETURN_IF_ERROR(Unary("ListUsers", request, &response, &v1::Admin::Stub::ListUsers));
  return response;
}

absl::StatusOr<v1::IssueTokenResponse> AdminClient::IssueToken(const std::string& user,
                                                               int64_t ttl_seconds) {
  v1::IssueTokenRequest request;
  request.set_user(EscapeInvalidUtf8(user));
  request.set_ttl_seconds(ttl_seconds);
  v1::IssueTokenResponse response;
  DAPPLE_RETURN_IF_ERROR(Unary("IssueToken", request, &response, &v1::Admin::Stub::IssueToken));
  return response;
}

absl::StatusOr<v1::ListTokensResponse> AdminClient::ListTokens(const std::string& user) {
  v1::ListTokensRequest request;
  request.set_user(EscapeInvalidUtf8(user));
  v1::ListTokensResponse response;
  DAPPLE_RETURN_IF_ERROR(Unary("ListTokens", request, &response, &v1::Admin::Stub::ListTokens));
  return response;
}

absl::StatusOr<v1::RevokeTokenResponse> AdminClient::RevokeToken(const std::string& id) {
  v1::RevokeTokenRequest request;
  request.set_id(EscapeInvalidUtf8(id));
  v1::RevokeTokenResponse response;
  DAPPLE_RETURN_IF_ERROR(Unary("RevokeToken", request, &response, &v1::Admin::Stub::RevokeToken));
  return response;
}

absl::StatusOr<v1::IssueTokenResponse> AdminClient::RotateJoinToken() {
  v1::IssueTokenResponse response;
  DAPPLE_RETURN_IF_ERROR(Unary("RotateJoinToken", v1::RotateJoinTokenRequest(), &response,
                               &v1::Admin::Stub::RotateJoinToken));
  return response;
}

absl::StatusOr<v1::ListAuditResponse> AdminClient::ListAudit(v1::ListAuditRequest request) {
  request.set_tenant(EscapeInvalidUtf8(request.tenant()));
  v1::ListAuditResponse response;
  DAPPLE_RETURN_IF_ERROR(Unary("ListAudit", request, &response, &v1::Admin::Stub::ListAudit));
  return response;
}

}  // namespace dapple::ctl
