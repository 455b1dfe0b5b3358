#include "coordinator/scheduling/scheduling_manager.h"

#include <algorithm>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::coordinator::scheduling {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

Workload Job(const std::string& id, const std::string& tenant, int64_t cpus, int64_t queued_ms,
             int32_t priority = 0) {
  Workload w;
  w.id = id;
  w.tenant = tenant;
  w.devices = {{"cpu", cpus}};
  w.queued_unix_ms = queued_ms;
  w.priority = priority;
  return w;
}

Workload Admitted(Workload w, int64_t at_ms) {
  w.admitted = true;
  w.admitted_unix_ms = at_ms;
  return w;
}

// Two tenants of one cohort, 2 cpu devices each.
SchedulingManager TwoTenants() {
  SchedulingConfig config;
  config.tenants.push_back({"a", "c", {{"cpu", 2}}});
  config.tenants.push_back({"b", "c", {{"cpu", 2}}});
  absl::StatusOr<SchedulingManager> m = SchedulingManager::Create(config);
  EXPECT_TRUE(m.ok()) << m.status();
  return *std::move(m);
}

const Pending* PendingOf(const SchedulingDecision& d, const std::string& id) {
  for (const Pending& p : d.pending) {
    if (p.id == id) return &p;
  }
  return nullptr;
}

TEST(SchedulingManagerTest, TheOperatorsJobsAreFifoWithoutHeadOfLineBlocking) {
  SchedulingManager m = TwoTenants();
  ClusterState s;
  s.now_unix_ms = 1000;
  s.free_devices = {{"cpu", 2}};
  s.workloads = {Job("job-1", "", 3, 1), Job("job-2", "", 2, 2), Job("job-3", "", 1, 3)};
  const SchedulingDecision d = m.Decide(s);
  // job-1 needs 3 of 2 free: it does not stop job-2 (all or nothing: never a part of job-1).
  EXPECT_THAT(d.admit, ElementsAre("job-2"));
  ASSERT_NE(PendingOf(d, "job-1"), nullptr);
  EXPECT_EQ(PendingOf(d, "job-1")->reason, PendingReason::kWaitingForDevices);
  EXPECT_EQ(PendingOf(d, "job-3")->reason, PendingReason::kWaitingForDevices);
  // No message names the operator's queue's inner name.
  for (const Pending& p : d.pending) EXPECT_THAT(p.message, Not(HasSubstr("_operator")));
}

TEST(SchedulingManagerTest, AStarvingOperatorJobHoldsTheDevicesItNeeds) {
  SchedulingConfig config;
  config.starvation_after_ms = 1000;
  SchedulingManager m = *SchedulingManager::Create(config);
  ClusterState s;
  s.now_unix_ms = 5000;  // job-1 waited 4 s > 1 s
  s.free_devices = {{"cpu", 2}};
  s.workloads = {Job("job-1", "", 3, 1000), Job("job-2", "", 1, 4000)};
  const SchedulingDecision d = m.Decide(s);
  EXPECT_THAT(d.admit, IsEmpty());
  EXPECT_THAT(PendingOf(d, "job-1")->message, HasSubstr("held for it as they come free"));
}

TEST(SchedulingManagerTest, OperatorJobsAreNeverPreemptedNorPreempt) {
  SchedulingManager m = TwoTenants();
  ClusterState s;
  s.now_unix_ms = 1000;
  s.free_devices = {{"cpu", 0}};
  s.workloads = {Admitted(Job("job-1", "", 2, 1), 10), Admitted(Job("job-2", "", 2, 2), 20),
                 Job("job-3", "a", 2, 3), Job("job-4", "", 1, 4, /*priority=*/500)};
  const SchedulingDecision d = m.Decide(s);
  EXPECT_THAT(d.preempt, IsEmpty());
  EXPECT_EQ(PendingOf(d, "job-3")->reason, PendingReason::kWaitingForDevices);
  EXPECT_EQ(PendingOf(d, "job-4")->reason, PendingReason::kWaitingForDevices);
}

