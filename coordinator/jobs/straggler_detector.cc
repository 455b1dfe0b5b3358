#include "coordinator/jobs/straggler_detector.h"

#include <utility>

#include "absl/strings/str_format.h"
#include "common/median.h"

namespace dapple::coordinator {

std::optional<StragglerDetector::Change> StragglerDetector::OnStep(
    int stage, int replica, const v1::StageStepStats& stats) {
  Rank& rank = ranks_[{stage, replica}];
  rank.seconds.push_back(stats.forward_seconds() + stats.backward_seconds() +
                         stats.optimizer_seconds());
  if (static_cast<int>(rank.seconds.size()) > kWindow) rank.seconds.pop_front();
  if (static_cast<int>(rank.seconds.size()) < kWindow) return std::nullopt;
  std::deque<double> peer_levels;
  for (const auto& [key, other] : ranks_) {
    if (key.first != stage || key.second == replica) continue;
    if (static_cast<int>(other.seconds.size()) < kWindow) continue;
    peer_levels.push_back(Median(other.seconds));
  }
  if (peer_levels.empty()) return std::nullopt;
  const double level = Median(rank.seconds);
  const double peers = Median(std::move(peer_levels));
  rank.ratio = peers > 0 ? level / peers : 0;
  const bool slow = peers > 0 && level > kRatio * peers;
  rank.slow_run = slow ? rank.slow_run + 1 : 0;
  rank.normal_run = slow ? 0 : rank.normal_run + 1;
  const bool was = rank.straggler;
  if (!was && rank.slow_run >= kConsecutive) rank.straggler = true;
  if (was && rank.normal_run >= kConsecutive) rank.straggler = false;
  if (rank.straggler == was) return std::nullopt;
  return Change{stage, replica, rank.straggler, level, peers};
}

bool StragglerDetector::IsStraggler(int stage, int replica) const {
  auto it = ranks_.find({stage, replica});
  return it != ranks_.end() && it->second.straggler;
}

double StragglerDetector::Ratio(int stage, int replica) const {
  auto it = ranks_.find({stage, replica});
  return it != ranks_.end() ? it->second.ratio : 0;
}

std::string StragglerDetector::Describe(const Change& c) {
  const std::string numbers =
      absl::StrFormat("median %.1f ms vs %.1f ms of compute per step over the last %d steps",
                      c.rank_seconds * 1e3, c.peers_seconds * 1e3, kWindow);
  const double ratio = c.peers_seconds > 0 ? c.rank_seconds / c.peers_seconds : 0;
  if (c.straggler) {
    return absl::StrFormat("stage %d replica %d computes %.2fx its stage's other replicas: %s",
                           c.stage, c.replica, ratio, numbers);
  }
  return absl::StrFormat("stage %d replica %d is no longer a straggler (%.2fx): %s", c.stage,
                         c.replica, ratio, numbers);
}

}  // namespace dapple::coordinator
