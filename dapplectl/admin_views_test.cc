#include "dapplectl/admin_views.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::ctl {
namespace {

using ::testing::HasSubstr;

TEST(AdminViewsTest, LimitsUnsetMeanWhatTheProtoSays) {
  v1::ListTenantsResponse response;
  v1::Tenant* t = response.add_tenants();
  t->set_name("team-a");
  t->mutable_quota()->set_cohort("c");
  t->mutable_quota()->set_weight(2.5);
  v1::DeviceQuota* cpu = t->mutable_quota()->add_devices();
  cpu->set_device_type("cpu");
  cpu->set_nominal(4);
  cpu->set_borrowing_limit(1);
  v1::DeviceQuota* cuda = t->mutable_quota()->add_devices();
  cuda->set_device_type("cuda");
  cuda->set_nominal(2);
  // In use of a type outside the quota (an admin changed it): shown after the quota's types.
  v1::DeviceUsage* use = t->add_usage();
  use->set_device_type("emulated");
  use->set_in_use(3);
  EXPECT_EQ(RenderTenants(response),
            "TENANT   COHORT   WEIGHT   DEVICE     NOMINAL   BORROW LIMIT   LEND LIMIT   IN USE   "
            "BORROWED   LENT   QUEUED   ADMITTED\n"
            "team-a   c        2.5      cpu        4         1              all          0        "
            "0          0      0        0\n"
            "team-a   c        2.5      cuda       2         0              all          0        "
            "0          0      0        0\n"
            "team-a   c        2.5      emulated   0         0              all          3        "
            "0          0      0        0\n");
}

TEST(AdminViewsTest, EmptyLists) {
  EXPECT_EQ(RenderTenants(v1::ListTenantsResponse()), "no tenants\n");
  EXPECT_EQ(RenderUsers({}, 0), "no users\n");
  EXPECT_EQ(RenderTokens({}, 0), "no tokens\n");
  EXPECT_EQ(RenderAudit({}), "no audit entries\n");
  v1::ListTenantsResponse cohorts_only;
  cohorts_only.add_cohorts()->set_name("c");
  EXPECT_EQ(RenderTenants(cohorts_only), "no tenants\n\nCOHORT   SHARED\nc        -\n");
  cohorts_only.add_notes("the nominal quotas total 6 cpu devices, more than the 4 ...");
  EXPECT_EQ(RenderTenants(cohorts_only),
            "no tenants\n\nCOHORT   SHARED\nc        -\n\n"
            "NOTE  the nominal quotas total 6 cpu devices, more than the 4 ...\n");
  v1::Cohort empty;
  empty.set_name("c");
  EXPECT_EQ(RenderCohortSet(empty), "set cohort c: shared nothing\n");
}

TEST(AdminViewsTest, Expiry) {
  EXPECT_EQ(ExpiryText(0, 5000), "never");
  EXPECT_EQ(ExpiryText(5000 + 7 * 86'400'000LL, 5000), "in 7d");
  EXPECT_EQ(ExpiryText(5000, 5000 + 120'000), "expired 2m ago");
}

TEST(AdminViewsTest, WhoAmIOfAnAdminWithoutExpiry) {
  v1::WhoAmIResponse who;
  who.set_user("admin");
  who.set_role("admin");
  who.set_token_id("00000000000000aa");
  EXPECT_EQ(RenderWhoAmI(who, 0),
            "USER          admin\n"
            "TENANT        -\n"
            "ROLE          admin\n"
            "TOKEN         dpl_00000000000000aa\n"
            "EXPIRES       never\n");
}

TEST(AdminViewsTest, NotesNeverCarryTheSecret) {
  v1::TokenInfo info;
  info.set_id("0123456789abcdef");
  info.set_user("bob");
  EXPECT_EQ(TokenIssuedNote(info, 0),
            "token 0123456789abcdef of bob (expires never) is shown only this once: keep it "
            "secret, in a file of yours alone, e.g. (umask 077; dapplectl admin token issue bob > "
            "bob.token)");
  EXPECT_THAT(JoinTokenRotatedNote(), HasSubstr("--join-token-file"));
}

}  // namespace
}  // namespace dapple::ctl
