#include "coordinator/planner/pipedream_code_planner.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "common/status.h"
#include "coordinator/planner/baseline_planners.h"
#include "coordinator/planner/placement.h"
#include "coordinator/planner/plan_estimator.h"
#include "coordinator/planner/plan_simulator.h"

namespace dapple::coordinator {
namespace {

// The code's A[i][j][m] tuple (min_pipeline_time, optimal_split, optimal_num_machines): `split`
// is the head's last layer k and `head` its machine index (m - m'), or -1 for one stage;
// `machines` the replicas of the last stage. valid = false is the code's None.
struct Cell {
  bool valid = false;
  double time = 0;
  int split = -1;
  int head = 0;
  int machines = 0;
};

// A level's table: rows i = 0 .. rows - 1 (every start, or only 0 at the last level), j >= i,
// machine index m (m + 1 machines).
class LevelTable {
 public:
  LevelTable(int layers, int machines, int rows)
      : L_(layers), n_(machines), cells_(static_cast<size_t>(rows) * layers * machines) {}
  Cell& at(int i, int j, int m) { return cells_[(static_cast<size_t>(i) * L_ + j) * n_ + m]; }
  const Cell& at(int i, int j, int m) const {
    return cells_[(static_cast<size_t>(i) * L_ + j) * n_ + m];
  }
  int machines() const { return n_; }
  int layers() const { return L_; }

