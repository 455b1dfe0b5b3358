// A simulation of QuotaPolicy's weighted fair sharing on a saturated cluster: tenants in one
// cohort with no nominal quota share the cohort's devices; each keeps a few jobs queued at all
// times; jobs take 1, 2 or 4 devices for 1-10 simulated minutes. Measures the device-seconds
// each tenant received, to compare with its weight (issue 16: within 10% of the weights).
#ifndef DAPPLE_COORDINATOR_SCHEDULING_FAIR_SHARE_SIMULATION_H_
#define DAPPLE_COORDINATOR_SCHEDULING_FAIR_SHARE_SIMULATION_H_

#include <cstdint>
#include <string>
#include <vector>

namespace dapple::coordinator::scheduling {

struct FairShareOptions {
  std::vector<double> weights = {2, 1, 1};  // one tenant per weight: t0, t1, ...
  int64_t devices = 16;                     // the cohort's shared cpu devices
  int queued_per_tenant = 4;                // jobs each tenant keeps queued (saturating)
  int64_t horizon_s = 24 * 3600;            // simulated time
  uint64_t seed = 1;
};

struct FairShareResult {
  std::vector<double> device_seconds;  // per tenant, within the horizon
  std::vector<double> share;           // device_seconds / their sum
  std::vector<double> target;          // weight / sum of weights
  int64_t jobs_started = 0;
  int64_t jobs_finished = 0;
  int64_t decisions = 0;   // QuotaPolicy::Decide calls
  double utilization = 0;  // device-seconds used / (devices x horizon)
};

// Deterministic for a seed. Runs QuotaPolicy (starvation_after 10 minutes) with a simulated
// clock that jumps from one job's end to the next.
FairShareResult SimulateFairShare(const FairShareOptions& options);

}  // namespace dapple::coordinator::scheduling

#endif  // DAPPLE_COORDINATOR_SCHEDULING_FAIR_SHARE_SIMULATION_H_
