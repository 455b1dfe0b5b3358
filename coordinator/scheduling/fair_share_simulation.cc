#include "coordinator/scheduling/fair_share_simulation.h"

#include <algorithm>
#include <map>
#include <random>

#include "absl/strings/str_cat.h"
#include "coordinator/scheduling/quota_policy.h"

namespace dapple::coordinator::scheduling {

FairShareResult SimulateFairShare(const FairShareOptions& options) {
  SchedulingConfig config;
  config.cohorts = {CohortConfig{"shared", {{"cpu", options.devices}}}};
  const int n = static_cast<int>(options.weights.size());
  for (int t = 0; t < n; ++t) {
    TenantConfig tenant;
    tenant.name = absl::StrCat("t", t);
    tenant.cohort = "shared";
    tenant.weight = options.weights[t];
    config.tenants.push_back(tenant);
  }
  const QuotaPolicy policy = *QuotaPolicy::Create(config);

  std::mt19937_64 rng(options.seed);
  std::uniform_int_distribution<int> size_pick(0, 2);
  std::uniform_int_distribution<int64_t> minutes(1, 10);
  struct Job {
    Workload w;
    int tenant = 0;
    int64_t duration_ms = 0;
  };
  std::map<std::string, Job> jobs;
  int64_t next_id = 0;
  std::vector<int> queued(n, 0);
  int64_t now = 0;
  auto refill = [&] {
    for (int t = 0; t < n; ++t) {
      while (queued[t] < options.queued_per_tenant) {
        Job job;
        job.w.id = absl::StrCat("job-", next_id++);
        job.w.tenant = absl::StrCat("t", t);
        job.w.devices = {{"cpu", int64_t{1} << size_pick(rng)}};
        job.w.queued_unix_ms = now;
        job.tenant = t;
        job.duration_ms = minutes(rng) * 60 * 1000;
        jobs[job.w.id] = job;
        ++queued[t];
      }
    }
  };

  FairShareResult result;
  result.device_seconds.assign(n, 0);
  const int64_t horizon_ms = options.horizon_s * 1000;
  int64_t in_use = 0;
  while (now < horizon_ms) {
    refill();
    ClusterState state;
    state.now_unix_ms = now;
    for (const auto& [id, job] : jobs) state.workloads.push_back(job.w);
    state.free_devices = {{"cpu", options.devices - in_use}};
    const SchedulingDecision decision = policy.Decide(state);
    ++result.decisions;
    for (const std::string& id : decision.admit) {
      Job& job = jobs.at(id);
      job.w.admitted = true;
      job.w.admitted_unix_ms = now;
      in_use += job.w.devices.at("cpu");
      --queued[job.tenant];
      ++result.jobs_started;
    }
    // No preemption happens here: no tenant has a nominal quota to reclaim, priorities are equal.
    int64_t next = horizon_ms;
    for (const auto& [id, job] : jobs) {
      if (job.w.admitted) next = std::min(next, job.w.admitted_unix_ms + job.duration_ms);
    }
    // Device-seconds of the interval [now, next) go to the tenants of the running jobs.
    for (const auto& [id, job] : jobs) {
      if (job.w.admitted) {
        result.device_seconds[job.tenant] +=
            static_cast<double>(job.w.devices.at("cpu")) * static_cast<double>(next - now) / 1000;
      }
    }
    now = next;
    for (auto it = jobs.begin(); it != jobs.end();) {
      const Job& job = it->second;
      if (job.w.admitted && job.w.admitted_unix_ms + job.duration_ms <= now) {
        in_use -= job.w.devices.at("cpu");
        ++result.jobs_finished;
        it = jobs.erase(it);
      } else {
        ++it;
      }
    }
  }
  double total = 0, weights = 0;
  for (int t = 0; t < n; ++t) {
    total += result.device_seconds[t];
    weights += options.weights[t];
  }
  for (int t = 0; t < n; ++t) {
    result.share.push_back(total > 0 ? result.device_seconds[t] / total : 0);
    result.target.push_back(options.weights[t] / weights);
  }
  result.utilization =
      total / (static_cast<double>(options.devices) * static_cast<double>(options.horizon_s));
  return result;
}

}  // namespace dapple::coordinator::scheduling
