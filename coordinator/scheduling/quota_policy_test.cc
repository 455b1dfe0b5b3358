#include "coordinator/scheduling/quota_policy.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::coordinator::scheduling {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

TenantConfig Tenant(const std::string& name, int64_t nominal, const std::string& cohort = "pool") {
  TenantConfig t;
  t.name = name;
  t.cohort = cohort;
  t.nominal = {{"cpu", nominal}};
  return t;
}

QuotaPolicy Make(std::vector<TenantConfig> tenants, int64_t starvation_ms = 600000) {
  SchedulingConfig config;
  config.tenants = std::move(tenants);
  config.starvation_after_ms = starvation_ms;
  absl::StatusOr<QuotaPolicy> policy = QuotaPolicy::Create(std::move(config));
  EXPECT_TRUE(policy.ok()) << policy.status();
  return *std::move(policy);
}

Workload Job(const std::string& id, const std::string& tenant, int64_t cpus, int64_t queued = 0,
             int32_t priority = 0) {
  Workload w;
  w.id = id;
  w.tenant = tenant;
  w.devices = {{"cpu", cpus}};
  w.queued_unix_ms = queued;
  w.priority = priority;
  return w;
}

Workload Running(const std::string& id, const std::string& tenant, int64_t cpus, int64_t admitted,
                 int32_t priority = 0) {
  Workload w = Job(id, tenant, cpus, 0, priority);
  w.admitted = true;
  w.admitted_unix_ms = admitted;
  return w;
}

// The simulated cluster: the policy's decisions applied at once (admitted jobs hold devices,
// preempted ones stop when told to with `Stop`).
struct Cluster {
  int64_t devices = 8;
  int64_t now = 1000;
  std::vector<Workload> workloads;

  ClusterState State() const {
    ClusterState s;
    s.now_unix_ms = now;
    s.workloads = workloads;
    int64_t used = 0;
    for (const Workload& w : workloads) {
      if (w.admitted) used += w.devices.at("cpu");
    }
    s.free_devices = {{"cpu", devices - used}};
    return s;
  }
  SchedulingDecision Step(const QuotaPolicy& policy) {
    SchedulingDecision d = policy.Decide(State());
    for (Workload& w : workloads) {
      for (const std::string& id : d.admit) {
        if (w.id == id) {
          w.admitted = true;
          w.admitted_unix_ms = now;
        }
      }
      for (const Preemption& p : d.preempt) {
        if (w.id == p.id) w.stopping = true;
      }
    }
    return d;
  }
  // A stopping job has saved its checkpoint and stopped: queued again.
  void Stop(const std::string& id) {
    for (Workload& w : workloads) {
      if (w.id == id) {
        w.admitted = false;
        w.stopping = false;
        w.queued_unix_ms = now;
      }
    }
  }
  void Finish(const std::string& id) {
    std::erase_if(workloads, [&](const Workload& w) { return w.id == id; });
  }
  bool Admitted(const std::string& id) const {
    for (const Workload& w : workloads) {
      if (w.id == id) return w.admitted;
    }
    return false;
  }
};

const Pending* Find(const SchedulingDecision& d, const std::string& id) {
  for (const Pending& p : d.pending) {
    if (p.id == id) return &p;
  }
  return nullptr;
}

TEST(QuotaPolicyTest, ConfigErrorsNameTheFieldAndRule) {
  auto make = [](std::vector<TenantConfig> tenants) {
    SchedulingConfig config;
    config.tenants = std::move(tenants);
    return QuotaPolicy::Create(config).status();
  };
  EXPECT_THAT(make({Tenant("a", 4), Tenant("a", 4)}).message(), HasSubstr("defined twice"));
  TenantConfig weightless = Tenant("a", 4);
  weightless.weight = 0;
  EXPECT_THAT(make({weightless}).message(), HasSubstr("tenant a weight must be > 0, got 0"));
  TenantConfig negative = Tenant("a", -1);
  EXPECT_THAT(make({negative}).message(), HasSubstr("tenant a nominal.cpu must be >= 0, got -1"));
  TenantConfig lender = Tenant("a", 4);
  lender.lending_limit = DeviceCounts{{"cpu", 5}};
  EXPECT_THAT(make({lender}).message(),
              HasSubstr("tenant a lending_limit.cpu must be at most its nominal quota (4), got 5"));
  EXPECT_TRUE(make({Tenant("a", 4), Tenant("b", 0, "")}).ok());
}

