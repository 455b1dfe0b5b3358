// What every planner (coordinator/planner/planners.h) and the plan simulator
// (plan_simulator.h) take and produce: the planning problem, a hybrid data + pipeline plan and
// its prediction. Plain data; thread-compatible.
//
// Devices are the topology's global device indices (profile.proto: node 0's devices first).
// A stage with D replicas uses DAPPLE's split-concat (Fan et al., PPoPP 2021, section 5.1): each
// micro-batch is split into D equal parts, one per replica, and joined again for the next stage;
// replicas hold identical weights and AllReduce their gradients once per step.
#ifndef DAPPLE_COORDINATOR_PLANNER_PROBLEM_H_
#define DAPPLE_COORDINATOR_PLANNER_PROBLEM_H_

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "common/job_spec.h"
#include "common/profile/chain_profile.h"
#include "common/schedule/generators.h"
#include "coordinator/planner/pipesgd_model.h"
#include "dapple/v1/job.pb.h"
#include "dapple/v1/profile.pb.h"

namespace dapple::coordinator {

// The most memory one planner's tables may take for one plan (PipeDream's dynamic programs grow
// with layers x layers x devices): a request beyond it is refused before anything is allocated,
// naming the sizes (a security review's 15000-layer profile took the coordinator to 2 GB; one of
// 40000 layers would have needed 13 GB).
inline constexpr int64_t kMaxPlannerTableBytes = int64_t{512} << 20;

// The planners' cost of what cannot run (no feasible plan or partition): +infinity, so that
// any real cost compares smaller.
inline constexpr double kInf = std::numeric_limits<double>::infinity();

struct PlanningProblem {
  profile::ChainProfile profile;  // layer costs at profile.batch_size samples
  v1::ClusterTopology topology;   // devices, memory, links
  int64_t global_batch = 0;       // samples per training step, > 0
  // Samples per micro-batch (before the split across a stage's replicas); 0: the planner
  // chooses among the divisors of global_batch.
  int64_t micro_batch_size = 0;
  // The schedule plans are scored under (synchronous: gpipe or dapple; pipedream: asynchronous,
  // scored per M micro-batches in steady state; pipesgd: one replicated stage whose step is
  // Pipe-SGD's pipelined time, pipesgd_model.h).
  schedule::ScheduleKind schedule = schedule::ScheduleKind::kDapple;
  // Optimizer state bytes per parameter byte (common/memory_model.h OptimizerStateCopies: sgd 0,
  // sgd with momentum 1, adamw 2).
  double optimizer_state_factor = 1.0;
  // pipedream.vertical_sync: every stage keeps stage 0's weight versions (memory_model.h).
  bool vertical_sync = false;
  int max_devices = 0;   // 0: every device of the topology; otherwise use at most this many
  int max_replicas = 0;  // 0: unlimited; 1: no stage replication (the runtime has none yet)
  // The fewest rows of each micro-batch a replica of a split-concat stage (more than one
  // replica) computes: 2 where a batch norm of the model would otherwise normalise one value per
  // channel (common/model_info.h MinRowsPerReplica); 1 otherwise. Applies to every stage, not
  // only to the batch norm's, so that a layout's micro-batch sizes need no layer ranges. Not
  // under schedule pipedream, whose replicas compute whole micro-batches.
  int64_t min_replica_rows = 1;
  // The job evaluates after a step other than its last (common/steps.h EvaluatesBetweenSteps),
  // in pieces of eval_piece_rows samples (memory_model.h EvalPieceRows): what a pipedream
  // stage's evaluation sends hold (memory_model.h, "communication buffers"). false / 0: no job.
  bool evaluates_between_steps = false;
  int64_t eval_piece_rows = 0;
  int num_stages = 0;  // 0: the planner chooses P; otherwise P is fixed
  // What Pipe-SGD's AllReduce carries (schedule pipesgd; pipesgd_model.h prices it).
  PipeSgdCompression pipesgd_compression = PipeSgdCompression::kNone;
  // training.recompute: which stages recompute their activations (stage_memory.h
  // StageRecomputes); kNone leaves it to each StagePlan::recompute (false unless set).
  RecomputeMode recompute = RecomputeMode::kNone;
  // Interleaved 1F1B (schedule kInterleaved): v, the model chunks each pipeline rank holds
  // (parallel.interleave); the plan's stages then carry StagePlan::chunks. 1 otherwise.
  int interleave = 1;
  // training.max_grad_norm and training.max_consecutive_skipped_steps: whether the job-wide
  // non-finite check holds each step until every rank ended it (schedule::DefersNonFiniteCheck).
  // zb-h2 without either (the defaults) runs its steps back to back: plan_simulator.h scores it
  // in steady state.
  double max_grad_norm = 0;
  int64_t max_consecutive_skipped_steps = 0;
};

struct StagePlan {
  StagePlan() = default;
  // A stage of layers [first, last] replicated on `replica_devices` (recompute off, no chunks).
  StagePlan(int first, int last, std::vector<int> replica_devices)
      : first_layer(first), last_layer(last), devices(std::move(replica_devices)) {}

