// DAPPLE's analytical model of a plan (Fan et al., "DAPPLE: A Pipelined Data Parallel Approach
// for Training Large Models", PPoPP 2021, section 5.2): the latency of one training step around
// a pivot stage, and the per-device memory of each stage. docs/planner.md, "Latency model", has
// the formulas with their sources; they use cost_model.h's costs and match what
// plan_simulator.h charges. Immutable objects; thread-safe.
#ifndef DAPPLE_COORDINATOR_PLANNER_PLAN_ESTIMATOR_H_
#define DAPPLE_COORDINATOR_PLANNER_PLAN_ESTIMATOR_H_

#include <cstdint>
#include <vector>

#include "coordinator/planner/activation_memory.h"
#include "coordinator/planner/problem.h"

namespace dapple::coordinator {

// DAPPLE's analytical latency of one step (section 5.2), in ms, in the paper's form
// L = T_w + T_s + T_e around a pivot stage Q. Per stage s: f_s / g_s one micro-batch's forward
// / backward compute on one replica (its share of the split micro-batch), x_s the transfer of
// the activations (and, back, their gradients) across the cut after it, AR_s the AllReduce of
// its gradients (0 with one replica) plus the sum of tied weights' gradients with another
// stage (TiedGradientMsPerStage, cost_model.h). Under dapple (1F1B):
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
// Two refinements the simulator also charges: every schedule that holds the job-wide
// GLOBAL_NORM (cost_model.h GlobalNormMs; all synchronous ones, pipedream when it clips) adds
// its barrier's AllGather to T_e; and across a host-memory link (cost_model.h HostMemoryLink:
// cpu processes of one host) x_s is the link's latency only, while the copies of both messages
// (HostCopyMsPerSide each) are added to f and g of the two stages on either side.
// Under gpipe (all forwards, then all backwards):
//   L = sum_s (f_s + x_s) + (M - 1) max_s max(f_s, x_s)
//       + sum_s (g_s + x_s) + (M - 1) max_s max(g_s, x_s) + the AllReduce tails.
// Under pipedream (no flush; per update of M micro-batches, K_i = P - i):
//   L = M cycle_Q + the AllReduce tails.
// Under pipesgd (one replicated stage, P = 1; pipesgd_model.h):
//   L = max(M (f_0 + g_0), AR_0 + compression)   the AllReduce overlaps the next step
struct LatencyEstimate {
  double step_ms = 0;
  double warmup_ms = 0;
  double steady_ms = 0;
  double ending_ms = 0;
  int pivot_stage = 0;
};

// Per replica, as the simulator counts it (plan_simulator.h): the memory model
// (common/memory_model.h through stage_memory.h PredictStageMemory).
struct StageMemory {
  int64_t weight_bytes = 0;      // ReplicaMemory::WeightBytes (stashed versions included)
  int64_t activation_bytes = 0;  // in_flight micro-batches of activations
  int64_t buffer_bytes = 0;      // send and receive buffers, the backward's workspace
  int64_t peak_bytes = 0;        // the sum of the three
  int64_t device_bytes = 0;      // the smallest memory among the stage's devices
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
  // ActivationMemory::PerMicroBatch: one micro-batch of `samples` samples on a stage.
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
  // cost_model.h's HostMemoryLink.
  bool HostMemoryLink(const std::vector<int>& a, const std::vector<int>& b) const;
  double TransferMs(double bytes, const std::vector<int>& from, const std::vector<int>& to) const;
  double AllReduceMs(double bytes, const std::vector<int>& devices) const;

  const PlanningProblem& problem_;
  std::vector<int> node_of_;            // per device of the topology
  std::vector<int64_t> device_memory_;  // per device of the topology
  std::vector<double> forward_prefix_;  // L + 1 entries
  std::vector<double> backward_prefix_;
  std::vector<double> forward_fixed_prefix_;  // of ChainProfile::forward_fixed_ms (0s if none)
  std::vector<double> backward_fixed_prefix_;
  std::vector<int64_t> parameter_prefix_;
  ActivationMemory activation_;
};

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_PLANNER_PLAN_ESTIMATOR_H_