 private:
  int L_;
  int n_;
  std::vector<Cell> cells_;
};

// compute(i..j) of a level's unit, ms: the layers' forward + backward at the first level, the
// previous level's optimum on all its machines above it (absent where that is None).
struct RangeCompute {
  int layers = 0;
  std::vector<double> time;  // [i * layers + j]
  std::vector<char> valid;
  double at(int i, int j) const { return time[static_cast<size_t>(i) * layers + j]; }
  bool ok(int i, int j) const { return valid[static_cast<size_t>(i) * layers + j] != 0; }
};

RangeCompute StateCompute(const std::vector<double>& cost) {
  const int L = static_cast<int>(cost.size());
  std::vector<double> prefix(L + 1, 0.0);
  for (int l = 0; l < L; ++l) prefix[l + 1] = prefix[l] + cost[l];
  RangeCompute c{L, std::vector<double>(static_cast<size_t>(L) * L, 0.0),
                 std::vector<char>(static_cast<size_t>(L) * L, 0)};
  for (int i = 0; i < L; ++i) {
    for (int j = i; j < L; ++j) {
      c.time[static_cast<size_t>(i) * L + j] = prefix[j + 1] - prefix[i];
      c.valid[static_cast<size_t>(i) * L + j] = 1;
    }
  }
  return c;
}

RangeCompute LevelOptimum(const LevelTable& table, int L) {
  RangeCompute c{L, std::vector<double>(static_cast<size_t>(L) * L, 0.0),
                 std::vector<char>(static_cast<size_t>(L) * L, 0)};
  for (int i = 0; i < L; ++i) {
    for (int j = i; j < L; ++j) {
      const Cell& cell = table.at(i, j, table.machines() - 1);
      c.time[static_cast<size_t>(i) * L + j] = cell.time;
      c.valid[static_cast<size_t>(i) * L + j] = cell.valid ? 1 : 0;
    }
  }
  return c;
}

struct LevelInputs {
  const RangeCompute* compute = nullptr;
  const std::vector<double>* weight_prefix = nullptr;  // parameter bytes
  const std::vector<double>* cut = nullptr;            // bytes crossing the cut after layer k
  double bytes_per_ms = 1;
  int machines = 1;
  int unit_machines = 1;  // the code's num_machines_within_machine
  int rows = 1;
};

// compute_partitioning: one stage per range first, then splits in the code's loop order (m, then
// j, then k, then m'), keeping the first strictly better candidate as the code does.
LevelTable SolveLevel(const LevelInputs& in, const PipeDreamCodeOptions& options) {
  const RangeCompute& compute = *in.compute;
  const int L = compute.layers;
  const int n = in.machines;
  const double B = in.bytes_per_ms;
  auto weights = [&](int l, int j) { return (*in.weight_prefix)[j + 1] - (*in.weight_prefix)[l]; };
  LevelTable a(L, n, in.rows);
  const int single_max = options.straight_pipeline ? 1 : n;
  for (int i = 0; i < in.rows; ++i) {
    for (int j = i; j < L; ++j) {
      if (!compute.ok(i, j)) continue;
      for (int m = 0; m < single_max; ++m) {
        // The code divides this sync time by the machines per unit; the split's below it does
        // not.
        const double sync = 4.0 * m * weights(i, j) / (B * (m + 1)) / in.unit_machines;
        a.at(i, j, m) = Cell{true, (compute.at(i, j) + sync) / (m + 1), -1, 0, m + 1};
      }
    }
  }
  const int split_max = options.straight_pipeline ? 1 : n;
  for (int i = 0; i < in.rows; ++i) {
    for (int m = 1; m < n; ++m) {
      for (int j = i + 1; j < L; ++j) {
        Cell best = a.at(i, j, m);
        if (options.use_fewer_machines) {
          const Cell& fewer = a.at(i, j, m - 1);
          if (!best.valid || (fewer.valid && fewer.time < best.time)) best = fewer;
        }
        for (int k = i; k < j; ++k) {
          if (!compute.ok(k + 1, j)) continue;
          for (int mp = 1; mp <= std::min(m, split_max); ++mp) {
            const Cell& head = a.at(i, k, m - mp);
            if (!head.valid) continue;
            const double sync = 4.0 * (mp - 1) * weights(k + 1, j) / (B * mp);
            double t = std::max(head.time, (compute.at(k + 1, j) + sync) / mp);
            if (options.activation_transfers) {
              t = std::max(t, 2.0 * (*in.cut)[k] / (B * mp));
              if (j < L - 1) t = std::max(t, 2.0 * (*in.cut)[j] / (B * mp));
            }
            if (!best.valid || best.time > t) best = Cell{true, t, k, m - mp, mp};
          }
        }
        a.at(i, j, m) = best;
      }
    }
  }
  return a;
}

struct SubStage {
  int first = 0;
  int last = 0;
  int replicas = 0;
};

// analyze_partitioning: the stages of first..last on all the level's machines.
std::vector<SubStage> Expand(const LevelTable& a, int first, int last) {
  std::vector<SubStage> out;
  Cell cell = a.at(first, last, a.machines() - 1);
  int end = last;
  while (cell.split >= 0) {
    out.push_back({cell.split + 1, end, cell.machines});
    end = cell.split;
    cell = a.at(first, cell.split, cell.head);
  }
  out.push_back({first, end, cell.machines});
  std::reverse(out.begin(), out.end());
  return out;
}

// analyze_partitioning from the top level down: each level splits every range of the level
// above over its machines; a level-l stage on r units of a range whose copies start at machines
// `bases` takes units [o, o + r) of each copy (o: the replicas of the stages before it).
struct MachineRange {
  int first = 0;
  int last = 0;
  std::vector<int> bases;  // at the end: the machines of the final stage
};

std::vector<MachineRange> ExpandLevels(const std::vector<LevelTable>& tables,
                                       const PipeDreamCodeOptions& options) {
  const int levels = static_cast<int>(options.levels.size());
  std::vector<int> unit(levels, 1);  // machines per unit of level l
  for (int l = 1; l < levels; ++l) unit[l] = unit[l - 1] * options.levels[l - 1].machines;
  std::vector<MachineRange> ranges = {{0, tables.back().layers() - 1, {0}}};
  for (int l = levels - 1; l >= 0; --l) {
    std::vector<MachineRange> next;
    for (const MachineRange& range : ranges) {
      int offset = 0;
      for (const SubStage& s : Expand(tables[l], range.first, range.last)) {
        MachineRange sub{s.first, s.last, {}};
        for (int base : range.bases) {
          for (int t = 0; t < s.replicas; ++t) sub.bases.push_back(base + (offset + t) * unit[l]);
        }
        std::sort(sub.bases.begin(), sub.bases.end());
        next.push_back(std::move(sub));
        offset += s.replicas;
      }
    }
    ranges = std::move(next);
  }
  return ranges;
}

absl::Status CheckOptions(const profile::ChainProfile& profile,
                          const PipeDreamCodeOptions& options) {
  if (profile.num_layers() == 0) {
    return absl::InvalidArgumentError("planner pipedream-code: the profile has no layers");
  }
  if (!options.cut_bytes.empty() && options.cut_bytes.size() != profile.cut_bytes.size()) {
    return absl::InvalidArgumentError(absl::StrCat("planner pipedream-code: cut_bytes has ",
                                                   options.cut_bytes.size(),
                                                   " entries but the "
                                                   "profile has ",
                                                   profile.cut_bytes.size(), " cuts"));
  }
  if (options.levels.empty()) {
    return absl::InvalidArgumentError("planner pipedream-code: no level (the code's -n) given");
  }
  for (size_t l = 0; l < options.levels.size(); ++l) {
    const PipeDreamCodeOptions::Level& level = options.levels[l];
    if (level.machines <= 0 || !(level.bandwidth_bytes_per_s > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("planner pipedream-code: level ", l, " has ", level.machines,
                       " machines and bandwidth ", level.bandwidth_bytes_per_s,
                       " bytes/s; each level needs machines > 0 and bandwidth > 0"));
    }
  }
  // A level's table holds a cell per (i, j, machines) and its range times one per (i, j): L x L
  // x machines cells at the first level, the largest.
  const double L = profile.num_layers();
  double most = 0;
  for (const PipeDreamCodeOptions::Level& level : options.levels) {
    most = std::max(most, L * L * (static_cast<double>(level.machines) * sizeof(Cell) + 9.0));
  }
  if (most > static_cast<double>(kMaxPlannerTableBytes)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "planner pipedream-code: %d layers on up to %d machines need a table of %.1f GiB (layers "
        "x layers x machines), more than the planners' limit of %d MiB: use planner pipedream "
        "or dapple, or a profile of fewer layers",
        profile.num_layers(), options.levels.front().machines, most / (1 << 30),
        kMaxPlannerTableBytes >> 20));
  }
  return absl::OkStatus();
}

