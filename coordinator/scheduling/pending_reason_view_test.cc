// Every pending reason the policy gives, as `dapplectl get` and `list` show it
// (dapplectl/views.h PendingReasonText, RenderJobDetails): the reason's name once, then a message
// that says what to do and never repeats the reason in words. The expected texts are the examples
// in docs/scheduling.md ("Pending reasons") and docs/dapplectl.md, word for word.
#include <map>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "coordinator/scheduling/quota_policy.h"
#include "dapplectl/views.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::coordinator::scheduling {
namespace {

using ::testing::HasSubstr;

TenantConfig Tenant(const std::string& name, int64_t cpus) {
  TenantConfig t;
  t.name = name;
  t.nominal = {{"cpu", cpus}};
  return t;
}

Workload Job(const std::string& id, const std::string& tenant, const std::string& type, int64_t n,
             bool admitted = false) {
  Workload w;
  w.id = id;
  w.tenant = tenant;
  w.devices = {{type, n}};
  w.admitted = admitted;
  return w;
}

// The job `id` as the coordinator stores it after `decision`: PENDING, its reason and message.
v1::Job AsStored(const SchedulingDecision& decision, const std::string& id) {
  v1::Job job;
  job.set_id(id);
  job.set_state(v1::JOB_STATE_PENDING);
  for (const Pending& p : decision.pending) {
    if (p.id != id) continue;
    job.set_pending_reason(PendingReasonName(p.reason));
    job.set_message(p.message);
  }
  return job;
}

TEST(PendingReasonViewTest, EveryReasonReadsAsDocumented) {
  SchedulingConfig config;
  config.tenants = {Tenant("a", 4), Tenant("b", 2), Tenant("c", 4)};
  absl::StatusOr<QuotaPolicy> policy = QuotaPolicy::Create(std::move(config));
  ASSERT_TRUE(policy.ok()) << policy.status();
  ClusterState s;
  s.now_unix_ms = 1000;
  s.free_devices = {{"cpu", 1}};
  Workload stopping = Job("stopping", "c", "cpu", 4, /*admitted=*/true);
  stopping.stopping = true;
  Workload high = Job("after-preemption", "c", "cpu", 2);
  s.workloads = {Job("no-queue", "z", "cpu", 1), Job("no-quota", "a", "cuda", 1),
                 Job("too-big", "a", "cpu", 9),  Job("running", "a", "cpu", 4, /*admitted=*/true),
                 Job("quota", "a", "cpu", 2),    Job("devices", "b", "cpu", 2)};
  SchedulingDecision d = policy->Decide(s);
  // The service's own: an admitted job waiting for its model's measurement.
  d.pending.push_back({"measured", PendingReason::kBeingMeasured,
                       "measuring the model's layers on cpu before planning (a worker times "
                       "each layer)"});
  // Apart: while a preempted job stops, every job it would make room for waits for it.
  s.workloads = {stopping, high};
  for (Pending& p : policy->Decide(s).pending) d.pending.push_back(std::move(p));
  std::map<std::string, std::string> expected = {
      {"no-queue",
       "Misconfigured: tenant z has no quota for cpu devices and cannot borrow them; ask an "
       "admin: dapplectl admin quota set z --nominal cpu=N ..."},
      {"no-quota",
       "Misconfigured: tenant a has no quota for cuda devices and cannot borrow them; ask an "
       "admin: dapplectl admin quota set a --nominal cuda=N ..."},
      {"too-big", "ExceedsMaximum: needs 9 cpu devices, more than tenant a can ever use (4)"},
      {"quota",
       "WaitingForQuota: tenant a uses 4 cpu devices in 1 job (nominal quota 4); this job "
       "needs 2"},
      {"devices", "WaitingForDevices: the cluster has 1 cpu device free; this job needs 2"},
      {"after-preemption",
       "WaitingForPreemption: 1 preempted job is stopping to make room (saving a checkpoint "
       "first); it starts then"},
      {"measured",
       "BeingMeasured: measuring the model's layers on cpu before planning (a worker times each "
       "layer)"},
  };
  // A job without a device type of a tenant that holds neither cuda nor cpu devices.
  s.workloads = {Job("untyped", "z", "any", 2)};
  for (Pending& p : policy->Decide(s).pending) d.pending.push_back(std::move(p));
  expected["untyped"] =
      "Misconfigured: tenant z has no quota for cuda or cpu devices (a job without "
      "parallel.device_type runs on either) and cannot borrow them; ask an admin: dapplectl "
      "admin quota set z --nominal cpu=N ...";
  for (const auto& [id, text] : expected) {
    const v1::Job job = AsStored(d, id);
    EXPECT_EQ(ctl::PendingReasonText(job), text) << id;
    // `get` shows it on its REASON line.
    EXPECT_THAT(ctl::RenderJobDetails(job, 2000), HasSubstr(text)) << id;
    // The message itself never repeats the reason, by name or in words.
    const std::string& message = job.message();
    EXPECT_FALSE(absl::StrContains(message, job.pending_reason())) << message;
    for (const char* words : {"waiting for quota", "waiting for free devices", "being measured",
                              "misconfigured", "exceeds"}) {
      EXPECT_FALSE(absl::StrContains(absl::AsciiStrToLower(message), words)) << message;
    }
  }
}

}  // namespace
}  // namespace dapple::coordinator::scheduling
