#include "coordinator/planner/dapple_planner.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/profile/cluster_topology.h"
#include "common/status.h"
#include "coordinator/planner/baseline_planners.h"
#include "coordinator/planner/plan_simulator.h"

namespace dapple::coordinator {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int kPairDpLayers = 256;
constexpr PlacementPolicy kPolicies[] = {
    PlacementPolicy::kFreshFirst, PlacementPolicy::kAppendFirst, PlacementPolicy::kScatterFirst};

}  // namespace

absl::string_view PlacementPolicyName(PlacementPolicy policy) {
  switch (policy) {
    case PlacementPolicy::kFreshFirst:
      return "fresh_first";
    case PlacementPolicy::kAppendFirst:
      return "append_first";
    case PlacementPolicy::kScatterFirst:
      return "scatter_first";
  }
  return "";
}

int UsableDeviceCount(const PlanningProblem& problem) {
  const int total = profile::NumDevices(problem.topology);
  return problem.max_devices > 0 ? std::min(total, problem.max_devices) : total;
}

std::vector<std::vector<int>> PlaceStages(const v1::ClusterTopology& topology, int usable_devices,
                                          const std::vector<int>& replicas,
                                          PlacementPolicy policy) {
  const int num_nodes = topology.nodes_size();
  std::vector<int> first(num_nodes), capacity(num_nodes), used(num_nodes, 0);
  int offset = 0;
  for (int n = 0; n < num_nodes; ++n) {
    first[n] = offset;
    capacity[n] = std::clamp(usable_devices - offset, 0, topology.nodes(n).devices());
    offset += topology.nodes(n).devices();
  }
  std::vector<std::vector<int>> out;
  out.reserve(replicas.size());
  for (int r : replicas) {
    std::vector<int> devices;
    devices.reserve(r);
    if (policy == PlacementPolicy::kScatterFirst) {
      // Machines with the most free devices first, so consecutive stages also spread out.
      std::vector<int> order;
      for (int n = 0; n < num_nodes; ++n) {
        if (used[n] < capacity[n]) order.push_back(n);
      }
      std::stable_sort(order.begin(), order.end(),
                       [&](int a, int b) { return capacity[a] - used[a] > capacity[b] - used[b]; });
      bool progress = true;
      while (static_cast<int>(devices.size()) < r && progress) {
        progress = false;
        for (int n : order) {
          if (static_cast<int>(devices.size()) == r) break;
          if (used[n] < capacity[n]) {
            devices.push_back(first[n] + used[n]++);
            progress = true;
          }
        }
      }
      std::sort(devices.begin(), devices.end());
    } else {
      std::vector<int> fresh, partly;
      for (int n = 0; n < num_nodes; ++n) {
        if (used[n] == 0 && capacity[n] > 0) fresh.push_back(n);
        if (used[n] > 0 && used[n] < capacity[n]) partly.push_back(n);
      }
      std::vector<int> order = policy == PlacementPolicy::kFreshFirst ? fresh : partly;
      const std::vector<int>& rest = policy == PlacementPolicy::kFreshFirst ? partly : fresh;
      order.insert(order.end(), rest.begin(), rest.end());
      for (int n : order) {
        while (static_cast<int>(devices.size()) < r && used[n] < capacity[n]) {
          devices.push_back(first[n] + used[n]++);
        }
      }
    }
    out.push_back(std::move(devices));
  }
  return out;
}

// ---- PlanEstimator ------------------------------------------------------------------------

PlanEstimator::PlanEstimator(const PlanningProblem& problem) : problem_(problem) {
  for (int n = 0; n < problem.topology.nodes_size(); ++n) {
    for (int d = 0; d < problem.topology.nodes(n).devices(); ++d) {
      node_of_.push_back(n);
      device_memory_.push_back(problem.topology.nodes(n).device_memory_bytes());
    }
  }
  const profile::ChainProfile& p = problem.profile;
  const int L = p.num_layers();
  forward_prefix_.assign(L + 1, 0.0);
  backward_prefix_.assign(L + 1, 0.0);
  parameter_prefix_.assign(L + 1, 0);
  activation_prefix_.assign(L + 1, 0.0);
  for (int i = 0; i < L; ++i) {
    forward_prefix_[i + 1] = forward_prefix_[i] + p.forward_ms[i];
    backward_prefix_[i + 1] = backward_prefix_[i] + p.backward_ms[i];
    parameter_prefix_[i + 1] = parameter_prefix_[i] + p.parameter_bytes[i];
    activation_prefix_[i + 1] = activation_prefix_[i] + static_cast<double>(p.activation_bytes[i]);
  }
}

bool PlanEstimator::OneNode(const std::vector<int>& a, const std::vector<int>& b) const {
  const int node = node_of_[a.front()];
  for (int d : a) {
    if (node_of_[d] != node) return false;
  }
  for (int d : b) {
    if (node_of_[d] != node) return false;
  }
  return true;
}

double PlanEstimator::TransferMs(double bytes, const std::vector<int>& from,
                                 const std::vector<int>& to) const {
  if (bytes == 0 || from == to) return 0;
  const v1::ClusterTopology& t = problem_.topology;
  const bool one = OneNode(from, to);
  const double bandwidth =
      one ? t.intra_node_bandwidth_bytes_per_s() : t.inter_node_bandwidth_bytes_per_s();
  const double latency = one ? t.intra_node_latency_ms() : t.inter_node_latency_ms();
  const double parallel = static_cast<double>(std::max(from.size(), to.size()));
  return latency + bytes / (parallel * bandwidth) * 1000.0;
}

