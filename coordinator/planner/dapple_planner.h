// DAPPLE's planner (Fan et al., "DAPPLE: A Pipelined Data Parallel Approach for Training Large
// Models", PPoPP 2021, section 5) and the pieces of it other planners reuse: the placement
// policies (section 5.3), the analytical latency model around a pivot stage (section 5.2) and
// the per-device memory model. docs/planner.md has the formulas with their sources and the
// restrictions of the search. Pure functions and immutable objects; thread-safe.
#ifndef DAPPLE_COORDINATOR_PLANNER_DAPPLE_PLANNER_H_
#define DAPPLE_COORDINATOR_PLANNER_DAPPLE_PLANNER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "coordinator/planner/planners.h"
#include "coordinator/planner/problem.h"

namespace dapple::coordinator {

// How a new stage's replicas are put on devices, given the devices earlier stages took
// (DAPPLE section 5.3). Within a node, devices are always taken in local index order.
//   kFreshFirst    machines no earlier stage uses first, then partly used ones (node order):
//                  a stage's replicas share a machine (fast AllReduce), stages get their own.
//   kAppendFirst   partly used machines first, then fresh ones: stages are contiguous device
//                  ranges in stage order, neighbours share a machine (fast activation transfer).
//   kScatterFirst  one device at a time from every machine with a free device, round robin in
//                  node order: replicas spread evenly over the machines.
enum class PlacementPolicy { kFreshFirst, kAppendFirst, kScatterFirst };

// "fresh_first" | "append_first" | "scatter_first".
absl::string_view PlacementPolicyName(PlacementPolicy policy);

// The devices plans may use: global devices 0 .. UsableDeviceCount(problem) - 1 (node order),
// i.e. every device of the topology, or the first problem.max_devices when that is smaller.
int UsableDeviceCount(const PlanningProblem& problem);

// Devices for stages with replicas[s] devices each, placed in stage order by `policy` among the
// first `usable_devices` devices of `topology`. Precondition: the sum of replicas is at most
// usable_devices and every entry is >= 1.
std::vector<std::vector<int>> PlaceStages(const v1::ClusterTopology& topology, int usable_devices,
                                          const std::vector<int>& replicas, PlacementPolicy policy);

// DAPPLE's analytical latency of one step (section 5.2), in ms, in the paper's form
// L = T_w + T_s + T_e around a pivot stage Q. Per stage s: f_s / g_s one micro-batch's forward
// / backward compute on one replica (its share of the split micro-batch), x_s the transfer of
// the activations (and, back, their gradients) across the cut after it, AR_s the AllReduce of
// its gradients (0 with one replica). Under dapple (1F1B):
//   cycle_s = the longest per-micro-batch loop starting at stage s:
//             max(f_s + g_s, x_s, max_{e > s} (sum_{i=s..e} (f_i + g_i) + 2 sum_{l=s..e-1} x_l)
//                                              / (e - s + 1))
//     (stage i keeps K_i = min(P - i, M) micro-batches in flight, one more than stage i + 1, so
//     the loop F_s -> .. -> F_e -> B_e -> .. -> B_s -> F_s spans e - s + 1 micro-batches; with
//     e = P - 1 it is the round trip of stage s's K_s micro-batches; for P > 128 windows of up
//     to 32 stages and the round trips are checked)
//   pivot Q: walking back from Q = P - 1, s becomes the pivot when cycle_s > cycle_Q
//   warm-up  T_w = sum_{s <= Q} (f_s + x_{s-1})           the first micro-batch reaches Q
//   steady   T_s = (M - 1) cycle_Q
//   ending   T_e = the rest of one micro-batch's round trip through every stage and link
//                  (sum_s (f_s + g_s) + 2 sum_l x_l - T_w)
//                  + max(0, max_s (AR_s - sum_{s' < s} (g_s' + x_s')))   AllReduce tails
// The paper folds the transfers into F_s = f_s + x_{s-1} and B_s = g_s + x_s, takes
// cycle_s = F_s + B_s and assumes the stages after Q hidden; measured against the simulator
// that is off by up to 2x when transfers or later stages matter, hence the loops above (on
// equal stages without transfers both give (M + P - 1)(f + g), the closed form).
// Under gpipe (all forwards, then all backwards):
//   L = sum_s (f_s + x_s) + (M - 1) max_s max(f_s, x_s)
//       + sum_s (g_s + x_s) + (M - 1) max_s max(g_s, x_s) + the AllReduce tails.
// Under pipedream (no flush; per update of M micro-batches, K_i = P - i):
//   L = M cycle_Q + the AllReduce tails.
struct LatencyEstimate {
  double step_ms = 0;
  double warmup_ms = 0;
  double steady_ms = 0;
  double ending_ms = 0;
  int pivot_stage = 0;
};

// Per replica, as the simulator counts it (plan_simulator.h): weights + gradients + optimizer
// state ((2 + optimizer_state_factor) x parameter bytes) and in_flight micro-batches of the
// stage's activations at micro_batch_size / replicas samples, in_flight = min(P - s, M) under
// dapple, M under gpipe, P - s under pipedream (which also stashes P - s - 1 weight versions).
struct StageMemory {
  int64_t weight_bytes = 0;
  int64_t activation_bytes = 0;
  int64_t peak_bytes = 0;
  int64_t device_bytes = 0;  // the smallest memory among the stage's devices
  int in_flight = 0;
};

struct MemoryEstimate {
  std::vector<StageMemory> stages;
  bool fits = true;        // every stage's peak_bytes <= its device_bytes
  int worst_stage = 0;     // the stage with the largest peak_bytes - device_bytes
  int64_t peak_bytes = 0;  // the largest peak_bytes of any stage
};

// Evaluates plans of one problem quickly: prefix sums over the profile's layers make a stage's
// cost O(1) plus O(replicas) for its links (the same formulas as cost_model.h). The problem
// must outlive the estimator. Immutable after construction; thread-safe.
class PlanEstimator {
 public:
  explicit PlanEstimator(const PlanningProblem& problem);

