// PipeDream's planner (Narayanan et al., "PipeDream: Generalized Pipeline Parallelism for DNN
// Training", SOSP 2019, section 3.1; msr-fiddle/pipedream optimizer/
// optimizer_graph_hierarchical.py). It minimises the time of the slowest stage of an
// asynchronous pipeline, level by level: level 1 splits layers over the devices of one node
// (intra-node bandwidth), level 2 over whole nodes (inter-node bandwidth), a node's time for a
// layer range being its level-1 optimum. At each level, with bandwidth B, |w| the parameter
// bytes and a_k the bytes crossing the cut after layer k (profile batch size):
//   T(l..j, m)  = max(compute(l..j), 4 (m - 1) |w_l..j| / (m B)) / m        (one stage, m replicas)
//   A(i..j, m)  = min( min_{m' <= m} T(i..j, m'),
//                      min_{i <= k < j, 1 <= m' < m} max(A(i..k, m - m'), 2 a_k / B, T(k+1..j, m'))
//                      )
// where compute is the sum of forward + backward ms at level 1 and A at level 1 of the range on
// a full node at level 2. Using fewer machines than available is allowed (the code's
// --use_fewer_machines), which makes A(i..k, m) non-decreasing in k; the solver uses that to
// skip split points that cannot win, and gives the same optimum as the full enumeration.
// It ignores the flush bubble and the AllReduce tail of synchronous training (its objective is
// asynchronous throughput). Pure; thread-safe.
#ifndef DAPPLE_COORDINATOR_PLANNER_PIPEDREAM_PLANNER_H_
#define DAPPLE_COORDINATOR_PLANNER_PIPEDREAM_PLANNER_H_

#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/planner/planners.h"
#include "coordinator/planner/problem.h"

namespace dapple::coordinator {

// One stage of PipeDream's answer: an inclusive layer range and its replica count.
struct PipeDreamStage {
  int first_layer = 0;
  int last_layer = 0;
  int replicas = 1;
};

struct PipeDreamSolution {
  std::vector<PipeDreamStage> stages;
  double slowest_stage_ms = 0;  // the objective A at the top level
};

// Solves PipeDream's dynamic program for `problem` (see above). Levels: devices of a node
// (when nodes have more than one usable device) and nodes (when more than one node is usable);
// nodes are taken to have the usable device count of the smallest node. Replication limit with
// max_replicas = R > 0: r1 <= min(R, devices per node) at level 1 and r2 <= R / that at level 2,
// so a final stage has r1 * r2 <= R replicas (R = 1: PipeDream's --straight_pipeline). Replica
// counts must divide the global batch (or the fixed micro-batch size) at each level so that
// split-concat can share micro-batches evenly. With num_stages > 0 it solves one flat level
// over all usable devices (the slowest link's bandwidth) with exactly num_stages stages.
// Errors: ValidateProblem's; kInvalidArgument when no split into num_stages stages exists.
absl::StatusOr<PipeDreamSolution> SolvePipeDream(const PlanningProblem& problem);

// The same optimum by plain enumeration of every split (no skipping); O(L^3 m^2): for tests.
absl::StatusOr<PipeDreamSolution> SolvePipeDreamReference(const PlanningProblem& problem);

// PipeDream's plan: SolvePipeDream's stages, placed on contiguous device ranges in stage order
// (stage 0 on devices 0 .. r_0 - 1, ...), M by the baselines' rule (PickBySimulation over
// MicroBatchSizes). Errors as RunPlanner.
absl::StatusOr<PlannedJob> PlanPipeDream(const PlanningProblem& problem);

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_PLANNER_PIPEDREAM_PLANNER_H_
