#include "coordinator/scheduling/tenants_file.h"

#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::coordinator::scheduling {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kFile[] = R"(cohorts:
  - name: research
    shared: {cpu: 4}
tenants:
  - name: team-a
    cohort: research
    weight: 2
    max_queued_jobs: 100
    quota:
      cuda: {nominal: 8, borrowing_limit: 4, lending_limit: 2}
      cpu: {nominal: 4}
  - name: team-b
    cohort: research
    quota:
      cpu: {nominal: 2}
)";

std::string Error(const std::string& yaml) {
  absl::StatusOr<TenantsFile> f = ParseTenantsFile(yaml, "tenants.yaml");
  if (f.ok()) return "";
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(f.status().message());
}

TEST(TenantsFileTest, ParsesTenantsCohortsAndQuotas) {
  absl::StatusOr<TenantsFile> f = ParseTenantsFile(kFile, "tenants.yaml");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_THAT(f->tenants, ElementsAre("team-a", "team-b"));
  ASSERT_EQ(f->cohorts.size(), 1u);
  EXPECT_EQ(f->cohorts[0].name(), "research");
  EXPECT_EQ(f->cohorts[0].shared(0).device_type(), "cpu");
  EXPECT_EQ(f->cohorts[0].shared(0).nominal(), 4);
  const v1::TenantQuota& a = f->quotas.at("team-a");
  EXPECT_EQ(a.cohort(), "research");
  EXPECT_EQ(a.weight(), 2);
  EXPECT_EQ(a.max_queued_jobs(), 100);
  ASSERT_EQ(a.devices_size(), 2);
  EXPECT_EQ(a.devices(0).device_type(), "cuda");
  EXPECT_EQ(a.devices(0).nominal(), 8);
  EXPECT_EQ(a.devices(0).borrowing_limit(), 4);
  EXPECT_EQ(a.devices(0).lending_limit(), 2);
  EXPECT_FALSE(a.devices(1).has_borrowing_limit());
  EXPECT_TRUE(ParseTenantsFile("", "t").ok());  // an empty file applies nothing
}

TEST(TenantsFileTest, ErrorsNameFieldValueRuleAndPosition) {
  EXPECT_EQ(Error("tenants:\n  - name: team-a\n    quota:\n      cuda: {nominal: -1}\n"),
            "tenants.yaml:4:23: tenants[0].quota.cuda.nominal must be an integer >= 0, got '-1'");
  EXPECT_EQ(Error("tenants:\n  - name: team-a\n    quota:\n      cuda: {nomnal: 1}\n"),
            "tenants.yaml:4:14: unknown field 'nomnal' in tenants[0].quota.cuda; known: nominal, "
            "borrowing_limit, lending_limit");
  EXPECT_EQ(
      Error("tenant:\n  - name: a\n"),
      "tenants.yaml:1:1: unknown field 'tenant' in the tenants file; known: cohorts, tenants");
  EXPECT_EQ(Error("tenants:\n  - name: Team_A\n    quota: {cpu: {nominal: 1}}\n"),
            "tenants.yaml:2:11: tenants[0].name must be a name of 1-63 of a-z, 0-9 and '-', "
            "starting with a letter, got 'Team_A'");
  EXPECT_EQ(Error("tenants:\n  - {name: a, quota: {cpu: {nominal: 1}}}\n"
                  "  - {name: a, quota: {cpu: {nominal: 2}}}\n"),
            "tenants.yaml:3:12: tenants[1].name 'a' is given twice");
  // A misspelt device type would leave the tenant unable to run anything.
  EXPECT_EQ(Error("tenants:\n  - {name: a, quota: {gpu: {nominal: 1}}}\n"),
            "tenants.yaml:2:23: the keys of tenants[0].quota must be device types (cpu, cuda, "
            "emulated), got 'gpu'");
  EXPECT_EQ(Error("cohorts:\n  - {name: c, shared: {any: 2}}\n"),
            "tenants.yaml:2:24: the keys of cohorts[0].shared must be device types (cpu, cuda, "
            "emulated), got 'any'");
  EXPECT_EQ(
      Error("tenants:\n  - {name: a, cohort: c, quota: {cpu: {nominal: 1, lending_limit: 3}}}\n"),
      "tenants.yaml:2:67: tenants[0].quota.cpu.lending_limit must be at most "
      "tenants[0].quota.cpu.nominal (1), got 3");
  // As `dapplectl admin quota set --borrowing-limit` without --cohort.
  EXPECT_EQ(Error("tenants:\n  - {name: a, quota: {cpu: {nominal: 1, borrowing_limit: 2}}}\n"),
            "tenants.yaml:2:58: tenants[0].quota.cpu.borrowing_limit needs tenants[0].cohort: a "
            "tenant outside a cohort neither borrows nor lends");
  EXPECT_EQ(Error("tenants:\n  - {name: a, weight: 0, quota: {cpu: {nominal: 1}}}\n"),
            "tenants.yaml:2:23: tenants[0].weight must be a number > 0 (and at most 1e6), got '0'");
  EXPECT_EQ(Error("tenants:\n  - {name: a, max_queued_jobs: 0, quota: {cpu: {nominal: 1}}}\n"),
            "tenants.yaml:2:32: tenants[0].max_queued_jobs must be an integer >= 1, got '0'");
  EXPECT_EQ(Error("tenants:\n  - name: a\n"),
            "tenants.yaml:2:5: tenants[0] (a) has no quota: give tenants[0].quota.<device "
            "type>.nominal");
  EXPECT_THAT(Error("tenants: [\n"), HasSubstr("tenants.yaml:2:1: YAML syntax error"));
  EXPECT_THAT(Error(std::string(kMaxTenantsFileBytes + 1, '#')),
              HasSubstr("a tenants file may be at most 1048576 bytes"));
}

