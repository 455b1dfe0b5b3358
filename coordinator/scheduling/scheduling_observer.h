// Told what each scheduling pass found per tenant, and about every preemption: the per-tenant
// Prometheus metrics (coordinator/metrics/coordinator_metrics.h) implement it.
#ifndef DAPPLE_COORDINATOR_SCHEDULING_SCHEDULING_OBSERVER_H_
#define DAPPLE_COORDINATOR_SCHEDULING_SCHEDULING_OBSERVER_H_

#include <cstdint>
#include <map>
#include <string>

#include "coordinator/scheduling/scheduling_manager.h"

namespace dapple::coordinator::scheduling {

// The tenant label of an admin's jobs (tenant ""), as the per-tenant checkpoint folders name it.
inline constexpr char kAdminTenantLabel[] = "_admin";

struct TenantSchedulingState {
  std::map<std::string, TenantUsage> devices;    // by device type (tenants with a quota)
  std::map<std::string, int> pending_by_reason;  // PendingReasonName -> queued jobs
  int64_t pending_devices = 0;                   // devices its queued jobs need, all types
  // Per device type, when its longest-waiting queued job that fits its nominal quota entered
  // the queue (SchedulingManager::OldestWithinQuota); a type with no such job is absent. As of
  // the snapshot the pass decided on: a job admitted by this pass leaves it at the next one.
  std::map<std::string, int64_t> oldest_within_quota_unix_ms;
};

// Called under the coordinator's lock: implementations must not call back into it.
class SchedulingObserver {
 public:
  virtual ~SchedulingObserver() = default;
  // Every tenant with a quota or a queued or admitted job, by tenant label.
  virtual void OnSchedulingPass(const std::map<std::string, TenantSchedulingState>& tenants,
                                int64_t now_unix_ms) = 0;
  // A job of `tenant` (label) is preempted; kind "reclaim" or "priority".
  virtual void OnPreempted(const std::string& tenant, const std::string& kind) = 0;
};

}  // namespace dapple::coordinator::scheduling

#endif  // DAPPLE_COORDINATOR_SCHEDULING_SCHEDULING_OBSERVER_H_
