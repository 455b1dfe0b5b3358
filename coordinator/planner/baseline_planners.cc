#include "coordinator/planner/baseline_planners.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/profile/cluster_topology.h"
#include "common/profile/format_bytes.h"
#include "common/status.h"
#include "coordinator/planner/partition.h"
#include "coordinator/planner/plan_simulator.h"
#include "coordinator/planner/stage_memory.h"

namespace dapple::coordinator {
namespace {

// Relative comparison used for every tie in plan selection.
bool Less(double a, double b) { return a < b * (1 - 1e-9); }

}  // namespace

absl::Status ValidateProblem(const PlanningProblem& problem) {
  const profile::ChainProfile& p = problem.profile;
  const int L = p.num_layers();
  if (L == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("profile ", p.source, " has no layers: a plan needs at least one"));
  }
  auto length = [&](absl::string_view field, size_t n, size_t want) -> absl::Status {
    if (n == want) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("profile ", p.source, ": ", field, " has ", n,
                                                   " entries but the profile has ", L,
                                                   " layers (want ", want, ")"));
  };
  DAPPLE_RETURN_IF_ERROR(length("backward_ms", p.backward_ms.size(), L));
  DAPPLE_RETURN_IF_ERROR(length("parameter_bytes", p.parameter_bytes.size(), L));
  DAPPLE_RETURN_IF_ERROR(length("activation_bytes", p.activation_bytes.size(), L));
  DAPPLE_RETURN_IF_ERROR(length("saved_bytes", p.saved_bytes.size(), L));
  DAPPLE_RETURN_IF_ERROR(length("cut_bytes", p.cut_bytes.size(), L - 1));
  if (p.batch_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("profile ", p.source, ": batch_size is ", p.batch_size, ": it must be > 0"));
  }
  if (problem.global_batch <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("global_batch is ", problem.global_batch, ": it must be > 0"));
  }
  if (problem.micro_batch_size < 0 ||
      (problem.micro_batch_size > 0 && problem.global_batch % problem.micro_batch_size != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "micro_batch_size ", problem.micro_batch_size, " does not divide global_batch ",
        problem.global_batch, ": M = global_batch / micro_batch_size must be whole"));
  }
  if (problem.max_devices < 0) {
    return absl::InvalidArgumentError(absl::StrCat("max_devices is ", problem.max_devices,
                                                   ": it must be >= 0 (0: every device)"));
  }
  if (problem.max_replicas < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_replicas is ", problem.max_replicas, ": it must be >= 0 (0: unlimited)"));
  }
  const int usable = UsableDeviceCount(problem);
  if (usable <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cluster ", problem.topology.source(), " has no devices"));
  }
  if (problem.num_stages < 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_stages is ", problem.num_stages,
                                                   ": it must be >= 0 (0: the planner chooses)"));
  }
  if (problem.num_stages > L) {
    return absl::InvalidArgumentError(
        absl::StrCat("the model has ", L, " layers but the plan has ", problem.num_stages,
                     " stages: every stage needs at least one layer"));
  }
  if (problem.num_stages > usable) {
    return absl::InvalidArgumentError(
        absl::StrCat("the plan has ", problem.num_stages, " stages but only ", usable,
                     " devices are usable: every stage needs its own device"));
  }
  return absl::OkStatus();
}

std::vector<int64_t> MicroBatchSizes(const PlanningProblem& problem,
                                     const std::vector<int>& replicas) {
  // Split-concat divides every micro-batch over a stage's replicas. PipeDream's 1F1B-RR sends
  // whole micro-batches round-robin instead: no divisibility, but every replica needs one per
  // step.
  const bool pipedream = problem.schedule == schedule::ScheduleKind::kPipeDream;
  int64_t lcm = 1;
  int64_t most = 1;
  for (int r : replicas) {
    if (!pipedream) lcm = std::lcm(lcm, static_cast<int64_t>(std::max(r, 1)));
    most = std::max<int64_t>(most, r);
  }
  std::vector<int64_t> out;
  if (problem.global_batch <= 0) return out;
  const int64_t G = problem.global_batch;
  auto enough = [&](int64_t b) {
    if (pipedream) return G / b >= most;
    return most == 1 || b / most >= problem.min_replica_rows;
  };
  if (problem.micro_batch_size > 0) {
    if (problem.micro_batch_size % lcm == 0 && enough(problem.micro_batch_size)) {
      out.push_back(problem.micro_batch_size);
    }
    return out;
  }
  const int64_t P = std::max<int64_t>(1, static_cast<int64_t>(replicas.size()));
  auto ok = [&](int64_t b) {
    return b % lcm == 0 && enough(b) && (b == G || P * (G / b) <= kMaxStageMicroBatches);
  };
  std::vector<int64_t> high;
  for (int64_t d = 1; d * d <= G; ++d) {
    if (G % d != 0) continue;
    if (ok(d)) out.push_back(d);
    const int64_t e = G / d;
    if (e != d && ok(e)) high.push_back(e);
  }
  out.insert(out.end(), high.rbegin(), high.rend());
  return out;
}

