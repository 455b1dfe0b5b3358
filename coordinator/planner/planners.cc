#include "coordinator/planner/planners.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/planner/baseline_planners.h"
#include "coordinator/planner/dapple_planner.h"
#include "coordinator/planner/pipedream_code_planner.h"
#include "coordinator/planner/pipedream_planner.h"

namespace dapple::coordinator {

const std::vector<std::string>& PlannerNames() {
  static const std::vector<std::string>* const kNames =
      new std::vector<std::string>{"dapple", "pipedream", "dp", "uniform", "balanced"};
  return *kNames;
}

absl::StatusOr<PlannedJob> RunPlanner(absl::string_view name, const PlanningProblem& problem) {
  absl::StatusOr<PlannedJob> job;
  if (name == "dapple") {
    job = PlanDapple(problem);
  } else if (name == "pipedream") {
    job = PlanPipeDream(problem);
  } else if (name == kPipeDreamCodePlanner) {
    job = PlanPipeDreamCode(problem);
  } else if (name == "dp") {
    job = PlanDataParallel(problem);
  } else if (name == "uniform") {
    job = PlanUniform(problem);
  } else if (name == "balanced") {
    job = PlanBalanced(problem);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "planner '", name, "' is unknown; known: ", absl::StrJoin(PlannerNames(), ", "), ", ",
        kPipeDreamCodePlanner));
  }
  return job;
}

}  // namespace dapple::coordinator
