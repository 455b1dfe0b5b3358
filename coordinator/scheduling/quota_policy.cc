#include "coordinator/scheduling/quota_policy.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace dapple::coordinator::scheduling {
namespace {

// "3 cpu devices"; for the quota of jobs without a device type "3 devices (any type)".
std::string Devices(int64_t n, const std::string& type) {
  if (type == "any") return absl::StrCat(n, n == 1 ? " device" : " devices", " (any type)");
  return absl::StrCat(n, " ", type, n == 1 ? " device" : " devices");
}

// What a tenant's job reads when the tenant has no quota for `type` (no queue at all, or none
// for that type): what is wrong and the command that fixes it.
std::string NoQuotaMessage(const std::string& tenant, const std::string& type) {
  // A job without a device type is charged to a cuda or cpu quota (SchedulingManager::
  // ChargedDeviceType): the fix is one of those.
  const bool any = type == "any";
  return absl::StrCat("tenant ", tenant, " has no quota for ",
                      any ? "cuda or cpu devices (a job without parallel.device_type runs on "
                            "either)"
                          : absl::StrCat(type, " devices"),
                      " and cannot borrow them; ask an admin: dapplectl admin quota set ", tenant,
                      " --nominal ", any ? "cpu" : type, "=N ...");
}

// The device type a workload needs (the first of them, "any" when none is named).
std::string FirstType(const Workload& w) {
  for (const auto& [type, n] : w.devices) {
    if (n > 0) return type;
  }
  return w.devices.empty() ? "any" : w.devices.begin()->first;
}

absl::Status CheckCounts(const DeviceCounts& counts, const std::string& field) {
  for (const auto& [type, n] : counts) {
    if (type.empty()) return absl::InvalidArgumentError(field + ": a device type must be named");
    if (n < 0) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".", type, " must be >= 0, got ", n));
    }
  }
  return absl::OkStatus();
}

}  // namespace

const char* PendingReasonName(PendingReason reason) {
  switch (reason) {
    case PendingReason::kMisconfigured:
      return "Misconfigured";
    case PendingReason::kExceedsMaximum:
      return "ExceedsMaximum";
    case PendingReason::kWaitingForQuota:
      return "WaitingForQuota";
    case PendingReason::kWaitingForDevices:
      return "WaitingForDevices";
    case PendingReason::kWaitingForPreemption:
      return "WaitingForPreemption";
    case PendingReason::kBeingMeasured:
      return "BeingMeasured";
  }
  return "Unknown";
}

absl::StatusOr<QuotaPolicy> QuotaPolicy::Create(SchedulingConfig config) {
  std::set<std::string> cohorts;
  for (const CohortConfig& c : config.cohorts) {
    if (c.name.empty()) return absl::InvalidArgumentError("cohorts[].name must not be empty");
    if (!cohorts.insert(c.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("cohort '", c.name, "' is defined twice"));
    }
    if (absl::Status s = CheckCounts(c.shared, absl::StrCat("cohort ", c.name, " shared"));
        !s.ok()) {
      return s;
    }
  }
  std::set<std::string> names;
  for (const TenantConfig& t : config.tenants) {
    if (t.name.empty()) return absl::InvalidArgumentError("tenants[].name must not be empty");
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("tenant '", t.name, "' is defined twice"));
    }
    const std::string field = absl::StrCat("tenant ", t.name);
    if (!t.cohort.empty() && !cohorts.contains(t.cohort)) {
      // A cohort needs no shared devices; naming it in a tenant is enough to create it.
      cohorts.insert(t.cohort);
      config.cohorts.push_back(CohortConfig{t.cohort, {}});
    }
    if (!(t.weight > 0)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s weight must be > 0, got %g", field, t.weight));
    }
    if (t.max_queued_jobs < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, " max_queued_jobs must be >= 1, got ", t.max_queued_jobs));
    }
    if (absl::Status s = CheckCounts(t.nominal, field + " nominal"); !s.ok()) return s;
    if (t.borrowing_limit) {
      if (absl::Status s = CheckCounts(*t.borrowing_limit, field + " borrowing_limit"); !s.ok()) {
        return s;
      }
    }
    if (t.lending_limit) {
      if (absl::Status s = CheckCounts(*t.lending_limit, field + " lending_limit"); !s.ok()) {
        return s;
      }
      for (const auto& [type, n] : *t.lending_limit) {
        if (n > CountOf(t.nominal, type)) {
          return absl::InvalidArgumentError(absl::StrCat(
              field, " lending_limit.", type, " must be at most its nominal quota (",
              CountOf(t.nominal, type), "), got ", n, ": a tenant lends only what it owns"));
        }
      }
    }
  }
  if (config.starvation_after_ms < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("starvation_after_ms must be >= 0, got ", config.starvation_after_ms));
  }
  return QuotaPolicy(std::move(config));
}