std::vector<Candidate> MicroBatchCandidates(const PlanEstimator& estimator,
                                            const HybridPlan& layout) {
  const PlanningProblem& problem = estimator.problem();
  std::vector<int> replicas;
  for (const StagePlan& st : layout.stages) replicas.push_back(static_cast<int>(st.devices.size()));
  std::vector<Candidate> out;
  for (int64_t b : MicroBatchSizes(problem, replicas)) {
    Candidate c;
    c.plan = layout;
    c.plan.micro_batch_size = b;
    c.plan.micro_batches = static_cast<int>(problem.global_batch / b);
    const MemoryEstimate memory = estimator.Memory(c.plan);
    c.fits = memory.fits;
    c.peak_bytes = memory.peak_bytes;
    c.estimate_ms = estimator.Latency(c.plan).step_ms;
    out.push_back(std::move(c));
  }
  return out;
}

absl::Status MemoryError(const PlanningProblem& problem, const HybridPlan& plan,
                         const Prediction& prediction) {
  int worst = 0;
  int64_t worst_excess = std::numeric_limits<int64_t>::min();
  std::vector<int64_t> device_bytes(plan.stages.size(), std::numeric_limits<int64_t>::max());
  for (size_t s = 0; s < plan.stages.size() && s < prediction.stages.size(); ++s) {
    for (int d : plan.stages[s].devices) {
      device_bytes[s] = std::min(device_bytes[s], profile::DeviceMemoryBytes(problem.topology, d));
    }
    const int64_t excess = prediction.stages[s].peak_memory_bytes - device_bytes[s];
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = static_cast<int>(s);
    }
  }
  if (prediction.stages.empty()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("planner ", plan.planner, ": no plan fits device memory"));
  }
  const StagePrediction& st = prediction.stages[worst];
  const auto [needs, has] = profile::FormatBytesApart(st.peak_memory_bytes, device_bytes[worst]);
  return absl::ResourceExhaustedError(absl::StrCat(
      "planner ", plan.planner, ": no plan fits device memory: the best needs ", needs,
      " on a device (stage ", worst, ": ", StageMemoryParts(st), ") but devices have ", has));
}

absl::StatusOr<PlannedJob> PickBySimulation(const PlanningProblem& problem,
                                            std::vector<Candidate> candidates, int simulate) {
  if (candidates.empty()) {
    return absl::InvalidArgumentError("no candidate plans to choose from");
  }
  std::vector<size_t> order(candidates.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const Candidate& x = candidates[a];
    const Candidate& y = candidates[b];
    if (x.fits != y.fits) return x.fits;
    if (x.estimate_ms != y.estimate_ms) return x.estimate_ms < y.estimate_ms;
    return x.plan.micro_batches > y.plan.micro_batches;
  });
  int simulated = 0;
  int best = -1;
  Prediction best_prediction;
  for (size_t i : order) {
    const Candidate& c = candidates[i];
    if (!c.fits) break;
    if (simulate > 0 && simulated >= simulate) break;
    ++simulated;
    DAPPLE_ASSIGN_OR_RETURN(Prediction prediction, SimulatePlan(problem, c.plan, problem.schedule));
    if (!prediction.fits_memory) continue;
    bool better = best < 0 || Less(prediction.step_ms, best_prediction.step_ms);
    if (!better && !Less(best_prediction.step_ms, prediction.step_ms)) {
      // A tie: the better estimate, then the larger M.
      const Candidate& b = candidates[best];
      better = Less(c.estimate_ms, b.estimate_ms) ||
               (!Less(b.estimate_ms, c.estimate_ms) && c.plan.micro_batches > b.plan.micro_batches);
    }
    if (better) {
      best = static_cast<int>(i);
      best_prediction = std::move(prediction);
    }
  }
  if (best >= 0) {
    PlannedJob job;
    job.plan = std::move(candidates[best].plan);
    job.prediction = std::move(best_prediction);
    return job;
  }
  size_t smallest = 0;
  for (size_t i = 1; i < candidates.size(); ++i) {
    if (candidates[i].peak_bytes < candidates[smallest].peak_bytes) smallest = i;
  }
  DAPPLE_ASSIGN_OR_RETURN(Prediction prediction,
                          SimulatePlan(problem, candidates[smallest].plan, problem.schedule));
  return MemoryError(problem, candidates[smallest].plan, prediction);
}

