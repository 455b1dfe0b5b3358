#include "coordinator/scheduling/scheduling_manager.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"

namespace dapple::coordinator::scheduling {
namespace {

// The operator's "unlimited" nominal quota: more devices than any cluster has, small enough
// that sums of a few of them never overflow.
constexpr int64_t kUnlimited = int64_t{1} << 40;

}  // namespace

std::string DeviceTypeKey(const std::string& parallel_device_type) {
  return parallel_device_type.empty() ? "any" : parallel_device_type;
}

std::string SchedulingManager::ChargedDeviceType(const std::string& tenant,
                                                 const std::string& parallel_device_type) const {
  const std::string key = DeviceTypeKey(parallel_device_type);
  if (key != "any" || tenant.empty()) return key;
  // The faster devices first: a tenant with both quotas trains on its GPUs.
  for (const char* type : {"cuda", "cpu"}) {
    if (policy_.MaxDevices(tenant, type) > 0) return type;
  }
  return key;
}

absl::StatusOr<SchedulingManager> SchedulingManager::Create(SchedulingConfig config) {
  absl::StatusOr<QuotaPolicy> policy = QuotaPolicy::Create(std::move(config));
  if (!policy.ok()) return policy.status();
  return SchedulingManager(*std::move(policy));
}

SchedulingDecision SchedulingManager::Decide(ClusterState state) const {
  SchedulingConfig config = policy_.config();
  TenantConfig op;
  op.name = kOperatorQueue;
  op.max_queued_jobs = 1 << 30;
  bool any_operator = false;
  for (Workload& w : state.workloads) {
    if (!w.tenant.empty()) continue;
    any_operator = true;
    w.tenant = kOperatorQueue;
    w.priority = 0;  // FIFO: never preempting another operator job
    for (const auto& [type, n] : w.devices) op.nominal[type] = kUnlimited;
  }
  if (!any_operator) return policy_.Decide(state);
  config.tenants.push_back(std::move(op));
  // The stored configuration was valid, and the operator's queue is in no cohort.
  absl::StatusOr<QuotaPolicy> policy = QuotaPolicy::Create(std::move(config));
  if (!policy.ok()) return policy_.Decide(state);
  return policy->Decide(state);
}

absl::Status SchedulingManager::CheckSubmit(const Workload& workload,
                                            int queued_jobs_of_tenant) const {
  if (workload.tenant.empty()) return absl::OkStatus();
  const TenantConfig* tenant = nullptr;
  for (const TenantConfig& t : policy_.config().tenants) {
    if (t.name == workload.tenant) tenant = &t;
  }
  if (tenant != nullptr && queued_jobs_of_tenant >= tenant->max_queued_jobs) {
    return absl::ResourceExhaustedError(
        absl::StrCat("tenant ", workload.tenant, " has ", queued_jobs_of_tenant,
                     queued_jobs_of_tenant == 1 ? " queued job" : " queued jobs",
                     " (its max_queued_jobs): wait for some to start or cancel some"));
  }
  // The policy's refusals say what to do (a no-quota one names the admin's command).
  return policy_.CheckSubmit(workload, queued_jobs_of_tenant);
}

std::vector<std::string> SchedulingManager::NominalBeyondDevices(const ClusterState& state) const {
  DeviceCounts promised;
  for (const TenantConfig& t : policy_.config().tenants) {
    for (const auto& [type, n] : t.nominal) promised[type] += n;
  }
  for (const CohortConfig& c : policy_.config().cohorts) {
    for (const auto& [type, n] : c.shared) promised[type] += n;
  }
  DeviceCounts devices = state.free_devices;
  for (const Workload& w : state.workloads) {
    if (!w.admitted) continue;
    for (const auto& [type, n] : w.devices) devices[type] += n;
  }
  std::vector<std::string> notes;
  for (const auto& [type, n] : promised) {
    const auto d = devices.find(type);
    const int64_t have = d == devices.end() ? 0 : d->second;
    if (n <= have) continue;
    notes.push_back(absl::StrCat("the nominal quotas total ", n, " ", type,
                                 n == 1 ? " device" : " devices", ", more than the ", have,
                                 " the live workers have: a nominal quota is guaranteed only as "
                                 "far as those devices exist"));
  }
  return notes;
}

std::map<std::string, std::map<std::string, TenantUsage>> SchedulingManager::Usage(
    const ClusterState& state) const {
  const SchedulingConfig& config = policy_.config();
  std::map<std::string, std::map<std::string, TenantUsage>> out;
  for (const TenantConfig& t : config.tenants) {
    auto& usage = out[t.name];
    for (const auto& [type, n] : t.nominal) usage[type].nominal = n;
  }
  for (const Workload& w : state.workloads) {
    if (!w.admitted || !out.contains(w.tenant)) continue;
    for (const auto& [type, n] : w.devices) out[w.tenant][type].in_use += n;
  }
  // Per cohort and type: what members borrow beyond the cohort's shared devices was lent by
  // the members below their nominal quota, attributed in name order up to their lending caps.
  std::map<std::string, std::set<std::string>> types_of_cohort;
  for (const TenantConfig& t : config.tenants) {
    if (t.cohort.empty()) continue;
    for (auto& [type, u] : out[t.name]) {
      u.borrowed = std::max<int64_t>(0, u.in_use - u.nominal);
      types_of_cohort[t.cohort].insert(type);
    }
  }
  for (const auto& [cohort, types] : types_of_cohort) {
    int64_t shared_unused = 0;
    for (const std::string& type : types) {
      int64_t borrowed = 0;
      for (const TenantConfig& t : config.tenants) {
        if (t.cohort == cohort) borrowed += out[t.name][type].borrowed;
      }
      shared_unused = 0;
      for (const CohortConfig& c : config.cohorts) {
        if (c.name == cohort) shared_unused = CountOf(c.shared, type);
      }
      borrowed -= std::min(borrowed, shared_unused);
      for (const TenantConfig& t : config.tenants) {
        if (t.cohort != cohort || borrowed <= 0) continue;
        TenantUsage& u = out[t.name][type];
        int64_t cap = std::max<int64_t>(0, u.nominal - u.in_use);
        if (t.lending_limit) cap = std::min(cap, CountOf(*t.lending_limit, type));
        u.lent = std::min(cap, borrowed);
        borrowed -= u.lent;
      }
    }
  }
  for (const TenantConfig& t : config.tenants) {
    if (!t.cohort.empty()) continue;
    for (auto& [type, u] : out[t.name]) u.borrowed = std::max<int64_t>(0, u.in_use - u.nominal);
  }
  return out;
}

std::map<std::string, std::map<std::string, int64_t>> SchedulingManager::OldestWithinQuota(
    const ClusterState& state,
    const std::map<std::string, std::map<std::string, TenantUsage>>& usage) {
  std::map<std::string, std::map<std::string, int64_t>> out;
  for (const Workload& w : state.workloads) {
    if (w.admitted || w.measuring || w.devices.empty()) continue;
    auto u = usage.find(w.tenant);
    if (u == usage.end()) continue;
    bool fits = true;
    for (const auto& [type, n] : w.devices) {
      auto t = u->second.find(type);
      const TenantUsage held = t == u->second.end() ? TenantUsage{} : t->second;
      if (held.in_use + n > held.nominal) fits = false;
    }
    if (!fits) continue;
    for (const auto& [type, n] : w.devices) {
      auto [it, inserted] = out[w.tenant].emplace(type, w.queued_unix_ms);
      if (!inserted) it->second = std::min(it->second, w.queued_unix_ms);
    }
  }
  return out;
}

}  // namespace dapple::coordinator::scheduling
