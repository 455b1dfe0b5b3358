#include "coordinator/planner/dapple_candidates.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/planner/baseline_planners.h"
#include "coordinator/planner/placement.h"

namespace dapple::coordinator::dapple_search {
namespace {

// The dynamic program of family 2 for one budget rule, with per (devices used u, replica count
// index) tables of the device range [D - u - r, D - u) it would place a stage on.
class ReverseDp {
 public:
  explicit ReverseDp(const StageBudget& budget);

  // Whether some plan covers every layer within T; when `out` is given, appends up to four such
  // layouts.
  bool Run(double T, std::vector<Layout>* out) const;

 private:
  const StageBudget& budget_;
  const int L_;
  const int D_;
  const std::vector<int>& replica_counts_;
  // Per (u, replica count index): the smallest device memory of devices [D - u - r, D - u) and
  // whether they share a node.
  std::vector<double> range_memory_;
  std::vector<char> range_one_node_;
};

ReverseDp::ReverseDp(const StageBudget& budget)
    : budget_(budget),
      L_(budget.num_layers()),
      D_(budget.usable_devices()),
      replica_counts_(budget.replica_counts()) {
  const int num_r = static_cast<int>(replica_counts_.size());
  range_memory_.assign(static_cast<size_t>(D_ + 1) * num_r, kInf);
  range_one_node_.assign(static_cast<size_t>(D_ + 1) * num_r, 0);
  for (int u = 0; u < D_; ++u) {
    for (int ri = 0; ri < num_r; ++ri) {
      const int r = replica_counts_[ri];
      if (u + r > D_) break;
      double memory = kInf;
      for (int d = D_ - u - r; d < D_ - u; ++d) memory = std::min(memory, budget.memory_of(d));
      range_memory_[u * num_r + ri] = memory;
      range_one_node_[u * num_r + ri] =
          budget.node_of(D_ - u - r) == budget.node_of(D_ - u - 1) ? 1 : 0;
    }
  }
}

bool ReverseDp::Run(double T, std::vector<Layout>* out) const {
  const int fixed_p = budget_.problem().num_stages;
  const int K = fixed_p > 0 ? fixed_p : 1;  // stage-count dimension only when P is fixed
  struct State {
    int start = std::numeric_limits<int>::max();  // first layer covered; L: nothing yet
    int stages = 0;
    int prev_u = -1;
    int replicas = 0;
  };
  // state[k][u]: k = stages so far (fixed P) or 0 (free P); u = devices used.
  std::vector<std::vector<State>> state(K + 1, std::vector<State>(D_ + 1));
  auto at = [&](int k, int u) -> State& { return state[fixed_p > 0 ? k : 0][u]; };
  at(0, 0).start = L_;
  bool any = false;
  for (int k = 0; k < (fixed_p > 0 ? fixed_p : 1); ++k) {
    for (int u = 0; u < D_; ++u) {
      const State cur = at(k, u);
      if (cur.start == std::numeric_limits<int>::max() || cur.start == 0) continue;
      const int last = cur.start - 1;
      const int stages_before_min = fixed_p > 0 ? fixed_p - cur.stages - 1 : 0;
      const int num_r = static_cast<int>(replica_counts_.size());
      for (int ri = 0; ri < num_r; ++ri) {
        const int r = replica_counts_[ri];
        if (u + r > D_) break;
        const int lo_dev = D_ - u - r;
        const bool one_node = range_one_node_[u * num_r + ri] != 0;
        const double memory = range_memory_[u * num_r + ri];
        const double in_flight = budget_.InFlight(cur.stages + 1, r);
        Slot slot;
        budget_.FillSlot(slot, r, one_node, memory, in_flight);
        // Transfers: out of the stage to the one above it (placed), and into it from the one
        // below (not placed yet: assumed as wide as this one, right below it).
        double out = 0;
        if (u > 0) {
          const int next_hi = D_ - u + cur.replicas - 1;
          const int par = std::max(r, cur.replicas);
          slot.link_ms_per_byte =
              budget_.LinkMsPerByte(par, budget_.node_of(lo_dev) == budget_.node_of(next_hi));
          out = budget_.LinkCost(slot, last);
          if (out > T) continue;
        }
        Slot below;
        below.link_ms_per_byte = budget_.LinkMsPerByte(
            r, budget_.node_of(std::max(0, lo_dev - r)) == budget_.node_of(D_ - u - 1));
        const double limit = T - budget_.link_weight() * out;
        if (last < stages_before_min || !budget_.StageOk(slot, last, last, limit)) continue;
        int lo = stages_before_min, hi = last;  // smallest first with StageOk(first, last)
        while (lo < hi) {
          const int mid = lo + (hi - lo) / 2;
          if (budget_.StageOk(slot, mid, last, limit)) {
            hi = mid;
          } else {
            lo = mid + 1;
          }
        }
        while (lo <= last && lo > 0 &&
               (budget_.LinkCost(below, lo - 1) > T ||
                budget_.StageCost(slot, lo, last) +
                        budget_.link_weight() * (out + budget_.LinkCost(below, lo - 1)) >
                    T)) {
          ++lo;
        }
        if (lo > last) continue;
        State& next = at(k + 1, u + r);
        if (lo < next.start || (lo == next.start && cur.stages + 1 < next.stages)) {
          next.start = lo;
          next.stages = cur.stages + 1;
          next.prev_u = u;
          next.replicas = r;
        }
      }
    }
  }
  const int final_k = fixed_p > 0 ? fixed_p : 0;
  for (int u = D_; u >= 1; --u) {
    const State& end = at(final_k, u);
    if (end.start != 0) continue;
    any = true;
    if (out == nullptr) return true;
    // Walk back: the state chain lists stages from the first (devices lowest) to the last.
    Layout layout;
    layout.policy = PlacementPolicy::kAppendFirst;
    int k = final_k, cu = u;
    int first = 0;
    while (cu > 0) {
      const State& s = at(k, cu);
      const State& prev = at(fixed_p > 0 ? k - 1 : 0, s.prev_u);
      const int last = prev.start - 1;
      layout.ranges.emplace_back(first, last);
      layout.replicas.push_back(s.replicas);
      std::vector<int> devices;
      for (int d = D_ - cu; d < D_ - cu + s.replicas; ++d) devices.push_back(d);
      layout.devices.push_back(std::move(devices));
      first = last + 1;
      cu = s.prev_u;
      if (fixed_p > 0) --k;
    }
    out->push_back(std::move(layout));
    if (out->size() >= 4) break;
  }
  return any;
}

}  // namespace

std::vector<Layout> UniformReplicaLayouts(const StageBudget& budget) {
  const PlanningProblem& problem = budget.problem();
  const int L = budget.num_layers();
  const int D = budget.usable_devices();
  std::vector<Layout> out;
  for (int r : budget.replica_counts()) {
    const int max_p = std::min(L, D / r);
    if (max_p < 1) continue;
    std::vector<int> depths;
    if (problem.num_stages > 0) {
      if (problem.num_stages <= max_p) depths.push_back(problem.num_stages);
    } else {
      depths = CandidateDepths(max_p);
    }
    for (int P : depths) {
      std::set<std::string> placements;
      for (PlacementPolicy policy : kPlacementPolicies) {
        const std::vector<int> replicas(P, r);
        std::vector<std::vector<int>> devices = PlaceStages(problem.topology, D, replicas, policy);
        std::string key;
        for (const auto& d : devices) {
          for (int x : d) absl::StrAppend(&key, x, ",");
          key += ";";
        }
        if (!placements.insert(key).second) continue;  // same devices as another policy
        const std::vector<Slot> slots = budget.SlotsFor(devices);
        const double T = budget.MinBudget(slots);
        if (T == kInf) continue;
        Layout layout;
        layout.ranges = budget.Balanced(slots, T);
        layout.replicas = replicas;
        layout.devices = std::move(devices);
        layout.policy = policy;
        out.push_back(std::move(layout));
      }
    }
  }
  return out;
}

std::vector<Layout> ReverseDpLayouts(const StageBudget& budget) {
  std::vector<Layout> out;
  if (budget.replica_counts().empty()) return out;
  const ReverseDp dp(budget);
  if (!dp.Run(1e300, nullptr)) return out;
  double hi = 1;
  while (!dp.Run(hi, nullptr)) hi *= 2;
  double lo = 0;
  for (int it = 0; it < 100 && hi - lo > 1e-6 * hi; ++it) {
    const double mid = 0.5 * (lo + hi);
    if (dp.Run(mid, nullptr)) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  std::vector<Layout> layouts;
  dp.Run(hi, &layouts);
  for (Layout& layout : layouts) {
    const std::vector<Slot> slots = budget.SlotsFor(layout.devices);
    std::vector<std::pair<int, int>> balanced = budget.Balanced(slots, hi);
    if (static_cast<int>(balanced.size()) == static_cast<int>(layout.ranges.size())) {
      Layout b = layout;
      b.ranges = std::move(balanced);
      out.push_back(std::move(b));
    }
    out.push_back(std::move(layout));
  }
  return out;
}

}  // namespace dapple::coordinator::dapple_search
