#include "worker/comm/loopback_allreduce.h"

#include <gloo/rendezvous/hash_store.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/median.h"
#include "worker/comm/gloo_collective.h"

namespace dapple::worker {
namespace {

bool ValidLink(const LinkEstimate& link) {
  return std::isfinite(link.latency_ms) && link.latency_ms >= 0 &&
         std::isfinite(link.bandwidth_bytes_per_s) && link.bandwidth_bytes_per_s > 0;
}

constexpr int kUntimed = 2;
constexpr int kSmallTrialsPerTrial = 4;

// One member's part: join, then kUntimed untimed and the timed AllReduces of each size. Both
// members run the same calls in the same order (Gloo's rule); member 0's times are the result,
// as the two end within one message of each other.
absl::Status RunMember(int rank, gloo::rendezvous::HashStore& store, const LoopbackOptions& options,
                       std::vector<double>* small_ms, std::vector<double>* large_ms) {
  absl::StatusOr<std::unique_ptr<GlooCollective>> c = GlooCollective::Create(
      rank, 2, store, "loopback", "127.0.0.1", options.timeout, "loopback link measurement");
  if (!c.ok()) return c.status();
  std::vector<float> buffer(options.large_bytes / sizeof(float), 1.0f);
  for (auto [bytes, times, trials] :
       {std::tuple{options.small_bytes, small_ms, options.trials * kSmallTrialsPerTrial},
        std::tuple{options.large_bytes, large_ms, options.trials}}) {
    const size_t count = bytes / sizeof(float);
    for (int t = -kUntimed; t < trials; ++t) {
      const auto start = std::chrono::steady_clock::now();
      if (absl::Status s = (*c)->AllReduceSum(buffer.data(), count); !s.ok()) return s;
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
      if (t >= 0) times->push_back(ms);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LinkEstimate> LinkFromAllReduceTimes(double small_bytes, double small_ms,
                                                    double large_bytes, double large_ms) {
  if (!(small_bytes > 0 && small_bytes < large_bytes && small_ms > 0 && small_ms < large_ms) ||
      !std::isfinite(large_bytes) || !std::isfinite(large_ms)) {
    return absl::InvalidArgumentError(
        absl::StrCat("no link reproduces AllReduce times of ", small_ms, " ms for ", small_bytes,
                     " bytes and ", large_ms, " ms for ", large_bytes,
                     " bytes: want 0 < small bytes < large bytes and 0 < small ms < large ms"));
  }
  LinkEstimate link;
  link.latency_ms = small_ms / 2;
  link.bandwidth_bytes_per_s = (large_bytes - small_bytes) / ((large_ms - small_ms) / 1000.0);
  return link;
}

absl::StatusOr<LinkEstimate> MeasureLoopbackAllReduce(const LoopbackOptions& options) {
  if (options.trials < 1 || options.small_bytes < sizeof(float) ||
      options.large_bytes <= options.small_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "loopback measurement: trials ", options.trials, " (want >= 1), sizes ",
        options.small_bytes, " and ", options.large_bytes, " bytes (want 4 <= small < large)"));
  }
  gloo::rendezvous::HashStore store;
  std::vector<double> small_ms, large_ms, peer_small, peer_large;
  absl::Status peer;
  std::thread other([&] { peer = RunMember(1, store, options, &peer_small, &peer_large); });
  const absl::Status mine = RunMember(0, store, options, &small_ms, &large_ms);
  other.join();
  if (!mine.ok()) return mine;
  if (!peer.ok()) return peer;
  return LinkFromAllReduceTimes(static_cast<double>(options.small_bytes),
                                *std::min_element(small_ms.begin(), small_ms.end()),
                                static_cast<double>(options.large_bytes), Median(large_ms));
}

void LinkEstimateMedian::Add(const LinkEstimate& link) {
  if (!ValidLink(link)) return;
  latency_ms_.push_back(link.latency_ms);
  bandwidth_.push_back(link.bandwidth_bytes_per_s);
}

LinkEstimate LinkEstimateMedian::Median() const {
  LinkEstimate link;
  link.latency_ms = dapple::Median(latency_ms_);
  link.bandwidth_bytes_per_s = dapple::Median(bandwidth_);
  return link;
}

}  // namespace dapple::worker
