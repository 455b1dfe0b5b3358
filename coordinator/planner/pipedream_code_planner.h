// PipeDream's planner as its published code plans (msr-fiddle/pipedream, commit 7db6a1c,
// optimizer/optimizer_graph_hierarchical.py compute_partitioning and analyze_partitioning), beside
// the paper variant of pipedream_planner.h. Where the two differ this one does what the code
// does (docs/planner.md, "PipeDream's planner as its code plans"):
// - A stage l..j with m replicas costs (compute(l..j) + sync / w) / m for a single-stage range,
//   but (compute(k+1..j) + sync) / m' for the last stage of a split, sync = 4 (m - 1) |w| /
//   (m B) and w the machines per unit of the level (1 at the first level, the first level's
//   machine count at the second): the code divides the sync time by w only in the first case.
//   Compute and sync add up (the paper takes their max).
// - Transfers between stages, 2 a_k / (B m') into the last stage and 2 a_j / (B m') out of it,
//   count only with --activation_compression_ratio (the README's command passes 1); they are
//   divided by the last stage's replica count m'.
// - Any replica count: stages are run with 1F1B-RR (whole micro-batches round-robin), so
//   nothing has to divide the batch. No fewer machines than available unless
//   use_fewer_machines (the code's flag, off by default), no memory constraint (the code's
//   default; the simulator checks memory).
// - Levels: the first level solves every range i..j on its machines; each next level takes the
//   previous level's optimum A(i..j, all machines) as a unit's compute time; only the last level
//   solves just the whole model. The answer expands top down: a level-2 stage on r2 units whose
//   level-1 plan has a stage on r1 machines is a final stage of r1 * r2 replicas, on machines
//   [o, o + r1) of each of its r2 units (the code's rank order).
// - States: the code's dynamic program runs over the antichain DAG of the layer graph (a state
//   is the set of layers before a cut). Here the states are the prefixes of the profile's layer
//   order (ToChain, model_profile.h), every one a down-set of the graph, and the bytes crossing
//   a cut are ChainProfile.cut_bytes (the outputs consumed after the cut), or the code's own
//   count (PipeDreamCutBytes) where the graph is at hand. This is the code's
//   program restricted to the cuts a contiguous-stage plan can express; it finds the code's plan
//   whenever the code's cuts are among them, up to ties, which the code itself breaks
//   differently from run to run (VGG-16 on the clusters of examples/clusters and ResNet-50 on
//   the flat ones; ResNet-50 on two_nodes_8_gpus cuts inside residual blocks:
//   pipedream_code_planner_test.cc).
// Pure; thread-safe.
#ifndef DAPPLE_COORDINATOR_PLANNER_PIPEDREAM_CODE_PLANNER_H_
#define DAPPLE_COORDINATOR_PLANNER_PIPEDREAM_CODE_PLANNER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/profile/chain_profile.h"
#include "coordinator/planner/planners.h"
#include "coordinator/planner/problem.h"
#include "dapple/v1/profile.pb.h"

namespace dapple::coordinator {

// The code's command line: `-n machines... -b bandwidths...` (innermost level first; bytes/s),
// --activation_compression_ratio 1 (activation_transfers), --straight_pipeline,
// --use_fewer_machines.
struct PipeDreamCodeOptions {
  struct Level {
    int machines = 1;                  // > 0
    double bandwidth_bytes_per_s = 0;  // > 0
  };
  std::vector<Level> levels;  // at least one
  bool activation_transfers = true;
  bool straight_pipeline = false;
  bool use_fewer_machines = false;
  // Bytes the code sends across the cut after each layer (L - 1 entries, PipeDreamCutBytes);
  // empty: the profile's cut_bytes.
  std::vector<int64_t> cut_bytes;
};

// The code's bytes across the cut after each layer k of `profile`'s order (L - 1 entries): the
// activation sizes of the cut's augmented antichain (graph.py augment_antichain): the last layers
// before the cut (those with no successor before it) and every earlier layer with an edge to a
// layer that is not an ancestor of, nor, one of those last layers. Unlike cut_bytes it also counts
// an output whose consumers are all before the cut but on two branches (a residual block's input
// once its downsample and main branches have both started). Input layers are left out, as the
// code removes them. kInvalidArgument: an edge that does not go forward.
absl::StatusOr<std::vector<int64_t>> PipeDreamCutBytes(const v1::ModelProfile& profile);

// One final stage: an inclusive layer range and the machines of its replicas, numbered as the
// code's ranks: machine o_1 + n_1 (o_2 + n_2 (...)) is machine o_l of its level-l unit (with two
// levels, device o_1 of node o_2).
struct PipeDreamCodeStage {
  int first_layer = 0;
  int last_layer = 0;
  std::vector<int> machines;
};

struct PipeDreamCodeSolution {
  std::vector<PipeDreamCodeStage> stages;
  // The code's "Time per stage in pipeline" in ms (its A at the top level; the code prints s).
  double time_per_stage_ms = 0;
};

// Runs the code's program on `profile` (times as profiled, for one profile batch).
// kInvalidArgument: an empty profile, no level, a level with machines <= 0 or bandwidth <= 0,
// or no plan at all (every range infeasible; not reachable without a memory constraint).
absl::StatusOr<PipeDreamCodeSolution> SolvePipeDreamCode(const profile::ChainProfile& profile,
                                                         const PipeDreamCodeOptions& options);

// The options the code would be run with for `problem`'s cluster: one level of the usable devices
// per node (intra-node bandwidth) when they are more than one, one of the nodes (inter-node
// bandwidth) when they are more than one (nodes are taken to have the usable devices of the
// smallest), activation transfers counted (the README's --activation_compression_ratio 1),
// --straight_pipeline when max_replicas is 1.
// kInvalidArgument: ValidateProblem's errors; num_stages > 0 (the code has no fixed depth) or
// 1 < max_replicas < usable devices (it has no replica limit but --straight_pipeline), each
// naming the field and suggesting planner pipedream.
absl::StatusOr<PipeDreamCodeOptions> PipeDreamCodeOptionsFor(const PlanningProblem& problem);

// The code-faithful plan ("pipedream-code"): SolvePipeDreamCode with PipeDreamCodeOptionsFor,
// its machines mapped to global devices (machine o of node n: the node's device o), M chosen by
// simulation under problem.schedule:
// - pipedream: as PipeDream runs it, 1F1B-RR (replicas take whole micro-batches in turn): the
//   divisors b of the global batch with M >= every replica count, PickBySimulation.
// - a synchronous schedule (dapple, gpipe): as the DAPPLE paper (Fan et al., PPoPP 2021,
//   section 6) compared PipeDream's plans, trained synchronously by DAPPLE's split-concat, which
//   splits a micro-batch unevenly when D does not divide it: every divisor b >= every replica
//   count is simulated with each stage charged its slowest replica's ceil(b / D) samples, and the
//   fastest that fits wins (ties: the larger M). dapple's runtime splits evenly only, so such a
//   plan is for comparison, not for submission.
// Errors: those above; kInvalidArgument when no micro-batch size meets the rule;
// kResourceExhausted (MemoryError) when none fits memory.
absl::StatusOr<PlannedJob> PlanPipeDreamCode(const PlanningProblem& problem);
// The same with explicit options (the levels must cover the usable devices: machines of the
// first level per node, of the second the nodes), e.g. PipeDreamCutBytes of the model's graph.
absl::StatusOr<PlannedJob> PlanPipeDreamCode(const PlanningProblem& problem,
                                             const PipeDreamCodeOptions& options);

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_PLANNER_PIPEDREAM_CODE_PLANNER_H_