// Usable devices per node as the paper variant takes them: the first UsableDeviceCount devices
// in node order, nodes cut to the smallest count.
struct NodeLayout {
  int nodes = 0;
  int per_node = 0;
  std::vector<int> first_device;  // global index of each used node's device 0
};

NodeLayout Nodes(const PlanningProblem& problem) {
  NodeLayout out;
  int left = UsableDeviceCount(problem);
  int first = 0;
  int per = 0;
  for (const v1::ClusterNode& node : problem.topology.nodes()) {
    if (left <= 0) break;
    const int used = std::min(left, node.devices());
    per = out.nodes == 0 ? used : std::min(per, used);
    out.first_device.push_back(first);
    ++out.nodes;
    first += node.devices();
    left -= node.devices();
  }
  out.per_node = per;
  return out;
}

std::vector<int> Replicas(const HybridPlan& plan) {
  std::vector<int> out;
  for (const StagePlan& st : plan.stages) out.push_back(static_cast<int>(st.devices.size()));
  return out;
}

absl::Status NoMicroBatch(const PlanningProblem& problem, int most, absl::string_view rule) {
  return absl::InvalidArgumentError(absl::StrCat(
      "planner pipedream-code: a stage has ", most, " replicas, and no micro-batch size ",
      problem.micro_batch_size > 0
          ? absl::StrCat("(training.micro_batch is ", problem.micro_batch_size, ") ")
          : "",
      "of global batch ", problem.global_batch, " gives ", rule,
      "; use a larger global batch, or planner pipedream"));
}

