#include "coordinator/planner/pipedream_planner.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/profile/cluster_topology.h"
#include "common/status.h"
#include "coordinator/planner/baseline_planners.h"
#include "coordinator/planner/dapple_planner.h"

namespace dapple::coordinator {
namespace {

// One level of PipeDream's hierarchy: `units` machines joined by a link of `bytes_per_ms`, each
// computing a layer range in compute(l, j) ms (the sum of layer times at level 1, the level-1
// optimum for one node at level 2). allowed[m] says whether a stage may have m replicas.
struct Level {
  int units = 1;
  double bytes_per_ms = 1;
  std::vector<char> allowed;                    // units + 1 entries
  const std::vector<double>* prefix = nullptr;  // compute(l, j) = prefix[j+1] - prefix[l]
  const std::vector<double>* table = nullptr;   // or table[l * L + j]
};

// What A(j, m) chose: fewer machines (A(j, m - 1)), one stage with `replicas`, or a split after
// layer `split` with `replicas` on the last stage.
struct Choice {
  enum Kind : char { kFewer, kSingle, kSplit } kind = kSingle;
  int split = -1;
  int replicas = 1;
};

class LevelSolver {
 public:
  LevelSolver(const Level& level, int num_layers, const std::vector<double>& weight_prefix,
              const std::vector<double>& cut_bytes, bool exhaustive)
      : level_(level),
        L_(num_layers),
        n_(level.units),
        weight_prefix_(weight_prefix),
        cut_(cut_bytes),
        exhaustive_(exhaustive),
        a_(static_cast<size_t>(num_layers) * (level.units + 1), kInf),
        choice_(static_cast<size_t>(num_layers) * (level.units + 1)) {}

  double Compute(int l, int j) const {
    if (level_.table != nullptr) return (*level_.table)[static_cast<size_t>(l) * L_ + j];
    return (*level_.prefix)[j + 1] - (*level_.prefix)[l];
  }
  // One stage l..j with m replicas: max(compute, weight sync 4 (m - 1) |w| / (m B)) / m.
  double T(int l, int j, int m) const {
    const double w = weight_prefix_[j + 1] - weight_prefix_[l];
    const double sync = 4.0 * (m - 1) * w / (m * level_.bytes_per_ms);
    return std::max(Compute(l, j), sync) / m;
  }
  double Transfer(int k) const { return 2.0 * cut_[k] / level_.bytes_per_ms; }

  double& A(int j, int m) { return a_[static_cast<size_t>(j) * (n_ + 1) + m]; }
  Choice& C(int j, int m) { return choice_[static_cast<size_t>(j) * (n_ + 1) + m]; }

  // Fills A(j, m) for ranges i..j, every j >= i and 1 <= m <= units.
  void SolveFrom(int i) {
    i_ = i;
    crossover_.assign(static_cast<size_t>(n_ + 1) * (n_ + 1), i);
    for (int j = i; j < L_; ++j) {
      for (int m = 1; m <= n_; ++m) {
        double best = kInf;
        Choice ch;
        if (m > 1) {
          best = A(j, m - 1);
          ch.kind = Choice::kFewer;
        }
        if (level_.allowed[m]) {
          const double t = T(i, j, m);
          if (t < best) {
            best = t;
            ch = Choice{Choice::kSingle, -1, m};
          }
        }
        for (int mp = 1; mp < m; ++mp) {
          if (!level_.allowed[mp] || j == i) continue;
          SearchSplits(j, m, mp, best, ch);
        }
        A(j, m) = best;
        C(j, m) = ch;
      }
    }
  }

  // Stages (first, last, replicas) of the optimum for i..j with up to m machines (after
  // SolveFrom(i)).
  void Reconstruct(int j, int m, std::vector<PipeDreamStage>* out) {
    while (true) {
      const Choice ch = C(j, m);
      if (ch.kind == Choice::kFewer) {
        --m;
        continue;
      }
      if (ch.kind == Choice::kSingle) {
        out->push_back({i_, j, ch.replicas});
        break;
      }
      std::vector<PipeDreamStage> head;
      Reconstruct(ch.split, m - ch.replicas, &head);
      head.push_back({ch.split + 1, j, ch.replicas});
      out->insert(out->end(), head.begin(), head.end());
      break;
    }
  }