QuotaPolicy::QuotaPolicy(SchedulingConfig config) : config_(std::move(config)) {
  for (int i = 0; i < static_cast<int>(config_.tenants.size()); ++i) {
    tenant_index_[config_.tenants[i].name] = i;
    if (!config_.tenants[i].cohort.empty()) members_[config_.tenants[i].cohort].push_back(i);
  }
}

const TenantConfig* QuotaPolicy::Tenant(const std::string& name) const {
  auto it = tenant_index_.find(name);
  return it == tenant_index_.end() ? nullptr : &config_.tenants[it->second];
}

const CohortConfig* QuotaPolicy::Cohort(const std::string& name) const {
  for (const CohortConfig& c : config_.cohorts) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

const std::vector<int>& QuotaPolicy::Members(const std::string& cohort) const {
  static const std::vector<int> kNone;
  auto it = members_.find(cohort);
  return it == members_.end() ? kNone : it->second;
}

int64_t QuotaPolicy::LendCap(int tenant, const std::string& type) const {
  const TenantConfig& t = config_.tenants[tenant];
  const int64_t nominal = CountOf(t.nominal, type);
  return t.lending_limit ? std::min(nominal, CountOf(*t.lending_limit, type)) : nominal;
}

int64_t QuotaPolicy::CohortCapacity(const std::string& cohort, const std::string& type) const {
  const CohortConfig* c = Cohort(cohort);
  int64_t capacity = c == nullptr ? 0 : CountOf(c->shared, type);
  for (int m : Members(cohort)) capacity += CountOf(config_.tenants[m].nominal, type);
  return capacity;
}

int64_t QuotaPolicy::MaxDevices(const std::string& tenant, const std::string& type) const {
  const TenantConfig* t = Tenant(tenant);
  if (t == nullptr) return 0;
  const int64_t nominal = CountOf(t->nominal, type);
  if (t->cohort.empty()) return nominal;
  const CohortConfig* c = Cohort(t->cohort);
  int64_t lendable = c == nullptr ? 0 : CountOf(c->shared, type);
  for (int m : Members(t->cohort)) {
    if (config_.tenants[m].name != tenant) lendable += LendCap(m, type);
  }
  if (t->borrowing_limit) lendable = std::min(lendable, CountOf(*t->borrowing_limit, type));
  return nominal + lendable;
}

absl::Status QuotaPolicy::CheckSubmit(const Workload& w, int queued_jobs_of_tenant) const {
  const TenantConfig* t = Tenant(w.tenant);
  if (t == nullptr) {
    return absl::InvalidArgumentError(NoQuotaMessage(w.tenant, FirstType(w)));
  }
  int64_t total = 0;
  for (const auto& [type, n] : w.devices) {
    total += n;
    if (n <= 0) continue;
    const int64_t most = MaxDevices(w.tenant, type);
    if (most == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(NoQuotaMessage(w.tenant, type), ", or use another parallel.device_type"));
    }
    if (n > most) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the job needs ", Devices(n, type), ", more than tenant ", w.tenant,
          " can ever use (its maximum: ", most, ", nominal quota ", CountOf(t->nominal, type),
          " + what it may borrow ", most - CountOf(t->nominal, type),
          "): exceeds the tenant's maximum; use fewer parallel.devices"));
    }
  }
  if (total <= 0) return absl::InvalidArgumentError("the job needs no device");
  if (queued_jobs_of_tenant >= t->max_queued_jobs) {
    return absl::ResourceExhaustedError(
        absl::StrCat("tenant ", w.tenant, " already has ", queued_jobs_of_tenant,
                     " queued jobs, its limit (max_queued_jobs ", t->max_queued_jobs,
                     "): wait for some to start or cancel some"));
  }
  return absl::OkStatus();
}