// Schedule pipedream (1F1B-RR, the code's runtime): replicas take whole micro-batches in turn,
// so b needs only M >= every replica count (MicroBatchSizes' rule under pipedream).
absl::StatusOr<PlannedJob> PickRoundRobin(const PlanningProblem& problem,
                                          const HybridPlan& layout) {
  const std::vector<int> replicas = Replicas(layout);
  std::vector<Candidate> candidates = MicroBatchCandidates(PlanEstimator(problem), layout);
  if (candidates.empty()) {
    const int most = *std::max_element(replicas.begin(), replicas.end());
    return NoMicroBatch(problem, most,
                        absl::StrCat("each replica a micro-batch (M >= ", most, ")"));
  }
  return PickBySimulation(problem, std::move(candidates), kBaselineSimulatedCandidates);
}

// `problem` as a synchronous step of `plan` with micro-batches of b samples costs when each
// stage splits them unevenly over its D replicas: the slowest replica holds ceil(b / D) samples,
// so the stage's layers are charged (and hold activations) ceil(b / D) / (b / D) times the
// simulator's even share. Transfers still carry whole micro-batches.
PlanningProblem UnevenSplitProblem(const PlanningProblem& problem, const HybridPlan& plan,
                                   int64_t b) {
  PlanningProblem out = problem;
  profile::ChainProfile& p = out.profile;
  for (const StagePlan& st : plan.stages) {
    const int64_t d = static_cast<int64_t>(st.devices.size());
    const double scale = static_cast<double>((b + d - 1) / d * d) / static_cast<double>(b);
    if (scale == 1.0) continue;
    for (int l = st.first_layer; l <= st.last_layer; ++l) {
      p.forward_ms[l] *= scale;
      p.backward_ms[l] *= scale;
      p.activation_bytes[l] = std::llround(static_cast<double>(p.activation_bytes[l]) * scale);
      p.saved_bytes[l] = std::llround(static_cast<double>(p.saved_bytes[l]) * scale);
    }
  }
  return out;
}

// A synchronous schedule (the DAPPLE paper's comparison): DAPPLE's split-concat with uneven
// shares, every b of the global batch with b >= every replica count simulated; the fastest that
// fits wins (ties: the larger M).
absl::StatusOr<PlannedJob> PickUnevenSplit(const PlanningProblem& problem,
                                           const HybridPlan& layout) {
  const std::vector<int> replicas = Replicas(layout);
  const int most = *std::max_element(replicas.begin(), replicas.end());
  const int64_t G = problem.global_batch;
  std::vector<int64_t> sizes;
  for (int64_t d = 1; d * d <= G; ++d) {
    if (G % d != 0) continue;
    for (int64_t b : {d, G / d}) {
      if (b < most || (problem.micro_batch_size > 0 && b != problem.micro_batch_size)) continue;
      // The simulation's bound on P * M, as MicroBatchSizes.
      if (b != G && static_cast<int64_t>(replicas.size()) * (G / b) > kMaxStageMicroBatches) {
        continue;
      }
      sizes.push_back(b);
    }
  }
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  if (sizes.empty()) {
    return NoMicroBatch(problem, most, absl::StrCat("each replica a sample (b >= ", most, ")"));
  }
  std::optional<PlannedJob> best;
  std::optional<PlannedJob> leanest;  // the smallest peak memory, for the error
  int64_t leanest_bytes = 0;
  std::optional<PlanningProblem> leanest_problem;
  for (int64_t b : sizes) {
    HybridPlan plan = layout;
    plan.micro_batch_size = b;
    plan.micro_batches = static_cast<int>(G / b);
    PlanningProblem scored = UnevenSplitProblem(problem, plan, b);
    DAPPLE_ASSIGN_OR_RETURN(Prediction prediction, SimulatePlan(scored, plan, problem.schedule));
    int64_t peak = 0;
    for (const StagePrediction& st : prediction.stages) {
      peak = std::max(peak, st.peak_memory_bytes);
    }
    if (!prediction.fits_memory) {
      if (!leanest.has_value() || peak < leanest_bytes) {
        leanest = PlannedJob{plan, prediction};
        leanest_bytes = peak;
        leanest_problem = std::move(scored);
      }
      continue;
    }
    // Sizes ascend, so the first of equal steps has the larger M.
    if (!best.has_value() || prediction.step_ms < best->prediction.step_ms) {
      best = PlannedJob{std::move(plan), std::move(prediction)};
    }
  }
  if (best.has_value()) return *std::move(best);
  return MemoryError(*leanest_problem, leanest->plan, leanest->prediction);
}

}  // namespace