double PlanEstimator::AllReduceMs(double bytes, const std::vector<int>& devices) const {
  if (devices.size() <= 1) return 0;
  const v1::ClusterTopology& t = problem_.topology;
  const bool one = OneNode(devices, {});
  const double bandwidth =
      one ? t.intra_node_bandwidth_bytes_per_s() : t.inter_node_bandwidth_bytes_per_s();
  const double latency = one ? t.intra_node_latency_ms() : t.inter_node_latency_ms();
  const double n = static_cast<double>(devices.size());
  return 2 * (n - 1) * latency + 2 * (n - 1) / n * bytes / bandwidth * 1000.0;
}

double PlanEstimator::ForwardMs(int first, int last, double samples) const {
  return (forward_prefix_[last + 1] - forward_prefix_[first]) * samples /
         static_cast<double>(problem_.profile.batch_size);
}

double PlanEstimator::BackwardMs(int first, int last, double samples) const {
  return (backward_prefix_[last + 1] - backward_prefix_[first]) * samples /
         static_cast<double>(problem_.profile.batch_size);
}

int64_t PlanEstimator::ParameterBytes(int first, int last) const {
  return parameter_prefix_[last + 1] - parameter_prefix_[first];
}

double PlanEstimator::ActivationBytes(int first, int last, double samples) const {
  return (activation_prefix_[last + 1] - activation_prefix_[first]) * samples /
         static_cast<double>(problem_.profile.batch_size);
}

double PlanEstimator::CutBytes(int last, double samples) const {
  if (last < 0 || last + 1 >= num_layers()) return 0;
  return static_cast<double>(problem_.profile.cut_bytes[last]) * samples /
         static_cast<double>(problem_.profile.batch_size);
}

LatencyEstimate PlanEstimator::Latency(const HybridPlan& plan) const {
  const int P = static_cast<int>(plan.stages.size());
  const double b = static_cast<double>(plan.micro_batch_size);
  const double M = plan.micro_batches;
  // f, g: one micro-batch's forward / backward compute on one replica; x: the transfer across
  // the cut after the stage (activations forward, gradients back: the same bytes).
  std::vector<double> f(P), g(P), x(P, 0.0), AR(P);
  for (int s = 0; s < P; ++s) {
    const StagePlan& st = plan.stages[s];
    const double share = b / static_cast<double>(st.devices.size());
    f[s] = ForwardMs(st.first_layer, st.last_layer, share);
    g[s] = BackwardMs(st.first_layer, st.last_layer, share);
    AR[s] =
        AllReduceMs(static_cast<double>(ParameterBytes(st.first_layer, st.last_layer)), st.devices);
    if (s + 1 < P) {
      x[s] = TransferMs(CutBytes(st.last_layer, b), st.devices, plan.stages[s + 1].devices);
    }
  }
  // The last gradient reaches stage s after the backward path from the pivot; AR_s then ends
  // sum_{s' < s} (g + x) before stage 0's last backward does, so only the excess is exposed.
  double tail = 0, path_back = 0;
  for (int s = 0; s < P; ++s) {
    tail = std::max(tail, AR[s] - path_back);
    path_back += g[s] + x[s];
  }
  LatencyEstimate e;
  if (problem_.schedule == schedule::ScheduleKind::kGPipe) {
    // All forwards stream through the pipeline, then all backwards.
    double sum_f = 0, sum_g = 0, max_f = 0, max_g = 0;
    for (int s = 0; s < P; ++s) {
      sum_f += f[s] + x[s];
      sum_g += g[s] + x[s];
      max_f = std::max({max_f, f[s], x[s]});
      max_g = std::max({max_g, g[s], x[s]});
    }
    e.warmup_ms = sum_f + (M - 1) * max_f;
    e.steady_ms = sum_g + (M - 1) * max_g;
    e.ending_ms = tail;
    e.step_ms = e.warmup_ms + e.steady_ms + e.ending_ms;
    return e;
  }
  // The steady cycle per micro-batch, by the cycles of 1F1B's dependency graph: a stage's own
  // compute, a link's transfers, and for stages s..e the loop F_s -> ... -> F_e -> (program
  // order on e) B_e -> ... -> B_s -> (program order on s) F_s, which carries the compute of
  // s..e and both transfers of each link between them over e - s + 1 micro-batches (stage i
  // holds K_i = min(P - i, M) in flight, one more than stage i + 1). The longest loops are
  // windows ending at the last stage (the round trip) or short ones around a slow link, so
  // deep pipelines (P > 128) look at windows of up to 32 stages and at the round trips.
  std::vector<double> compute_prefix(P + 1, 0.0), link_prefix(P + 1, 0.0);
  for (int s = 0; s < P; ++s) {
    compute_prefix[s + 1] = compute_prefix[s] + f[s] + g[s];
    link_prefix[s + 1] = link_prefix[s] + x[s];
  }
  auto window = [&](int first, int last) {
    return (compute_prefix[last + 1] - compute_prefix[first] +
            2 * (link_prefix[last] - link_prefix[first])) /
           (last - first + 1);
  };
  std::vector<double> cycle(P);
  for (int s = 0; s < P; ++s) {
    double c = std::max(f[s] + g[s], x[s]);
    const int last_end = P > 128 ? std::min(P - 1, s + 31) : P - 1;
    for (int e = s + 1; e <= last_end; ++e) c = std::max(c, window(s, e));
    if (last_end < P - 1) c = std::max(c, window(s, P - 1));
    cycle[s] = c;
  }
  const double round_trip = window(0, P - 1) * P;
  int Q = P - 1;  // walking back from the last stage, a strictly longer cycle takes the pivot
  for (int s = P - 2; s >= 0; --s) {
    if (cycle[s] > cycle[Q]) Q = s;
  }
  e.pivot_stage = Q;
  if (problem_.schedule == schedule::ScheduleKind::kPipeDream) {
    // No flush: M micro-batches per update at the pivot's cycle, plus the exposed AllReduce.
    e.steady_ms = M * cycle[Q];
    e.ending_ms = tail;
  } else {
    for (int s = 0; s <= Q; ++s) e.warmup_ms += f[s] + (s > 0 ? x[s - 1] : 0.0);
    e.steady_ms = (M - 1) * cycle[Q];
    // The rest of one micro-batch's round trip: through the stages after the pivot and back.
    e.ending_ms = round_trip - e.warmup_ms + tail;
  }
  e.step_ms = e.warmup_ms + e.steady_ms + e.ending_ms;
  return e;
}

