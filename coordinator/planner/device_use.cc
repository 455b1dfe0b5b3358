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
#include "absl/strings/str_join.h"
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
    int divisor = 1;  // the most replicas that split a micro-batch evenly
    int kept = 1;     // of those, the most that leave each replica min_replica_rows rows
    for (int r = 2; r <= cap; ++r) {
      if (b % r != 0) continue;
      divisor = r;
      if (b / r >= problem.min_replica_rows) kept = r;
    }
    if (kept < divisor) {
      return {kept, absl::StrCat("a stage's replicas each compute an equal share of every "
                                 "micro-batch (training.micro_batch ",
                                 b, "), at least ", problem.min_replica_rows,
                                 " rows so that the model's batch norm normalises more than one "
                                 "value per channel")};
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

// A plan on more devices than `plan`, and what changed ("stage 1 on 2 replicas").
struct Neighbour {
  HybridPlan plan;
  std::string change;
};

// `count` usable device indices that `plan` does not use, smallest first; fewer when there are
// not that many.
std::vector<int> FreeDevices(const PlanningProblem& problem, const HybridPlan& plan, int count) {
  std::vector<bool> used(UsableDeviceCount(problem), false);
  for (const StagePlan& s : plan.stages) {
    for (int d : s.devices) {
      if (d >= 0 && d < static_cast<int>(used.size())) used[d] = true;
    }
  }
  std::vector<int> free;
  for (size_t d = 0; d < used.size() && static_cast<int>(free.size()) < count; ++d) {
    if (!used[d]) free.push_back(static_cast<int>(d));
  }
  return free;
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

// The plans within `devices` that differ from `plan` in one stage: the stage on the next
// replica count the rules allow (MicroBatchSizes), or (below `max_stages`) the stage split in
// two at its most balanced cut, both halves on as many replicas as it had.
std::vector<Neighbour> Neighbours(const PlanningProblem& problem, const HybridPlan& plan,
                                  int devices, int max_stages, int max_replicas) {
  std::vector<Neighbour> out;
  const std::vector<int> replicas = ReplicasOf(plan);
  const int used = DevicesOf(plan);
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    std::vector<int> more = replicas;
    for (int r = replicas[s] + 1; r <= max_replicas && used + r - replicas[s] <= devices; ++r) {
      more[s] = r;
      if (MicroBatchSizes(problem, more).empty()) continue;
      const std::vector<int> free = FreeDevices(problem, plan, r - replicas[s]);
      if (static_cast<int>(free.size()) < r - replicas[s]) break;
      Neighbour n{plan, absl::StrCat("stage ", s, " on ", r, " replicas")};
      for (int d : free) n.plan.stages[s].devices.push_back(d);
      out.push_back(std::move(n));
      break;
    }
  }
  if (static_cast<int>(plan.stages.size()) >= max_stages) return out;
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    const StagePlan& stage = plan.stages[s];
    const int r = replicas[s];
    if (stage.last_layer == stage.first_layer || used + r > devices) continue;
    const std::vector<int> free = FreeDevices(problem, plan, r);
    if (static_cast<int>(free.size()) < r) continue;
    const int cut = BalancedCut(problem.profile, stage.first_layer, stage.last_layer);
    Neighbour n{plan, absl::StrFormat("stage %d split into layers %d-%d and %d-%d%s", s,
                                      stage.first_layer, cut, cut + 1, stage.last_layer,
                                      r > 1 ? absl::StrCat(", ", r, " replicas each") : "")};
    StagePlan second;
    second.first_layer = cut + 1;
    second.last_layer = stage.last_layer;
    second.devices = free;
    n.plan.stages[s].last_layer = cut;
    n.plan.stages.insert(n.plan.stages.begin() + static_cast<std::ptrdiff_t>(s) + 1,
                         std::move(second));
    out.push_back(std::move(n));
  }
  return out;
}