absl::StatusOr<PipeDreamCodeSolution> SolvePipeDreamCode(const profile::ChainProfile& profile,
                                                         const PipeDreamCodeOptions& options) {
  DAPPLE_RETURN_IF_ERROR(CheckOptions(profile, options));
  // The code removes the graph's Input sources before planning (their work is data loading),
  // so no cut precedes its first real layer: leading layers without compute or weights join
  // the first state. State t ends at layer lead + t.
  int lead = 0;
  while (lead + 1 < profile.num_layers() &&
         profile.forward_ms[lead] + profile.backward_ms[lead] == 0 &&
         profile.parameter_bytes[lead] == 0) {
    ++lead;
  }
  const int L = profile.num_layers() - lead;
  std::vector<double> cost(L, 0.0), weight_prefix(L + 1, 0.0), cut(L, 0.0);
  for (int l = 0; l < profile.num_layers(); ++l) {
    const int t = std::max(0, l - lead);
    cost[t] += profile.forward_ms[l] + profile.backward_ms[l];
    weight_prefix[t + 1] += static_cast<double>(profile.parameter_bytes[l]);
  }
  for (int t = 0; t < L; ++t) weight_prefix[t + 1] += weight_prefix[t];
  const std::vector<int64_t>& cuts =
      options.cut_bytes.empty() ? profile.cut_bytes : options.cut_bytes;
  for (int t = 0; t + 1 < L; ++t) cut[t] = static_cast<double>(cuts[lead + t]);

  const int levels = static_cast<int>(options.levels.size());
  std::vector<LevelTable> tables;
  RangeCompute compute = StateCompute(cost);
  int unit_machines = 1;
  for (int l = 0; l < levels; ++l) {
    LevelInputs in;
    in.compute = &compute;
    in.weight_prefix = &weight_prefix;
    in.cut = &cut;
    in.bytes_per_ms = options.levels[l].bandwidth_bytes_per_s / 1000.0;
    in.machines = options.levels[l].machines;
    in.unit_machines = unit_machines;
    in.rows = l + 1 == levels ? 1 : L;
    tables.push_back(SolveLevel(in, options));
    if (l + 1 < levels) compute = LevelOptimum(tables.back(), L);
    unit_machines = options.levels[l].machines;
  }
  const LevelTable& top = tables.back();
  const Cell& best = top.at(0, L - 1, top.machines() - 1);
  if (!best.valid) {
    return absl::InvalidArgumentError("planner pipedream-code: no plan (every range infeasible)");
  }

  std::vector<MachineRange> ranges = ExpandLevels(tables, options);
  PipeDreamCodeSolution solution;
  solution.time_per_stage_ms = best.time;
  for (MachineRange& r : ranges) {
    solution.stages.push_back(
        {r.first == 0 ? 0 : lead + r.first, lead + r.last, std::move(r.bases)});
  }
  return solution;
}

absl::StatusOr<PipeDreamCodeOptions> PipeDreamCodeOptionsFor(const PlanningProblem& problem) {
  DAPPLE_RETURN_IF_ERROR(ValidateProblem(problem));
  if (problem.num_stages > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("planner pipedream-code: num_stages is ", problem.num_stages,
                     " but PipeDream's code has no fixed depth; use num_stages 0, or planner "
                     "pipedream (the paper variant) for a fixed depth"));
  }
  const NodeLayout nodes = Nodes(problem);
  const int usable = nodes.nodes * nodes.per_node;
  if (problem.max_replicas > 1 && problem.max_replicas < usable) {
    return absl::InvalidArgumentError(absl::StrCat(
        "planner pipedream-code: max_replicas is ", problem.max_replicas,
        " but PipeDream's code limits replicas only to 1 (--straight_pipeline) or not at all (",
        usable, " devices); use max_replicas 0, 1 or ", usable, ", or planner pipedream"));
  }
  PipeDreamCodeOptions options;
  const double intra = problem.topology.intra_node_bandwidth_bytes_per_s();
  const double inter = problem.topology.inter_node_bandwidth_bytes_per_s();
  if (nodes.per_node > 1 || nodes.nodes == 1) options.levels.push_back({nodes.per_node, intra});
  if (nodes.nodes > 1) options.levels.push_back({nodes.nodes, inter});
  options.activation_transfers = true;
  options.straight_pipeline = problem.max_replicas == 1;
  options.use_fewer_machines = false;
  return options;
}

