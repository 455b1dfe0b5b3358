// QuotaPolicy: Kueue's admission semantics for dapple jobs (scheduling_policy.h has the terms).
//
// Each Decide() call, in this order:
//  1. Queued jobs are considered one at a time: repeatedly the next job of the tenant whose
//     weighted share beyond its nominal quota would be smallest with that job admitted
//     (dominant resource share over the device types: max_t above_nominal_t / cohort
//     capacity_t, divided by the weight; 0 for a job within its tenant's quota, so those go
//     first), within a tenant by priority (higher first), then queue time.
//  2. A job is admitted when, for every device type it needs, (a) the tenant stays within its
//     nominal quota, or borrows the rest within its borrowing limit from what its cohort has
//     unused (the cohort's shared devices plus each member's unused nominal quota up to its
//     lending limit, less what members already borrowed), and (b) the cluster has that many free
//     devices. All or nothing: never part of a job.
//  3. A job that does not fit does not stop the jobs after it (no head-of-line blocking), unless
//     it has waited past starvation_after_ms: then it claims what is free now of what it needs
//     (devices, the tenant's unused quota, the cohort's lendable pool) and no job considered
//     after it may take that, so it starts once enough running jobs end. It keeps its place in
//     the order: a tenant above its fair share does not jump ahead by waiting.
//  4. A job that does not fit may preempt (checkpoint, stop, queue again): when it would fit
//     within its tenant's nominal quota, the most recently admitted jobs of cohort members that
//     are borrowing, lowest priority first (reclaim); otherwise its own tenant's jobs of lower
//     priority, lowest first, then most recently admitted. Only when the preemptions found make
//     it fit; while preempted jobs are stopping it waits (WaitingForPreemption).
// Pure and deterministic; thread-compatible (const methods may run concurrently).
#ifndef DAPPLE_COORDINATOR_SCHEDULING_QUOTA_POLICY_H_
#define DAPPLE_COORDINATOR_SCHEDULING_QUOTA_POLICY_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/scheduling/scheduling_policy.h"

namespace dapple::coordinator::scheduling {

class QuotaPolicy : public SchedulingPolicy {
 public:
  // InvalidArgument naming the field, value and rule: an empty or repeated tenant or cohort
  // name, a tenant's cohort that is not configured, a weight <= 0, a negative count, a lending
  // limit above the nominal quota, max_queued_jobs < 1, starvation_after_ms < 0.
  static absl::StatusOr<QuotaPolicy> Create(SchedulingConfig config);

  // At submit, before the job is queued: InvalidArgument for a job that can never run here
  // (unknown tenant, no device, a device type the tenant has no quota for and cannot borrow:
  // "tenant a has no quota for cuda devices and cannot borrow them; ask an admin: dapplectl
  // admin quota set a --nominal cuda=N ..., or use another parallel.device_type"; more devices
  // than the tenant can ever use: "exceeds the tenant's maximum");
  // ResourceExhausted when the tenant already has max_queued_jobs queued jobs.
  absl::Status CheckSubmit(const Workload& workload, int queued_jobs_of_tenant) const;

  // The most devices of `type` the tenant can ever hold at once: its nominal quota plus what it
  // may borrow (its borrowing limit, and no more than its cohort can lend). 0 for an unknown
  // tenant.
  int64_t MaxDevices(const std::string& tenant, const std::string& type) const;

  SchedulingDecision Decide(const ClusterState& state) const override;

  const SchedulingConfig& config() const { return config_; }

 private:
  struct Ledger;
  class Round;

  explicit QuotaPolicy(SchedulingConfig config);

  const TenantConfig* Tenant(const std::string& name) const;
  const CohortConfig* Cohort(const std::string& name) const;
  // Members of `cohort` (indices into config_.tenants).
  const std::vector<int>& Members(const std::string& cohort) const;
  // What tenant i lends at most of `type`: its nominal quota, capped by its lending limit.
  int64_t LendCap(int tenant, const std::string& type) const;
  // The cohort's devices of `type`: shared plus every member's nominal quota.
  int64_t CohortCapacity(const std::string& cohort, const std::string& type) const;

  SchedulingConfig config_;
  std::map<std::string, int> tenant_index_;
  std::map<std::string, std::vector<int>> members_;
};

}  // namespace dapple::coordinator::scheduling

#endif  // DAPPLE_COORDINATOR_SCHEDULING_QUOTA_POLICY_H_