// The replica counts a stage may have, for a note that found no plan on more devices: "a
// stage's replicas split each micro-batch evenly, so training.micro_batch 8 allows 1, 2, 4 or
// 8 replicas per stage"; "" when every count up to `devices` is allowed.
std::string ReplicaRule(const PlanningProblem& problem, int devices) {
  const int64_t b = problem.micro_batch_size;
  if (b <= 0) return "";
  if (problem.schedule == schedule::ScheduleKind::kPipeDream) {
    const int64_t m = problem.global_batch / b;
    if (m >= devices) return "";
    return absl::StrCat("parallel.schedule pipedream allows at most training.global_batch ",
                        problem.global_batch, " / training.micro_batch ", b, " = ",
                        Count(m, "replica", "replicas"), " per stage");
  }
  std::vector<int64_t> allowed;
  for (int64_t r = 1; r <= devices; ++r) {
    if (b % r == 0 && (r == 1 || b / r >= problem.min_replica_rows)) allowed.push_back(r);
  }
  if (static_cast<int64_t>(allowed.size()) == devices) return "";
  std::string list = absl::StrJoin(allowed.begin(), allowed.end() - 1, ", ");
  if (allowed.size() > 1) absl::StrAppend(&list, " or ");
  absl::StrAppend(&list, allowed.back());
  return absl::StrCat("a stage's replicas split each micro-batch evenly",
                      problem.min_replica_rows > 1
                          ? absl::StrCat(", at least ", problem.min_replica_rows,
                                         " rows each for the model's batch norm")
                          : "",
                      ", so training.micro_batch ", b, " allows ", list, " replicas per stage");
}

}  // namespace

absl::StatusOr<std::string> DeviceUseNote(const PlanningProblem& problem, const PlannedJob& planned,
                                          const std::string& planner, int devices,
                                          absl::string_view devices_noun) {
  const HybridPlan& plan = planned.plan;
  const int used = DevicesOf(plan);
  if (used >= devices) return std::string();
  const std::string head =
      absl::StrCat("uses ", used, " of the ", devices, " ", devices_noun, ": ");
  const auto [max_stages, stages_why] = StageLimit(problem, planner);
  const auto [max_replicas, replicas_why] = ReplicaLimit(problem, devices);
  if (static_cast<int64_t>(max_stages) * max_replicas <= used) {
    std::string why = absl::StrCat(head, "no plan can use more: ", stages_why, ", ",
                                   max_stages == 1 ? "on" : "each on", " at most ",
                                   Count(max_replicas, "replica", "replicas"));
    if (!replicas_why.empty()) absl::StrAppend(&why, " (", replicas_why, ")");
    return why;
  }
  std::vector<Neighbour> neighbours = Neighbours(problem, plan, devices, max_stages, max_replicas);
  if (neighbours.empty()) {
    const std::string rule = ReplicaRule(problem, devices);
    return absl::StrCat(head,
                        "no plan within them splits a stage of this one or gives a stage more "
                        "replicas",
                        rule.empty() ? "" : absl::StrCat(" (", rule, ")"));
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
    return absl::StrCat(head,
                        "more do not fit: every plan made from this one with more devices (a "
                        "stage split in two, or a stage on more replicas) exceeds device memory");
  }
  const int more = DevicesOf(best->plan);
  const std::string these = absl::StrFormat("%.1f", planned.prediction.step_ms);
  const std::string those = absl::StrFormat("%.1f", best_prediction.step_ms);
  if (best_prediction.step_ms >= planned.prediction.step_ms) {
    return absl::StrCat(head, "more would not make a step faster on this model: the best plan on ",
                        more, " devices (", best->change, ") is predicted at ",
                        these == those ? absl::StrCat("the same ", those, " ms per step as")
                                       : absl::StrCat(those, " ms per step vs ", these, " ms for"),
                        " this plan");
  }
  return absl::StrCat(head, "planner ", planner, " chose this plan, predicted at ", these,
                      " ms per step; on ", more, " devices, ", best->change, " is predicted at ",
                      those, " ms");
}

}  // namespace dapple::coordinator
