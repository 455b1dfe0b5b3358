#include "coordinator/scheduling/quota_store.h"

#include <sqlite3.h>

#include "coordinator/jobs/test_db.h"
#include "coordinator/scheduling/quota_policy.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace dapple::coordinator::scheduling {
namespace {

using ::testing::HasSubstr;

v1::TenantQuota Quota(const std::string& text) {
  v1::TenantQuota q;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &q)) << text;
  return q;
}

TEST(QuotaStoreTest, QuotasAndCohortsSurviveReopeningAndBuildTheConfig) {
  const std::string path = FreshDbPath();
  {
    auto store = QuotaStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)
                    ->SetTenantQuota("team-a", Quota(R"pb(
                                       cohort: "gpus"
                                       devices { device_type: "cpu" nominal: 4 borrowing_limit: 2 }
                                       devices { device_type: "cuda" nominal: 1 }
                                       weight: 2
                                     )pb"))
                    .ok());
    ASSERT_TRUE((*store)
                    ->SetTenantQuota("team-b", Quota(R"pb(
                                       cohort: "gpus"
                                       devices { device_type: "cpu" nominal: 2 lending_limit: 1 }
                                     )pb"))
                    .ok());
    v1::Cohort cohort;
    cohort.set_name("gpus");
    v1::DeviceQuota* shared = cohort.add_shared();
    shared->set_device_type("cpu");
    shared->set_nominal(3);
    ASSERT_TRUE((*store)->SetCohort(cohort).ok());
  }
  auto store = QuotaStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  const SchedulingConfig config = (*store)->Config(1234);
  EXPECT_EQ(config.starvation_after_ms, 1234);
  ASSERT_EQ(config.tenants.size(), 2u);
  const TenantConfig& a = config.tenants[0];
  EXPECT_EQ(a.name, "team-a");
  EXPECT_EQ(a.cohort, "gpus");
  EXPECT_EQ(a.nominal, (DeviceCounts{{"cpu", 4}, {"cuda", 1}}));
  ASSERT_TRUE(a.borrowing_limit.has_value());
  EXPECT_EQ(*a.borrowing_limit, (DeviceCounts{{"cpu", 2}}));  // cuda: may not be borrowed
  EXPECT_FALSE(a.lending_limit.has_value());                  // lends all
  EXPECT_EQ(a.weight, 2);
  EXPECT_EQ(a.max_queued_jobs, 1000);  // 0 reads 1000
  const TenantConfig& b = config.tenants[1];
  EXPECT_FALSE(b.borrowing_limit.has_value());
  EXPECT_EQ(*b.lending_limit, (DeviceCounts{{"cpu", 1}}));
  EXPECT_EQ(b.weight, 1);  // 0 reads 1
  ASSERT_EQ(config.cohorts.size(), 1u);
  EXPECT_EQ(config.cohorts[0].shared, (DeviceCounts{{"cpu", 3}}));
  EXPECT_TRUE(QuotaPolicy::Create(config).ok());
  EXPECT_EQ((*store)->Quota("team-b")->devices(0).nominal(), 2);
  EXPECT_FALSE((*store)->Quota("team-c").has_value());
}

// A quota an earlier version stored with another device type ("gpu", "any") keeps its other
// entries: the entry is left out (logged), not the tenant (which would then run nothing).
TEST(QuotaStoreTest, AStoredEntryOfAnotherDeviceTypeIsLeftOutNotTheTenant) {
  const std::string path = FreshDbPath();
  {
    auto store = QuotaStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
  }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  // Also a borrowing limit without a cohort, which earlier versions stored (it did nothing).
  const std::string blob = Quota(R"pb(devices { device_type: "cpu" nominal: 2 borrowing_limit: 1 }
                                      devices { device_type: "gpu" nominal: 1 })pb")
                               .SerializeAsString();
  sqlite3_stmt* stmt = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "INSERT INTO tenant_quotas (tenant, quota) VALUES ('old', ?1)",
                               -1, &stmt, nullptr),
            SQLITE_OK);
  sqlite3_bind_blob(stmt, 1, blob.data(), static_cast<int>(blob.size()), SQLITE_TRANSIENT);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_DONE);
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  auto store = QuotaStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  const SchedulingConfig config = (*store)->Config(0);
  ASSERT_EQ(config.tenants.size(), 1u);
  EXPECT_EQ(config.tenants[0].name, "old");
  EXPECT_EQ(config.tenants[0].nominal, (DeviceCounts{{"cpu", 2}}));
  EXPECT_FALSE(config.tenants[0].borrowing_limit.has_value());
  EXPECT_TRUE(QuotaPolicy::Create(config).ok());
}

TEST(QuotaStoreTest, RefusesWhatThePolicyWouldRefuseNamingFieldValueAndRule) {
  auto store = QuotaStore::Open(FreshDbPath());
  ASSERT_TRUE(store.ok()) << store.status();
  auto refused = [&](const std::string& text) {
    absl::Status s = (*store)->SetTenantQuota("team-a", Quota(text));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << text;
    return std::string(s.message());
  };
  EXPECT_THAT(refused(R"pb(devices { device_type: "cpu" nominal: -1 })pb"),
              HasSubstr("tenant team-a quota.devices[cpu].nominal must be >= 0, got -1"));
  EXPECT_THAT(refused(R"pb(devices { device_type: "cpu" nominal: 1 }
                           devices { device_type: "cpu" nominal: 2 })pb"),
              HasSubstr("device_type 'cpu' is given twice"));
  EXPECT_THAT(refused(R"pb(devices { nominal: 1 })pb"), HasSubstr("device_type must not be empty"));
  EXPECT_THAT(refused(R"pb(devices { device_type: "gpu" nominal: 1 })pb"),
              HasSubstr("device_type must be one of cpu, cuda, emulated, got 'gpu'"));
  EXPECT_THAT(refused(R"pb(cohort: "c"
                           devices { device_type: "cpu" nominal: 2 lending_limit: 3 })pb"),
              HasSubstr("lending_limit.cpu must be at most its nominal quota (2), got 3"));
  EXPECT_THAT(refused(R"pb(devices { device_type: "cpu" nominal: 2 borrowing_limit: 1 })pb"),
              HasSubstr("tenant team-a has a borrowing limit but no cohort"));
  EXPECT_THAT(refused(R"pb(weight: -1)pb"), HasSubstr("quota.weight must be > 0 (0: 1), got -1"));
  EXPECT_THAT(refused(R"pb(max_queued_jobs: -5)pb"),
              HasSubstr("quota.max_queued_jobs must be >= 1 (0: 1000), got -5"));
  EXPECT_TRUE((*store)->Quotas().empty());  // nothing refused was stored
  v1::Cohort unnamed;
  EXPECT_THAT((*store)->SetCohort(unnamed).message(), HasSubstr("cohort.name must not be empty"));
}

TEST(QuotaStoreTest, ACohortNamedOnlyByATenantIsListed) {
  auto store = QuotaStore::Open(FreshDbPath());
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->SetTenantQuota("team-a", Quota(R"pb(cohort: "c1")pb")).ok());
  const auto cohorts = (*store)->Cohorts();
  ASSERT_EQ(cohorts.size(), 1u);
  EXPECT_EQ(cohorts.begin()->second.name(), "c1");
}

}  // namespace
}  // namespace dapple::coordinator::scheduling