  int first_layer = 0;       // inclusive, into the profile's layers
  int last_layer = 0;        // inclusive
  std::vector<int> devices;  // one per replica: global device indices, distinct across stages
  // Activation recomputation (recompute.h): the stage keeps only its inputs (and outputs) in
  // flight and runs each micro-batch's forward again before its backward.
  bool recompute = false;
  // Interleaved 1F1B (interleaved_partition.h): the v layer ranges (model chunks) this pipeline
  // rank holds, chunk c being virtual stage c * P + s; chunks[0] is [first_layer, last_layer]
  // (the PlanStageSummary.chunks contract). Empty for every other schedule: one range.
  std::vector<v1::StageRange> chunks;
};

struct HybridPlan {
  std::string planner;           // dapple | pipedream | dp | uniform | balanced | manual
  std::string placement_policy;  // fresh_first | append_first | scatter_first ("" if none)
  // P entries, contiguous, covering every layer once (with chunks: the P * v virtual stages
  // are, in virtual-stage order)
  std::vector<StagePlan> stages;
  int64_t micro_batch_size = 0;  // samples per micro-batch (split across a stage's replicas)
  int micro_batches = 0;         // M = global_batch / micro_batch_size
};

// The stage of `plan` whose layer range (or one of its chunks) holds `layer`, or -1.
inline int StageOfLayer(const HybridPlan& plan, int layer) {
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    if (layer >= plan.stages[s].first_layer && layer <= plan.stages[s].last_layer) {
      return static_cast<int>(s);
    }
    for (const v1::StageRange& c : plan.stages[s].chunks) {
      if (layer >= c.first_layer() && layer <= c.last_layer()) return static_cast<int>(s);
    }
  }
  return -1;
}

struct StagePrediction {
  double forward_ms = 0;  // one micro-batch's forward on one replica (its share)
  double backward_ms = 0;
  double compute_ms = 0;  // per step: forwards + backwards + optimizer step + overhead_ms
                          // + contention_ms
  // Inside compute_ms, per step: the work outside the layers (stage 0's data loading, the last
  // stage's loss, the interpreter's per-action cost: ChainProfile's input_ms_per_sample,
  // loss_ms_per_sample, action_ms) and the time lost to stages computing at once on the same
  // host's cores (ClusterNode.compute_capacity; 0 when each stage has its own device).
  double overhead_ms = 0;
  double contention_ms = 0;
  double idle_ms = 0;        // per step: step_ms - compute_ms - allreduce_ms (the bubble)
  double comm_ms = 0;        // per step: transfer time of activations/gradients into and out of it
  double allreduce_ms = 0;   // per step: its gradient AllReduce (0 with one replica)
  int64_t weight_bytes = 0;  // per replica: weights + gradients + optimizer state (+ stashed
                             // versions under pipedream)
  int64_t activation_bytes = 0;  // per replica: activations of peak_in_flight micro-batches
  // per replica: send and receive buffers and the backward's workspace
  int64_t buffer_bytes = 0;
  // weight_bytes + activation_bytes + buffer_bytes (common/memory_model.h)
  int64_t peak_memory_bytes = 0;
  int peak_in_flight = 0;  // micro-batches whose activations are held at the peak
  // The stage recomputes its activations (stage_memory.h StageRecomputes): its memory counts
  // only inputs and outputs in flight, and each backward runs the forward again first.
  bool recompute = false;
};

struct Prediction {
  double step_ms = 0;             // one step of global_batch samples
  double samples_per_second = 0;  // global_batch / step_ms * 1000
  double bubble_fraction = 0;     // sum of idle / (P * step_ms)
  bool fits_memory = true;        // every replica's peak_memory_bytes <= its device's memory
  std::vector<StagePrediction> stages;
};

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_PLANNER_PROBLEM_H_
