// The baseline planners (dp, uniform, balanced) and the building blocks every planner of
// planners.h shares: problem validation, the micro-batch candidates, the micro-batch / depth
// choice by analytical pre-screening plus simulation, and the out-of-memory error. Pure
// functions; thread-safe. docs/planner.md describes each rule.
#ifndef DAPPLE_COORDINATOR_PLANNER_BASELINE_PLANNERS_H_
#define DAPPLE_COORDINATOR_PLANNER_BASELINE_PLANNERS_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/planner/dapple_planner.h"
#include "coordinator/planner/planners.h"
#include "coordinator/planner/problem.h"

namespace dapple::coordinator {

// ---- Building blocks ---------------------------------------------------------------------

// kInvalidArgument, one line naming the field and rule, for: an empty profile, a profile whose
// per-layer vectors disagree in length, global_batch <= 0, micro_batch_size < 0 or not dividing
// global_batch, a topology without devices, num_stages < 0, num_stages > L ("the model has 3
// layers but the plan has 4 stages: every stage needs at least one layer"), num_stages larger
// than the usable devices, max_devices < 0, max_replicas < 0.
absl::Status ValidateProblem(const PlanningProblem& problem);

// Micro-batch sizes a plan whose stages have these replica counts (one entry per stage) may
// use, ascending: problem.micro_batch_size when > 0, otherwise every divisor b of global_batch
// with P * M <= kMaxStageMicroBatches (M = global_batch / b, P = replicas.size(); M = 1 is
// always allowed); only multiples of every replica count (split-concat gives each replica an
// equal share) that give every replica of a replicated stage problem.min_replica_rows rows at
// least, except under schedule pipedream, which never splits a micro-batch and instead needs
// M >= every replica count (1F1B-RR: at least one micro-batch per replica per step).
std::vector<int64_t> MicroBatchSizes(const PlanningProblem& problem,
                                     const std::vector<int>& replicas);

// The largest P * M a planner considers: simulating one step costs O(P * M) (a few hundred ms at
// this bound), and a planner simulates several candidates. It binds only for very deep
// pipelines with many tiny micro-batches (e.g. the synthetic 1000-stage benchmark); the
// published profiles on 16 devices stay far below it.
inline constexpr int64_t kMaxStageMicroBatches = int64_t{1} << 20;

// A plan to be scored: stages and devices fixed, micro_batch_size / micro_batches set.
struct Candidate {
  HybridPlan plan;
  double estimate_ms = 0;  // PlanEstimator::Latency
  int64_t peak_bytes = 0;  // PlanEstimator::Memory: the largest per-replica peak
  bool fits = false;       // PlanEstimator::Memory: every replica fits its device
};

// Candidates for `layout` (stages with devices; its micro-batch fields are ignored), one per
// micro-batch size of MicroBatchSizes, each estimated with `estimator`.
std::vector<Candidate> MicroBatchCandidates(const PlanEstimator& estimator,
                                            const HybridPlan& layout);

// Scores candidates with SimulatePlan(problem, plan, problem.schedule) and returns the fastest
// simulated plan that fits memory: the `simulate` candidates that fit by the memory estimate
// with the smallest estimate_ms are simulated (all fitting ones when simulate <= 0). Ties within
// a relative 1e-9 go to the smaller estimate, then to the larger M. When no candidate fits,
// kResourceExhausted (MemoryError) for the candidate with the smallest peak memory.
// kInvalidArgument when `candidates` is empty; SimulatePlan's errors.
absl::StatusOr<PlannedJob> PickBySimulation(const PlanningProblem& problem,
                                            std::vector<Candidate> candidates, int simulate);

// kResourceExhausted naming the memory `prediction` needs on its worst device:
// "needs 21.4 GiB on a device (stage 0: weights 9.13 GiB, activations 12.3 GiB) but devices
// have 16.0 GiB", sizes by FormatBytesApart (common/profile/format_bytes.h) (weights: weights +
// gradients + optimizer state), prefixed with "planner <name>: ".
absl::Status MemoryError(const PlanningProblem& problem, const HybridPlan& plan,
                         const Prediction& prediction);

// Exact min-max contiguous partition of `costs` (each >= 0) into `num_stages` non-empty ranges
// by bisection on the bottleneck with a greedy feasibility test, O(P log L) per test. Among
// partitions with the optimal bottleneck it returns a balanced one: each stage in turn takes the
// number of layers whose cost is closest to the remaining cost / remaining stages that still
// lets the rest fit, so equal costs give layer counts that differ by at most one.
// Returns inclusive (first, last) pairs. kInvalidArgument as PartitionBalanced (partition.h).
absl::StatusOr<std::vector<std::pair<int, int>>> BalancedRanges(const std::vector<double>& costs,
                                                                int num_stages);

// Depths P tried when the planner chooses P among 1..max_stages: every value up to 64, then
// about 12% apart (rounded), always including max_stages.
std::vector<int> CandidateDepths(int max_stages);

// ---- Baselines ---------------------------------------------------------------------------

// dp: P = 1 and every usable device a replica (or the most devices n <= usable with n dividing
// global_batch and, when fixed, micro_batch_size). M: PickBySimulation over MicroBatchSizes.
// Extra error: kInvalidArgument when num_stages > 1 or max_replicas (> 0) is below the usable
// device count ("planner dp replicates every stage on all 16 usable devices but max_replicas
// is 1").
absl::StatusOr<PlannedJob> PlanDataParallel(const PlanningProblem& problem);

// uniform: PartitionUniform (partition.h) into P stages, stage s on usable device s. P is
// num_stages, or the best by simulation among CandidateDepths(min(L, usable devices)).
absl::StatusOr<PlannedJob> PlanUniform(const PlanningProblem& problem);

// balanced: BalancedRanges of each layer's forward + backward ms into P stages (torchgpipe's
// balance-by-time, Kim et al. 2020, section 3.3, solved exactly), stage s on usable device s,
// P as for uniform.
absl::StatusOr<PlannedJob> PlanBalanced(const PlanningProblem& problem);

// Candidates simulated per baseline run (PickBySimulation's `simulate`).
inline constexpr int kBaselineSimulatedCandidates = 6;

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_PLANNER_BASELINE_PLANNERS_H_