// The mutable accounting of one Decide() call.
struct QuotaPolicy::Ledger {
  std::vector<DeviceCounts> usage;  // per tenant: devices its admitted jobs hold
  std::vector<int> admitted_jobs;   // per tenant
  DeviceCounts free;                // devices free in the cluster, less starving jobs' claims
  std::map<std::string, DeviceCounts> pool_claimed;  // per cohort: claimed by starving jobs
};

// One Decide() call: the ledger, the decision so far and the steps of quota_policy.h.
class QuotaPolicy::Round {
 public:
  Round(const QuotaPolicy& policy, const ClusterState& state) : p_(policy), state_(state) {
    const int n = static_cast<int>(p_.config_.tenants.size());
    ledger_.usage.resize(n);
    ledger_.admitted_jobs.assign(n, 0);
    ledger_.free = state.free_devices;
    for (const Workload& w : state.workloads) {
      by_id_[w.id] = &w;
      const int t = TenantOf(w);
      if (!w.admitted || t < 0) continue;
      Take(&ledger_, w, +1, /*devices=*/false);
      if (w.stopping) stopping_.insert(w.id);
    }
  }

  SchedulingDecision Run() {
    std::vector<std::vector<const Workload*>> queues = Queues();
    while (true) {
      const int next = NextTenant(queues);
      if (next < 0) break;
      const Workload* w = queues[next].back();
      queues[next].pop_back();
      Consider(*w);
    }
    return std::move(decision_);
  }

 private:
  enum class Fit { kFits, kQuota, kDevices };

  int TenantOf(const Workload& w) const {
    auto it = p_.tenant_index_.find(w.tenant);
    return it == p_.tenant_index_.end() ? -1 : it->second;
  }
  const TenantConfig& Config(int t) const { return p_.config_.tenants[t]; }

  // Holds (+1) or releases (-1) w's devices in the tenant's usage, and in the free devices
  // unless they were never counted there (admitted jobs: the caller's free count excludes them).
  void Take(Ledger* l, const Workload& w, int sign, bool devices = true) const {
    const int t = TenantOf(w);
    for (const auto& [type, n] : w.devices) {
      l->usage[t][type] += sign * n;
      if (devices) l->free[type] -= sign * n;
    }
    l->admitted_jobs[t] += sign;
  }

  // What the cohort can still lend of `type`: shared devices plus members' unused nominal
  // quota up to their lending limits, less what members borrow and starving jobs claimed.
  // `borrower`'s own unused quota is not lent to itself (a job that borrows uses it up first).
  int64_t PoolFree(const Ledger& l, const std::string& cohort, const std::string& type,
                   int borrower = -1) const {
    const CohortConfig* c = p_.Cohort(cohort);
    int64_t pool = c == nullptr ? 0 : CountOf(c->shared, type);
    for (int m : p_.Members(cohort)) {
      const int64_t nominal = CountOf(Config(m).nominal, type);
      const int64_t used = CountOf(l.usage[m], type);
      if (m != borrower) {
        pool += std::min(p_.LendCap(m, type), std::max<int64_t>(0, nominal - used));
      }
      pool -= std::max<int64_t>(0, used - nominal);
    }
    auto claimed = l.pool_claimed.find(cohort);
    if (claimed != l.pool_claimed.end()) pool -= CountOf(claimed->second, type);
    return std::max<int64_t>(0, pool);
  }