  const PlanningProblem& problem() const { return problem_; }
  int num_layers() const { return static_cast<int>(forward_prefix_.size()) - 1; }

  // Layer-range costs for `samples` samples (cost_model.h's ForwardMs etc.).
  double ForwardMs(int first, int last, double samples) const;
  double BackwardMs(int first, int last, double samples) const;
  int64_t ParameterBytes(int first, int last) const;
  double ActivationBytes(int first, int last, double samples) const;
  // Bytes crossing the cut after layer `last` for `samples` samples (0 after the last layer).
  double CutBytes(int last, double samples) const;

  // Precondition for both: plan.stages are non-empty, contiguous layer ranges with devices,
  // plan.micro_batch_size > 0 and plan.micro_batches >= 1.
  LatencyEstimate Latency(const HybridPlan& plan) const;
  MemoryEstimate Memory(const HybridPlan& plan) const;

 private:
  // cost_model.h's TransferMs / AllReduceMs with the device-to-node map precomputed.
  bool OneNode(const std::vector<int>& a, const std::vector<int>& b) const;
  double TransferMs(double bytes, const std::vector<int>& from, const std::vector<int>& to) const;
  double AllReduceMs(double bytes, const std::vector<int>& devices) const;

  const PlanningProblem& problem_;
  std::vector<int> node_of_;            // per device of the topology
  std::vector<int64_t> device_memory_;  // per device of the topology
  std::vector<double> forward_prefix_;  // L + 1 entries
  std::vector<double> backward_prefix_;
  std::vector<int64_t> parameter_prefix_;
  std::vector<double> activation_prefix_;
};

// Knobs of the DAPPLE search (docs/planner.md, "DAPPLE planner"); the defaults are what
// RunPlanner uses.
struct DapplePlannerOptions {
  // Re-scoring with SimulatePlan: up to this many distinct layouts (stages, replicas, devices),
  // best by the analytical model first, each at its `simulated_sizes` best micro-batch sizes
  // by the model plus the largest M that fits; stop early (after two layouts) once the
  // simulated work, the sum of P * M, exceeds simulation_budget.
  int simulated_layouts = 24;
  int simulated_sizes = 3;
  int64_t simulation_budget = int64_t{1} << 19;
  // Then the best plan's stage boundaries are moved by +-1, 2, 4, ... layers while the
  // simulator finds it faster (first improvement, up to polish_rounds passes, P <= 64), within
  // polish_budget of simulated work.
  int polish_rounds = 8;
  int64_t polish_budget = int64_t{1} << 18;
  // Candidates improved by local search on the analytical model (boundary moves by +-1, 2, 4,
  // ..., replica doubling / halving, splitting or merging stages, another placement policy).
  int refined_candidates = 6;
  int refine_iterations = 40;
  // Also run the dp, uniform and balanced baselines (their plans are points of DAPPLE's search
  // space) and keep the best; off only in tests of the search itself.
  bool include_natural_candidates = true;
};

// DAPPLE's planner: searches pipeline depth P, stage boundaries, replicas per stage (powers of
// two dividing the micro-batch, at most max_replicas, sum at most the usable devices),
// placement policy and micro-batch count M with the analytical model and memory limit above,
// then re-scores the best candidates with SimulatePlan and returns the best simulated plan that
// fits memory. Restrictions that keep it fast (docs/planner.md): replica counts are powers of
// two; depths 1..64 and then about 12% apart; stage boundaries come from a bisection on the
// per-step bottleneck (plus local moves), not from enumerating every split; micro-batch sizes
// as MicroBatchSizes (P * M <= kMaxStageMicroBatches). The baselines dp, uniform and balanced
// are points of its space and are always considered, so it is never slower than they are.
// Errors as RunPlanner (planners.h).
absl::StatusOr<PlannedJob> PlanDapple(const PlanningProblem& problem,
                                      const DapplePlannerOptions& options = {});

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_PLANNER_DAPPLE_PLANNER_H_
