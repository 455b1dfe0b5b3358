#include "coordinator/planner/dapple_refine.h"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "coordinator/planner/placement.h"

namespace dapple::coordinator::dapple_search {

std::vector<Layout> RefinementMoves(const LayoutScorer& scorer, const StageBudget& budget,
                                    const Scored& current) {
  const PlanningProblem& problem = scorer.problem();
  const std::vector<double>& work_prefix = budget.work_prefix();
  const int L = budget.num_layers();
  const int D = budget.usable_devices();
  const Layout& cur = current.layout;
  const int P = static_cast<int>(cur.ranges.size());
  std::vector<Layout> moves;
  // Which stages to touch: all of them for short pipelines, else the pivot's neighbourhood and
  // the stage with the most work per replica.
  std::vector<int> stages;
  if (P <= 32) {
    for (int s = 0; s < P; ++s) stages.push_back(s);
  } else {
    const HybridPlan plan = ToPlan(cur, current.micro_batch_size, problem.global_batch);
    const int q = scorer.estimator().Latency(plan).pivot_stage;
    int heaviest = 0;
    double heaviest_work = -1;
    for (int s = 0; s < P; ++s) {
      const double w = (work_prefix[cur.ranges[s].second + 1] - work_prefix[cur.ranges[s].first]) /
                       cur.replicas[s];
      if (w > heaviest_work) {
        heaviest_work = w;
        heaviest = s;
      }
    }
    for (int s : {q - 1, q, q + 1, heaviest - 1, heaviest, heaviest + 1}) {
      if (s >= 0 && s < P) stages.push_back(s);
    }
    std::sort(stages.begin(), stages.end());
    stages.erase(std::unique(stages.begin(), stages.end()), stages.end());
  }
  const int devices_used = [&] {
    int n = 0;
    for (int r : cur.replicas) n += r;
    return n;
  }();
  // Boundary moves: the cut after stage s by +-1, 2, 4, ... layers (same devices).
  for (int s : stages) {
    if (s + 1 >= P) continue;
    for (int delta = 1; delta <= std::max(1, L / 4); delta *= 2) {
      for (int sign : {-1, 1}) {
        const int cut = cur.ranges[s].second + sign * delta;
        if (cut < cur.ranges[s].first || cut >= cur.ranges[s + 1].second) continue;
        Layout m = cur;
        m.ranges[s].second = cut;
        m.ranges[s + 1].first = cut + 1;
        moves.push_back(std::move(m));
      }
    }
  }
  // Replica moves: double or halve one stage, split one stage in two, merge two neighbours.
  for (int s : stages) {
    for (int r : {cur.replicas[s] * 2, cur.replicas[s] / 2}) {
      if (r < 1 || !budget.ReplicasAllowed(r) || devices_used - cur.replicas[s] + r > D) continue;
      std::vector<int> replicas = cur.replicas;
      replicas[s] = r;
      moves.push_back(PlaceLayout(problem, cur.ranges, replicas, cur.policy));
    }
    const auto [first, last] = cur.ranges[s];
    // Stage s cut where its work is halved, the halves on `left` and `right` replicas.
    auto split_at_half = [&](int left, int right) {
      const double half = 0.5 * (work_prefix[first] + work_prefix[last + 1]);
      int cut = first;
      while (cut + 1 < last && work_prefix[cut + 1] < half) ++cut;
      std::vector<std::pair<int, int>> ranges = cur.ranges;
      std::vector<int> replicas = cur.replicas;
      ranges[s] = {first, cut};
      ranges.insert(ranges.begin() + s + 1, {cut + 1, last});
      replicas[s] = left;
      replicas.insert(replicas.begin() + s + 1, right);
      moves.push_back(PlaceLayout(problem, ranges, replicas, cur.policy));
    };
    if (last > first && cur.replicas[s] >= 2 && budget.ReplicasAllowed(cur.replicas[s] / 2) &&
        (problem.num_stages == 0)) {
      split_at_half(cur.replicas[s] / 2, cur.replicas[s] / 2);
    }
    if (last > first && problem.num_stages == 0 && devices_used + cur.replicas[s] <= D) {
      // Split it in two, the new half on as many unused devices.
      split_at_half(cur.replicas[s], cur.replicas[s]);
    }
    if (s + 1 < P && problem.num_stages == 0) {
      const int r = cur.replicas[s] + cur.replicas[s + 1];
      for (int merged : {r, std::max(cur.replicas[s], cur.replicas[s + 1])}) {
        if (!budget.ReplicasAllowed(merged)) continue;
        std::vector<std::pair<int, int>> ranges = cur.ranges;
        std::vector<int> replicas = cur.replicas;
        ranges[s].second = ranges[s + 1].second;
        ranges.erase(ranges.begin() + s + 1);
        replicas[s] = merged;
        replicas.erase(replicas.begin() + s + 1);
        moves.push_back(PlaceLayout(problem, ranges, replicas, cur.policy));
      }
    }
  }
  for (PlacementPolicy policy : kPlacementPolicies) {
    if (policy != cur.policy)
      moves.push_back(PlaceLayout(problem, cur.ranges, cur.replicas, policy));
  }
  return moves;
}

Scored Refine(const LayoutScorer& scorer, const StageBudget& budget, int iterations, Scored start) {
  Scored current = std::move(start);
  for (int it = 0; it < iterations; ++it) {
    Scored best = current;
    for (Layout& move : RefinementMoves(scorer, budget, current)) {
      // Same replicas: keep the micro-batch (cheap); otherwise choose it again.
      double t;
      int64_t b = current.micro_batch_size;
      if (move.replicas == current.layout.replicas) {
        t = scorer.EstimateAt(move, b);
      } else {
        const Scored s = scorer.Score(move);
        if (!s.fits) continue;
        t = s.estimate_ms;
        b = s.micro_batch_size;
      }
      if (t < best.estimate_ms * (1 - 1e-9)) {
        best.layout = std::move(move);
        best.estimate_ms = t;
        best.micro_batch_size = b;
      }
    }
    if (best.estimate_ms >= current.estimate_ms * (1 - 1e-9)) break;
    current = scorer.Score(best.layout);
  }
  return current;
}

}  // namespace dapple::coordinator::dapple_search