  // Quota first: a job short of quota waits for quota even where devices are short too.
  Fit Fits(const Ledger& l, const Workload& w) const {
    const int t = TenantOf(w);
    const TenantConfig& tc = Config(t);
    bool devices_short = false;
    for (const auto& [type, need] : w.devices) {
      if (need <= 0) continue;
      const int64_t nominal = CountOf(tc.nominal, type);
      const int64_t used = CountOf(l.usage[t], type);
      if (used + need > nominal) {
        if (tc.cohort.empty()) return Fit::kQuota;
        const int64_t borrow_after = used + need - nominal;
        const int64_t extra = borrow_after - std::max<int64_t>(0, used - nominal);
        if (tc.borrowing_limit && borrow_after > CountOf(*tc.borrowing_limit, type)) {
          return Fit::kQuota;
        }
        if (extra > PoolFree(l, tc.cohort, type, t)) return Fit::kQuota;
      }
      if (need > CountOf(l.free, type)) devices_short = true;
    }
    return devices_short ? Fit::kDevices : Fit::kFits;
  }

  // Dominant share of what tenant t would hold beyond its nominal quota with w admitted, over
  // its weight: a job that fits within its tenant's quota (share 0) goes before any that borrows.
  double Share(int t, const Workload& w) const {
    const TenantConfig& tc = Config(t);
    if (tc.cohort.empty()) return 0.0;
    DeviceCounts after = ledger_.usage[t];
    for (const auto& [type, n] : w.devices) after[type] += n;
    double most = 0;
    for (const auto& [type, used] : after) {
      const int64_t above = used - CountOf(tc.nominal, type);
      const int64_t capacity = p_.CohortCapacity(tc.cohort, type);
      if (above > 0 && capacity > 0) {
        most = std::max(most, static_cast<double>(above) / static_cast<double>(capacity));
      }
    }
    return most / tc.weight;
  }

  // Per tenant its admissible queued jobs, the next one at the back; the others get their
  // pending reason here (no queue, no quota for a type, more than the maximum).
  std::vector<std::vector<const Workload*>> Queues() {
    std::vector<std::vector<const Workload*>> queues(p_.config_.tenants.size());
    for (const Workload& w : state_.workloads) {
      if (w.admitted) continue;
      const int t = TenantOf(w);
      if (t < 0) {
        Wait(w, PendingReason::kMisconfigured, NoQuotaMessage(w.tenant, FirstType(w)));
      } else if (Admissible(w)) {
        // A job being measured is admitted like any other (the service keeps it waiting as
        // BeingMeasured until its measurement is in): set aside, its devices went to others
        // meanwhile, and a borrower preempted for it was admitted again and preempted twice.
        queues[t].push_back(&w);
      }
    }
    for (auto& queue : queues) {
      std::sort(queue.begin(), queue.end(), [](const Workload* a, const Workload* b) {
        if (a->priority != b->priority) return a->priority < b->priority;
        if (a->queued_unix_ms != b->queued_unix_ms) return a->queued_unix_ms > b->queued_unix_ms;
        return a->id > b->id;
      });
    }
    return queues;
  }

  bool Admissible(const Workload& w) {
    for (const auto& [type, need] : w.devices) {
      if (need <= 0) continue;
      const int64_t most = p_.MaxDevices(w.tenant, type);
      if (most == 0) {
        Wait(w, PendingReason::kMisconfigured, NoQuotaMessage(w.tenant, type));
        return false;
      }
      if (need > most) {
        Wait(w, PendingReason::kExceedsMaximum,
             absl::StrCat("needs ", Devices(need, type), ", more than tenant ", w.tenant,
                          " can ever use (", most, ")"));
        return false;
      }
    }
    return true;
  }

  // The tenant whose next job would leave it the smallest weighted share; -1 when none is left.
  int NextTenant(const std::vector<std::vector<const Workload*>>& queues) const {
    int next = -1;
    double best = 0;
    for (int t = 0; t < static_cast<int>(queues.size()); ++t) {
      if (queues[t].empty()) continue;
      const double s = Share(t, *queues[t].back());
      // Equal shares: the job that has waited longest, so that no tenant wins every tie.
      const bool tie = next >= 0 && std::abs(s - best) <= 1e-12;
      if (next < 0 || (!tie && s < best) ||
          (tie && queues[t].back()->queued_unix_ms < queues[next].back()->queued_unix_ms)) {
        next = t;
        best = s;
      }
    }
    return next;
  }

  void Wait(const Workload& w, PendingReason reason, std::string message) {
    decision_.pending.push_back({w.id, reason, std::move(message)});
  }

