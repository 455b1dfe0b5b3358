#include "coordinator/planner/least_memory.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "coordinator/planner/activation_memory.h"
#include "coordinator/planner/stage_memory.h"

namespace dapple::coordinator {
namespace {

class Search {
 public:
  Search(const PlanningProblem& problem, int stages, int64_t micro_batch_size)
      : problem_(problem),
        activations_(problem.profile),
        P_(stages),
        L_(problem.profile.num_layers()) {
    plan_.planner = "dapple";
    plan_.micro_batch_size = micro_batch_size;
    plan_.micro_batches = static_cast<int>(problem.global_batch / micro_batch_size);
    plan_.stages.resize(static_cast<size_t>(P_));
    for (int s = 0; s < P_; ++s) plan_.stages[static_cast<size_t>(s)].devices = {s};
  }

  // The peak of stage s over layers [i, j]; stages before it keep what Cut set, the ones after
  // take one layer each and the last the rest, so that the plan is well formed (a stage's peak
  // depends on its own range, its index and the plan's depth and M only).
  int64_t Peak(int s, int i, int j) {
    plan_.stages[static_cast<size_t>(s)].first_layer = i;
    plan_.stages[static_cast<size_t>(s)].last_layer = j;
    int next = j + 1;
    for (int t = s + 1; t < P_; ++t) {
      StagePlan& st = plan_.stages[static_cast<size_t>(t)];
      st.first_layer = next;
      st.last_layer = t + 1 == P_ ? L_ - 1 : next;
      ++next;
    }
    return PredictStageMemory(problem_, plan_, s, activations_, problem_.schedule).PeakBytes();
  }

  // Cuts the layers so that no stage passes `cap` bytes, each stage ending at the furthest layer
  // at which it fits (not the first at which it does not: a stage that also takes a layer of a
  // small output sends less); false when no cut does.
  bool Cut(int64_t cap) {
    int i = 0;
    for (int s = 0; s < P_; ++s) {
      const int last = s + 1 == P_ ? L_ - 1 : L_ - (P_ - s);  // a layer for every later stage
      int end = -1;
      for (int j = last; j >= i && end < 0; --j) {
        if (Peak(s, i, j) <= cap) end = j;
      }
      if (end < 0 || (s + 1 == P_ && end != L_ - 1)) return false;
      Peak(s, i, end);  // leaves stage s at [i, end] for the later stages' plans
      i = end + 1;
    }
    return true;
  }

  HybridPlan Run() {
    // Any cut is a bound: the first stage with all but one layer per later stage.
    int64_t hi = 0;
    for (int s = 0; s < P_; ++s) {
      const int first = s == 0 ? 0 : L_ - P_ + s;
      hi = std::max(hi, Peak(s, first, s == 0 ? L_ - P_ : first));
    }
    int64_t lo = 0;  // infeasible
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (Cut(mid)) {
        hi = mid;
      } else {
        lo = mid;
      }
    }
    Cut(hi);
    return plan_;
  }

 private:
  const PlanningProblem& problem_;
  const ActivationMemory activations_;
  const int P_;
  const int L_;
  HybridPlan plan_;
};

}  // namespace

HybridPlan LeastMemoryPipeline(const PlanningProblem& problem, int stages,
                               int64_t micro_batch_size) {
  return Search(problem, stages, micro_batch_size).Run();
}

}  // namespace dapple::coordinator
