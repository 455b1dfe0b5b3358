#include "coordinator/planner/device_use.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"
#include "coordinator/planner/baseline_planners.h"
#include "coordinator/planner/placement.h"
#include "coordinator/planner/plan_simulator.h"

namespace dapple::coordinator {
namespace {

std::string Count(int64_t n, const char* one, const char* many) {
  return absl::StrCat(n, " ", n == 1 ? one : many);
}

int DevicesOf(const HybridPlan& plan) {
  int used = 0;
  for (const StagePlan& s : plan.stages) used += static_cast<int>(s.devices.size());
  return used;
}

std::vector<int> ReplicasOf(const HybridPlan& plan) {
  std::vector<int> replicas;
  for (const StagePlan& s : plan.stages) replicas.push_back(static_cast<int>(s.devices.size()));
  return replicas;
}

// The most replicas any stage may have, and why ("" when parallel.devices is the limit).
std::pair<int, std::string> ReplicaLimit(const PlanningProblem& problem, int devices) {
  const int cap = problem.max_replicas > 0 ? std::min(problem.max_replicas, devices) : devices;
  const int64_t b = problem.micro_batch_size;
  const int64_t m = b > 0 ? problem.global_batch / b : 0;
  if (problem.schedule == schedule::ScheduleKind::kPipeDream) {
    if (m > 0 && m < cap) {
      return {static_cast<int>(m),
              absl::StrCat("parallel.schedule pipedream sends whole micro-batches round-robin to "
                           "a stage's replicas and training.global_batch ",
                           problem.global_batch, " / training.micro_batch ", b, " = ",
                           Count(m, "micro-batch", "micro-batches"), " per step")};
    }
  } else if (b > 0) {
    int divisor = 1;
    for (int r = 1; r <= cap; ++r) {
      if (b % r == 0) divisor = r;
    }
    if (divisor < cap) {
      return {divisor, absl::StrCat("a stage's replicas split every micro-batch evenly, and ",
                                    divisor, " is the largest divisor of training.micro_batch ", b,
                                    " up to ", devices)};
    }
  }
  if (cap < devices) return {cap, "the coordinator's limit of replicas per stage"};
  return {cap, ""};
}

// The most stages any plan may have, and a clause saying so ("one stage (planner dp)").
std::pair<int, std::string> StageLimit(const PlanningProblem& problem, const std::string& planner) {
  if (planner == "dp") return {1, "one stage (planner dp)"};
  if (problem.num_stages > 0) {
    return {problem.num_stages,
            absl::StrCat(Count(problem.num_stages, "stage", "stages"), " (parallel.stages)")};
  }
  const int layers = problem.profile.num_layers();
  return {layers,
          absl::StrCat("at most ", Count(layers, "stage", "stages"), " (one per layer or more)")};
}

// A plan of one more device than `plan`, and what changed ("stage 1 on 2 replicas").
struct Neighbour {
  HybridPlan plan;
  std::string change;
};

// The smallest usable device index `plan` does not use, or -1.
int FreeDevice(const PlanningProblem& problem, const HybridPlan& plan) {
  std::vector<bool> used(UsableDeviceCount(problem), false);
  for (const StagePlan& s : plan.stages) {
    for (int d : s.devices) {
      if (d >= 0 && d < static_cast<int>(used.size())) used[d] = true;
    }
  }
  for (size_t d = 0; d < used.size(); ++d) {
    if (!used[d]) return static_cast<int>(d);
  }
  return -1;
}

// The cut (last layer of the first part) of layers [first, last] that best balances the two
// parts' forward + backward time.
int BalancedCut(const profile::ChainProfile& p, int first, int last) {
  double total = 0;
  for (int l = first; l <= last; ++l) total += p.forward_ms[l] + p.backward_ms[l];
  int best = first;
  double best_max = std::numeric_limits<double>::infinity();
  double head = 0;
  for (int cut = first; cut < last; ++cut) {
    head += p.forward_ms[cut] + p.backward_ms[cut];
    const double worst = std::max(head, total - head);
    if (worst < best_max) {
      best_max = worst;
      best = cut;
    }
  }
  return best;
}

// The plans of one device more that keep `plan`'s shape but for one stage: another replica of
// a stage, or (when the planner chooses the depth) a single-replica stage split in two.
std::vector<Neighbour> Neighbours(const PlanningProblem& problem, const HybridPlan& plan,
                                  int max_stages, int max_replicas) {
  std::vector<Neighbour> out;
  const int device = FreeDevice(problem, plan);
  if (device < 0) return out;
  const std::vector<int> replicas = ReplicasOf(plan);
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    if (replicas[s] + 1 > max_replicas) continue;
    std::vector<int> more = replicas;
    ++more[s];
    if (MicroBatchSizes(problem, more).empty()) continue;
    Neighbour n{plan, absl::StrCat("stage ", s, " on ", more[s], " replicas")};
    n.plan.stages[s].devices.push_back(device);
    out.push_back(std::move(n));
  }
  if (static_cast<int>(plan.stages.size()) >= max_stages) return out;
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    const StagePlan& stage = plan.stages[s];
    if (stage.last_layer == stage.first_layer || stage.devices.size() != 1) continue;
    const int cut = BalancedCut(problem.profile, stage.first_layer, stage.last_layer);
    Neighbour n{plan, absl::StrFormat("stage %d split into layers %d-%d and %d-%d", s,
                                      stage.first_layer, cut, cut + 1, stage.last_layer)};
    StagePlan second;
    second.first_layer = cut + 1;
    second.last_layer = stage.last_layer;
    second.devices = {device};
    n.plan.stages[s].last_layer = cut;
    n.plan.stages.insert(n.plan.stages.begin() + static_cast<std::ptrdiff_t>(s) + 1,
                         std::move(second));
    out.push_back(std::move(n));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::string> DeviceUseNote(const PlanningProblem& problem, const PlannedJob& planned,
                                          const std::string& planner, int devices) {
  const HybridPlan& plan = planned.plan;
  const int used = DevicesOf(plan);
  if (used >= devices) return std::string();
  const std::string head = absl::StrCat("uses ", used, " of the ", devices, " parallel.devices: ");
  const auto [max_stages, stages_why] = StageLimit(problem, planner);
  const auto [max_replicas, replicas_why] = ReplicaLimit(problem, devices);
  if (static_cast<int64_t>(max_stages) * max_replicas <= used) {
    std::string why = absl::StrCat(head, "no plan can use more: ", stages_why, ", ",
                                   max_stages == 1 ? "on" : "each on", " at most ",
                                   Count(max_replicas, "replica", "replicas"));
    if (!replicas_why.empty()) absl::StrAppend(&why, " (", replicas_why, ")");
    return why;
  }
  const double ms = planned.prediction.step_ms;
  std::vector<Neighbour> neighbours = Neighbours(problem, plan, max_stages, max_replicas);
  if (neighbours.empty()) {
    return absl::StrFormat(
        "%splanner %s predicts %.1f ms per step for this plan, and no plan on "
        "%d devices is one replica or one stage away from it",
        head, planner, ms, used + 1);
  }
  std::optional<Neighbour> best;
  Prediction best_prediction;
  for (Neighbour& n : neighbours) {
    DAPPLE_ASSIGN_OR_RETURN(Prediction p, SimulatePlan(problem, n.plan, problem.schedule));
    if (!p.fits_memory) continue;
    if (!best.has_value() || p.step_ms < best_prediction.step_ms) {
      best = std::move(n);
      best_prediction = std::move(p);
    }
  }
  if (!best.has_value()) {
    return absl::StrCat(head, "one more does not fit: every plan on ", used + 1,
                        " devices made from this one (another replica of a stage, or a stage "
                        "split in two) exceeds device memory");
  }
  if (best_prediction.step_ms >= ms) {
    return absl::StrFormat(
        "%sone more would not make a step faster on this model: the best plan on %d devices "
        "(%s) is predicted at %.1f ms per step vs %.1f ms for this plan",
        head, used + 1, best->change, best_prediction.step_ms, ms);
  }
  return absl::StrFormat(
      "%splanner %s chose this plan, predicted at %.1f ms per step; on %d devices, %s is "
      "predicted at %.1f ms",
      head, planner, ms, used + 1, best->change, best_prediction.step_ms);
}

}  // namespace dapple::coordinator