  void Consider(const Workload& w) {
    const Fit fit = Fits(ledger_, w);
    if (fit == Fit::kFits) {
      Take(&ledger_, w, +1);
      decision_.admit.push_back(w.id);
      return;
    }
    if (WaitsForStoppingJobs(w) || Preempt(w)) return;
    Explain(w, fit);
    if (state_.now_unix_ms - w.queued_unix_ms >= p_.config_.starvation_after_ms) Claim(w);
  }

  // Jobs already stopping that would make room: wait for them rather than preempt more.
  bool WaitsForStoppingJobs(const Workload& w) {
    if (stopping_.empty()) return false;
    Ledger after = ledger_;
    for (const std::string& id : stopping_) Take(&after, *by_id_.at(id), -1);
    if (Fits(after, w) != Fit::kFits) return false;
    WaitForPreemption(w, stopping_.size());
    return true;
  }

  void WaitForPreemption(const Workload& w, size_t jobs) {
    Wait(w, PendingReason::kWaitingForPreemption,
         absl::StrCat(jobs, jobs == 1 ? " preempted job is" : " preempted jobs are",
                      " stopping to make room (saving a checkpoint first); it starts then"));
  }

  // Reclaim within the nominal quota, else preemption of lower priority within the tenant.
  bool Preempt(const Workload& w) {
    const int t = TenantOf(w);
    const TenantConfig& tc = Config(t);
    bool within_nominal = true;
    for (const auto& [type, need] : w.devices) {
      if (CountOf(ledger_.usage[t], type) + need > CountOf(tc.nominal, type))
        within_nominal = false;
    }
    std::vector<const Workload*> victims;
    std::string why;
    if (within_nominal && !tc.cohort.empty()) {
      victims = Victims(
          w,
          [&](const Workload& o) {
            const int ot = TenantOf(o);
            return ot >= 0 && ot != t && Config(ot).cohort == tc.cohort;
          },
          /*only_borrowers=*/true);
      why = absl::StrCat("reclaimed: tenant ", tc.name, " needs its nominal quota back");
    }
    if (victims.empty()) {
      victims = Victims(
          w, [&](const Workload& o) { return TenantOf(o) == t && o.priority < w.priority; },
          /*only_borrowers=*/false);
      why = absl::StrCat("preempted by ", w.id, " of priority ", w.priority);
    }
    if (victims.empty()) return false;
    for (const Workload* v : victims) {
      decision_.preempt.push_back({v->id, why});
      stopping_.insert(v->id);
    }
    WaitForPreemption(w, victims.size());
    return true;
  }

  // Admitted jobs that `candidate` accepts, lowest priority then most recently admitted first,
  // released one by one on a copy of the ledger until w fits; empty when they never suffice.
  // only_borrowers: skip a job once its tenant no longer borrows a type w needs.
  std::vector<const Workload*> Victims(const Workload& w,
                                       const std::function<bool(const Workload&)>& candidate,
                                       bool only_borrowers) const {
    std::vector<const Workload*> candidates;
    for (const Workload& o : state_.workloads) {
      if (o.admitted && !stopping_.contains(o.id) && candidate(o)) candidates.push_back(&o);
    }
    std::sort(candidates.begin(), candidates.end(), [](const Workload* a, const Workload* b) {
      if (a->priority != b->priority) return a->priority < b->priority;
      if (a->admitted_unix_ms != b->admitted_unix_ms) {
        return a->admitted_unix_ms > b->admitted_unix_ms;
      }
      return a->id > b->id;
    });
    Ledger trial = ledger_;
    std::vector<const Workload*> chosen;
    for (const Workload* c : candidates) {
      if (only_borrowers && !Borrows(trial, *c, w)) continue;
      Take(&trial, *c, -1);
      chosen.push_back(c);
      if (Fits(trial, w) == Fit::kFits) return chosen;
    }
    return {};
  }

  // Whether o's tenant borrows a device type that o holds and w needs.
  bool Borrows(const Ledger& l, const Workload& o, const Workload& w) const {
    const int ot = TenantOf(o);
    for (const auto& [type, need] : w.devices) {
      if (need > 0 && CountOf(o.devices, type) > 0 &&
          CountOf(l.usage[ot], type) > CountOf(Config(ot).nominal, type)) {
        return true;
      }
    }
    return false;
  }

