#include "coordinator/planner/stage_budget.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "common/profile/chain_profile.h"
#include "common/profile/cluster_topology.h"
#include "coordinator/planner/baseline_planners.h"
#include "coordinator/planner/placement.h"

namespace dapple::coordinator::dapple_search {

StageBudget::StageBudget(const PlanningProblem& problem)
    : problem_(problem), activation_(problem.profile) {
  L_ = problem.profile.num_layers();
  D_ = UsableDeviceCount(problem);
  G_ = static_cast<double>(problem.global_batch);
  batch_ = static_cast<double>(problem.profile.batch_size);
  const profile::ChainProfile& p = problem.profile;
  work_prefix_.assign(L_ + 1, 0.0);
  weight_prefix_.assign(L_ + 1, 0.0);
  for (int i = 0; i < L_; ++i) {
    work_prefix_[i + 1] = work_prefix_[i] + p.forward_ms[i] + p.backward_ms[i];
    weight_prefix_[i + 1] = weight_prefix_[i] + static_cast<double>(p.parameter_bytes[i]);
  }
  cut_.assign(L_, 0.0);
  for (int i = 0; i + 1 < L_; ++i) {
    cut_[i] = static_cast<double>(p.cut_bytes[i]);
    max_cut_ = std::max(max_cut_, cut_[i]);
  }
  node_of_.resize(D_);
  memory_of_.resize(D_);
  for (int d = 0; d < D_; ++d) {
    node_of_[d] = profile::NodeOfDevice(problem.topology, d);
    memory_of_[d] = static_cast<double>(profile::DeviceMemoryBytes(problem.topology, d));
  }
  device_memory_ = memory_of_;
  const int limit = problem.max_replicas > 0 ? std::min(problem.max_replicas, D_) : D_;
  for (int r = 1; r <= limit; r *= 2) {
    const std::vector<int64_t> sizes = MicroBatchSizes(problem, {r});
    if (sizes.empty()) continue;
    replica_counts_.push_back(r);
    min_micro_batch_[r] = sizes.front();
  }
}

double StageBudget::BandwidthBytesPerMs(bool one_node) const {
  return (one_node ? problem_.topology.intra_node_bandwidth_bytes_per_s()
                   : problem_.topology.inter_node_bandwidth_bytes_per_s()) /
         1000.0;
}

double StageBudget::LatencyMs(bool one_node) const {
  return one_node ? problem_.topology.intra_node_latency_ms()
                  : problem_.topology.inter_node_latency_ms();
}

bool StageBudget::OneNode(const std::vector<int>& a, const std::vector<int>* b) const {
  const int n = node_of_[a.front()];
  for (int d : a) {
    if (node_of_[d] != n) return false;
  }
  if (b != nullptr) {
    for (int d : *b) {
      if (node_of_[d] != n) return false;
    }
  }
  return true;
}

void StageBudget::FillSlot(Slot& slot, int r, bool one_node, double memory,
                           double in_flight) const {
  slot.replicas = r;
  slot.compute_scale = G_ / (static_cast<double>(r) * batch_);
  if (r > 1) {
    const double n = r;
    slot.ar_fixed_ms = 2 * (n - 1) * LatencyMs(one_node);
    slot.ar_ms_per_byte = 2 * (n - 1) / n / BandwidthBytesPerMs(one_node);
  } else {
    slot.ar_fixed_ms = 0;
    slot.ar_ms_per_byte = 0;
  }
  slot.memory_bytes = memory;
  slot.activation_scale =
      in_flight * static_cast<double>(MinMicroBatch(r)) / static_cast<double>(r) / batch_;
  slot.in_flight = in_flight;
}

void StageBudget::set_memory_margin(double bytes) {
  for (size_t d = 0; d < memory_of_.size(); ++d) memory_of_[d] = device_memory_[d] - bytes;
}

double StageBudget::LinkMsPerByte(int par, bool one_node) const {
  return G_ / batch_ / (static_cast<double>(par) * BandwidthBytesPerMs(one_node));
}

std::vector<Slot> StageBudget::SlotsFor(const std::vector<std::vector<int>>& devices) const {
  const int P = static_cast<int>(devices.size());
  std::vector<Slot> slots(P);
  for (int s = 0; s < P; ++s) {
    const int r = static_cast<int>(devices[s].size());
    double memory = kInf;
    for (int d : devices[s]) memory = std::min(memory, memory_of_[d]);
    const double in_flight = InFlight(P - s, r);
    FillSlot(slots[s], r, OneNode(devices[s], nullptr), memory, in_flight);
    if (s + 1 < P) {
      const int par = std::max(r, static_cast<int>(devices[s + 1].size()));
      slots[s].link_ms_per_byte = LinkMsPerByte(par, OneNode(devices[s], &devices[s + 1]));
    }
  }
  return slots;
}

double StageBudget::StageCost(const Slot& slot, int first, int last) const {
  double c = (work_prefix_[last + 1] - work_prefix_[first]) * slot.compute_scale;
  if (slot.replicas > 1) {
    c +=
        slot.ar_fixed_ms + slot.ar_ms_per_byte * (weight_prefix_[last + 1] - weight_prefix_[first]);
  }
  return c;
}

bool StageBudget::StageFits(const Slot& slot, int first, int last) const {
  const double scale = problem_.recompute == RecomputeMode::kNone
                           ? slot.activation_scale
                           : slot.activation_scale / std::max(1.0, slot.in_flight);
  return memory::ParameterStateBytes(weight_prefix_[last + 1] - weight_prefix_[first],
                                     problem_.optimizer_state_factor) +
             scale * activation_.AtProfileBatch(first, last) <=
         slot.memory_bytes;
}

double StageBudget::InCost(const std::vector<Slot>& slots, int s, int first) const {
  return s > 0 && first > 0 ? LinkCost(slots[s - 1], first - 1) : 0.0;
}

double StageBudget::OutCost(const std::vector<Slot>& slots, int s, int last) const {
  return s + 1 < static_cast<int>(slots.size()) ? LinkCost(slots[s], last) : 0.0;
}

bool StageBudget::Fits(const std::vector<Slot>& slots, int s, int first, int last, double T) const {
  const double in = InCost(slots, s, first), out = OutCost(slots, s, last);
  return in <= T && out <= T && StageCost(slots[s], first, last) + link_weight_ * (in + out) <= T &&
         StageFits(slots[s], first, last);
}

int StageBudget::MaxLast(const std::vector<Slot>& slots, int s, int first, double T) const {
  const int P = static_cast<int>(slots.size());
  const double in = InCost(slots, s, first);
  const int max_last = s == P - 1 ? L_ - 1 : L_ - (P - s);  // a layer for every later stage
  const double budget = T - link_weight_ * in;
  if (first > max_last || in > T || !StageOk(slots[s], first, first, budget)) return first - 1;
  if (s == P - 1) {
    return StageOk(slots[s], first, L_ - 1, budget) ? L_ - 1 : first - 1;
  }
  int lo = first, hi = max_last;  // the largest last with StageOk (monotone in last)
  while (lo < hi) {
    const int mid = lo + (hi - lo + 1) / 2;
    if (StageOk(slots[s], first, mid, budget)) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  // The transfer out of the stage depends on where it ends: walk back until it fits too.
  int last = lo;
  while (last >= first && !Fits(slots, s, first, last, T)) --last;
  return last;
}

bool StageBudget::Greedy(const std::vector<Slot>& slots, double T,
                         std::vector<std::pair<int, int>>* ranges) const {
  if (pair_mode_) return PairDp(slots, T, ranges);
  const int P = static_cast<int>(slots.size());
  if (ranges != nullptr) ranges->clear();
  int first = 0;
  for (int s = 0; s < P; ++s) {
    const int last = MaxLast(slots, s, first, T);
    if (last < first) return false;
    if (ranges != nullptr) ranges->emplace_back(first, last);
    first = last + 1;
  }
  return first == L_;
}

bool StageBudget::PairDp(const std::vector<Slot>& slots, double T,
                         std::vector<std::pair<int, int>>* ranges) const {
  const int P = static_cast<int>(slots.size());
  // lightest[s][j]: the smallest cost stage s can have when it ends at layer j and stages 0..s
  // satisfy every constraint; only that matters for stage s + 1's two-stage loop. from[s][j]:
  // where stage s then starts.
  std::vector<std::vector<double>> lightest(P, std::vector<double>(L_, kInf));
  std::vector<std::vector<int>> from(P, std::vector<int>(L_, -1));
  for (int j = 0; j + P <= L_; ++j) {
    if (!Fits(slots, 0, 0, j, T)) break;
    lightest[0][j] = StageCost(slots[0], 0, j);
    from[0][j] = 0;
  }
  for (int s = 1; s < P; ++s) {
    for (int j = s; j + (P - s) <= L_; ++j) {
      // The latest start gives the lightest stage: scan starts down from j.
      for (int first = j; first >= s; --first) {
        const double cost = StageCost(slots[s], first, j);
        if (cost > T) break;  // and only grows as the start moves down
        const double before = lightest[s - 1][first - 1];
        if (before == kInf || !Fits(slots, s, first, j, T)) continue;
        if (before + cost + 2 * InCost(slots, s, first) <= 2 * T) {
          lightest[s][j] = cost;
          from[s][j] = first;
          break;
        }
      }
    }
  }
  if (lightest[P - 1][L_ - 1] == kInf) return false;
  if (ranges != nullptr) {
    ranges->assign(P, {0, 0});
    int last = L_ - 1;
    for (int s = P - 1; s >= 0; --s) {
      (*ranges)[s] = {from[s][last], last};
      last = from[s][last] - 1;
    }
  }
  return true;
}

double StageBudget::MinBudget(const std::vector<Slot>& slots) const {
  double hi = 0;
  for (const Slot& slot : slots) {
    hi = std::max(hi, StageCost(slot, 0, L_ - 1) + 2 * slot.link_ms_per_byte * max_cut_);
  }
  for (const Slot& slot : slots) hi += slot.link_ms_per_byte * max_cut_;
  hi = hi * 1.001 + 1e-9;
  if (!Greedy(slots, hi, nullptr)) return kInf;  // memory, not time, is the obstacle
  double lo = 0;
  for (int it = 0; it < 100 && hi - lo > 1e-9 * hi; ++it) {
    const double mid = 0.5 * (lo + hi);
    if (Greedy(slots, mid, nullptr)) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return hi;
}

std::vector<std::pair<int, int>> StageBudget::Balanced(const std::vector<Slot>& slots,
                                                       double T) const {
  const int P = static_cast<int>(slots.size());
  std::vector<std::pair<int, int>> greedy;
  Greedy(slots, T, &greedy);
  if (pair_mode_) return greedy;
  // min_start[s]: the earliest first layer from which stages s..P-1 can cover the rest within
  // T, by a greedy pass from the end.
  std::vector<int> min_start(P + 1, L_);
  for (int s = P - 1; s >= 1; --s) {
    const int last = min_start[s + 1] - 1;
    const double budget = T - link_weight_ * OutCost(slots, s, last);
    if (last < s || !StageOk(slots[s], last, last, budget)) break;
    int lo = s, hi = last;  // smallest first with StageOk(first, last) (leaving s layers)
    while (lo < hi) {
      const int mid = lo + (hi - lo) / 2;
      if (StageOk(slots[s], mid, last, budget)) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    int first = lo;
    while (first <= last && !Fits(slots, s, first, last, T)) ++first;
    if (first > last) break;  // the stages before s take the rest (min_start stays L)
    min_start[s] = first;
  }
  std::vector<std::pair<int, int>> out;
  double replicas_left = 0;
  for (const Slot& slot : slots) replicas_left += slot.replicas;
  int first = 0;
  for (int s = 0; s < P - 1; ++s) {
    // The most this stage can take (Greedy's rule) and the least that lets the rest fit.
    const int max_last = MaxLast(slots, s, first, T);
    if (max_last < first) return greedy;
    // (The pass from the end is a heuristic when transfers vary along the cut; if it asks for
    // more than this stage can take, take the most.)
    const int min_last = std::min(max_last, std::max(first, min_start[s + 1] - 1));
    const double share = slots[s].replicas / replicas_left;
    const double target = work_prefix_[first] + (work_prefix_[L_] - work_prefix_[first]) * share;
    int best = -1;
    double best_gap = kInf;
    for (int last = min_last; last <= max_last; ++last) {
      if (!Fits(slots, s, first, last, T)) continue;
      const double gap = std::abs(work_prefix_[last + 1] - target);
      if (gap <= best_gap) {  // ties: the later cut
        best_gap = gap;
        best = last;
      } else if (work_prefix_[last + 1] > target) {
        break;
      }
    }
    if (best < 0) return greedy;
    out.emplace_back(first, best);
    replicas_left -= slots[s].replicas;
    first = best + 1;
  }
  if (first > L_ - 1 || !Fits(slots, P - 1, first, L_ - 1, T)) return greedy;
  out.emplace_back(first, L_ - 1);
  return out;
}

}  // namespace dapple::coordinator::dapple_search
