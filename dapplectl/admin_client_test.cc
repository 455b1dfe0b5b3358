// AdminClient against an in-process fake Admin service: every call carries the bearer token of
// ClientOptions.token (PrepareContext), none without one; errors convert like
// CoordinatorClient's.
#include "dapplectl/admin_client.h"

#include <string>
#include <vector>

#include "dapplectl/exit_codes.h"
#include "dapplectl/fake_admin_test_util.h"
#include "dapplectl/fake_coordinator_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::ctl {
namespace {

using ::dapple::ctl::testing::FakeAdmin;
using ::dapple::ctl::testing::FakeCoordinator;
using ::dapple::ctl::testing::RefusingPort;
using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::SizeIs;

constexpr char kToken[] = "dpl_0123456789abcdef_00ff";

// Calls every method of `client` once (answers may be errors: only the calls matter here).
void CallEveryMethod(AdminClient& client) {
  v1::CreateTenantRequest create;
  create.set_name("team-a");
  (void)client.CreateTenant(create);
  (void)client.ListTenants();
  v1::SetTenantQuotaRequest quota;
  quota.set_tenant("team-a");
  (void)client.SetTenantQuota(quota);
  v1::Cohort cohort;
  cohort.set_name("research");
  (void)client.SetCohort(cohort);
  v1::CreateUserRequest user;
  user.set_name("alice");
  user.set_tenant("team-a");
  user.set_role("user");
  (void)client.CreateUser(user);
  (void)client.ListUsers("");
  (void)client.IssueToken("alice", 60);
  (void)client.ListTokens("alice");
  (void)client.RevokeToken("0000000000000001");
  (void)client.RotateJoinToken();
  (void)client.ListAudit(v1::ListAuditRequest());
}

TEST(AdminClientTest, EveryCallCarriesTheBearerToken) {
  FakeAdmin fake;
  fake.RequireToken(kToken);
  ClientOptions options;
  options.address = fake.address();
  options.token = kToken;
  AdminClient client(options);
  CallEveryMethod(client);
  EXPECT_THAT(fake.calls(),
              ElementsAre("CreateTenant", "ListTenants", "SetTenantQuota", "SetCohort",
                          "CreateUser", "ListUsers", "IssueToken", "ListTokens", "RevokeToken",
                          "RotateJoinToken", "ListAudit"));
  EXPECT_THAT(fake.authorizations(), Each(std::string("Bearer ") + kToken));
  // The fake's own checks passed: the calls reached it and were answered.
  absl::StatusOr<v1::ListTenantsResponse> tenants = client.ListTenants();
  ASSERT_TRUE(tenants.ok()) << tenants.status();
  ASSERT_EQ(tenants->tenants_size(), 1);
  EXPECT_EQ(tenants->tenants(0).name(), "team-a");
}

TEST(AdminClientTest, WithoutATokenNoAuthorizationIsSentAndTheAnswerIsKept) {
  FakeAdmin fake;
  fake.RequireToken(kToken);
  ClientOptions options;
  options.address = fake.address();
  AdminClient client(options);
  CallEveryMethod(client);
  EXPECT_THAT(fake.authorizations(), SizeIs(11));
  EXPECT_THAT(fake.authorizations(), Each(std::string()));
  absl::StatusOr<v1::ListTenantsResponse> tenants = client.ListTenants();
  EXPECT_EQ(tenants.status().code(), absl::StatusCode::kUnauthenticated);
  // The coordinator's answer is kept, after what to do about it (client.h AuthenticationError).
  EXPECT_EQ(tenants.status().message(),
            std::string(kNoTokenMessage) + " (the coordinator said: no token)");
}

TEST(AdminClientTest, AWrongTokenIsRefused) {
  FakeAdmin fake;
  fake.RequireToken(kToken);
  ClientOptions options;
  options.address = fake.address();
  options.token = "dpl_ffffffffffffffff_00";
  AdminClient client(options);
  absl::StatusOr<v1::ListUsersResponse> users = client.ListUsers("");
  EXPECT_EQ(users.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(fake.authorizations(), ElementsAre("Bearer dpl_ffffffffffffffff_00"));
}

TEST(AdminClientTest, ErrorsConvertLikeTheCoordinators) {
  RefusingPort refusing;
  ClientOptions options;
  options.address = refusing.address();
  options.timeout = absl::Seconds(2);
  AdminClient client(options);
  absl::StatusOr<v1::ListTenantsResponse> tenants = client.ListTenants();
  EXPECT_EQ(ExitCodeForStatusCode(tenants.status().code()), kExitUnreachable);
  EXPECT_EQ(tenants.status().message(),
            "cannot reach the coordinator at " + refusing.address() +
                " (connection refused); start dapple-coordinator or set --coordinator / "
                "DAPPLE_COORDINATOR");

  FakeAdmin fake;
  fake.FailAll(grpc::Status(grpc::StatusCode::INTERNAL, "boom"));
  options.address = fake.address();
  AdminClient failing(options);
  absl::StatusOr<v1::IssueTokenResponse> issued = failing.IssueToken("alice", 0);
  EXPECT_EQ(issued.status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(issued.status().message(), "IssueToken failed with INTERNAL: boom");
}

TEST(AdminClientTest, WhoAmICarriesTheBearerToken) {
  FakeCoordinator fake;
  v1::WhoAmIResponse who;
  who.set_user("alice");
  fake.SetWhoAmI(who);
  ClientOptions options;
  options.address = fake.address();
  options.token = kToken;
  CoordinatorClient client(options);
  absl::StatusOr<v1::WhoAmIResponse> answer = client.WhoAmI();
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->user(), "alice");
  EXPECT_EQ(fake.last_whoami_authorization(), std::string("Bearer ") + kToken);
  options.token.clear();
  CoordinatorClient anonymous(options);
  ASSERT_TRUE(anonymous.WhoAmI().ok());
  EXPECT_EQ(fake.last_whoami_authorization(), "");
}

}  // namespace
}  // namespace dapple::ctl