absl::StatusOr<PlannedJob> PlanPipeDreamCode(const PlanningProblem& problem) {
  DAPPLE_ASSIGN_OR_RETURN(const PipeDreamCodeOptions options, PipeDreamCodeOptionsFor(problem));
  return PlanPipeDreamCode(problem, options);
}

absl::StatusOr<PlannedJob> PlanPipeDreamCode(const PlanningProblem& problem,
                                             const PipeDreamCodeOptions& options) {
  DAPPLE_RETURN_IF_ERROR(ValidateProblem(problem));
  DAPPLE_ASSIGN_OR_RETURN(PipeDreamCodeSolution solution,
                          SolvePipeDreamCode(problem.profile, options));
  const NodeLayout nodes = Nodes(problem);
  HybridPlan layout;
  layout.planner = "pipedream-code";
  for (const PipeDreamCodeStage& s : solution.stages) {
    StagePlan st;
    st.first_layer = s.first_layer;
    st.last_layer = s.last_layer;
    for (int machine : s.machines) {
      st.devices.push_back(nodes.first_device[machine / nodes.per_node] + machine % nodes.per_node);
    }
    layout.stages.push_back(std::move(st));
  }
  if (problem.schedule == schedule::ScheduleKind::kPipeDream)
    return PickRoundRobin(problem, layout);
  return PickUnevenSplit(problem, layout);
}

absl::StatusOr<std::vector<int64_t>> PipeDreamCutBytes(const v1::ModelProfile& profile) {
  const int n = profile.layers_size();
  std::vector<std::vector<int>> successors(n);
  for (const v1::ProfileEdge& edge : profile.edges()) {
    if (edge.src() < 0 || edge.dst() >= n || edge.src() >= edge.dst()) {
      return absl::InvalidArgumentError(absl::StrCat("planner pipedream-code: edge ", edge.src(),
                                                     " -> ", edge.dst(), " does not go forward"));
    }
    if (profile.layers(edge.src()).input()) continue;  // the code removes Input nodes
    successors[edge.src()].push_back(edge.dst());
  }
  if (profile.edges().empty()) {
    for (int k = 0; k + 1 < n; ++k) successors[k].push_back(k + 1);
  }
  // ancestor[a][p]: p reaches a (graph.py predecessors, transitive).
  std::vector<std::vector<char>> ancestor(n, std::vector<char>(n, 0));
  for (int p = n - 1; p >= 0; --p) {
    for (int q : successors[p]) {
      ancestor[q][p] = 1;
      for (int a = q + 1; a < n; ++a) {
        if (ancestor[a][q]) ancestor[a][p] = 1;
      }
    }
  }
  std::vector<int64_t> out(n > 0 ? n - 1 : 0, 0);
  for (int k = 0; k + 1 < n; ++k) {
    std::vector<char> counted(n, 0);
    for (int a = 0; a <= k; ++a) {
      if (profile.layers(a).input()) continue;
      const bool last =
          std::none_of(successors[a].begin(), successors[a].end(), [&](int q) { return q <= k; });
      if (!last) continue;
      counted[a] = 1;
      for (int p = 0; p < a; ++p) {
        if (!ancestor[a][p]) continue;
        for (int q : successors[p]) {
          if (!ancestor[a][q] && q != a) counted[p] = 1;
        }
      }
    }
    for (int l = 0; l <= k; ++l) {
      if (counted[l]) out[k] += profile.layers(l).activation_bytes();
    }
  }
  return out;
}

}  // namespace dapple::coordinator