absl::StatusOr<std::vector<std::pair<int, int>>> BalancedRanges(const std::vector<double>& costs,
                                                                int num_stages) {
  const int L = static_cast<int>(costs.size());
  // PartitionUniform states the count rules (P >= 1, L >= P) with partition.h's messages.
  DAPPLE_RETURN_IF_ERROR(PartitionUniform(L, num_stages).status());
  for (int i = 0; i < L; ++i) {
    if (!std::isfinite(costs[i]) || costs[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer ", i, " has cost ", costs[i], ": costs must be >= 0"));
    }
  }
  const int P = num_stages;
  std::vector<double> prefix(L + 1, 0.0);
  for (int i = 0; i < L; ++i) prefix[i + 1] = prefix[i] + costs[i];
  auto cost = [&](int first, int last) { return prefix[last + 1] - prefix[first]; };
  // The largest last layer of a stage starting at `first` with cost <= T, leaving a layer for
  // each of `after` later stages; first - 1 when even one layer is too much.
  auto reach = [&](int first, int after, double T) {
    int lo = first - 1, hi = L - 1 - after;
    while (lo < hi) {
      const int mid = lo + (hi - lo + 1) / 2;
      if (cost(first, mid) <= T) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    return lo;
  };
  auto feasible = [&](double T) {
    int first = 0;
    for (int s = 0; s < P - 1; ++s) {
      const int last = reach(first, P - 1 - s, T);
      if (last < first) return false;
      first = last + 1;
    }
    return cost(first, L - 1) <= T;
  };
  double lo = 0, hi = prefix[L];
  for (int it = 0; it < 200 && hi - lo > 1e-12 * hi; ++it) {
    const double mid = 0.5 * (lo + hi);
    if (feasible(mid)) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  const double T = hi;
  // min_start[s]: the earliest first layer from which stages s..P-1 cover the rest within T.
  std::vector<int> min_start(P + 1, L);
  for (int s = P - 1; s >= 1; --s) {
    const int last = min_start[s + 1] - 1;
    int a = s, b = last;  // smallest first in [s, last] with cost(first, last) <= T
    while (a < b) {
      const int mid = a + (b - a) / 2;
      if (cost(mid, last) <= T) {
        b = mid;
      } else {
        a = mid + 1;
      }
    }
    min_start[s] = a;
  }
  std::vector<std::pair<int, int>> out;
  int first = 0;
  for (int s = 0; s < P - 1; ++s) {
    const int max_last = reach(first, P - 1 - s, T);
    const int min_last = std::max(first, min_start[s + 1] - 1);
    const double target = prefix[first] + (prefix[L] - prefix[first]) / (P - s);
    int best = max_last;
    double best_gap = kInf;
    for (int last = min_last; last <= max_last; ++last) {
      const double gap = std::abs(prefix[last + 1] - target);
      if (gap <= best_gap) {  // ties: the later cut
        best_gap = gap;
        best = last;
      } else if (prefix[last + 1] > target) {
        break;
      }
    }
    out.emplace_back(first, best);
    first = best + 1;
  }
  out.emplace_back(first, L - 1);
  return out;
}

std::vector<int> CandidateDepths(int max_stages) {
  std::vector<int> out;
  for (int p = 1; p <= std::min(max_stages, 64); ++p) out.push_back(p);
  int p = 64;
  while (true) {
    p = std::max(p + 1, static_cast<int>(std::lround(p * 1.12)));
    if (p >= max_stages) break;
    out.push_back(p);
  }
  if (max_stages > 64) out.push_back(max_stages);
  return out;
}

namespace {

// One device per stage (stage s on usable device s), P from num_stages or CandidateDepths, M by
// PickBySimulation over every (P, micro-batch) pair.
absl::StatusOr<PlannedJob> PlanOneDevicePerStage(
    const PlanningProblem& problem, absl::string_view name,
    const std::function<absl::StatusOr<std::vector<std::pair<int, int>>>(int)>& ranges_for) {
  DAPPLE_RETURN_IF_ERROR(ValidateProblem(problem));
  const PlanEstimator estimator(problem);
  const int L = problem.profile.num_layers();
  const int usable = UsableDeviceCount(problem);
  const std::vector<int> depths = problem.num_stages > 0 ? std::vector<int>{problem.num_stages}
                                                         : CandidateDepths(std::min(L, usable));
  std::vector<Candidate> candidates;
  for (int P : depths) {
    absl::StatusOr<std::vector<std::pair<int, int>>> ranges_or = ranges_for(P);
    if (!ranges_or.ok()) return ranges_or.status();
    const std::vector<std::pair<int, int>>& ranges = *ranges_or;
    HybridPlan layout;
    layout.planner = std::string(name);
    for (int s = 0; s < P; ++s) {
      StagePlan st;
      st.first_layer = ranges[s].first;
      st.last_layer = ranges[s].second;
      st.devices = {s};
      layout.stages.push_back(std::move(st));
    }
    std::vector<Candidate> more = MicroBatchCandidates(estimator, layout);
    std::move(more.begin(), more.end(), std::back_inserter(candidates));
  }
  if (candidates.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("planner ", name, ": micro_batch_size ",
                                                   problem.micro_batch_size, " admits no plan"));
  }
  return PickBySimulation(problem, std::move(candidates), kBaselineSimulatedCandidates);
}

}  // namespace

absl::StatusOr<PlannedJob> PlanDataParallel(const PlanningProblem& problem) {
  DAPPLE_RETURN_IF_ERROR(ValidateProblem(problem));
  const int usable = UsableDeviceCount(problem);
  if (problem.num_stages > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("planner dp has one stage but num_stages is ", problem.num_stages));
  }
  if (problem.max_replicas > 0 && problem.max_replicas < usable) {
    return absl::InvalidArgumentError(absl::StrCat("planner dp replicates the model on all ",
                                                   usable, " usable devices but max_replicas is ",
                                                   problem.max_replicas));
  }
  // Split-concat needs micro-batches that divide evenly over the replicas.
  int replicas = usable;
  while (replicas > 1 && MicroBatchSizes(problem, {replicas}).empty()) --replicas;
  HybridPlan layout;
  layout.planner = "dp";
  StagePlan stage;
  stage.first_layer = 0;
  stage.last_layer = problem.profile.num_layers() - 1;
  for (int d = 0; d < replicas; ++d) stage.devices.push_back(d);
  layout.stages.push_back(std::move(stage));
  const PlanEstimator estimator(problem);
  std::vector<Candidate> candidates = MicroBatchCandidates(estimator, layout);
  if (candidates.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("planner dp: micro_batch_size ", problem.micro_batch_size, " admits no plan"));
  }
  return PickBySimulation(problem, std::move(candidates), kBaselineSimulatedCandidates);
}

absl::StatusOr<PlannedJob> PlanUniform(const PlanningProblem& problem) {
  const int L = problem.profile.num_layers();
  return PlanOneDevicePerStage(
      problem, "uniform", [L](int P) -> absl::StatusOr<std::vector<std::pair<int, int>>> {
        DAPPLE_ASSIGN_OR_RETURN(std::vector<v1::StageRange> ranges, PartitionUniform(L, P));
        std::vector<std::pair<int, int>> out;
        for (const v1::StageRange& r : ranges) out.emplace_back(r.first_layer(), r.last_layer());
        return out;
      });
}

absl::StatusOr<PlannedJob> PlanBalanced(const PlanningProblem& problem) {
  const profile::ChainProfile& p = problem.profile;
  std::vector<double> costs(p.num_layers());
  for (int i = 0; i < p.num_layers() && i < static_cast<int>(p.backward_ms.size()); ++i) {
    costs[i] = p.forward_ms[i] + p.backward_ms[i];
  }
  return PlanOneDevicePerStage(problem, "balanced",
                               [&costs](int P) { return BalancedRanges(costs, P); });
}

}  // namespace dapple::coordinator