MemoryEstimate PlanEstimator::Memory(const HybridPlan& plan) const {
  const int P = static_cast<int>(plan.stages.size());
  const int M = plan.micro_batches;
  const double b = static_cast<double>(plan.micro_batch_size);
  MemoryEstimate out;
  out.stages.resize(P);
  int64_t worst_excess = std::numeric_limits<int64_t>::min();
  for (int s = 0; s < P; ++s) {
    const StagePlan& st = plan.stages[s];
    StageMemory& m = out.stages[s];
    const double weights = static_cast<double>(ParameterBytes(st.first_layer, st.last_layer));
    m.weight_bytes =
        static_cast<int64_t>(std::llround((2.0 + problem_.optimizer_state_factor) * weights));
    switch (problem_.schedule) {
      case schedule::ScheduleKind::kGPipe:
        m.in_flight = M;
        break;
      case schedule::ScheduleKind::kDapple:
        m.in_flight = std::min(P - s, M);
        break;
      case schedule::ScheduleKind::kPipeDream:
        // A continuous run: P - s in flight, and as many stashed weight versions minus one.
        m.in_flight = P - s;
        m.weight_bytes += static_cast<int64_t>(std::llround(weights * (P - s - 1)));
        break;
    }
    m.activation_bytes = static_cast<int64_t>(
        std::llround(m.in_flight * ActivationBytes(st.first_layer, st.last_layer,
                                                   b / static_cast<double>(st.devices.size()))));
    m.peak_bytes = m.weight_bytes + m.activation_bytes;
    m.device_bytes = std::numeric_limits<int64_t>::max();
    for (int d : st.devices) {
      m.device_bytes = std::min(m.device_bytes, device_memory_[d]);
    }
    if (m.peak_bytes > m.device_bytes) out.fits = false;
    out.peak_bytes = std::max(out.peak_bytes, m.peak_bytes);
    if (m.peak_bytes - m.device_bytes > worst_excess) {
      worst_excess = m.peak_bytes - m.device_bytes;
      out.worst_stage = s;
    }
  }
  return out;
}

// ---- The search ---------------------------------------------------------------------------

namespace {

// A plan without its micro-batch size: stage ranges, replicas and devices.
struct Layout {
  std::vector<std::pair<int, int>> ranges;
  std::vector<int> replicas;
  std::vector<std::vector<int>> devices;
  PlacementPolicy policy = PlacementPolicy::kAppendFirst;
};

HybridPlan ToPlan(const Layout& layout, int64_t micro_batch_size, int64_t global_batch) {
  HybridPlan plan;
  plan.planner = "dapple";
  plan.placement_policy = std::string(PlacementPolicyName(layout.policy));
  for (size_t s = 0; s < layout.ranges.size(); ++s) {
    StagePlan st;
    st.first_layer = layout.ranges[s].first;
    st.last_layer = layout.ranges[s].second;
    st.devices = layout.devices[s];
    plan.stages.push_back(std::move(st));
  }
  plan.micro_batch_size = micro_batch_size;
  plan.micro_batches = static_cast<int>(global_batch / micro_batch_size);
  return plan;
}

std::string LayoutKey(const Layout& layout) {
  std::string key;
  for (size_t s = 0; s < layout.ranges.size(); ++s) {
    absl::StrAppend(&key, layout.ranges[s].first, "-", layout.ranges[s].second, ":");
    for (int d : layout.devices[s]) absl::StrAppend(&key, d, ",");
    key += ";";
  }
  return key;
}

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
  double activation_scale = 0;  // in-flight bytes per profile-batch activation byte
  double link_ms_per_byte = 0;  // per-step transfer ms per profile-batch cut byte to the next
};

