#include "coordinator/planner/dapple_simulated_choice.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "coordinator/planner/baseline_planners.h"
#include "coordinator/planner/plan_simulator.h"

namespace dapple::coordinator::dapple_search {

int64_t SimulationWork(const PlanningProblem& problem, const HybridPlan& plan) {
  const int64_t P = static_cast<int64_t>(plan.stages.size());
  const int64_t M = plan.micro_batches;
  if (problem.schedule != schedule::ScheduleKind::kPipeDream) return P * M;
  return P * M * ((2 * P + M - 1) / M + 4);
}

absl::StatusOr<std::optional<PlannedJob>> ChooseBySimulation(const LayoutScorer& scorer,
                                                             const std::vector<Scored>& finalists,
                                                             const DapplePlannerOptions& options) {
  const PlanningProblem& problem = scorer.problem();
  // Re-score by simulation: layouts in the model's order, each at its best few micro-batch sizes
  // by the model plus the largest M that fits, within a budget of simulated work.
  std::optional<PlannedJob> best;
  double best_estimate = kInf;
  std::set<std::string> chosen;
  int64_t work = 0;
  for (const Scored& f : finalists) {
    if (static_cast<int>(chosen.size()) >= options.simulated_layouts) break;
    if (work >= options.simulation_budget && static_cast<int>(chosen.size()) >= 2) break;
    if (!chosen.insert(LayoutKey(f.layout)).second) continue;
    std::vector<std::pair<double, int64_t>> sizes;  // (estimate, micro-batch size)
    for (int64_t b : MicroBatchSizes(problem, f.layout.replicas)) {
      const double t = scorer.EstimateAt(f.layout, b);
      if (t < kInf) sizes.emplace_back(t, b);
    }
    std::vector<int64_t> tried;
    std::vector<std::pair<double, int64_t>> by_estimate = sizes;
    std::stable_sort(by_estimate.begin(), by_estimate.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (size_t i = 0; i < by_estimate.size() && static_cast<int>(i) < options.simulated_sizes;
         ++i) {
      tried.push_back(by_estimate[i].second);
    }
    if (!sizes.empty() &&
        std::find(tried.begin(), tried.end(), sizes.front().second) == tried.end()) {
      tried.push_back(sizes.front().second);  // the largest M that fits
    }
    for (int64_t b : tried) {
      const HybridPlan plan = ToPlan(f.layout, b, problem.global_batch);
      work += SimulationWork(problem, plan);
      DAPPLE_ASSIGN_OR_RETURN(Prediction prediction, SimulatePlan(problem, plan, problem.schedule));
      if (!prediction.fits_memory) continue;
      const double estimate = scorer.EstimateAt(f.layout, b);
      bool better = !best.has_value() || prediction.step_ms < best->prediction.step_ms * (1 - 1e-9);
      if (!better && best.has_value() &&
          !(best->prediction.step_ms < prediction.step_ms * (1 - 1e-9))) {
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
  return best;
}

absl::Status PolishBySimulation(const LayoutScorer& scorer, const DapplePlannerOptions& options,
                                PlannedJob& job) {
  const PlanningProblem& problem = scorer.problem();
  const int L = problem.profile.num_layers();
  const int P = static_cast<int>(job.plan.stages.size());
  if (P < 2 || P > 64) return absl::OkStatus();
  int64_t work = 0;
  const int64_t per_simulation = SimulationWork(problem, job.plan);
  for (int round = 0; round < options.polish_rounds; ++round) {
    bool improved = false;
    for (int s = 0; s + 1 < P && !improved; ++s) {
      for (int delta = 1; delta <= std::max(1, L / (4 * P)) && !improved; delta *= 2) {
        for (int sign : {-1, 1}) {
          HybridPlan plan = job.plan;
          const int cut = plan.stages[s].last_layer + sign * delta;
          if (cut < plan.stages[s].first_layer || cut >= plan.stages[s + 1].last_layer) continue;
          plan.stages[s].last_layer = cut;
          plan.stages[s + 1].first_layer = cut + 1;
          if (!scorer.estimator().Memory(plan).fits) continue;
          if (work + per_simulation > options.polish_budget) return absl::OkStatus();
          work += per_simulation;
          DAPPLE_ASSIGN_OR_RETURN(Prediction prediction,
                                  SimulatePlan(problem, plan, problem.schedule));
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

}  // namespace dapple::coordinator::dapple_search
