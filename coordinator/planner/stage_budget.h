// Part of DAPPLE's planner search (dapple_planner.h; docs/planner.md, "DAPPLE planner", step 2):
// stage partitions under a per-step budget T. A stage's per-step cost is what its devices spend
// on one training step (all M micro-batches): compute of its layers for all its samples, its
// gradient AllReduce, its transfers to and from its neighbours (cost_model.h's formulas), plus
// its memory at the smallest micro-batch its replica count allows. The search finds the smallest
// T a partition fits (bisection) and the partitions within it. Internal to the planner.
#ifndef DAPPLE_COORDINATOR_PLANNER_STAGE_BUDGET_H_
#define DAPPLE_COORDINATOR_PLANNER_STAGE_BUDGET_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "common/memory_model.h"
#include "coordinator/planner/activation_memory.h"
#include "coordinator/planner/problem.h"

namespace dapple::coordinator::dapple_search {

// One stage position of a fixed replica vector and placement: what its cost depends on besides
// its layer range. Costs are per step (all M micro-batches) in ms, so they do not depend on the
// micro-batch size; memory uses the smallest micro-batch the replica count allows (the most
// permissive, since activation bytes in flight grow with the micro-batch).
struct Slot {
  int replicas = 1;
  double compute_scale = 0;  // per-step ms of one replica per profile-batch ms
  double ar_fixed_ms = 0;    // AllReduce: ar_fixed_ms + ar_ms_per_byte * parameter bytes
  double ar_ms_per_byte = 0;
  double memory_bytes = 0;      // the smallest device memory among its devices
  double activation_scale = 0;  // in-flight bytes per profile-batch ActivationMemory byte
  double in_flight = 1;         // the micro-batches in flight activation_scale counts
  double link_ms_per_byte = 0;  // per-step transfer ms per profile-batch cut byte to the next
};

// Budget tests and partitions for one problem (which must outlive it): prefix sums over the
// profile's layers make a stage's cost O(1). Layer ranges are inclusive [first, last]; `slots`
// has one entry per stage. Two settings say how transfers count (PlanDapple searches with
// several): link_weight, the share of a stage's input and output transfers its budget carries
// (each transfer alone must also fit T), and pair_mode, whether two neighbouring stages' loop
// (their costs plus twice the link between them) must also fit 2T. Not thread-safe while the
// settings change; const methods are safe otherwise.
class StageBudget {
 public:
  explicit StageBudget(const PlanningProblem& problem);

  const PlanningProblem& problem() const { return problem_; }
  int num_layers() const { return L_; }
  int usable_devices() const { return D_; }  // UsableDeviceCount(problem)
  // Powers of two up to min(max_replicas, usable devices) that some micro-batch size allows.
  const std::vector<int>& replica_counts() const { return replica_counts_; }
  bool ReplicasAllowed(int r) const {
    return std::find(replica_counts_.begin(), replica_counts_.end(), r) != replica_counts_.end();
  }
  // L + 1 entries: sums of forward + backward ms at the profile's batch size.
  const std::vector<double>& work_prefix() const { return work_prefix_; }
  int node_of(int device) const { return node_of_[device]; }
  double memory_of(int device) const { return memory_of_[device]; }
  // Holds `bytes` of every device back from StageFits (device memory - bytes): room for what
  // StageFits does not count (the communication buffers and the backward's workspace of
  // common/memory_model.h), which the exact model adds. 0 at construction.
  void set_memory_margin(double bytes);

  double link_weight() const { return link_weight_; }
  void set_link_weight(double weight) { link_weight_ = weight; }
  bool pair_mode() const { return pair_mode_; }
  void set_pair_mode(bool on) { pair_mode_ = on; }

  // The smallest micro-batch size r replicas allow (r from replica_counts()), and the most
  // micro-batches per step that leaves.
  int64_t MinMicroBatch(int r) const { return min_micro_batch_.at(r); }
  double MaxMicroBatches(int r) const {
    return std::floor(G_ / static_cast<double>(MinMicroBatch(r)));
  }
  // Micro-batches in flight on a stage of r replicas with `stages_from_here` stages from it to
  // the last (itself included), at MaxMicroBatches(r): memory::InFlightBound.
  double InFlight(int stages_from_here, int r) const {
    return memory::InFlightBound(problem_.schedule, stages_from_here, MaxMicroBatches(r));
  }