// DAPPLE's search for one problem (docs/planner.md, "DAPPLE planner"):
//   1. candidate layouts (stage ranges, replicas, devices), each the smallest per-step
//      bottleneck of its family, found by bisection on a budget T:
//      - equal replicas r (a power of two) on P stages for every depth P, placed by each policy;
//        boundaries by Greedy, then rebalanced within T (Balanced);
//      - free replicas per stage: ReverseDp over the devices used;
//      each under three charges of the transfers to the stages (link_weight_ 1, 0.5, 0) and,
//      for models of up to kPairDpLayers layers, with the two-stage loops as constraints;
//   2. every layout's micro-batch size by the analytical model (PlanEstimator), memory first;
//   3. local search from the best few (Refine: boundaries, replicas, splits, merges, policy);
//   4. re-scoring of the best layouts by SimulatePlan, then the baselines' plans, then Polish.
// Not thread-safe (one per call); PlanDapple makes one.
class Search {
 public:
  Search(const PlanningProblem& problem, const PlanEstimator& estimator,
         const DapplePlannerOptions& options)
      : problem_(problem), est_(estimator), options_(options) {
    L_ = problem.profile.num_layers();
    D_ = UsableDeviceCount(problem);
    G_ = static_cast<double>(problem.global_batch);
    batch_ = static_cast<double>(problem.profile.batch_size);
    state_factor_ = 2.0 + problem.optimizer_state_factor;
    dapple_schedule_ = problem.schedule != schedule::ScheduleKind::kGPipe;
    const profile::ChainProfile& p = problem.profile;
    work_prefix_.assign(L_ + 1, 0.0);
    weight_prefix_.assign(L_ + 1, 0.0);
    act_prefix_.assign(L_ + 1, 0.0);
    for (int i = 0; i < L_; ++i) {
      work_prefix_[i + 1] = work_prefix_[i] + p.forward_ms[i] + p.backward_ms[i];
      weight_prefix_[i + 1] = weight_prefix_[i] + static_cast<double>(p.parameter_bytes[i]);
      act_prefix_[i + 1] = act_prefix_[i] + static_cast<double>(p.activation_bytes[i]);
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
    const int limit = problem.max_replicas > 0 ? std::min(problem.max_replicas, D_) : D_;
    for (int r = 1; r <= limit; r *= 2) {
      const std::vector<int64_t> sizes = MicroBatchSizes(problem, {r});
      if (sizes.empty()) continue;
      replica_counts_.push_back(r);
      min_micro_batch_[r] = sizes.front();
    }
  }

  absl::StatusOr<PlannedJob> Run();

 private:
  // Link between device sets: intra-node when all are on one node (cost_model.h's rule).
  double BandwidthBytesPerMs(bool one_node) const {
    return (one_node ? problem_.topology.intra_node_bandwidth_bytes_per_s()
                     : problem_.topology.inter_node_bandwidth_bytes_per_s()) /
           1000.0;
  }
  double LatencyMs(bool one_node) const {
    return one_node ? problem_.topology.intra_node_latency_ms()
                    : problem_.topology.inter_node_latency_ms();
  }
  bool OneNode(const std::vector<int>& a, const std::vector<int>* b) const {
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
  int64_t MinMicroBatch(int r) const { return min_micro_batch_.at(r); }
  double MaxMicroBatches(int r) const {
    return std::floor(G_ / static_cast<double>(MinMicroBatch(r)));
  }

  // A slot for r replicas on one node or not, with `memory` bytes per device and `in_flight`
  // micro-batches of activations at the smallest micro-batch r allows.
  void FillSlot(Slot& slot, int r, bool one_node, double memory, double in_flight) const {
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
  }
  double LinkMsPerByte(int par, bool one_node) const {
    return G_ / batch_ / (static_cast<double>(par) * BandwidthBytesPerMs(one_node));
  }
  std::vector<Slot> SlotsFor(const std::vector<std::vector<int>>& devices) const {
    const int P = static_cast<int>(devices.size());
    std::vector<Slot> slots(P);
    for (int s = 0; s < P; ++s) {
      const int r = static_cast<int>(devices[s].size());
      double memory = kInf;
      for (int d : devices[s]) memory = std::min(memory, memory_of_[d]);
      const double in_flight =
          dapple_schedule_ ? std::min<double>(P - s, MaxMicroBatches(r)) : MaxMicroBatches(r);
      FillSlot(slots[s], r, OneNode(devices[s], nullptr), memory, in_flight);
      if (s + 1 < P) {
        const int par = std::max(r, static_cast<int>(devices[s + 1].size()));
        slots[s].link_ms_per_byte = LinkMsPerByte(par, OneNode(devices[s], &devices[s + 1]));
      }
    }
    return slots;
  }

  double StageCost(const Slot& slot, int first, int last) const {
    double c = (work_prefix_[last + 1] - work_prefix_[first]) * slot.compute_scale;
    if (slot.replicas > 1) {
      c += slot.ar_fixed_ms +
           slot.ar_ms_per_byte * (weight_prefix_[last + 1] - weight_prefix_[first]);
    }
    return c;
  }
  bool StageFits(const Slot& slot, int first, int last) const {
    return state_factor_ * (weight_prefix_[last + 1] - weight_prefix_[first]) +
               slot.activation_scale * (act_prefix_[last + 1] - act_prefix_[first]) <=
           slot.memory_bytes;
  }
  bool StageOk(const Slot& slot, int first, int last, double T) const {
    return StageCost(slot, first, last) <= T && StageFits(slot, first, last);
  }
  double LinkCost(const Slot& slot, int last) const { return slot.link_ms_per_byte * cut_[last]; }
  // A stage's per-step transfers: of its input (from stage s - 1) and of its output, in ms.
  double InCost(const std::vector<Slot>& slots, int s, int first) const;
  double OutCost(const std::vector<Slot>& slots, int s, int last) const;
  // Whether stage s = [first, last] fits budget T: compute + AllReduce + link_weight_ x its
  // transfers, each transfer alone, and memory.
  bool Fits(const std::vector<Slot>& slots, int s, int first, int last, double T) const;
  // The last layer of the longest stage s starting at `first` within T (Greedy's rule), or
  // first - 1 when none fits.
  int MaxLast(const std::vector<Slot>& slots, int s, int first, double T) const;

  // Greedy: every stage takes the most layers it can within budget T. Returns false when the
  // layers cannot be covered; fills `ranges` when given.
  bool Greedy(const std::vector<Slot>& slots, double T,
              std::vector<std::pair<int, int>>* ranges) const;
  // Greedy's answer when the two-stage loops are constraints too (pair_mode_): exact by dynamic
  // programming over (stage, last layer), O(P L^2) per call at worst.
  bool PairDp(const std::vector<Slot>& slots, double T,
              std::vector<std::pair<int, int>>* ranges) const;
  // The smallest T Greedy accepts (bisection), or kInf.
  double MinBudget(const std::vector<Slot>& slots) const;
  // A partition within T whose stages each take about their share of the remaining work.
  std::vector<std::pair<int, int>> Balanced(const std::vector<Slot>& slots, double T) const;

  void AddLayout(Layout layout);
  void UniformReplicaFamily();
  void ReverseDpFamily();
  bool ReverseDp(double T, std::vector<Layout>* out) const;

  // The best micro-batch for `layout` by the analytical model among those that fit.
  struct Scored {
    Layout layout;
    int64_t micro_batch_size = 0;
    double estimate_ms = kInf;
    int64_t peak_bytes = 0;
    bool fits = false;
  };
  Scored Score(const Layout& layout) const;
  double EstimateAt(const Layout& layout, int64_t micro_batch_size) const;
  Scored Refine(Scored start) const;
  // Stage-micro-batches SimulatePlan runs for `plan`: P M for one synchronous step; pipedream's
  // steady state simulates (2P + M - 1) / M + 4 updates of M.
  int64_t SimulationWork(const HybridPlan& plan) const {
    const int64_t P = static_cast<int64_t>(plan.stages.size());
    const int64_t M = plan.micro_batches;
    if (problem_.schedule != schedule::ScheduleKind::kPipeDream) return P * M;
    return P * M * ((2 * P + M - 1) / M + 4);
  }
  // Hill-climbs `job`'s stage boundaries with the simulator (same devices and M).
  absl::Status Polish(PlannedJob& job) const;
  std::vector<Layout> Moves(const Scored& current) const;
  Layout Replace(const std::vector<std::pair<int, int>>& ranges, const std::vector<int>& replicas,
                 PlacementPolicy policy) const;
  bool ReplicasAllowed(int r) const {
    return std::find(replica_counts_.begin(), replica_counts_.end(), r) != replica_counts_.end();
  }

  const PlanningProblem& problem_;
  const PlanEstimator& est_;
  const DapplePlannerOptions& options_;
  int L_ = 0;
  int D_ = 0;
  double G_ = 0;
  double batch_ = 1;
  double state_factor_ = 2;
  bool dapple_schedule_ = true;
  std::vector<double> work_prefix_, weight_prefix_, act_prefix_, cut_;
  double max_cut_ = 0;
  double link_weight_ = 1.0;  // how much of its transfers a stage's budget carries
  bool pair_mode_ = false;    // Greedy also bounds neighbouring stages' two-stage loops
  // For ReverseDp, per (devices used u, replica count index): the smallest device memory of
  // devices [D - u - r, D - u) and whether they share a node.
  std::vector<double> range_memory_;
  std::vector<char> range_one_node_;
  std::vector<int> node_of_;
  std::vector<double> memory_of_;
  std::vector<int> replica_counts_;
  std::map<int, int64_t> min_micro_batch_;
  std::vector<Scored> pool_;
  std::set<std::string> seen_;
};

double Search::InCost(const std::vector<Slot>& slots, int s, int first) const {
  return s > 0 && first > 0 ? LinkCost(slots[s - 1], first - 1) : 0.0;
}

double Search::OutCost(const std::vector<Slot>& slots, int s, int last) const {
  return s + 1 < static_cast<int>(slots.size()) ? LinkCost(slots[s], last) : 0.0;
}

bool Search::Fits(const std::vector<Slot>& slots, int s, int first, int last, double T) const {
  const double in = InCost(slots, s, first), out = OutCost(slots, s, last);
  return in <= T && out <= T && StageCost(slots[s], first, last) + link_weight_ * (in + out) <= T &&
         StageFits(slots[s], first, last);
}

int Search::MaxLast(const std::vector<Slot>& slots, int s, int first, double T) const {
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

bool Search::Greedy(const std::vector<Slot>& slots, double T,
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

bool Search::PairDp(const std::vector<Slot>& slots, double T,
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

double Search::MinBudget(const std::vector<Slot>& slots) const {
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

std::vector<std::pair<int, int>> Search::Balanced(const std::vector<Slot>& slots, double T) const {
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

Layout Search::Replace(const std::vector<std::pair<int, int>>& ranges,
                       const std::vector<int>& replicas, PlacementPolicy policy) const {
  Layout layout;
  layout.ranges = ranges;
  layout.replicas = replicas;
  layout.policy = policy;
  layout.devices = PlaceStages(problem_.topology, D_, replicas, policy);
  return layout;
}

double Search::EstimateAt(const Layout& layout, int64_t micro_batch_size) const {
  const HybridPlan plan = ToPlan(layout, micro_batch_size, problem_.global_batch);
  if (!est_.Memory(plan).fits) return kInf;
  return est_.Latency(plan).step_ms;
}

Search::Scored Search::Score(const Layout& layout) const {
  Scored best;
  best.layout = layout;
  best.peak_bytes = std::numeric_limits<int64_t>::max();
  for (int64_t b : MicroBatchSizes(problem_, layout.replicas)) {
    const HybridPlan plan = ToPlan(layout, b, problem_.global_batch);
    const MemoryEstimate memory = est_.Memory(plan);
    if (!memory.fits) {
      if (!best.fits && memory.peak_bytes < best.peak_bytes) {
        best.peak_bytes = memory.peak_bytes;
        best.micro_batch_size = b;
      }
      continue;
    }
    const double t = est_.Latency(plan).step_ms;
    // Sizes ascend, so ties keep the larger M (the smaller micro-batch): less memory.
    if (!best.fits || t < best.estimate_ms * (1 - 1e-12)) {
      best.fits = true;
      best.estimate_ms = t;
      best.micro_batch_size = b;
      best.peak_bytes = memory.peak_bytes;
    }
  }
  return best;
}

void Search::AddLayout(Layout layout) {
  if (layout.ranges.empty()) return;
  if (problem_.num_stages > 0 && static_cast<int>(layout.ranges.size()) != problem_.num_stages) {
    return;
  }
  const std::string key = LayoutKey(layout);
  if (!seen_.insert(key).second) return;
  Scored scored = Score(layout);
  if (scored.micro_batch_size == 0) return;
  pool_.push_back(std::move(scored));
}

// Family 1: P stages with the same replica count r each, placed by each policy; boundaries by
// the smallest per-step bottleneck, then balanced within it.
void Search::UniformReplicaFamily() {
  for (int r : replica_counts_) {
    const int max_p = std::min(L_, D_ / r);
    if (max_p < 1) continue;
    std::vector<int> depths;
    if (problem_.num_stages > 0) {
      if (problem_.num_stages <= max_p) depths.push_back(problem_.num_stages);
    } else {
      depths = CandidateDepths(max_p);
    }
    for (int P : depths) {
      std::set<std::string> placements;
      for (PlacementPolicy policy : kPolicies) {
        const std::vector<int> replicas(P, r);
        std::vector<std::vector<int>> devices =
            PlaceStages(problem_.topology, D_, replicas, policy);
        std::string key;
        for (const auto& d : devices) {
          for (int x : d) absl::StrAppend(&key, x, ",");
          key += ";";
        }
        if (!placements.insert(key).second) continue;  // same devices as another policy
        const std::vector<Slot> slots = SlotsFor(devices);
        const double T = MinBudget(slots);
        if (T == kInf) continue;
        Layout layout;
        layout.ranges = Balanced(slots, T);
        layout.replicas = replicas;
        layout.devices = std::move(devices);
        layout.policy = policy;
        AddLayout(std::move(layout));
      }
    }
  }
}

// Family 2: any replica counts per stage. A dynamic program over the devices used, filling
// stages from the last layer backwards on contiguous devices from the top of the usable range
// (append-first mirrored), keeping per device count the plan that covers the most layers within
// budget T; bisection on T.
bool Search::ReverseDp(double T, std::vector<Layout>* out) const {
  const int fixed_p = problem_.num_stages;
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
        const double in_flight = dapple_schedule_
                                     ? std::min<double>(cur.stages + 1, MaxMicroBatches(r))
                                     : MaxMicroBatches(r);
        Slot slot;
        FillSlot(slot, r, one_node, memory, in_flight);
        // Transfers: out of the stage to the one above it (placed), and into it from the one
        // below (not placed yet: assumed as wide as this one, right below it).
        double out = 0;
        if (u > 0) {
          const int next_hi = D_ - u + cur.replicas - 1;
          const int par = std::max(r, cur.replicas);
          slot.link_ms_per_byte = LinkMsPerByte(par, node_of_[lo_dev] == node_of_[next_hi]);
          out = LinkCost(slot, last);
          if (out > T) continue;
        }
        Slot below;
        below.link_ms_per_byte =
            LinkMsPerByte(r, node_of_[std::max(0, lo_dev - r)] == node_of_[D_ - u - 1]);
        const double budget = T - link_weight_ * out;
        if (last < stages_before_min || !StageOk(slot, last, last, budget)) continue;
        int lo = stages_before_min, hi = last;  // smallest first with StageOk(first, last)
        while (lo < hi) {
          const int mid = lo + (hi - lo) / 2;
          if (StageOk(slot, mid, last, budget)) {
            hi = mid;
          } else {
            lo = mid + 1;
          }
        }
        while (lo <= last && lo > 0 &&
               (LinkCost(below, lo - 1) > T ||
                StageCost(slot, lo, last) + link_weight_ * (out + LinkCost(below, lo - 1)) > T)) {
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

void Search::ReverseDpFamily() {
  if (replica_counts_.empty()) return;
  const int num_r = static_cast<int>(replica_counts_.size());
  range_memory_.assign(static_cast<size_t>(D_ + 1) * num_r, kInf);
  range_one_node_.assign(static_cast<size_t>(D_ + 1) * num_r, 0);
  for (int u = 0; u < D_; ++u) {
    for (int ri = 0; ri < num_r; ++ri) {
      const int r = replica_counts_[ri];
      if (u + r > D_) break;
      double memory = kInf;
      for (int d = D_ - u - r; d < D_ - u; ++d) memory = std::min(memory, memory_of_[d]);
      range_memory_[u * num_r + ri] = memory;
      range_one_node_[u * num_r + ri] = node_of_[D_ - u - r] == node_of_[D_ - u - 1] ? 1 : 0;
    }
  }
  if (!ReverseDp(1e300, nullptr)) return;
  double hi = 1;
  while (!ReverseDp(hi, nullptr)) hi *= 2;
  double lo = 0;
  for (int it = 0; it < 100 && hi - lo > 1e-6 * hi; ++it) {
    const double mid = 0.5 * (lo + hi);
    if (ReverseDp(mid, nullptr)) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  std::vector<Layout> layouts;
  ReverseDp(hi, &layouts);
  for (Layout& layout : layouts) {
    const std::vector<Slot> slots = SlotsFor(layout.devices);
    std::vector<std::pair<int, int>> balanced = Balanced(slots, hi);
    if (static_cast<int>(balanced.size()) == static_cast<int>(layout.ranges.size())) {
      Layout b = layout;
      b.ranges = std::move(balanced);
      AddLayout(std::move(b));
    }
    AddLayout(std::move(layout));
  }
}

std::vector<Layout> Search::Moves(const Scored& current) const {
  const Layout& cur = current.layout;
  const int P = static_cast<int>(cur.ranges.size());
  std::vector<Layout> moves;
  // Which stages to touch: all of them for short pipelines, else the pivot's neighbourhood and
  // the stage with the most work per replica.
  std::vector<int> stages;
  if (P <= 32) {
    for (int s = 0; s < P; ++s) stages.push_back(s);
  } else {
    const HybridPlan plan = ToPlan(cur, current.micro_batch_size, problem_.global_batch);
    const int q = est_.Latency(plan).pivot_stage;
    int heaviest = 0;
    double heaviest_work = -1;
    for (int s = 0; s < P; ++s) {
      const double w =
          (work_prefix_[cur.ranges[s].second + 1] - work_prefix_[cur.ranges[s].first]) /
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
    for (int delta = 1; delta <= std::max(1, L_ / 4); delta *= 2) {
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
      if (r < 1 || !ReplicasAllowed(r) || devices_used - cur.replicas[s] + r > D_) continue;
      std::vector<int> replicas = cur.replicas;
      replicas[s] = r;
      moves.push_back(Replace(cur.ranges, replicas, cur.policy));
    }
    const auto [first, last] = cur.ranges[s];
    if (last > first && cur.replicas[s] >= 2 && ReplicasAllowed(cur.replicas[s] / 2) &&
        (problem_.num_stages == 0)) {
      const double half = 0.5 * (work_prefix_[first] + work_prefix_[last + 1]);
      int cut = first;
      while (cut + 1 < last && work_prefix_[cut + 1] < half) ++cut;
      std::vector<std::pair<int, int>> ranges = cur.ranges;
      std::vector<int> replicas = cur.replicas;
      ranges[s] = {first, cut};
      ranges.insert(ranges.begin() + s + 1, {cut + 1, last});
      replicas[s] = cur.replicas[s] / 2;
      replicas.insert(replicas.begin() + s + 1, cur.replicas[s] / 2);
      moves.push_back(Replace(ranges, replicas, cur.policy));
    }
    if (last > first && problem_.num_stages == 0 && devices_used + cur.replicas[s] <= D_) {
      // Split it in two, the new half on as many unused devices.
      const double half = 0.5 * (work_prefix_[first] + work_prefix_[last + 1]);
      int cut = first;
      while (cut + 1 < last && work_prefix_[cut + 1] < half) ++cut;
      std::vector<std::pair<int, int>> ranges = cur.ranges;
      std::vector<int> replicas = cur.replicas;
      ranges[s] = {first, cut};
      ranges.insert(ranges.begin() + s + 1, {cut + 1, last});
      replicas.insert(replicas.begin() + s + 1, cur.replicas[s]);
      moves.push_back(Replace(ranges, replicas, cur.policy));
    }
    if (s + 1 < P && problem_.num_stages == 0) {
      const int r = cur.replicas[s] + cur.replicas[s + 1];
      for (int merged : {r, std::max(cur.replicas[s], cur.replicas[s + 1])}) {
        if (!ReplicasAllowed(merged)) continue;
        std::vector<std::pair<int, int>> ranges = cur.ranges;
        std::vector<int> replicas = cur.replicas;
        ranges[s].second = ranges[s + 1].second;
        ranges.erase(ranges.begin() + s + 1);
        replicas[s] = merged;
        replicas.erase(replicas.begin() + s + 1);
        moves.push_back(Replace(ranges, replicas, cur.policy));
      }
    }
  }
  for (PlacementPolicy policy : kPolicies) {
    if (policy != cur.policy) moves.push_back(Replace(cur.ranges, cur.replicas, policy));
  }
  return moves;
}

Search::Scored Search::Refine(Scored current) const {
  for (int it = 0; it < options_.refine_iterations; ++it) {
    Scored best = current;
    for (Layout& move : Moves(current)) {
      // Same replicas: keep the micro-batch (cheap); otherwise choose it again.
      double t;
      int64_t b = current.micro_batch_size;
      if (move.replicas == current.layout.replicas) {
        t = EstimateAt(move, b);
      } else {
        const Scored s = Score(move);
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
    current = Score(best.layout);
  }
  return current;
}

absl::Status Search::Polish(PlannedJob& job) const {
  const int P = static_cast<int>(job.plan.stages.size());
  if (P < 2 || P > 64) return absl::OkStatus();
  int64_t work = 0;
  const int64_t per_simulation = SimulationWork(job.plan);
  for (int round = 0; round < options_.polish_rounds; ++round) {
    bool improved = false;
    for (int s = 0; s + 1 < P && !improved; ++s) {
      for (int delta = 1; delta <= std::max(1, L_ / (4 * P)) && !improved; delta *= 2) {
        for (int sign : {-1, 1}) {
          HybridPlan plan = job.plan;
          const int cut = plan.stages[s].last_layer + sign * delta;
          if (cut < plan.stages[s].first_layer || cut >= plan.stages[s + 1].last_layer) continue;
          plan.stages[s].last_layer = cut;
          plan.stages[s + 1].first_layer = cut + 1;
          if (!est_.Memory(plan).fits) continue;
          if (work + per_simulation > options_.polish_budget) return absl::OkStatus();
          work += per_simulation;
          DAPPLE_ASSIGN_OR_RETURN(Prediction prediction,
                                  SimulatePlan(problem_, plan, problem_.schedule));
          if (prediction.fits_memory && prediction.step_ms < job.prediction.step_ms * (1 - 1e-9)) {
            job.plan = std::move(plan);
            job.prediction = std::move(prediction);
            improved = true;
            break;
          }
        }
      }
    }
    if (!improved) break;
  }
  return absl::OkStatus();
}

absl::StatusOr<PlannedJob> Search::Run() {
  // Transfers sit between stages: a loop over stages s..e carries each link between them twice
  // over e - s + 1 micro-batches (see PlanEstimator::Latency). Charging both neighbours' links
  // to a stage is safe but pessimistic for short loops, charging none optimistic for long ones:
  // search with each and let the model rank the results.
  for (double weight : {1.0, 0.5, 0.0}) {
    link_weight_ = weight;
    UniformReplicaFamily();
    ReverseDpFamily();
  }
  // And with the two-stage loops as constraints, which leaves light stages next to heavy
  // stages and slow links (for models of up to kPairDpLayers layers: it costs O(P L^2)).
  if (L_ <= kPairDpLayers) {
    link_weight_ = 0;
    pair_mode_ = true;
    UniformReplicaFamily();
    pair_mode_ = false;
  }

  // Refine the best few that fit, then re-score the best by simulation.
  std::sort(pool_.begin(), pool_.end(), [](const Scored& a, const Scored& b) {
    if (a.fits != b.fits) return a.fits;
    if (a.fits) return a.estimate_ms < b.estimate_ms;
    return a.peak_bytes < b.peak_bytes;
  });
  std::vector<Scored> finalists;
  for (size_t i = 0; i < pool_.size(); ++i) {
    if (!pool_[i].fits) break;
    if (static_cast<int>(i) < options_.refined_candidates) {
      finalists.push_back(Refine(pool_[i]));
    }
    finalists.push_back(pool_[i]);
  }
  std::sort(finalists.begin(), finalists.end(),
            [](const Scored& a, const Scored& b) { return a.estimate_ms < b.estimate_ms; });

  // Re-score by simulation: layouts in the model's order, each at its best few micro-batch sizes
  // by the model plus the largest M that fits, within a budget of simulated work.
  absl::StatusOr<PlannedJob> best = absl::NotFoundError("no candidate fits memory");
  double best_estimate = kInf;
  std::set<std::string> chosen;
  int64_t work = 0;
  for (const Scored& f : finalists) {
    if (static_cast<int>(chosen.size()) >= options_.simulated_layouts) break;
    if (work >= options_.simulation_budget && static_cast<int>(chosen.size()) >= 2) break;
    if (!chosen.insert(LayoutKey(f.layout)).second) continue;
    std::vector<std::pair<double, int64_t>> sizes;  // (estimate, micro-batch size)
    for (int64_t b : MicroBatchSizes(problem_, f.layout.replicas)) {
      const double t = EstimateAt(f.layout, b);
      if (t < kInf) sizes.emplace_back(t, b);
    }
    std::vector<int64_t> tried;
    std::vector<std::pair<double, int64_t>> by_estimate = sizes;
    std::stable_sort(by_estimate.begin(), by_estimate.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (size_t i = 0; i < by_estimate.size() && static_cast<int>(i) < options_.simulated_sizes;
         ++i) {
      tried.push_back(by_estimate[i].second);
    }
    if (!sizes.empty() &&
        std::find(tried.begin(), tried.end(), sizes.front().second) == tried.end()) {
      tried.push_back(sizes.front().second);  // the largest M that fits
    }
    for (int64_t b : tried) {
      const HybridPlan plan = ToPlan(f.layout, b, problem_.global_batch);
      work += SimulationWork(plan);
      DAPPLE_ASSIGN_OR_RETURN(Prediction prediction,
                              SimulatePlan(problem_, plan, problem_.schedule));
      if (!prediction.fits_memory) continue;
      const double estimate = EstimateAt(f.layout, b);
      bool better = !best.ok() || prediction.step_ms < best->prediction.step_ms * (1 - 1e-9);
      if (!better && best.ok() && !(best->prediction.step_ms < prediction.step_ms * (1 - 1e-9))) {
        better = estimate < best_estimate * (1 - 1e-9) ||
                 (!(best_estimate < estimate * (1 - 1e-9)) &&
                  plan.micro_batches > best->plan.micro_batches);
      }
      if (better) {
        PlannedJob job;
        job.plan = plan;
        job.prediction = std::move(prediction);
        best = std::move(job);
        best_estimate = estimate;
      }
    }
  }
  if (options_.include_natural_candidates) {
    // Points of DAPPLE's own search space that the baselines find: pure data parallelism,
    // equal-layer splits and time-balanced splits with one device per stage.
    for (auto natural : {&PlanDataParallel, &PlanUniform, &PlanBalanced}) {
      absl::StatusOr<PlannedJob> job = natural(problem_);
      if (!job.ok()) continue;
      // Ties go to the baseline's plan, so that the result is never slower by rounding.
      if (!best.ok() || job->prediction.step_ms <= best->prediction.step_ms) {
        job->plan.planner = "dapple";
        if (job->plan.placement_policy.empty()) job->plan.placement_policy = "append_first";
        best = std::move(job);
      }
    }
  }
  if (best.ok()) {
    DAPPLE_RETURN_IF_ERROR(Polish(*best));
    return best;
  }

  // Nothing fits: report the plan of the search space that needs the least memory per device.
  HybridPlan smallest;
  int64_t smallest_peak = std::numeric_limits<int64_t>::max();
  auto consider = [&](const Layout& layout) {
    for (int64_t b : MicroBatchSizes(problem_, layout.replicas)) {
      HybridPlan plan = ToPlan(layout, b, problem_.global_batch);
      const MemoryEstimate memory = est_.Memory(plan);
      if (memory.peak_bytes < smallest_peak) {
        smallest_peak = memory.peak_bytes;
        smallest = std::move(plan);
      }
    }
  };
  for (const Scored& s : pool_) consider(s.layout);
  // The deepest straight pipeline, balanced by weight and activation bytes.
  const int P = problem_.num_stages > 0 ? problem_.num_stages : std::min(L_, D_);
  std::vector<double> bytes(L_);
  for (int i = 0; i < L_; ++i) {
    bytes[i] = state_factor_ * static_cast<double>(problem_.profile.parameter_bytes[i]) +
               static_cast<double>(problem_.profile.activation_bytes[i]);
  }
  absl::StatusOr<std::vector<std::pair<int, int>>> ranges = BalancedRanges(bytes, P);
  if (ranges.ok())
    consider(Replace(*ranges, std::vector<int>(P, 1), PlacementPolicy::kAppendFirst));
  if (smallest.stages.empty()) {
    return absl::ResourceExhaustedError(
        "planner dapple: no plan fits device memory and no micro-batch size is allowed");
  }
  DAPPLE_ASSIGN_OR_RETURN(Prediction prediction,
                          SimulatePlan(problem_, smallest, problem_.schedule));
  return MemoryError(problem_, smallest, prediction);
}

}  // namespace

absl::StatusOr<PlannedJob> PlanDapple(const PlanningProblem& problem,
                                      const DapplePlannerOptions& options) {
  DAPPLE_RETURN_IF_ERROR(ValidateProblem(problem));
  const PlanEstimator estimator(problem);
  Search search(problem, estimator, options);
  return search.Run();
}

}  // namespace dapple::coordinator