 private:
  // Candidates max(A(k, m - mp), 2 a_k / B, T(k+1..j, mp)) for i <= k < j. A(k, .) does not
  // decrease with k and T(k+1..j, .) does not increase, so only split points where both are
  // below the best so far can win: start at their crossover and walk out while that holds.
  void SearchSplits(int j, int m, int mp, double& best, Choice& ch) {
    auto consider = [&](int k) {
      const double v = std::max({A(k, m - mp), Transfer(k), T(k + 1, j, mp)});
      if (v < best) {
        best = v;
        ch = Choice{Choice::kSplit, k, mp};
      }
    };
    if (exhaustive_) {
      for (int k = i_; k < j; ++k) consider(k);
      return;
    }
    // The crossover (the smallest k with A(k, m - mp) >= T(k+1..j, mp), or j) only moves right
    // as j grows, since T(k+1..j, mp) grows with j: keep it per (m, mp) between calls.
    int& lo = crossover_[static_cast<size_t>(m) * (n_ + 1) + mp];
    while (lo < j && A(lo, m - mp) < T(lo + 1, j, mp)) ++lo;
    for (int k = lo; k < j && A(k, m - mp) < best; ++k) consider(k);
    for (int k = lo - 1; k >= i_ && T(k + 1, j, mp) < best; --k) consider(k);
  }

