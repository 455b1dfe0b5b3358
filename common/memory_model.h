// The memory model (docs/planner.md, "Memory model"): what one replica of a pipeline stage holds
// at its peak during training, term by term. The ONE place that says it: the planners, the
// analytical estimator (coordinator/planner/plan_estimator.h), DAPPLE's search budget
// (coordinator/planner/stage_budget.h), the simulator (coordinator/planner/plan_simulator.h) and
// the worker runtime (worker/runtime/stage_runtime.h, which reports the model's figure beside
// what its buffers really hold) all call these functions; memory_model_source_test refuses the
// formula written anywhere else.
//
// A replica of a stage with parameter bytes W (fp32, a tied copy counted on each stage that
// holds it) holds:
//   weights                 W
//   gradients               W (accumulated over the step's micro-batches)
//   optimizer state         OptimizerStateCopies x W: sgd without momentum 0, sgd with
//                           momentum 1 (the velocity), adamw 2 (both moments)
//   gradient buffers        Pipe-SGD only: 2 W (the flat stale gradient and its AllReduce
//                           buffer, worker/runtime/pipesgd_updater.h)
//   stashed weights         PipeDream only (weight stashing, Narayanan et al., SOSP 2019,
//                           section 3.3): one copy per stashed version beyond the live one, plus
//                           one copy of the live weights while a stashed version is swapped in
//                           (worker/runtime/weight_stash.h)
//   activations             ActivationsInFlight micro-batches of the stage's activations (the
//                           stage input, every layer's output and saved bytes) at ReplicaRows
//                           samples each; on the last stage also each one's dL/dlogits (the
//                           loss computes it with the forward; the backward reads it). A stage
//                           that recomputes (activation recomputation, Chen et al. 2016;
//                           worker/runtime/layer_recompute.h) keeps per micro-batch in flight
//                           only its input and its output (the output waits for its send or the
//                           loss; the last stage's dL/dlogits as above), plus one micro-batch's
//                           activations but the input once: the scratch set every forward and
//                           every recomputation runs through
//   communication buffers   per micro-batch id the replica sends or receives under
//                           (CommunicationBufferIds): the activation it sends (its output) and
//                           the gradient it receives for it (not the last stage), and the input
//                           gradient it sends back (not the first stage); a sent buffer must stay
//                           untouched until the step's final wait (worker/comm/transport.h, Send),
//                           so the runtime keeps one per id rather than per micro-batch in flight;
//                           under pipedream, on a stage that sends, when the job evaluates between
//                           steps (ReplicaPlace.evaluates_between_steps), also kEvalSendsInFlight
//                           evaluation pieces' outputs (StageSizes.eval_piece_output_bytes): the
//                           next step's training sends are still out, so the evaluation sends
//                           from ids of its own (worker/runtime/stage_runtime_eval.cc)
//   backward workspace      the backward's two buffers for the gradients between the stage's
//                           layers, used in turn from the last layer down (dx of layer k, the
//                           size of layer k - 1's output, goes to buffer (last - k) % 2); each
//                           keeps the largest it held: the largest of the inner outputs at even
//                           and at odd distance from the last layer. Under zb-h1 / zb-h2 none:
//                           the split backward keeps, per micro-batch in flight (its slot), the
//                           gradients of every inner output from BACKWARD_INPUT for
//                           BACKWARD_WEIGHT, counted with the activations
// Not counted: batch norm's running statistics (a few floats per channel), kernels' transient
// scratch inside one action (freed before the next), the process's code and libraries.
//
// Units: bytes (doubles where callers scale from a profile; ReplicaMemory rounds to int64).
// Thread safety: pure functions.
#ifndef DAPPLE_COMMON_MEMORY_MODEL_H_
#define DAPPLE_COMMON_MEMORY_MODEL_H_

#include <cstdint>
#include <vector>

#include "common/schedule/generators.h"
#include "dapple/v1/job.pb.h"