// The target of ApplyTenantsFile in memory.
struct FakeCluster {
  std::vector<std::string> tenants = {"team-b", "other"};
  std::map<std::string, v1::TenantQuota> quotas;
  std::map<std::string, v1::Cohort> cohorts;
  std::vector<std::string> calls;

  TenantsTarget Target() {
    TenantsTarget t;
    t.list_tenants = [this]() -> absl::StatusOr<std::vector<std::string>> { return tenants; };
    t.create_tenant = [this](const std::string& name) {
      calls.push_back("create " + name);
      tenants.push_back(name);
      return absl::OkStatus();
    };
    t.quotas = [this]() -> absl::StatusOr<std::map<std::string, v1::TenantQuota>> {
      return quotas;
    };
    t.cohorts = [this]() -> absl::StatusOr<std::map<std::string, v1::Cohort>> { return cohorts; };
    t.set_cohort = [this](const v1::Cohort& c) {
      calls.push_back("cohort " + c.name());
      cohorts[c.name()] = c;
      return absl::OkStatus();
    };
    t.set_quota = [this](const std::string& name, const v1::TenantQuota& q) {
      calls.push_back("quota " + name);
      quotas[name] = q;
      return absl::OkStatus();
    };
    return t;
  }
};

TEST(TenantsFileTest, ApplyCreatesMissingSetsChangedAndIsIdempotent) {
  absl::StatusOr<TenantsFile> f = ParseTenantsFile(kFile, "tenants.yaml");
  ASSERT_TRUE(f.ok()) << f.status();
  FakeCluster cluster;
  cluster.quotas["other"].set_cohort("elsewhere");
  absl::StatusOr<TenantsApplied> applied = ApplyTenantsFile(*f, cluster.Target());
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ(applied->tenants_created, 1);
  EXPECT_EQ(applied->cohorts_set, 1);
  EXPECT_EQ(applied->quotas_set, 2);
  EXPECT_THAT(cluster.calls,
              ElementsAre("create team-a", "cohort research", "quota team-a", "quota team-b"));
  // Applied again (the next start): nothing changes.
  cluster.calls.clear();
  applied = ApplyTenantsFile(*f, cluster.Target());
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ(applied->tenants_created + applied->cohorts_set + applied->quotas_set, 0);
  EXPECT_TRUE(cluster.calls.empty());
  // Never deletes: a tenant absent from the file keeps its quota.
  EXPECT_THAT(cluster.tenants, ElementsAre("team-b", "other", "team-a"));
  EXPECT_EQ(cluster.quotas.at("other").cohort(), "elsewhere");
  // A changed quota is set again, alone.
  f->quotas["team-b"].mutable_devices(0)->set_nominal(3);
  applied = ApplyTenantsFile(*f, cluster.Target());
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_THAT(cluster.calls, ElementsAre("quota team-b"));
}

TEST(TenantsFileTest, ApplyNamesWhatFailed) {
  absl::StatusOr<TenantsFile> f = ParseTenantsFile(kFile, "tenants.yaml");
  ASSERT_TRUE(f.ok()) << f.status();
  FakeCluster cluster;
  TenantsTarget target = cluster.Target();
  target.set_quota = [](const std::string&, const v1::TenantQuota&) {
    return absl::InvalidArgumentError("no room");
  };
  absl::StatusOr<TenantsApplied> applied = ApplyTenantsFile(*f, target);
  EXPECT_EQ(applied.status(), absl::InvalidArgumentError("tenants file: tenant team-a: no room"));
}

}  // namespace
}  // namespace dapple::coordinator::scheduling
