#include "coordinator/scheduling/fair_share_simulation.h"

#include <cmath>
#include <cstdio>

#include "gtest/gtest.h"

namespace dapple::coordinator::scheduling {
namespace {

// Issue 16: three tenants weighted 2:1:1, all saturating, hundreds of jobs: each tenant's
// device-seconds within 10% of its weight's share. Prints the table of docs/benchmarks.md.
TEST(FairShareSimulationTest, DeviceSecondsFollowTheWeights) {
  for (uint64_t seed : {1, 2, 3}) {
    FairShareOptions options;
    options.seed = seed;
    const FairShareResult r = SimulateFairShare(options);
    std::printf("| %llu | %lld | %lld | %.3f |", static_cast<unsigned long long>(seed),
                static_cast<long long>(r.jobs_started), static_cast<long long>(r.decisions),
                r.utilization);
    EXPECT_GE(r.jobs_started, 300) << "hundreds of jobs";
    EXPECT_GE(r.utilization, 0.95) << "saturated: the devices are in use";
    for (size_t t = 0; t < r.share.size(); ++t) {
      std::printf(" %.0f | %.3f (%.3f, %+.1f%%) |", r.device_seconds[t], r.share[t], r.target[t],
                  100 * (r.share[t] / r.target[t] - 1));
      EXPECT_LE(std::abs(r.share[t] / r.target[t] - 1), 0.10)
          << "seed " << seed << " tenant " << t << ": share " << r.share[t] << " against "
          << r.target[t];
    }
    std::printf("\n");
  }
}

}  // namespace
}  // namespace dapple::coordinator::scheduling