TEST(QuotaPolicyTest, SubmitRefusesWhatCanNeverRun) {
  TenantConfig a = Tenant("a", 4);
  a.borrowing_limit = DeviceCounts{{"cpu", 2}};
  a.max_queued_jobs = 2;
  const QuotaPolicy policy = Make({a, Tenant("b", 8)});
  EXPECT_EQ(policy.MaxDevices("a", "cpu"), 6);
  EXPECT_EQ(policy.MaxDevices("b", "cpu"), 12);
  EXPECT_TRUE(policy.CheckSubmit(Job("j", "a", 6), 0).ok());
  absl::Status big = policy.CheckSubmit(Job("j", "a", 7), 0);
  EXPECT_EQ(big.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(big.message(), HasSubstr("the job needs 7 cpu devices, more than tenant a can ever "
                                       "use (its maximum: 6, nominal quota 4 + what it may "
                                       "borrow 2): exceeds the tenant's maximum"));
  Workload gpu = Job("j", "a", 0);
  gpu.devices = {{"cuda", 1}};
  EXPECT_THAT(policy.CheckSubmit(gpu, 0).message(),
              HasSubstr("tenant a has no quota for cuda devices and cannot borrow them"));
  EXPECT_THAT(policy.CheckSubmit(Job("j", "z", 1), 0).message(),
              HasSubstr("tenant z has no quota for cpu devices and cannot borrow them; ask an "
                        "admin: dapplectl admin quota set z --nominal cpu=N ..."));
  absl::Status full = policy.CheckSubmit(Job("j", "a", 1), 2);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(full.message(), HasSubstr("already has 2 queued jobs, its limit"));
}

TEST(QuotaPolicyTest, AllOrNothingAndNoHeadOfLineBlocking) {
  const QuotaPolicy policy = Make({Tenant("a", 8, "")});
  Cluster c;
  c.workloads = {Running("r", "a", 5, 0), Job("big", "a", 4, 10), Job("small", "a", 3, 20)};
  SchedulingDecision d = c.Step(policy);
  // big does not fit in the 3 free devices and is not started in part; small, behind it, runs.
  EXPECT_THAT(d.admit, ElementsAre("small"));
  ASSERT_NE(Find(d, "big"), nullptr);
  EXPECT_EQ(Find(d, "big")->reason, PendingReason::kWaitingForQuota);
  EXPECT_THAT(Find(d, "big")->message,
              HasSubstr("tenant a uses 5 cpu devices in 1 job (nominal quota 8); this job "
                        "needs 4"));
}

TEST(QuotaPolicyTest, BorrowsWhenTheLenderIsIdle) {
  const QuotaPolicy policy = Make({Tenant("a", 4), Tenant("b", 4)});
  Cluster c;
  c.workloads = {Job("a1", "a", 3, 1), Job("a2", "a", 3, 2)};
  SchedulingDecision d = c.Step(policy);
  EXPECT_THAT(d.admit, ElementsAre("a1", "a2"));  // a2 borrows 2 of b's unused 4
  c.workloads.push_back(Job("a3", "a", 3, 3));
  d = c.Step(policy);
  EXPECT_THAT(d.admit, IsEmpty());
  EXPECT_EQ(Find(d, "a3")->reason, PendingReason::kWaitingForQuota);
  EXPECT_THAT(Find(d, "a3")->message,
              HasSubstr("tenant a uses 6 cpu devices in 2 jobs (nominal quota 4, 2 borrowed), "
                        "its cohort has 2 to lend; this job needs 3"));
}

TEST(QuotaPolicyTest, AJobBeyondTheNominalQuotaSaysWhyTheLentQuotaIsNotReclaimed) {
  const QuotaPolicy policy = Make({Tenant("a", 2), Tenant("b", 2)});
  Cluster c;
  c.workloads = {Running("a0", "a", 4, 1), Job("b1", "b", 3, 2)};
  SchedulingDecision d = c.Step(policy);
  EXPECT_THAT(d.preempt, IsEmpty());  // reclaim serves only a job within b's nominal 2
  EXPECT_EQ(Find(d, "b1")->reason, PendingReason::kWaitingForQuota);
  EXPECT_EQ(Find(d, "b1")->message,
            "tenant b uses 0 cpu devices in 0 jobs (nominal quota 2), its cohort has 0 to lend; "
            "this job needs 3, more than the 2 left of its nominal quota, which other tenants of "
            "the cohort borrow and which is reclaimed only for a job within it");
  // Nobody borrows: the plain message.
  c.workloads = {Running("a0", "a", 2, 1), Job("b1", "b", 3, 2)};
  d = c.Step(policy);
  EXPECT_EQ(Find(d, "b1")->message,
            "tenant b uses 0 cpu devices in 0 jobs (nominal quota 2), its cohort has 0 to lend; "
            "this job needs 3");
}

TEST(QuotaPolicyTest, BorrowingAndLendingLimitsHold) {
  TenantConfig a = Tenant("a", 4);
  a.borrowing_limit = DeviceCounts{{"cpu", 1}};
  TenantConfig b = Tenant("b", 4);
  b.lending_limit = DeviceCounts{{"cpu", 2}};
  const QuotaPolicy policy = Make({a, b, Tenant("c", 0)});
  EXPECT_EQ(policy.MaxDevices("a", "cpu"), 5);  // 4 + its borrowing limit 1
  EXPECT_EQ(policy.MaxDevices("c", "cpu"), 6);  // a lends its 4, b only 2
  Cluster c;
  c.workloads = {Running("a0", "a", 4, 1), Job("a1", "a", 1, 2), Job("a2", "a", 1, 3),
                 Job("c1", "c", 3, 4)};
  SchedulingDecision d = c.Step(policy);
  // a borrows 1 (its limit), not 2; a uses its own 4, so only b's 2 are lendable: c1's 3 wait.
  EXPECT_THAT(d.admit, ElementsAre("a1"));
  EXPECT_EQ(Find(d, "a2")->reason, PendingReason::kWaitingForQuota);
  EXPECT_EQ(Find(d, "c1")->reason, PendingReason::kWaitingForQuota);
  EXPECT_THAT(Find(d, "c1")->message, HasSubstr("its cohort has 1 to lend; this job needs 3"));
  ClusterState s = c.State();
  s.workloads.push_back(Job("a3", "a", 6, 5));
  EXPECT_EQ(Find(policy.Decide(s), "a3")->reason, PendingReason::kExceedsMaximum);
}

TEST(QuotaPolicyTest, ReclaimPreemptsTheNewestBorrowingJobThenAdmits) {
  const QuotaPolicy policy = Make({Tenant("a", 4), Tenant("b", 4)});
  Cluster c;
  c.workloads = {Running("a1", "a", 3, 100), Running("a2", "a", 3, 200), Running("a3", "a", 1, 50),
                 Job("b1", "b", 4, 300)};
  SchedulingDecision d = c.Step(policy);
  // a holds 7 (3 borrowed); b needs its 4: stopping a2 (the newest borrowing job) frees enough.
  ASSERT_EQ(d.preempt.size(), 1u);
  EXPECT_EQ(d.preempt[0].id, "a2");
  EXPECT_EQ(d.preempt[0].reason, "reclaimed: tenant b needs its nominal quota back");
  EXPECT_EQ(Find(d, "b1")->reason, PendingReason::kWaitingForPreemption);
  // While a2 saves its checkpoint, b1 waits and nothing more is preempted.
  d = c.Step(policy);
  EXPECT_THAT(d.preempt, IsEmpty());
  EXPECT_EQ(Find(d, "b1")->reason, PendingReason::kWaitingForPreemption);
  EXPECT_THAT(Find(d, "b1")->message, HasSubstr("1 preempted job is stopping"));
  c.Stop("a2");
  d = c.Step(policy);
  EXPECT_THAT(d.admit, ElementsAre("b1"));
  // a2 is queued again and waits for quota: nobody lends now.
  EXPECT_EQ(Find(d, "a2")->reason, PendingReason::kWaitingForQuota);
  EXPECT_TRUE(c.Admitted("b1"));
}

TEST(QuotaPolicyTest, NoReclaimBeyondTheNominalQuota) {
  const QuotaPolicy policy = Make({Tenant("a", 4), Tenant("b", 4)});
  Cluster c;
  c.workloads = {Running("a1", "a", 6, 100), Running("b1", "b", 2, 50), Job("b2", "b", 3, 300)};
  SchedulingDecision d = c.Step(policy);
  // b would hold 5 > its nominal 4: it may not take back more than it owns.
  EXPECT_THAT(d.preempt, IsEmpty());
  EXPECT_EQ(Find(d, "b2")->reason, PendingReason::kWaitingForQuota);
}

TEST(QuotaPolicyTest, PriorityPreemptsLowerPriorityJobsOfTheSameTenant) {
  const QuotaPolicy policy = Make({Tenant("a", 8, "")});
  Cluster c;
  c.workloads = {Running("low-old", "a", 4, 100, 0), Running("low-new", "a", 4, 200, 0),
                 Job("high", "a", 4, 300, 5), Job("same", "a", 4, 310, 0)};
  SchedulingDecision d = c.Step(policy);
  ASSERT_EQ(d.preempt.size(), 1u);
  EXPECT_EQ(d.preempt[0].id, "low-new");
  EXPECT_EQ(d.preempt[0].reason, "preempted by high of priority 5");
  EXPECT_EQ(Find(d, "high")->reason, PendingReason::kWaitingForPreemption);
  EXPECT_EQ(Find(d, "same")->reason, PendingReason::kWaitingForPreemption);
  c.Stop("low-new");
  d = c.Step(policy);
  EXPECT_THAT(d.admit, ElementsAre("high"));
}

TEST(QuotaPolicyTest, ABigJobIsNotStarvedBySmallOnes) {
  const QuotaPolicy policy = Make({Tenant("a", 8, "")}, /*starvation_ms=*/60000);
  Cluster c;
  c.now = 0;
  c.workloads = {Running("s1", "a", 2, 0), Running("s2", "a", 2, 0), Running("s3", "a", 2, 0),
                 Running("s4", "a", 2, 0), Job("big", "a", 8, 0)};
  int next = 5;
  bool big_ran = false;
  // Every 10 s one small job ends and another small one is queued: without the starvation
  // rule the freed 2 devices always go to a small job and big never runs.
  for (int round = 0; round < 30 && !big_ran; ++round) {
    c.now += 10000;
    for (const Workload& w : c.workloads) {
      if (w.admitted && w.id != "big") {
        c.Finish(w.id);
        break;
      }
    }
    c.workloads.push_back(Job("s" + std::to_string(next++), "a", 2, c.now));
    SchedulingDecision d = c.Step(policy);
    big_ran = c.Admitted("big");
    if (!big_ran && c.now < 60000) {
      // Before the bound, smaller jobs go ahead (no head-of-line blocking).
      EXPECT_THAT(d.admit, Not(IsEmpty())) << "at " << c.now;
    }
  }
  EXPECT_TRUE(big_ran);
  EXPECT_LE(c.now, 60000 + 4 * 10000);  // the bound plus the time for 4 small jobs to end
}

TEST(QuotaPolicyTest, EveryPendingReason) {
  TenantConfig a = Tenant("a", 4, "");
  const QuotaPolicy policy = Make({a, Tenant("b", 2), Tenant("c", 2)});
  ClusterState s;
  s.now_unix_ms = 1000;
  s.free_devices = {{"cpu", 1}};
  Workload gpu = Job("g", "a", 0);
  gpu.devices = {{"cuda", 1}};
  s.workloads = {gpu, Job("x", "a", 9), Job("z", "nobody", 1), Job("d", "b", 2)};
  SchedulingDecision d = policy.Decide(s);
  // (BeingMeasured is the service's: it keeps an admitted job waiting for its measurement.)
  EXPECT_EQ(Find(d, "g")->reason, PendingReason::kMisconfigured);
  EXPECT_EQ(Find(d, "x")->reason, PendingReason::kExceedsMaximum);
  EXPECT_EQ(Find(d, "z")->reason, PendingReason::kMisconfigured);
  // b's quota allows 2; the cluster has 1 free device.
  EXPECT_EQ(Find(d, "d")->reason, PendingReason::kWaitingForDevices);
  EXPECT_EQ(Find(d, "d")->message, "the cluster has 1 cpu device free; this job needs 2");
  EXPECT_STREQ(PendingReasonName(PendingReason::kWaitingForPreemption), "WaitingForPreemption");
}

// A job being measured is admitted like any other and so keeps its devices: set aside, its
// devices went to a job queued after it (a borrower preempted for it was admitted again, and
// preempted a second time once the measurement was in).
TEST(QuotaPolicyTest, AJobBeingMeasuredKeepsItsPlaceAndItsDevices) {
  const QuotaPolicy policy = Make({Tenant("a", 2)});
  ClusterState s;
  s.now_unix_ms = 1000;
  s.free_devices = {{"cpu", 2}};
  Workload measured = Job("m", "a", 2, /*queued=*/100);
  measured.measuring = true;
  s.workloads = {measured, Job("later", "a", 2, /*queued=*/200)};
  SchedulingDecision d = policy.Decide(s);
  EXPECT_EQ(d.admit, std::vector<std::string>{"m"});
  ASSERT_NE(Find(d, "later"), nullptr);
}

// A waiting job's message counts its own tenant's use, never names another tenant's jobs.
TEST(QuotaPolicyTest, MessagesNameNoOtherTenantsJobs) {
  const QuotaPolicy policy = Make({Tenant("a", 2), Tenant("b", 2)});
  Cluster c;
  c.devices = 4;
  c.workloads = {Running("secret-job-of-b", "b", 2, 0), Running("a1", "a", 2, 0),
                 Job("a2", "a", 2, 10)};
  SchedulingDecision d = c.Step(policy);
  for (const Pending& p : d.pending) {
    EXPECT_THAT(p.message, Not(HasSubstr("secret"))) << p.message;
    EXPECT_THAT(p.message, Not(HasSubstr("tenant b"))) << p.message;
  }
}

// The tenant with the smaller weighted share beyond its nominal quota goes first.
TEST(QuotaPolicyTest, FairShareOrdersTenantsByWeightedShare) {
  TenantConfig a = Tenant("a", 0);
  a.weight = 2;
  TenantConfig b = Tenant("b", 0);
  SchedulingConfig config;
  config.tenants = {a, b};
  config.cohorts = {CohortConfig{"pool", {{"cpu", 8}}}};
  absl::StatusOr<QuotaPolicy> policy = QuotaPolicy::Create(config);
  ASSERT_TRUE(policy.ok()) << policy.status();
  Cluster c;
  c.workloads = {Running("a1", "a", 2, 0), Running("b1", "b", 2, 0), Job("b2", "b", 2, 1),
                 Job("a2", "a", 2, 2), Job("a3", "a", 2, 3)};
  // Shares: a 2/8/2 = 0.125, b 2/8/1 = 0.25: a first (a2), then a is at 0.25 = b: a by name
  // order (a3); 8 devices are then in use, b2 waits.
  SchedulingDecision d = c.Step(*policy);
  EXPECT_THAT(d.admit, ElementsAre("a2", "a3"));
  EXPECT_EQ(Find(d, "b2")->reason, PendingReason::kWaitingForQuota);
}

}  // namespace
}  // namespace dapple::coordinator::scheduling
