// SchedulingManager: what the coordinator asks each scheduling pass (coordinator_service.cc
// ScheduleLocked) — which queued jobs to admit, which admitted ones to preempt, and why each other
// one waits — answered by QuotaPolicy (quota_policy.h) on the tenants' quotas, plus the
// operator's queue. No gRPC, no lock, no clock of its own: the caller hands it a snapshot.
//
// The operator's queue (docs/scheduling.md, contract 6 of issue 16): jobs of tenant "" (submitted
// by an admin) are outside every quota. They get an implicit queue of unlimited nominal quota in
// no cohort, FIFO (their priorities are ignored), never preempted and never preempting: they are
// admitted when the cluster has the devices free. Within-quota jobs of every tenant and the
// operator's jobs share the first place of the policy's order, longest waiting first.
//
// Devices: a job needs WorkersNeeded(job) devices of its parallel.device_type ("any" when unset);
// free devices per type are the idle live workers that fit that type (a cpu worker counts for
// "cpu", "any" and "emulated"). Two admitted jobs of different types may count the same worker:
// the caller starts the admitted jobs one by one and leaves a job queued when its workers are
// gone by then (all or nothing, decided again next pass).
//
// Thread safety: thread-compatible (const methods may run concurrently).
#ifndef DAPPLE_COORDINATOR_SCHEDULING_SCHEDULING_MANAGER_H_
#define DAPPLE_COORDINATOR_SCHEDULING_SCHEDULING_MANAGER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/scheduling/quota_policy.h"

namespace dapple::coordinator::scheduling {

// The device-type key of a job's quota: parallel.device_type, "any" when empty.
std::string DeviceTypeKey(const std::string& parallel_device_type);

// What a tenant holds of one device type (admin.proto DeviceUsage).
struct TenantUsage {
  int64_t nominal = 0;
  int64_t in_use = 0;    // held by its admitted jobs (stopping ones included)
  int64_t borrowed = 0;  // in_use above nominal
  int64_t lent = 0;      // of its nominal quota, held by other members of its cohort
};

class SchedulingManager {
 public:
  // The tenant name of the operator's queue inside the policy: not a valid tenant name (those
  // start with a letter), so it never collides with one.
  static constexpr char kOperatorQueue[] = "_operator";

  // kInvalidArgument as QuotaPolicy::Create.
  static absl::StatusOr<SchedulingManager> Create(SchedulingConfig config);

  // The policy's decision on `state`, whose workloads of tenant "" are the operator's queue.
  // Pending entries name the job's own tenant only (never the operator's queue's inner name).
  SchedulingDecision Decide(ClusterState state) const;

  // SubmitJob's check (QuotaPolicy::CheckSubmit) for a user's job; OK for the operator's (tenant
  // ""). ResourceExhausted "tenant team-a has 1000 queued jobs (its max_queued_jobs): wait for
  // some to start or cancel some"; InvalidArgument for a job that can never run (no quota for its
  // device type: the message names `dapplectl admin quota set`; more than the tenant's maximum).
  absl::Status CheckSubmit(const Workload& workload, int queued_jobs_of_tenant) const;

  // The device type a job of tenant `tenant` with parallel.device_type `parallel_device_type` is
  // charged to, chosen once at submit (Kueue's flavor assignment): a concrete type (cpu, cuda,
  // emulated) as given; for "any" or empty, the first of cuda, cpu that the tenant can ever hold
  // devices of (QuotaPolicy::MaxDevices > 0: its nominal quota or what it may borrow), so that
  // the job is charged to that quota and runs on workers of that type. "any" when it can hold
  // neither (CheckSubmit then refuses the job, naming the quota to set) and for the operator's
  // jobs (tenant "", outside every quota: they run on any worker).
  std::string ChargedDeviceType(const std::string& tenant,
                                const std::string& parallel_device_type) const;

  // Per tenant and device type what `state`'s admitted workloads hold against the quotas (every
  // configured tenant, each type of its quota or use).
  std::map<std::string, std::map<std::string, TenantUsage>> Usage(const ClusterState& state) const;

  const SchedulingConfig& config() const { return policy_.config(); }

  // What an admin should know of the quotas against `state`'s devices (ListTenants' notes):
  // per device type whose nominal quotas (every tenant's, plus every cohort's shared devices)
  // total more than the cluster's live devices of that type (state.free_devices plus what the
  // admitted workloads hold), "the nominal quotas total 6 cpu devices, more than the 4 the live
  // workers have: a nominal quota is guaranteed only as far as those devices exist". A type no
  // worker has is named as 0. Types in name order; empty when every quota is covered.
  std::vector<std::string> NominalBeyondDevices(const ClusterState& state) const;

  // The signal of the alert "tenant starved within its quota" (docs/operations.md,
  // DappleTenantStarvedWithinQuota): per tenant of `usage` (Usage(state)) and device type, when
  // the longest-waiting of the tenant's queued jobs that fits its nominal quota next to what the
  // tenant already uses entered the queue (Workload::queued_unix_ms). A job fits when, for every
  // type it needs, in_use + needed <= nominal. Jobs being measured are left out (not admissible
  // yet), and so is the operator's queue (tenant "", not in `usage`). A type of a tenant with no
  // such job is absent. Such a job should be admitted within a pass or two (reclaim preempts
  // borrowers for it); one that waits for minutes means reclaim is not firing or the cluster has
  // fewer live devices than the quotas promise.
  static std::map<std::string, std::map<std::string, int64_t>> OldestWithinQuota(
      const ClusterState& state,
      const std::map<std::string, std::map<std::string, TenantUsage>>& usage);

 private:
  explicit SchedulingManager(QuotaPolicy policy) : policy_(std::move(policy)) {}
  QuotaPolicy policy_;
};

}  // namespace dapple::coordinator::scheduling

#endif  // DAPPLE_COORDINATOR_SCHEDULING_SCHEDULING_MANAGER_H_