namespace dapple::memory {

// The evaluation's pieces (worker/runtime/stage_runtime.h Evaluate): at most kMaxEvalPieceRows
// samples each, no activation tensor of a piece over kMaxEvalActivationFloats floats, and at most
// kEvalSendsInFlight pieces' sends out at once on a rank.
inline constexpr int64_t kMaxEvalPieceRows = 1000;
inline constexpr int64_t kMaxEvalActivationFloats = int64_t{1} << 26;  // 256 MiB
inline constexpr int kEvalSendsInFlight = 2;

// Samples per evaluation piece: training.micro_batch `micro_batch` (so that an evaluation's
// forward holds no more activations than one micro-batch of training does), at most
// kMaxEvalPieceRows, fewer where the model's widest tensor (its input or a layer's output,
// `widest_floats` per sample) would exceed kMaxEvalActivationFloats; at least 1. Every stage
// splits the evaluation split the same way.
int64_t EvalPieceRows(int64_t micro_batch, int64_t widest_floats);

// Copies of the parameters `optimizer` keeps (kernels/cpu/optimizer.h, kernels/cuda): "adamw" 2,
// "sgd" with momentum != 0 1, "sgd" without momentum 0.
int OptimizerStateCopies(const v1::OptimizerSpec& optimizer);

// Weights + gradients + optimizer state of `parameter_bytes` parameters: (2 + copies) x bytes.
// What a stage costs per parameter byte whatever the schedule (DAPPLE's search budget and the
// planners' balancing by bytes use it alone).
double ParameterStateBytes(double parameter_bytes, double optimizer_state_copies);

// Where a replica sits in the pipeline and what the schedule keeps.
struct ReplicaPlace {
  schedule::ScheduleKind schedule = schedule::ScheduleKind::kDapple;
  int stage = 0;  // s, 0-based
  // The replica of the stage (0-based), or -1: the stage's largest (the plan predicts that
  // one: a replica of a pipedream stage may stash fewer versions than its siblings).
  int replica = -1;
  int micro_batches = 1;       // M per step (>= 1)
  std::vector<int> replicas;   // D_t of every stage (P entries, each >= 1)
  bool vertical_sync = false;  // pipedream.vertical_sync
  // Steps of the run (PipeDream's warm-up is at most steps x M micro-batches); 0: long.
  int64_t num_steps = 0;
  // The stage recomputes its activations (PlanStageSummary.recompute).
  bool recompute = false;
  // Interleaved 1F1B: v, the layer ranges (chunks) the rank holds; StageSizes then covers all
  // of them, with one ChunkSizes per chunk (StageSizes.chunks), its other per-micro-batch sizes
  // the means over the chunks (what ActivationBytes multiplies by a count of chunk
  // activations in flight). 1 for every other schedule.
  int chunks = 1;
  // The job evaluates after a step other than its last (common/steps.h
  // EvaluatesBetweenSteps): under pipedream its sends then take buffers of their own.
  bool evaluates_between_steps = false;
};

// Micro-batches whose activations a replica holds at its peak: M under gpipe (all forwards
// before the first backward), min(P - s, M) under dapple and pipesgd (1F1B), ceil(K_s / D_s)
// under pipedream (1F1B-RR, K_s = D_s + ... + D_{P-1}: schedule::PipeDreamReplicaInFlight),
// min(P, M) under zb-h1 and min(2P - 1, M) under zb-h2 on every stage (a micro-batch counts
// until its BACKWARD_WEIGHT: schedule/generators.h); under interleaved the chunk activations of
// schedule::InterleavedInFlight(P, chunks, M, s).
int ActivationsInFlight(const ReplicaPlace& place);

// The in-flight rule for a search that places stages before the whole layout is known (DAPPLE's
// budget, coordinator/planner/stage_budget.h): `micro_batches` under gpipe, else
// min(stages_from_here, micro_batches) with stages_from_here = P - s (zb-h2:
// min(2 (P - s) - 1, M)); a lower bound of ActivationsInFlight under pipedream with replicas and
// under the zero-bubble schedules, whose counts need P.
double InFlightBound(schedule::ScheduleKind schedule, int stages_from_here, double micro_batches);

// Samples of one micro-batch of `micro_batch_size` a replica holds: b / D_s (split-concat under
// the synchronous schedules) or b (1F1B-RR runs whole micro-batches on one replica).
double ReplicaRows(const ReplicaPlace& place, double micro_batch_size);

// Weight versions a replica keeps at its peak, the live one included: 1 unless pipedream;
// pipedream 1 + the distinct versions its micro-batches in flight at an update ran their
// forwards under (exact for a long run; at most ceil((K_s - 1) / D_s) + 1,
// schedule::PipeDreamReplicaVersions, reached at M = 1; 2 when K_s - 1 <= M); with vertical sync
// every stage keeps the versions stage 0 used for the micro-batches of the step's window, which
// is at least 2 + ceil((K_0 - 1) / M) (the runtime keeps versions from that of micro-batch t M,
// worker/runtime/stage_runtime_pipedream.cc OldestNeededVersion, to the one it updates to).
int WeightVersions(const ReplicaPlace& place);

// Weight copies beyond the live weights: the stashed versions (WeightVersions - 1), plus the
// copy of the live weights kept while a stashed version is swapped in (when any is stashed).
int ExtraWeightCopies(const ReplicaPlace& place);

// Distinct micro-batch ids a replica sends and receives under over a long run: M for the
// synchronous schedules; pipedream's ids are global micro-batches modulo M + K_s, and a replica
// runs every D_s-th micro-batch: (M + K_s) / gcd(M + K_s, D_s).
int CommunicationBufferIds(const ReplicaPlace& place);

// One chunk's sizes under interleaved 1F1B (StageSizes.chunks), for one micro-batch at
// ReplicaRows samples: as StageSizes' fields, for the chunk's layers alone.
struct ChunkSizes {
  double activation_bytes = 0;
  double input_bytes = 0;
  double output_bytes = 0;
  std::vector<double> inner_output_bytes;
};

// The sizes a replica's memory is made of, for one micro-batch at ReplicaRows samples.
struct StageSizes {
  double parameter_bytes = 0;         // W: the stage's parameters, fp32
  double optimizer_state_copies = 0;  // OptimizerStateCopies
  double activation_bytes = 0;        // one micro-batch: input + outputs + saved bytes
  double input_bytes = 0;             // one micro-batch's stage input
  double output_bytes = 0;            // one micro-batch's stage output
  // One micro-batch's outputs of the stage's layers but the last, in layer order, whose
  // gradients the backward computes: from the stage's first layer, or on the first stage (no
  // input gradient) from its first layer with parameters (kernels::FirstLayerWithParams: the
  // backward stops there). Empty for a one-layer stage.
  std::vector<double> inner_output_bytes;
  // One evaluation piece's stage output (EvalPieceRows samples): see "communication buffers".
  double eval_piece_output_bytes = 0;
  // Interleaved 1F1B: one entry per chunk, in order (the fields above are then their means and,
  // for inner_output_bytes, their concatenation). PredictReplicaMemory counts each chunk on its
  // own when there are ReplicaPlace.chunks of them: its slots (schedule::InterleavedChunkSlots),
  // its two backward buffers and its messages, as the runtime's chunk backends hold them.
  std::vector<ChunkSizes> chunks;
};

// Adds one of a rank's `chunks` (v) chunks to `sizes`, in order: its sizes / v to the means, its
// inner outputs to the concatenation, and (when v > 1) the chunk itself to sizes->chunks. The
// planner and the worker build a rank's StageSizes chunk by chunk with it.
void AddChunkSizes(ChunkSizes chunk, int chunks, StageSizes* sizes);

struct ReplicaMemory {
  int64_t weights = 0;
  int64_t gradients = 0;
  int64_t optimizer_state = 0;
  int64_t gradient_buffers = 0;  // Pipe-SGD's two flat buffers
  int64_t stashed_weights = 0;   // PipeDream's stashed versions and the swap copy
  int64_t activations = 0;
  int64_t communication = 0;
  int64_t workspace = 0;    // the backward's two gradient buffers
  int in_flight = 0;        // ActivationsInFlight
  int weight_versions = 1;  // WeightVersions

  // Everything that scales with the parameters (the plan's weight_bytes).
  int64_t WeightBytes() const {
    return weights + gradients + optimizer_state + gradient_buffers + stashed_weights;
  }
  // The replica's peak: every term.
  int64_t PeakBytes() const { return WeightBytes() + activations + communication + workspace; }
};

// The activations term of a replica holding `in_flight` micro-batches (ActivationsInFlight at
// the peak; the runtime also asks for the count it really reached): per micro-batch in flight
// the activations (all of them, or with recomputation the input and the output), the last
// stage's dL/dlogits, and with recomputation the scratch set once. Bytes, not rounded.
double ActivationBytes(const ReplicaPlace& place, const StageSizes& sizes, int in_flight);

// The memory model: what a replica at `place` with `sizes` holds at its peak (the terms above,
// each rounded to whole bytes).
ReplicaMemory PredictReplicaMemory(const ReplicaPlace& place, const StageSizes& sizes);

}  // namespace dapple::memory

#endif  // DAPPLE_COMMON_MEMORY_MODEL_H_
