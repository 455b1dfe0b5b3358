#include "dapplectl/admin_args.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::ctl {
namespace {

using ::testing::HasSubstr;

TEST(AdminArgsTest, AccountNames) {
  for (const char* ok :
       {"a", "team-a", "t0", "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijk"}) {
    EXPECT_TRUE(CheckAccountName("tenant name", ok).ok()) << ok;
  }
  for (const char* bad : {"", "A", "0a", "-a", "a_b", "a b", "é",
                          "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijkl"}) {
    const absl::Status s = CheckAccountName("tenant name", bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(s.message(), HasSubstr("must be 1-63 characters")) << bad;
  }
  // Control bytes and invalid UTF-8 are escaped in the message.
  EXPECT_EQ(CheckAccountName("user name", "a\nb").message(),
            "user name \"a\\x0Ab\" must be 1-63 characters of a-z, 0-9 and -, starting with a "
            "letter");
}

TEST(AdminArgsTest, TokenIds) {
  auto check = [](std::string id) { return CheckTokenId(&id); };
  EXPECT_TRUE(check("0123456789abcdef").ok());
  EXPECT_TRUE(check("0123456789ABCDEF").ok());
  EXPECT_FALSE(check("0123456789abcde").ok());
  EXPECT_FALSE(check("0123456789abcdefg").ok());
  EXPECT_FALSE(check("0123456789abcdeg").ok());
  // The id as messages and whoami print it.
  std::string printed = "dpl_0123456789abcdef";
  EXPECT_TRUE(CheckTokenId(&printed).ok());
  EXPECT_EQ(printed, "0123456789abcdef");
  EXPECT_FALSE(check("dpl_0123456789abcdeg").ok());
  const absl::Status whole = check("dpl_0123456789abcdef_secretsecret");
  EXPECT_THAT(whole.message(), ::testing::Not(HasSubstr("secretsecret")));
}

TEST(AdminArgsTest, DeviceCounts) {
  absl::StatusOr<std::vector<std::pair<std::string, int64_t>>> counts =
      ParseDeviceCounts("--nominal", {"cpu=4", "emulated=0", "cuda=1000000"});
  ASSERT_TRUE(counts.ok()) << counts.status();
  EXPECT_THAT(*counts,
              ::testing::ElementsAre(std::make_pair(std::string("cpu"), int64_t{4}),
                                     std::make_pair(std::string("emulated"), int64_t{0}),
                                     std::make_pair(std::string("cuda"), int64_t{1000000})));
  for (const char* bad : {"cpu", "=4", "cpu=", "cpu=1000001", "cpu=+1", "cpu=1.5", "any=1",
                          "cpu=99999999999999999999", "cpu =1"}) {
    EXPECT_EQ(ParseDeviceCounts("--nominal", {bad}).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
  EXPECT_EQ(ParseDeviceCounts("--shared", {"cpu=1", "cpu=2"}).status().message(),
            "--shared gives cpu twice: give each device type once");
}

TEST(AdminArgsTest, Ttl) {
  EXPECT_EQ(*ParseTtlSeconds("--ttl", "90s"), 90);
  EXPECT_EQ(*ParseTtlSeconds("--ttl", "30m"), 1800);
  EXPECT_EQ(*ParseTtlSeconds("--ttl", "24h"), 86400);
  EXPECT_EQ(*ParseTtlSeconds("--ttl", "7d"), 7 * 86400);
  EXPECT_EQ(*ParseTtlSeconds("--ttl", "3650d"), kMaxTtlSeconds);
  for (const char* bad :
       {"", "d", "7", "7w", "1.5h", "-1h", "1h30m", " 1h", "0d", "3651d", "99999999999d"}) {
    EXPECT_EQ(ParseTtlSeconds("--ttl", bad).status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

TEST(AdminArgsTest, Weight) {
  EXPECT_EQ(*ParseWeight("--weight", "2"), 2);
  EXPECT_EQ(*ParseWeight("--weight", "0.5"), 0.5);
  EXPECT_EQ(*ParseWeight("--weight", "1000"), 1000);
  for (const char* bad : {"", "0", "-1", "1001", "nan", "inf", "two"}) {
    EXPECT_EQ(ParseWeight("--weight", bad).status().message(),
              std::string("--weight must be a number greater than 0 and at most 1000, got \"") +
                  bad + "\"")
        << bad;
  }
}

TEST(AdminArgsTest, QuotaFromFlags) {
  QuotaFlags flags;
  EXPECT_FALSE(AnyQuotaFlag(flags));
  flags.cohort = "research";
  flags.nominal = {"cuda=2", "cpu=4"};
  flags.borrowing_limit = {"emulated=8"};
  flags.lending_limit = {"cpu=4"};
  flags.max_queued_jobs = "10";
  EXPECT_TRUE(AnyQuotaFlag(flags));
  absl::StatusOr<v1::TenantQuota> quota = BuildTenantQuota(flags);
  ASSERT_TRUE(quota.ok()) << quota.status();
  EXPECT_EQ(quota->cohort(), "research");
  EXPECT_EQ(quota->max_queued_jobs(), 10);
  EXPECT_EQ(quota->weight(), 0);  // not given: the coordinator's default
  // In kQuotaDeviceTypes' order; a type named only by a limit has nominal 0.
  ASSERT_EQ(quota->devices_size(), 3);
  EXPECT_EQ(quota->devices(0).device_type(), "cpu");
  EXPECT_EQ(quota->devices(0).lending_limit(), 4);
  EXPECT_FALSE(quota->devices(0).has_borrowing_limit());
  EXPECT_EQ(quota->devices(1).device_type(), "cuda");
  EXPECT_FALSE(quota->devices(1).has_lending_limit());
  EXPECT_EQ(quota->devices(2).device_type(), "emulated");
  EXPECT_EQ(quota->devices(2).nominal(), 0);
  EXPECT_EQ(quota->devices(2).borrowing_limit(), 8);

  QuotaFlags lend_without_nominal;
  lend_without_nominal.cohort = "c";
  lend_without_nominal.lending_limit = {"cuda=1"};
  EXPECT_EQ(BuildTenantQuota(lend_without_nominal).status().message(),
            "--lending-limit cuda=1 is above --nominal cuda=0: a tenant lends only its own "
            "nominal quota");
  QuotaFlags lend_without_cohort;
  lend_without_cohort.nominal = {"cuda=1"};
  lend_without_cohort.lending_limit = {"cuda=1"};
  EXPECT_EQ(BuildTenantQuota(lend_without_cohort).status().message(),
            "--lending-limit needs --cohort: a tenant outside a cohort neither borrows nor lends");
}

}  // namespace
}  // namespace dapple::ctl