  // Fills `slot` for r replicas on one node or not, with `memory` bytes per device and
  // `in_flight` micro-batches of activations at the smallest micro-batch r allows (its
  // link_ms_per_byte is left as is).
  void FillSlot(Slot& slot, int r, bool one_node, double memory, double in_flight) const;
  // Per-step ms per profile-batch cut byte of a transfer split over `par` parallel links.
  double LinkMsPerByte(int par, bool one_node) const;
  // The slots of stages on `devices` (one list per stage).
  std::vector<Slot> SlotsFor(const std::vector<std::vector<int>>& devices) const;

  // Per-step compute + AllReduce ms of layers [first, last] in `slot`.
  double StageCost(const Slot& slot, int first, int last) const;
  // Whether weights, gradients, optimizer state and in-flight activations (ActivationMemory)
  // fit the slot's memory. Monotone in the range: a stage's bytes only grow as it takes layers
  // on either side (a stage's input is at most its previous layer's input plus output). Where
  // the problem allows recomputation (training.recompute all or auto), the activations are
  // those of one micro-batch, a lower bound of what a recomputing stage holds (its scratch set
  // plus inputs and outputs in flight: memory::ActivationBytes), so no partition that fits with
  // recomputation is pruned; the estimator and the simulator then judge the exact figure.
  bool StageFits(const Slot& slot, int first, int last) const;
  bool StageOk(const Slot& slot, int first, int last, double T) const {
    return StageCost(slot, first, last) <= T && StageFits(slot, first, last);
  }
  // Per-step ms of the transfer across the cut after layer `last` out of `slot`.
  double LinkCost(const Slot& slot, int last) const { return slot.link_ms_per_byte * cut_[last]; }
  // A stage's per-step transfers: of its input (from stage s - 1) and of its output, in ms.
  double InCost(const std::vector<Slot>& slots, int s, int first) const;
  double OutCost(const std::vector<Slot>& slots, int s, int last) const;
  // Whether stage s = [first, last] fits budget T: compute + AllReduce + link_weight x its
  // transfers, each transfer alone, and memory.
  bool Fits(const std::vector<Slot>& slots, int s, int first, int last, double T) const;
  // The last layer of the longest stage s starting at `first` within T (Greedy's rule), or
  // first - 1 when none fits.
  int MaxLast(const std::vector<Slot>& slots, int s, int first, double T) const;

  // Greedy: every stage takes the most layers it can within budget T (under pair_mode, the
  // exact answer by PairDp). Returns false when the layers cannot be covered; fills `ranges`
  // when given.
  bool Greedy(const std::vector<Slot>& slots, double T,
              std::vector<std::pair<int, int>>* ranges) const;
  // The smallest T Greedy accepts (bisection to a relative 1e-9), or infinity when memory, not
  // time, rules every partition out.
  double MinBudget(const std::vector<Slot>& slots) const;
  // A partition within T whose stages each take about their share (by replicas) of the
  // remaining work; Greedy's partition when none is found or under pair_mode.
  std::vector<std::pair<int, int>> Balanced(const std::vector<Slot>& slots, double T) const;

 private:
  // Link between device sets: intra-node when all are on one node (cost_model.h's rule).
  double BandwidthBytesPerMs(bool one_node) const;
  double LatencyMs(bool one_node) const;
  bool OneNode(const std::vector<int>& a, const std::vector<int>* b) const;
  // Greedy's answer when the two-stage loops are constraints too (pair_mode_): exact by dynamic
  // programming over (stage, last layer), O(P L^2) per call at worst.
  bool PairDp(const std::vector<Slot>& slots, double T,
              std::vector<std::pair<int, int>>* ranges) const;

  const PlanningProblem& problem_;
  int L_ = 0;
  int D_ = 0;
  double G_ = 0;
  double batch_ = 1;
  std::vector<double> work_prefix_, weight_prefix_, cut_;
  ActivationMemory activation_;
  double max_cut_ = 0;
  double link_weight_ = 1.0;
  bool pair_mode_ = false;
  std::vector<int> node_of_;
  std::vector<double> memory_of_;
  std::vector<double> device_memory_;  // the topology's, before set_memory_margin
  std::vector<int> replica_counts_;
  std::map<int, int64_t> min_micro_batch_;
};

}  // namespace dapple::coordinator::dapple_search

#endif  // DAPPLE_COORDINATOR_PLANNER_STAGE_BUDGET_H_