  // Whether a tenant of t's cohort other than t uses more of `type` than its nominal quota.
  bool CohortBorrows(int t, const std::string& type) const {
    const std::string& cohort = Config(t).cohort;
    if (cohort.empty()) return false;
    for (int o : p_.Members(cohort)) {
      if (o != t && CountOf(ledger_.usage[o], type) > CountOf(Config(o).nominal, type)) return true;
    }
    return false;
  }

  // The pending reason of a job that neither fits nor preempts: its own tenant's use only.
  void Explain(const Workload& w, Fit fit) {
    const int t = TenantOf(w);
    const TenantConfig& tc = Config(t);
    std::vector<std::string> parts;
    for (const auto& [type, need] : w.devices) {
      if (need <= 0) continue;
      if (fit == Fit::kDevices) {
        parts.push_back(absl::StrCat("the cluster has ", Devices(CountOf(ledger_.free, type), type),
                                     " free; this job needs ", need));
        continue;
      }
      const int64_t used = CountOf(ledger_.usage[t], type);
      const int64_t nominal = CountOf(tc.nominal, type);
      const int jobs = ledger_.admitted_jobs[t];
      std::string part =
          absl::StrCat("tenant ", tc.name, " uses ", Devices(used, type), " in ", jobs,
                       jobs == 1 ? " job" : " jobs", " (nominal quota ", nominal);
      if (used > nominal) absl::StrAppend(&part, ", ", used - nominal, " borrowed");
      absl::StrAppend(&part, ")");
      if (!tc.cohort.empty()) {
        absl::StrAppend(&part, ", its cohort has ", PoolFree(ledger_, tc.cohort, type, t),
                        " to lend");
      }
      absl::StrAppend(&part, "; this job needs ", need);
      // Reclaim serves only a job within the nominal quota (Kueue's rule): say so when the
      // tenant's unused quota is what others borrow, or "why is my quota not reclaimed".
      if (fit == Fit::kQuota && used < nominal && used + need > nominal && CohortBorrows(t, type)) {
        absl::StrAppend(&part, ", more than the ", nominal - used,
                        " left of its nominal quota, which other tenants of the cohort borrow "
                        "and which is reclaimed only for a job within it");
      }
      parts.push_back(std::move(part));
    }
    if (fit == Fit::kQuota) {
      Wait(w, PendingReason::kWaitingForQuota, absl::StrJoin(parts, "; "));
    } else {
      Wait(w, PendingReason::kWaitingForDevices, absl::StrJoin(parts, "; "));
    }
  }

  // A starving job claims what is free now of what it needs; nothing after it takes that.
  void Claim(const Workload& w) {
    const int t = TenantOf(w);
    const TenantConfig& tc = Config(t);
    for (const auto& [type, need] : w.devices) {
      ledger_.free[type] -= std::min(need, std::max<int64_t>(0, CountOf(ledger_.free, type)));
      const int64_t headroom =
          std::max<int64_t>(0, CountOf(tc.nominal, type) - CountOf(ledger_.usage[t], type));
      const int64_t own = std::min(need, headroom);
      ledger_.usage[t][type] += own;
      if (!tc.cohort.empty() && need > own) {
        ledger_.pool_claimed[tc.cohort][type] +=
            std::min(need - own, PoolFree(ledger_, tc.cohort, type, t));
      }
    }
    decision_.pending.back().message +=
        absl::StrCat(" (queued for ", (state_.now_unix_ms - w.queued_unix_ms) / 1000,
                     " s: the devices it needs are held for it as they come free)");
  }

  const QuotaPolicy& p_;
  const ClusterState& state_;
  Ledger ledger_;
  SchedulingDecision decision_;
  std::map<std::string, const Workload*> by_id_;
  std::set<std::string> stopping_;  // admitted jobs told to stop (before or in this round)
};

SchedulingDecision QuotaPolicy::Decide(const ClusterState& state) const {
  return Round(*this, state).Run();
}

}  // namespace dapple::coordinator::scheduling