  const Level& level_;
  const int L_;
  const int n_;
  const std::vector<double>& weight_prefix_;
  const std::vector<double>& cut_;
  const bool exhaustive_;
  int i_ = 0;
  std::vector<int> crossover_;  // per (m, mp), for the current i
  std::vector<double> a_;
  std::vector<Choice> choice_;
};

// Replica counts that split the batch evenly: m divides `batch` (the global batch, or the fixed
// micro-batch size) and m * `times` divides it too, so that products over levels still do.
// `batch` 0: no split (schedule pipedream's 1F1B-RR gives replicas whole micro-batches; the
// limit, at most M, is the only rule).
std::vector<char> Allowed(int units, int limit, int64_t batch, int64_t times) {
  std::vector<char> allowed(units + 1, 0);
  for (int m = 1; m <= units; ++m) {
    allowed[m] =
        m <= limit && (batch == 0 || batch % (static_cast<int64_t>(m) * times) == 0) ? 1 : 0;
  }
  return allowed;
}

int64_t Lcm(const std::vector<char>& allowed) {
  int64_t l = 1;
  for (size_t m = 1; m < allowed.size(); ++m) {
    if (allowed[m]) l = std::lcm(l, static_cast<int64_t>(m));
  }
  return l;
}

// Exactly `stages` stages over `units` machines of one flat level (num_stages > 0): A_p(j, m)
// over prefixes 0..j with p stages; only T's monotonicity is used to stop the scan.
absl::StatusOr<PipeDreamSolution> SolveFixedDepth(const Level& level, int L, int stages,
                                                  const std::vector<double>& weight_prefix,
                                                  const std::vector<double>& cut, bool exhaustive) {
  const int n = level.units;
  LevelSolver helper(level, L, weight_prefix, cut, exhaustive);
  auto idx = [&](int p, int j, int m) { return (static_cast<size_t>(p) * L + j) * (n + 1) + m; };
  std::vector<double> A(static_cast<size_t>(stages + 1) * L * (n + 1), kInf);
  std::vector<Choice> C(A.size());
  for (int j = 0; j < L; ++j) {
    for (int m = 1; m <= n; ++m) {
      double best = m > 1 ? A[idx(1, j, m - 1)] : kInf;
      Choice ch{Choice::kFewer, -1, 0};
      if (level.allowed[m] && helper.T(0, j, m) < best) {
        best = helper.T(0, j, m);
        ch = Choice{Choice::kSingle, -1, m};
      }
      A[idx(1, j, m)] = best;
      C[idx(1, j, m)] = ch;
    }
  }
  for (int p = 2; p <= stages; ++p) {
    for (int j = p - 1; j < L; ++j) {
      for (int m = p; m <= n; ++m) {
        double best = m > p ? A[idx(p, j, m - 1)] : kInf;
        Choice ch{Choice::kFewer, -1, 0};
        for (int mp = 1; mp <= m - (p - 1); ++mp) {
          if (!level.allowed[mp]) continue;
          for (int k = j - 1; k >= p - 2; --k) {
            const double t = helper.T(k + 1, j, mp);
            if (!exhaustive && t >= best) break;  // T only grows as k decreases
            const double v = std::max({A[idx(p - 1, k, m - mp)], helper.Transfer(k), t});
            if (v < best) {
              best = v;
              ch = Choice{Choice::kSplit, k, mp};
            }
          }
        }
        A[idx(p, j, m)] = best;
        C[idx(p, j, m)] = ch;
      }
    }
  }
  PipeDreamSolution solution;
  solution.slowest_stage_ms = A[idx(stages, L - 1, n)];
  if (solution.slowest_stage_ms == kInf) {
    return absl::InvalidArgumentError(
        absl::StrCat("planner pipedream: no split into ", stages, " stages on ", n, " devices"));
  }
  int p = stages, j = L - 1, m = n;
  while (p >= 1) {
    const Choice ch = C[idx(p, j, m)];
    if (ch.kind == Choice::kFewer) {
      --m;
      continue;
    }
    if (ch.kind == Choice::kSingle) {
      solution.stages.push_back({0, j, ch.replicas});
      break;
    }
    solution.stages.push_back({ch.split + 1, j, ch.replicas});
    j = ch.split;
    m -= ch.replicas;
    --p;
  }
  std::reverse(solution.stages.begin(), solution.stages.end());
  return solution;
}

// Refuses before anything is allocated a solve whose tables would exceed kMaxPlannerTableBytes:
// a level's solver keeps L x (units + 1) results and choices and (units + 1)^2 crossovers, and
// two levels (several nodes of several devices) a node time per range i..j.
absl::Status CheckTableBytes(int L, int nodes, int per, int usable, bool flat) {
  const auto level = [&](double units) {
    return static_cast<double>(L) * (units + 1) * (sizeof(double) + sizeof(Choice)) +
           (units + 1) * (units + 1) * sizeof(int);
  };
  double bytes = flat ? level(usable) : std::max(level(per), level(nodes));
  if (!flat && nodes > 1 && per > 1) bytes += static_cast<double>(L) * L * sizeof(double);
  if (bytes <= static_cast<double>(kMaxPlannerTableBytes)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "planner pipedream: %d layers on %d devices (%d node%s) need tables of %.1f GiB, more than "
      "the planners' limit of %d MiB: use planner dapple, or a profile of fewer layers",
      L, usable, nodes, nodes == 1 ? "" : "s", bytes / (1 << 30), kMaxPlannerTableBytes >> 20));
}

absl::StatusOr<PipeDreamSolution> Solve(const PlanningProblem& problem, bool exhaustive) {
  DAPPLE_RETURN_IF_ERROR(ValidateProblem(problem));
  const profile::ChainProfile& p = problem.profile;
  const int L = p.num_layers();
  std::vector<double> compute_prefix(L + 1, 0.0), weight_prefix(L + 1, 0.0);
  for (int i = 0; i < L; ++i) {
    compute_prefix[i + 1] = compute_prefix[i] + p.forward_ms[i] + p.backward_ms[i];
    weight_prefix[i + 1] = weight_prefix[i] + static_cast<double>(p.parameter_bytes[i]);
  }
  std::vector<double> cut(L, 0.0);
  for (int i = 0; i + 1 < L; ++i) cut[i] = static_cast<double>(p.cut_bytes[i]);

  // Usable devices per node (the first UsableDeviceCount devices in node order).
  const int usable = UsableDeviceCount(problem);
  std::vector<int> per_node;
  int left = usable;
  for (const v1::ClusterNode& node : problem.topology.nodes()) {
    if (left <= 0) break;
    per_node.push_back(std::min(left, node.devices()));
    left -= node.devices();
  }
  const int nodes = static_cast<int>(per_node.size());
  const int per = *std::min_element(per_node.begin(), per_node.end());
  DAPPLE_RETURN_IF_ERROR(CheckTableBytes(L, nodes, per, usable, problem.num_stages > 0));
  const int64_t batch = problem.schedule == schedule::ScheduleKind::kPipeDream ? 0
                        : problem.micro_batch_size > 0 ? problem.micro_batch_size
                                                       : problem.global_batch;
  const double intra = problem.topology.intra_node_bandwidth_bytes_per_s() / 1000.0;
  const double inter = problem.topology.inter_node_bandwidth_bytes_per_s() / 1000.0;
  // A stage's replicas each compute batch / replicas rows, at least min_replica_rows of them
  // (a batch norm over one value per channel cannot learn): a cap on every stage's replicas.
  int R = problem.max_replicas;
  if (batch > 0 && problem.min_replica_rows > 1) {
    const int cap = static_cast<int>(std::max<int64_t>(1, batch / problem.min_replica_rows));
    R = R > 0 ? std::min(R, cap) : cap;
  }

  if (problem.num_stages > 0) {
    Level flat;
    flat.units = usable;
    flat.bytes_per_ms = nodes > 1 ? inter : intra;
    flat.allowed = Allowed(flat.units, R > 0 ? R : flat.units, batch, 1);
    flat.prefix = &compute_prefix;
    return SolveFixedDepth(flat, L, problem.num_stages, weight_prefix, cut, exhaustive);
  }

  PipeDreamSolution solution;
  if (nodes == 1 && per == 1) {
    solution.stages.push_back({0, L - 1, 1});
    solution.slowest_stage_ms = compute_prefix[L];
    return solution;
  }
  const int limit1 = R > 0 ? std::min(R, per) : per;
  Level level1;
  level1.units = per;
  level1.bytes_per_ms = intra;
  level1.allowed = Allowed(per, limit1, batch, 1);
  level1.prefix = &compute_prefix;

  if (nodes == 1) {  // one level: the devices of one node
    LevelSolver solver(level1, L, weight_prefix, cut, exhaustive);
    solver.SolveFrom(0);
    solution.slowest_stage_ms = solver.A(L - 1, per);
    solver.Reconstruct(L - 1, per, &solution.stages);
    return solution;
  }
  Level level2;
  level2.units = nodes;
  level2.bytes_per_ms = inter;
  const int limit2 = R > 0 ? std::max(1, R / limit1) : nodes;
  level2.allowed = Allowed(nodes, limit2, batch, per > 1 ? Lcm(level1.allowed) : 1);
  std::vector<double> node_time;
  if (per == 1) {
    level2.prefix = &compute_prefix;  // a node is one device: its time is the layers' sum
  } else {
    // Level 1 for every range i..j on one node: the unit time of level 2.
    node_time.assign(static_cast<size_t>(L) * L, kInf);
    LevelSolver solver(level1, L, weight_prefix, cut, exhaustive);
    for (int i = 0; i < L; ++i) {
      solver.SolveFrom(i);
      for (int j = i; j < L; ++j) node_time[static_cast<size_t>(i) * L + j] = solver.A(j, per);
    }
    level2.table = &node_time;
  }
  LevelSolver top(level2, L, weight_prefix, cut, exhaustive);
  top.SolveFrom(0);
  solution.slowest_stage_ms = top.A(L - 1, nodes);
  std::vector<PipeDreamStage> outer;
  top.Reconstruct(L - 1, nodes, &outer);
  if (per == 1) {
    solution.stages = std::move(outer);
    return solution;
  }
  LevelSolver inner(level1, L, weight_prefix, cut, exhaustive);
  for (const PipeDreamStage& o : outer) {
    inner.SolveFrom(o.first_layer);
    std::vector<PipeDreamStage> sub;
    inner.Reconstruct(o.last_layer, per, &sub);
    for (PipeDreamStage s : sub) {
      s.replicas *= o.replicas;
      solution.stages.push_back(s);
    }
  }
  return solution;
}

}  // namespace

