#include "coordinator/planner/dapple_planner.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "common/memory_model.h"
#include "common/status.h"
#include "coordinator/planner/activation_memory.h"
#include "coordinator/planner/baseline_planners.h"
#include "coordinator/planner/dapple_candidates.h"
#include "coordinator/planner/dapple_layout.h"
#include "coordinator/planner/dapple_refine.h"
#include "coordinator/planner/dapple_simulated_choice.h"
#include "coordinator/planner/least_memory.h"
#include "coordinator/planner/plan_simulator.h"
#include "coordinator/planner/stage_budget.h"

namespace dapple::coordinator {
namespace {

using dapple_search::CandidatePool;
using dapple_search::Layout;
using dapple_search::LayoutScorer;
using dapple_search::Scored;
using dapple_search::StageBudget;

constexpr int kPairDpLayers = 256;
// The depths a memory error tries for the least hungry straight pipeline (1 .. this many).
constexpr int kLeastMemoryMaxDepths = 16;

// Nothing fits: the error names the plan of the search space that needs the least memory per
// device, among the pool's layouts and the least hungry straight pipeline of every depth
// (least_memory.h; of the deepest one balanced by bytes on models beyond its layers).
absl::Status SmallestPlanMemoryError(const LayoutScorer& scorer, const std::vector<Scored>& pool) {
  const PlanningProblem& problem = scorer.problem();
  const int L = problem.profile.num_layers();
  const int D = UsableDeviceCount(problem);
  HybridPlan smallest;
  int64_t smallest_peak = std::numeric_limits<int64_t>::max();
  auto consider_plan = [&](HybridPlan plan) {
    const MemoryEstimate memory = scorer.estimator().Memory(plan);
    if (memory.peak_bytes < smallest_peak) {
      smallest_peak = memory.peak_bytes;
      smallest = std::move(plan);
    }
  };
  auto consider = [&](const Layout& layout) {
    for (int64_t b : MicroBatchSizes(problem, layout.replicas)) {
      consider_plan(dapple_search::ToPlan(layout, b, problem.global_batch));
    }
  };
  for (const Scored& s : pool) consider(s.layout);
  if (L <= kLeastMemoryMaxLayers) {
    const int deepest = std::min({L, D, kLeastMemoryMaxDepths});
    for (int p = problem.num_stages > 0 ? problem.num_stages : 1;
         p <= (problem.num_stages > 0 ? problem.num_stages : deepest); ++p) {
      // The smallest micro-batch holds the least (sent buffers hold M x b = the global batch).
      const std::vector<int64_t> sizes = MicroBatchSizes(problem, std::vector<int>(p, 1));
      if (!sizes.empty()) consider_plan(LeastMemoryPipeline(problem, p, sizes.front()));
    }
  }
  // The deepest straight pipeline, balanced by weight and activation bytes.
  const int P = problem.num_stages > 0 ? problem.num_stages : std::min(L, D);
  const ActivationMemory activations(problem.profile);
  std::vector<double> bytes(L);
  for (int i = 0; i < L; ++i) {
    bytes[i] = memory::ParameterStateBytes(static_cast<double>(problem.profile.parameter_bytes[i]),
                                           problem.optimizer_state_factor) +
               activations.LayerBytes(i);
  }
  absl::StatusOr<std::vector<std::pair<int, int>>> ranges = BalancedRanges(bytes, P);
  if (ranges.ok()) {
    consider(dapple_search::PlaceLayout(problem, *ranges, std::vector<int>(P, 1),
                                        PlacementPolicy::kAppendFirst));
  }
  if (smallest.stages.empty()) {
    return absl::ResourceExhaustedError(
        "planner dapple: no plan fits device memory and no micro-batch size is allowed");
  }
  DAPPLE_ASSIGN_OR_RETURN(Prediction prediction, SimulatePlan(problem, smallest, problem.schedule));
  return MemoryError(problem, smallest, prediction);
}

}  // namespace

// DAPPLE's search (docs/planner.md, "DAPPLE planner"):
//   1. candidate layouts (stage ranges, replicas, devices), each the smallest per-step
//      bottleneck of its family, found by bisection on a budget T (dapple_candidates.h):
//      - equal replicas r (a power of two) on P stages for every depth P, placed by each policy;
//        boundaries by Greedy, then rebalanced within T (Balanced);
//      - free replicas per stage: ReverseDp over the devices used;
//      each under three charges of the transfers to the stages (link weight 1, 0.5, 0) and,
//      for models of up to kPairDpLayers layers, with the two-stage loops as constraints;
//   2. every layout's micro-batch size by the analytical model (PlanEstimator), memory first;
//   3. local search from the best few (Refine: boundaries, replicas, splits, merges, policy);
//   4. re-scoring of the best layouts by SimulatePlan, then the baselines' plans, then Polish.
absl::StatusOr<PlannedJob> PlanDapple(const PlanningProblem& problem,
                                      const DapplePlannerOptions& options) {
  DAPPLE_RETURN_IF_ERROR(ValidateProblem(problem));
  const PlanEstimator estimator(problem);
  const LayoutScorer scorer(problem, estimator);
  StageBudget budget(problem);
  CandidatePool pool(scorer);

  // Transfers sit between stages: a loop over stages s..e carries each link between them twice
  // over e - s + 1 micro-batches (see PlanEstimator::Latency). Charging both neighbours' links
  // to a stage is safe but pessimistic for short loops, charging none optimistic for long ones:
  // search with each and let the model rank the results.
  auto generate = [&] {
    for (double weight : {1.0, 0.5, 0.0}) {
      budget.set_link_weight(weight);
      for (Layout& layout : dapple_search::UniformReplicaLayouts(budget)) {
        pool.Add(std::move(layout));
      }
      for (Layout& layout : dapple_search::ReverseDpLayouts(budget)) pool.Add(std::move(layout));
    }
    // And with the two-stage loops as constraints, which leaves light stages next to heavy
    // stages and slow links (for models of up to kPairDpLayers layers: it costs O(P L^2)).
    if (budget.num_layers() <= kPairDpLayers) {
      budget.set_link_weight(0);
      budget.set_pair_mode(true);
      for (Layout& layout : dapple_search::UniformReplicaLayouts(budget)) {
        pool.Add(std::move(layout));
      }
      budget.set_pair_mode(false);
    }
  };
  // Refine the best few that fit, then re-score the best by simulation.
  auto choose = [&]() -> absl::StatusOr<std::optional<PlannedJob>> {
    pool.Sort();
    const std::vector<Scored>& scored = pool.scored();
    std::vector<Scored> finalists;
    for (size_t i = 0; i < scored.size(); ++i) {
      if (!scored[i].fits) break;
      if (static_cast<int>(i) < options.refined_candidates) {
        finalists.push_back(
            dapple_search::Refine(scorer, budget, options.refine_iterations, scored[i]));
      }
      finalists.push_back(scored[i]);
    }
    std::sort(finalists.begin(), finalists.end(),
              [](const Scored& a, const Scored& b) { return a.estimate_ms < b.estimate_ms; });
    return dapple_search::ChooseBySimulation(scorer, finalists, options);
  };
  generate();
  DAPPLE_ASSIGN_OR_RETURN(std::optional<PlannedJob> best, choose());
  if (!best.has_value()) {
    // The search's per-stage filter (StageBudget::StageFits) counts weights, optimizer state and
    // activations, not the communication buffers and the backward's workspace that the exact
    // model adds, so the fastest layout it admits can need more than the device while a slower
    // one that leaves room for them was never generated (a user's GPT planned at 63-69 MiB and
    // was refused at 70-74). Nothing fitted: search again holding back the most any scored
    // plan's stage needs for them; the new layouts join the pool, the old ones stay.
    double margin = 0;
    for (const Scored& s : pool.scored()) {
      if (s.micro_batch_size <= 0) continue;
      const HybridPlan plan =
          dapple_search::ToPlan(s.layout, s.micro_batch_size, problem.global_batch);
      for (const StageMemory& m : estimator.Memory(plan).stages) {
        margin = std::max(margin, static_cast<double>(m.buffer_bytes));
      }
    }
    if (margin > 0) {
      budget.set_memory_margin(margin);
      generate();
      DAPPLE_ASSIGN_OR_RETURN(best, choose());
    }
  }

  if (options.include_natural_candidates) {
    // Points of DAPPLE's own search space that the baselines find: pure data parallelism,
    // equal-layer splits and time-balanced splits with one device per stage.
    for (auto natural : {&PlanDataParallel, &PlanUniform, &PlanBalanced}) {
      absl::StatusOr<PlannedJob> job = natural(problem);
      if (!job.ok()) continue;
      // Ties go to the baseline's plan, so that the result is never slower by rounding.
      if (!best.has_value() || job->prediction.step_ms <= best->prediction.step_ms) {
        job->plan.planner = "dapple";
        if (job->plan.placement_policy.empty()) job->plan.placement_policy = "append_first";
        best = std::move(*job);
      }
    }
  }
  if (best.has_value()) {
    DAPPLE_RETURN_IF_ERROR(dapple_search::PolishBySimulation(scorer, options, *best));
    return std::move(*best);
  }
  return SmallestPlanMemoryError(scorer, pool.scored());
}

}  // namespace dapple::coordinator
