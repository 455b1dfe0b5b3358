// The scheduling policy of a shared cluster: which queued jobs (workloads) to admit, which
// admitted ones to preempt, and why each other one waits. A policy is pure: it sees a snapshot
// (ClusterState: every workload, the free devices, the time) and returns a decision; the
// coordinator applies it (starts, checkpoints and stops jobs) and calls it again. Tests drive it
// with direct calls and a simulated clock. Terms follow Kueue (kueue.sigs.k8s.io, "Concepts"):
// a tenant's queue (Kueue's ClusterQueue) has a nominal quota of devices per device type; tenants
// in a cohort borrow each other's unused quota, up to a borrowing limit, and lend up to a lending
// limit; reclaim preempts a borrower when a lender needs its quota back.
#ifndef DAPPLE_COORDINATOR_SCHEDULING_SCHEDULING_POLICY_H_
#define DAPPLE_COORDINATOR_SCHEDULING_SCHEDULING_POLICY_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dapple::coordinator::scheduling {

// Devices per device type ("cpu", "cuda", "emulated"): a count >= 0 each. A type that is absent
// counts 0.
using DeviceCounts = std::map<std::string, int64_t>;

// One tenant's queue.
struct TenantConfig {
  std::string name;      // "team-a": unique, non-empty
  std::string cohort;    // tenants in the same cohort borrow from each other; "": none
  DeviceCounts nominal;  // devices guaranteed to the tenant (admitted without borrowing)
  // The most devices per type the tenant may use above its nominal quota (borrowed from its
  // cohort). A type absent from a set limit may not be borrowed; unset: only what the cohort
  // has unused limits it.
  std::optional<DeviceCounts> borrowing_limit;
  // The most of its unused nominal quota per type that others in the cohort may borrow. A type
  // absent from a set limit is not lent; unset: all of it.
  std::optional<DeviceCounts> lending_limit;
  // Share of what the cohort has beyond nominal quotas, relative to the other tenants'
  // (weighted fair sharing); > 0.
  double weight = 1.0;
  // Queued (not admitted) jobs the tenant may have at once; more are refused at submit.
  int max_queued_jobs = 1000;
};

// Devices that belong to a cohort rather than to any tenant's nominal quota (Kueue's Cohort
// resources): any member may borrow them, subject to its borrowing limit.
struct CohortConfig {
  std::string name;
  DeviceCounts shared;
};

struct SchedulingConfig {
  std::vector<TenantConfig> tenants;
  std::vector<CohortConfig> cohorts;
  // A queued job that waited this long reserves the devices it needs: no job considered after it
  // (quota_policy.h: the order) may take them, so it starts once enough running jobs end (no
  // starvation of a big job behind a stream of small ones). Before that, a job that does not
  // fit does not block the jobs behind it (no head-of-line blocking).
  int64_t starvation_after_ms = 10 * 60 * 1000;
};

// A job as the policy sees it.
struct Workload {
  std::string id;        // "job-3"
  std::string tenant;    // the owner's tenant (from the caller's identity, never from the spec)
  int32_t priority = 0;  // higher first within a tenant; a higher one may preempt a lower one
  DeviceCounts devices;  // all-or-nothing: admitted with all of them or not at all
  int64_t queued_unix_ms = 0;  // when it (last) entered the queue: FIFO within tenant and priority
  bool admitted = false;       // holds its devices
  int64_t admitted_unix_ms = 0;
  // Admitted and told to stop (preempted: checkpoint, then stop); still holds its devices.
  bool stopping = false;
  // Queued and being measured (its layer profile): admitted like any other job, so that its
  // devices stay its own; the service keeps it waiting (BeingMeasured) until it is measured.
  // Not counted as waiting within its quota (SchedulingManager::OldestWithinQuota).
  bool measuring = false;
};

struct ClusterState {
  int64_t now_unix_ms = 0;
  std::vector<Workload> workloads;  // every queued and admitted job
  // Devices of each type not held by an admitted job (live, idle workers): admission needs
  // them too, whatever the quotas say (a dead worker's quota is not a device).
  DeviceCounts free_devices;
};

// Why a queued job waits, most actionable first (Kueue's ranking of pending reasons).
enum class PendingReason {
  kMisconfigured,         // no queue for the tenant, a device type with no quota, ...: say what
  kExceedsMaximum,        // more than the tenant can ever get (nominal + borrowing limit)
  kWaitingForQuota,       // the tenant's quota (and what it may borrow) is in use
  kWaitingForDevices,     // the quota allows it, the cluster has too few free devices
  kWaitingForPreemption,  // jobs preempted to make room for it have not stopped yet
  kBeingMeasured,         // its profile is being measured
};

// counts[type], 0 when `counts` has no entry for the type.
inline int64_t CountOf(const DeviceCounts& counts, const std::string& type) {
  auto it = counts.find(type);
  return it == counts.end() ? 0 : it->second;
}

// "Misconfigured", "ExceedsMaximum", ... (stable names for events, metrics and the API).
const char* PendingReasonName(PendingReason reason);

struct Pending {
  std::string id;
  PendingReason reason = PendingReason::kWaitingForQuota;
  // For the job's owner: what it waits for, with counts of its own tenant's use only; never
  // another tenant's job ids. Never repeats the reason (dapplectl shows "<reason>: <message>";
  // the texts: docs/scheduling.md, "Pending reasons").
  std::string message;
};

struct Preemption {
  std::string id;      // an admitted job to checkpoint, stop and queue again
  std::string reason;  // "reclaimed: tenant team-a needs its nominal quota back"
};

struct SchedulingDecision {
  std::vector<std::string> admit;  // in admission order
  std::vector<Preemption> preempt;
  std::vector<Pending> pending;  // one per queued job not admitted
};

// The policy interface the coordinator's scheduling manager calls. Implementations are pure
// (the same state gives the same decision) and thread-compatible.
class SchedulingPolicy {
 public:
  virtual ~SchedulingPolicy() = default;
  virtual SchedulingDecision Decide(const ClusterState& state) const = 0;
};

}  // namespace dapple::coordinator::scheduling

#endif  // DAPPLE_COORDINATOR_SCHEDULING_SCHEDULING_POLICY_H_