absl::StatusOr<PipeDreamSolution> SolvePipeDream(const PlanningProblem& problem) {
  return Solve(problem, /*exhaustive=*/false);
}

absl::StatusOr<PipeDreamSolution> SolvePipeDreamReference(const PlanningProblem& problem) {
  return Solve(problem, /*exhaustive=*/true);
}

absl::StatusOr<PlannedJob> PlanPipeDream(const PlanningProblem& problem) {
  DAPPLE_ASSIGN_OR_RETURN(PipeDreamSolution solution, SolvePipeDream(problem));
  HybridPlan layout;
  layout.planner = "pipedream";
  int next_device = 0;
  for (const PipeDreamStage& s : solution.stages) {
    StagePlan st;
    st.first_layer = s.first_layer;
    st.last_layer = s.last_layer;
    for (int r = 0; r < s.replicas; ++r) st.devices.push_back(next_device++);
    layout.stages.push_back(std::move(st));
  }
  const PlanEstimator estimator(problem);
  std::vector<Candidate> candidates = MicroBatchCandidates(estimator, layout);
  if (candidates.empty()) {
    // Split-concat (every schedule but pipedream's) shares each micro-batch evenly among a
    // stage's replicas: the micro-batch must be a multiple of every replica count.
    int64_t lcm = 1;
    std::vector<int> replicas;
    for (const StagePlan& st : layout.stages) {
      replicas.push_back(static_cast<int>(st.devices.size()));
      lcm = std::lcm(lcm, static_cast<int64_t>(st.devices.size()));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "planner pipedream: its stages have ", absl::StrJoin(replicas, ", "),
        " replicas, which split each micro-batch evenly only when it is a multiple of ", lcm,
        problem.micro_batch_size > 0
            ? absl::StrCat(", and training.micro_batch is ", problem.micro_batch_size,
                           ": use a micro_batch that is a multiple of ", lcm,
                           ", or parallel.planner dapple")
            : absl::StrCat(", and no divisor of the global batch ", problem.global_batch, " is")));
  }
  return PickBySimulation(problem, std::move(candidates), kBaselineSimulatedCandidates);
}

}  // namespace dapple::coordinator