TEST(SchedulingManagerTest, ReclaimPreemptsTheBorrowerNotTheOperator) {
  SchedulingManager m = TwoTenants();
  ClusterState s;
  s.now_unix_ms = 1000;
  s.free_devices = {{"cpu", 0}};
  // b borrows a's 2 devices (4 in use, nominal 2); a submits within its nominal quota.
  s.workloads = {Admitted(Job("job-1", "b", 2, 1), 10), Admitted(Job("job-2", "b", 2, 2), 20),
                 Job("job-3", "a", 2, 3)};
  const SchedulingDecision d = m.Decide(s);
  ASSERT_EQ(d.preempt.size(), 1u);
  EXPECT_EQ(d.preempt[0].id, "job-2");  // the most recently admitted
  EXPECT_THAT(d.preempt[0].reason, HasSubstr("reclaimed: tenant a"));
  EXPECT_EQ(PendingOf(d, "job-3")->reason, PendingReason::kWaitingForPreemption);
}

TEST(SchedulingManagerTest, CheckSubmitRefusesWhatCanNeverRunAndAFullQueue) {
  SchedulingConfig config;
  TenantConfig a{"team-a", "", {{"cpu", 2}}};
  a.max_queued_jobs = 3;
  config.tenants.push_back(a);
  SchedulingManager m = *SchedulingManager::Create(config);
  EXPECT_TRUE(m.CheckSubmit(Job("x", "team-a", 2, 0), 2).ok());
  EXPECT_TRUE(m.CheckSubmit(Job("x", "", 64, 0), 100000).ok());  // the operator's: no quota
  absl::Status full = m.CheckSubmit(Job("x", "team-a", 1, 0), 3);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(full.message(),
            "tenant team-a has 3 queued jobs (its max_queued_jobs): wait for some to start or "
            "cancel some");
  absl::Status big = m.CheckSubmit(Job("x", "team-a", 3, 0), 0);
  EXPECT_EQ(big.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(big.message(), HasSubstr("exceeds the tenant's maximum"));
  Workload cuda = Job("x", "team-a", 0, 0);
  cuda.devices = {{"cuda", 1}};
  absl::Status none = m.CheckSubmit(cuda, 0);
  EXPECT_EQ(none.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(none.message(), HasSubstr("no quota for cuda devices"));
  EXPECT_THAT(none.message(), HasSubstr("dapplectl admin quota set team-a"));
  absl::Status unknown = m.CheckSubmit(Job("x", "team-z", 1, 0), 0);
  EXPECT_THAT(unknown.message(), HasSubstr("tenant team-z has no quota for cpu devices"));
  EXPECT_THAT(unknown.message(), HasSubstr("dapplectl admin quota set team-z"));
}

// A job for any device is charged to a type its tenant can hold (cuda before cpu); a concrete
// type stays; the operator's jobs and tenants without any quota keep "any".
TEST(SchedulingManagerTest, AJobForAnyDeviceIsChargedToATypeItsTenantHasQuotaFor) {
  SchedulingConfig config;
  config.tenants.push_back({"cpus", "c", {{"cpu", 2}}});
  config.tenants.push_back({"both", "", {{"cpu", 2}, {"cuda", 1}}});
  config.tenants.push_back({"none", "", {}});
  TenantConfig borrower{"borrower", "c", {}};  // nothing nominal, borrows the cohort's cpus
  config.tenants.push_back(borrower);
  SchedulingManager m = *SchedulingManager::Create(config);
  EXPECT_EQ(m.ChargedDeviceType("cpus", ""), "cpu");
  EXPECT_EQ(m.ChargedDeviceType("cpus", "any"), "cpu");
  EXPECT_EQ(m.ChargedDeviceType("cpus", "cuda"), "cuda");  // refused by CheckSubmit, by name
  EXPECT_EQ(m.ChargedDeviceType("both", "any"), "cuda");
  EXPECT_EQ(m.ChargedDeviceType("both", "emulated"), "emulated");
  EXPECT_EQ(m.ChargedDeviceType("borrower", ""), "cpu");
  EXPECT_EQ(m.ChargedDeviceType("none", ""), "any");
  EXPECT_EQ(m.ChargedDeviceType("", ""), "any");
  EXPECT_EQ(m.ChargedDeviceType("", "cpu"), "cpu");
}

TEST(SchedulingManagerTest, UsageCountsBorrowedAndLent) {
  SchedulingManager m = TwoTenants();
  ClusterState s;
  s.workloads = {Admitted(Job("job-1", "b", 3, 1), 10), Job("job-2", "a", 1, 2),
                 Admitted(Job("job-3", "", 4, 3), 10)};
  const auto usage = m.Usage(s);
  EXPECT_EQ(usage.at("b").at("cpu").in_use, 3);
  EXPECT_EQ(usage.at("b").at("cpu").borrowed, 1);
  EXPECT_EQ(usage.at("a").at("cpu").in_use, 0);
  EXPECT_EQ(usage.at("a").at("cpu").lent, 1);
  EXPECT_EQ(usage.at("a").at("cpu").nominal, 2);
  EXPECT_FALSE(usage.contains(""));
}

TEST(SchedulingManagerTest, NominalQuotasBeyondTheLiveDevicesAreNoted) {
  SchedulingManager m = TwoTenants();  // a and b: cpu 2 each
  ClusterState s;
  s.free_devices = {{"cpu", 1}};
  s.workloads = {Admitted(Job("job-1", "b", 3, 1), 10), Job("job-2", "a", 8, 2)};
  EXPECT_THAT(m.NominalBeyondDevices(s), IsEmpty());  // 1 free + 3 held = 4 = 2 + 2
  s.workloads.pop_back();
  s.workloads.front().devices = {{"cpu", 2}};
  EXPECT_THAT(m.NominalBeyondDevices(s),
              ElementsAre("the nominal quotas total 4 cpu devices, more than the 3 the live "
                          "workers have: a nominal quota is guaranteed only as far as those "
                          "devices exist"));
  // A cohort's shared devices are promised too; a type no worker has counts 0.
  SchedulingConfig config = m.config();
  for (CohortConfig& cohort : config.cohorts) {
    if (cohort.name == "c") cohort.shared["cuda"] = 1;
  }
  absl::StatusOr<SchedulingManager> with_cohort = SchedulingManager::Create(config);
  ASSERT_TRUE(with_cohort.ok()) << with_cohort.status();
  s.free_devices = {{"cpu", 2}};
  EXPECT_THAT(with_cohort->NominalBeyondDevices(s),
              ElementsAre("the nominal quotas total 1 cuda device, more than the 0 the live "
                          "workers have: a nominal quota is guaranteed only as far as those "
                          "devices exist"));
}

TEST(SchedulingManagerTest, OldestWithinQuotaIsTheLongestWaitingJobThatFitsNominal) {
  SchedulingManager m = TwoTenants();
  ClusterState state;
  state.now_unix_ms = 100'000;
  // b borrowed a's quota: 3 of 4 devices; a holds 1 of its 2.
  state.workloads.push_back(Admitted(Job("b1", "b", 3, 0), 1'000));
  state.workloads.push_back(Admitted(Job("a0", "a", 1, 0), 1'000));
  state.workloads.push_back(Job("a1", "a", 1, 20'000));  // fits: 1 + 1 <= 2
  state.workloads.push_back(Job("a2", "a", 1, 30'000));  // fits too, queued later
  state.workloads.push_back(Job("a3", "a", 2, 10'000));  // 1 + 2 > 2: would borrow
  Workload measured = Job("a4", "a", 1, 5'000);
  measured.measuring = true;  // not admissible yet
  state.workloads.push_back(measured);
  state.workloads.push_back(Job("b2", "b", 1, 1'000));  // b is above its nominal quota
  state.workloads.push_back(Job("op", "", 1, 2'000));   // the operator's queue has no quota
  const auto usage = m.Usage(state);
  const auto oldest = SchedulingManager::OldestWithinQuota(state, usage);
  ASSERT_EQ(oldest.size(), 1u);
  EXPECT_EQ(oldest.at("a"), (std::map<std::string, int64_t>{{"cpu", 20'000}}));
  // Once a's jobs are admitted (or gone), nothing of a waits within its quota.
  state.workloads.erase(state.workloads.begin() + 2, state.workloads.begin() + 4);
  EXPECT_TRUE(SchedulingManager::OldestWithinQuota(state, m.Usage(state)).empty());
}

TEST(SchedulingManagerTest, DeviceTypeKey) {
  EXPECT_EQ(DeviceTypeKey(""), "any");
  EXPECT_EQ(DeviceTypeKey("cuda"), "cuda");
}

}  // namespace
}  // namespace dapple::coordinator::scheduling
