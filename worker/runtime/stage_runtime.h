// The pipeline runtime of one rank: a stage's layers, its optimizer and the ONE interpreter loop
// that runs the rank program (design.md, "Schedules are data").
//
// Data (worker/data/dataset.h): stage 0 reads the inputs of each micro-batch itself and the last
// stage reads the targets itself (the sample order is EpochOrder, a pure function of seed and
// epoch), so only activations (forward) and their gradients (backward) travel between stages.
//
// Buffers and blocking: a micro-batch's stashed activations live in a slot taken at its first
// action (RECV_ACT, or FORWARD on stage 0) and given back after its BACKWARD, so the number of
// live slots is the schedule's in-flight count (min(P - i, M) under dapple, M under gpipe).
// Outgoing activations and gradients are copied into per-micro-batch send buffers that stay
// untouched until OPTIMIZER_STEP, where the rank waits for all its sends (Transport rules).
//
// Gradients accumulate over the M micro-batches with the loss scaled by 1 / global_batch, and
// the optimizer steps once per global batch: training equals one device on the whole batch up to
// floating-point summation order.
//
// Stage replicas (DAPPLE, Fan et al., PPoPP 2021, section 4, "split-concat"): stage s may run on
// D_s ranks (plan.stages[s].replicas; different stages may differ). Every micro-batch keeps
// training.micro_batch rows (M = global_batch / micro_batch); replica r of stage s owns the rows
// schedule::SplitRows(micro_batch, D_s, r) of each (uneven when D_s does not divide it). Stage 0
// reads the images of its rows, the last stage the labels of its rows. SEND_ACT m sends to every
// replica q of stage s + 1 whose rows overlap mine the overlapping rows (a contiguous slice of
// the row-major output; one message per receiver, all with the same tag); RECV_ACT m gathers
// them from the overlapping replicas of stage s - 1 into their offsets of my input; gradients
// travel the same way backwards. The loss scale stays 1 / global_batch, so the SUM of the
// replicas' gradients is the single-device gradient: ALLREDUCE (once per step, after the
// stage's last BACKWARD) sums them in place over the stage's Collective, the last stage's
// per-replica loss sums riding along as one more float, so every replica then steps with
// identical gradients and keeps bitwise-identical weights, and every last-stage replica reports
// the same global loss. Peers are addressed by schedule::RankIndex(plan, stage, replica).
//
// Before each update the program may hold, in this order, TIED_ALLREDUCE (a stage holding one
// side of a tied weight split across stages), ALLREDUCE (replicas) and GLOBAL_NORM (every rank
// of a synchronous schedule: the step's non-finite decision and the clipping norm), each run by
// GradientExchange (gradient_exchange.h). OPTIMIZER_STEP then multiplies every gradient by
// common/grad_clip.h ClipCoefficient(training.max_grad_norm, the global squared norm) when that
// is below 1, and updates with the learning rate of the backend's update count
// (common/lr_schedule.h). When GLOBAL_NORM found a non-finite loss or gradient on any rank,
// every rank instead drops the step's gradients (StageBackend::DropGradients) and does not
// update: weights, optimizer state and the update count (so the learning-rate schedule and
// AdamW's bias correction, as Megatron-LM's skipped iterations) stay as they were, the step
// counts as done (the next step reads the next batch) and its stats say skipped; the layers'
// step statistics (batch norm's running statistics) were applied at the ALLREDUCE before the
// decision, as PyTorch's GradScaler keeps a skipped step's forward effects. The layers' step
// statistics (batch norm's running statistics, docs/layers.md "Batch normalisation") are summed
// over the replicas and applied at the ALLREDUCE, or at OPTIMIZER_STEP on a stage without replicas:
// once per update. Which of them a rank's program must hold is schedule::LowerOptionsFor(spec,
// plan)'s (common/schedule/job_lowering.h).
//
// The program is the coordinator's (common/schedule/job_programs.h) and the interpreter runs
// it as it is, whatever the schedule: one loop over the step's actions, one switch over their
// kinds, no branch on the schedule. What differs between schedules is in the program:
//   - its steps: RankProgram.actions for every step, or RankProgram.phases for programs that
//     change from step to step (PipeDream's continuous run: warm-up, steady state, cool-down);
//   - micro-batch ids relative to the step: j >= M is micro-batch j % M of step
//     step + j / M, run early (no flush); buffers are keyed by the global index modulo
//     RankProgram.micro_batch_ids, a step may end with micro-batches in flight (not the last),
//     and, before an evaluation, with its sends still in flight (the neighbour receives them
//     only after its own evaluation; an id is reused only micro_batch_ids micro-batches later);
//     the loss of a later step's forward counts in its own step;
//   - RankProgram.whole_micro_batches (PipeDream's 1F1B-RR, Narayanan et al., SOSP 2019,
//     section 3.2): micro-batches are NOT split; global micro-batch g (step * M + m) runs whole
//     on replica g % D_s of every stage (schedule::PipeDreamReplicaOf), which sends its
//     activation to replica g % D_{s+1} and its gradient to replica g % D_{s-1}; needs D_s <= M;
//   - weight stashing (USE_WEIGHTS, RESTORE_WEIGHTS, STASH_WEIGHTS, DROP_WEIGHTS: plan.proto),
//     run by the rank's WeightStash (weight_stash.h) with version step + Action.weight_version;
//   - Pipe-SGD's pipelined AllReduce (ALLREDUCE_ASYNC, STALE_OPTIMIZER_STEP), run by the rank's
//     PipeSgdUpdater (pipesgd_updater.h), created when the program holds them;
//   - virtual stages (Megatron's interleaved 1F1B, Narayanan et al., SC 2021, section 2.2;
//     common/schedule/generators.h GenerateInterleavedOps): a rank of P holding v layer ranges
//     (schedule::StageChunks, one backend each: chunked_stage_backend.h) gets actions naming
//     virtual stage k = c * P + r; the interpreter runs each on chunk c = k / P. A chunk's
//     micro-batches have their own slots; its neighbours are virtual stages k - 1 and k + 1, on
//     ranks (r - 1) mod P and (r + 1) mod P, and the messages' tags carry the chunk of the lower
//     virtual stage of their link (MessageTag), so two links between the same ranks never mix.
//     Data enters on virtual stage 0 (rank 0's chunk 0), the loss on P * v - 1 (rank P - 1's
//     last chunk). The rank's collectives and update cover all its chunks (the whole backend).
//     Evaluation runs its chunks in order, each over the whole evaluation split; generation
//     (GeneratesSample) is off.
//
// Thread safety: one thread drives a StageRuntime.
#ifndef DAPPLE_WORKER_RUNTIME_STAGE_RUNTIME_H_
#define DAPPLE_WORKER_RUNTIME_STAGE_RUNTIME_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/memory_model.h"
#include "common/schedule/ranks.h"
#include "dapple/v1/plan.pb.h"
#include "dapple/v1/trace.pb.h"
#include "kernels/cpu/layer.h"
#include "worker/comm/collective.h"
#include "worker/comm/transport.h"
#include "worker/data/dataset.h"
#include "worker/runtime/gradient_exchange.h"
#include "worker/runtime/nonfinite_injection.h"
#include "worker/runtime/pipesgd_updater.h"
#include "worker/runtime/stage_backend.h"
#include "worker/runtime/weight_stash.h"

namespace dapple::worker {

// Only with StageRuntime::RecordWeightUses(true): which weights a forward or a backward
// computed with (tests prove weight stashing with it).
struct WeightUse {
  int64_t micro_batch = 0;  // global: step * M + m
  v1::ActionKind kind = v1::FORWARD;
  int64_t version = 0;        // updates applied to the weights used
  uint64_t weights_hash = 0;  // FNV-1a of the weights' bytes at that moment
  int versions_held = 0;      // versions the stage held then (the live one included)
};

struct StepResult {
  bool has_loss = false;   // true on the last stage
  double loss = 0;         // mean loss over the global batch
  double seconds = 0;      // wall time of the step on this rank
  int peak_in_flight = 0;  // most micro-batches stashed at once during the step
  // Every step: per-kind action times, memory, gradient norm, learning rate (job.proto
  // StageStepStats; stats.step is step + 1).
  v1::StageStepStats stats;
  // Only when RunStep was asked to trace: the start and end of every action, in program order
  // (job_id / worker_id / device left for the caller to fill).
  bool traced = false;
  v1::StepTrace trace;
  std::vector<WeightUse> weight_uses;  // with RecordWeightUses(true) only
  // stats.skipped: where the step's first non-finite value was (gradient_exchange.h
  // DescribeNonFinite), for the worker's log.
  std::string skip_reason;
};

struct EvalResult {
  bool has_metrics = false;  // true on the last stage
  // Mean loss per target over the evaluation split: per sample ([classes] output), or per
  // token ([T, vocab] output: the mean per-token cross-entropy, in nats).
  double loss = 0;
  double accuracy = 0;  // fraction of targets predicted right (argmax), in [0, 1]
  int64_t samples = 0;  // samples of the evaluation split
};

struct GenerateResult {
  bool has_text = false;  // true on the last stage (replica 0)
  std::string bytes;      // the generated bytes (spec.sample.tokens of them), raw
};

class StageRuntime {
 public:
  // Builds the layers of `assignment`'s stage (plan.stages[stage]) and the optimizer on
  // `backend` (null: the CPU backend, stage_backend.h) for rank (assignment.stage,
  // assignment.replica). `train` (the training split) and `eval` (the evaluation split: test set
  // or validation) must outlive the runtime: stage 0 reads inputs from them, the last stage
  // targets, and every stage takes the evaluation's chunk count from eval's size (only
  // Evaluate needs `eval`; stage 0 and the last stage need `train`). `transport` must outlive
  // it too, and may be null only when P == 1. The transport must accept the backend's memory
  // (host, or device for a CUDA backend: worker/comm/cuda) and address peers by
  // schedule::RankIndex (with one replica per stage: the stage index).
  // `replicas`: the Collective of this stage's D_s replicas (size() == D_s, rank() ==
  // assignment.replica; not owned, must outlive the runtime), used by ALLREDUCE only; may be
  // null when D_s == 1. The backend must implement GradientFloats / ReadGradients /
  // WriteGradients when D_s > 1.
  // kInvalidArgument for a plan that does not fit the spec, naming the field: replica outside
  // [0, D_s); micro_batch smaller than some stage's replicas (a replica would own no rows);
  // D_s > 1 without `replicas`, or with a Collective of another size or rank; D_s > 1 with a
  // program that has neither ALLREDUCE nor ALLREDUCE_ASYNC (schedule::LowerOptions); with
  // whole_micro_batches, a stage with more replicas than M micro-batches per step (the
  // micro_batch rule does not apply: 1F1B-RR does not split); a program phase without steps or
  // actions; a program with ALLREDUCE_ASYNC on more than one stage or without `replicas`;
  // on stage 0 a dataset whose samples do not have the model's input elements, on the last stage
  // one whose targets per sample are not the loss's; a `train` with fewer samples than the spec
  // counts (common/steps.h TrainSamples); a program whose TIED_ALLREDUCE or GLOBAL_NORM actions
  // differ from what schedule::LowerOptionsFor(spec, plan) says this stage needs.
  // A program whose actions name a stage that is neither this one nor one of its virtual stages
  // (stage + c * P, c < the plan's chunks of this stage); a backend with another number of
  // chunks than the plan's (StageBackend::num_chunks).
  static absl::StatusOr<std::unique_ptr<StageRuntime>> Create(
      const v1::StageAssignment& assignment, const Dataset* train, const Dataset* eval,
      Transport* transport, std::unique_ptr<StageBackend> backend = nullptr,
      Collective* replicas = nullptr);
  // The same with every collective the rank may need (gradient_exchange.h): `collectives.tied`
  // on a stage with tied weights split across stages, `collectives.job` with gradient clipping
  // over more than one rank; GradientExchange::Create's errors besides the ones above.
  static absl::StatusOr<std::unique_ptr<StageRuntime>> Create(const v1::StageAssignment& assignment,
                                                              const Dataset* train,
                                                              const Dataset* eval,
                                                              Transport* transport,
                                                              std::unique_ptr<StageBackend> backend,
                                                              const StageCollectives& collectives);

  // Runs the rank program's step `step` (0-based global step; epoch = step / steps per epoch).
  // Errors: kInvalidArgument for a step outside a phased program's run; whatever the transport
  // or the Collective returns (kAborted, kUnavailable naming the peer, kDeadlineExceeded),
  // kInternal for a program the runtime cannot run (an OPTIMIZER_STEP of a replicated stage
  // without its ALLREDUCE, a second ALLREDUCE in a step, a weight version not stashed, an
  // update while a stashed version is swapped in), each prefixed with the rank and the action
  // ("stage 1 replica 0 step 3 action 1RECV_ACT3: ...").
  // With `trace`, also records every action's start and end into StepResult::trace.
  //
  // Timing (StepResult::stats, job.proto StageStepStats): every action is timed on the steady
  // clock. step_seconds runs from the first action's start to the last action's end; each
  // action's time goes to its kind (FORWARD: forward, the last stage's loss included;
  // BACKWARD: backward; SEND_ACT / SEND_GRAD: comm; ALLREDUCE, ALLREDUCE_ASYNC: allreduce);
  // OPTIMIZER_STEP and STALE_OPTIMIZER_STEP split into their wait for this step's sends (comm)
  // and the gradient norm plus the update (optimizer); TIED_ALLREDUCE and GLOBAL_NORM count as
  // allreduce, the weight-stash actions as optimizer. idle_seconds is the rest:
  // RECV_ACT / RECV_GRAD waits and the gaps between actions, so the six parts add up to
  // step_seconds exactly (durations are summed as integer nanoseconds). Memory is measured:
  // after every action the runtime adds up what the backend's buffers hold (StageBackend::Held:
  // allocated capacity) and the weight stash's copies (WeightStash::held_bytes); weight_bytes
  // is the most the parameters, gradients, optimizer state and stashed versions held during the
  // step, peak_activation_bytes the most the slots and the send and receive buffers held, and
  // peak_memory_bytes the most of their sum. A backend that does not measure (Held() < 0) gets
  // the memory model's figures (common/memory_model.h, the planner's prediction for this
  // replica) with the measured peak_in_flight. gradient_sq_norm is the backend's
  // GradientSquaredNorm() (this stage's parameters, tied copies excluded) after the step's
  // collectives and before clipping (negative when the backend cannot measure it). learning_rate is
  // the rate of the step's update. samples = this replica's rows x M. With replicas,
  // gradient_sq_norm is that of the summed (global) gradient. Trace timestamps (TraceEvent.start_us
  // / end_us, StepTrace.start_us / end_us) are system clock microseconds since the Unix epoch: the
  // system clock is read once per step and every action's offset on the steady clock is added to
  // it, so the events of a step never go back in time. StepTrace.stage / replica / step / stats are
  // filled; job_id, worker_id and device are the caller's.
  absl::StatusOr<StepResult> RunStep(int64_t step, bool trace = false);

  // Forward-only pass over the whole evaluation split, through all stages, in chunks of
  // EvalChunk() samples. `eval_index` distinguishes evaluations on the wire (use the steps
  // done; common/steps.h EvaluatesAfterStep says after which). Only replica 0 of every stage
  // takes part (replicas hold identical weights), talking to replica 0 of the neighbouring
  // stages; any other replica returns an empty EvalResult at once.
  absl::StatusOr<EvalResult> Evaluate(int64_t eval_index);

  // Whether the job generates a text sample at its end: its model reads tokens
  // (model.input_type tokens) of a [T] input, its output is [T, vocab] with vocab <= 256 (the
  // tokens are bytes) and spec.sample.tokens > 0. A function of the spec, so every rank of the
  // job gives the same answer.
  bool GeneratesSample() const { return generates_sample_; }

  // Generates spec.sample.tokens bytes continuing spec.sample.prompt with the current weights,
  // one byte at a time, through every stage (replica 0 of each, as Evaluate; any other replica
  // returns an empty GenerateResult at once). For the byte at position i (0-based among the
  // generated ones):
  //   stage 0 takes the last L = min(T, |prompt| + i) tokens of the text so far (prompt, then
  //   the bytes generated), places them at positions 0..L-1 of one sample ([T] token ids;
  //   positions L..T-1 hold token 0, which position L - 1 of a causal model with learned
  //   positions never sees) and runs an evaluation forward (ForwardContext training false);
  //   the activations travel to the next stage's replica 0 as in Evaluate
  //   (MessageKind::kSampleActivation, index i);
  //   the last stage reads the logits of position L - 1 (StageBackend::ReadOutput) and draws
  //   the byte (token_sampler.h SampleToken: spec.sample.temperature, seed training.seed,
  //   position i), then sends it back (an int32 in StageBackend::MessageBuffer,
  //   MessageKind::kSampleToken, index i) hop by hop through every stage to stage 0, which
  //   appends it to the text.
  // Every rank waits for its sends after each byte. So the sample is a pure function of the
  // weights, the spec and the seed, whatever P. Runs between steps, in a free slot.
  // Errors: kFailedPrecondition when !GeneratesSample(); kInternal during a step;
  // kInvalidArgument naming sample.prompt for a prompt byte outside the vocabulary; transport
  // and backend errors prefixed "stage 1 sample byte 7: ".
  absl::StatusOr<GenerateResult> Generate();

  // Samples per evaluation chunk (common/memory_model.h EvalPieceRows): training.micro_batch,
  // at most kMaxEvalChunk, fewer for wide models so that no activation tensor exceeds
  // kMaxEvalActivationFloats. A function of the spec and the whole model, so every stage splits
  // the evaluation split the same way.
  int64_t EvalChunk() const { return eval_chunk_; }

  // This stage's parameters on the host, in layer order (names "layer<i>.weight" /
  // "layer<i>.bias"); copied back from the device first on a GPU backend. Pointers stay valid
  // until the next call.
  absl::StatusOr<std::vector<kernels::Param*>> Params();
  StageBackend& backend() { return *backend_; }
  // The memory model's prediction for this replica (common/memory_model.h): what the plan
  // predicted for its stage when it is the stage's largest replica.
  const memory::ReplicaMemory& predicted_memory() const { return predicted_memory_; }
  // Record every forward's and backward's WeightUse into StepResult (slow: hashes the weights
  // each time; for tests).
  void RecordWeightUses(bool on) { record_weight_uses_ = on; }
  // Tests only (nonfinite_injection.h): a NaN at `injection`'s steps and micro-batch when this
  // rank is its stage and replica (otherwise nothing happens).
  void InjectNonFinite(const NonFiniteInjection& injection);

  static constexpr int64_t kMaxEvalChunk = memory::kMaxEvalPieceRows;
  static constexpr int64_t kMaxEvalActivationFloats = memory::kMaxEvalActivationFloats;
  // Evaluation pieces whose activations a rank with one chunk keeps in flight (Evaluate).
  static constexpr int kEvalSendsInFlight = memory::kEvalSendsInFlight;

 private:
  StageRuntime() = default;
  absl::Status RunAction(const v1::Action& action, int64_t step);
  // The backend slot of `micro_batch` on chunk `chunk`, taken from the chunk's free list at its
  // first action.
  int SlotFor(int chunk, int micro_batch);
  void ReleaseSlot(int chunk, int micro_batch);
  int& SlotOf(int chunk, int micro_batch) { return slot_of_[chunk * id_space_ + micro_batch]; }
  // Takes the step's peaks of what the backend and the weight stash hold (held_*_bytes_).
  void MeasureMemory();
  // The dataset indices of this replica's rows of `micro_batch`.
  void MicroBatchIndices(int64_t step, int micro_batch, std::vector<int64_t>* out);
  // The actions of global step `step` (stage_runtime_program.cc): the program's actions, or
  // its phases' step; kInvalidArgument outside a phased program's run.
  absl::StatusOr<const google::protobuf::RepeatedPtrField<v1::Action>*> StepActions(
      int64_t step) const;
  // OPTIMIZER_STEP's and STALE_OPTIMIZER_STEP's common start: the wait for the step's sends
  // (measured into send_wait_ns_), the collectives' checks and clipping, the learning rate.
  // Returns whether GLOBAL_NORM decided to skip the update (a non-finite value somewhere).
  absl::StatusOr<bool> PrepareUpdate(int64_t step);
  // Waits for this rank's sends of step `step` (Transport::WaitSends; the wait added to
  // send_wait_ns_): before the update reuses their buffers (PrepareUpdate), and before a blocking
  // collective (ALLREDUCE, TIED_ALLREDUCE, GLOBAL_NORM): a send still in flight needs this rank's
  // transport to progress, which it does not while the rank waits in a Gloo collective, so the
  // receiver would wait for it while this rank waits for the receiver at the collective (a 4 MiB
  // gradient over UCX's tcp, more than the socket takes at once: both ranks stuck until Gloo's
  // 120 s timeout). Skipped before an evaluation of a program without a flush (see the .cc).
  absl::Status FlushSends(int64_t step);
  // The test hook's NaN into the accumulated gradient (a stage before the last), after the
  // backward of micro-batch `mb` of step `step`.
  absl::Status MaybeInjectIntoGradient(int64_t step, int mb);
  void RecordWeightUse(int64_t global_mb, v1::ActionKind kind);
  // Create's parts (stage_runtime_create.cc), in its order: this replica's rows of each
  // micro-batch and its split-concat peers; the stage's shapes and sizes from the model's layers
  // (returned; kInvalidArgument when the plan's layer range is outside the model); the run,
  // the micro-batch ids and the weight stash; the updater of ALLREDUCE_ASYNC when the program
  // holds one (kInvalidArgument for more than one stage or no replica collective).
  void InitRows();
  absl::StatusOr<std::vector<LayerInfo>> InitShapes();
  // InitShapes' last part: the memory model's prediction for this replica of the rank's
  // `ranges` (schedule::StageChunks).
  void InitMemoryModel(const std::vector<LayerInfo>& infos,
                       const std::vector<v1::StageRange>& ranges);
  void InitProgram();
  absl::Status InitAsyncAllReduce(const StageCollectives& collectives);
  // Create's last check: the datasets have the model's input and target sizes, and `train` the
  // spec's training samples.
  absl::Status CheckDatasets() const;
  int64_t InputBytes(int64_t rows, int chunk = 0) const;
  // The neighbouring stage's ranks (other_stage = stage - 1 or stage + 1) that exchange global
  // micro-batch `global_mb` with this rank, and their rows (valid until the next call).
  struct RowPeer;
  const std::vector<RowPeer>& PeersFor(bool next, int64_t global_mb);
  int64_t OutputBytes(int64_t rows, int chunk = 0) const;
  // The slot Evaluate and Generate use between steps (a program without a flush may keep
  // forwards of the next step in flight: a free one then). kInternal during a step otherwise.
  absl::StatusOr<int> SlotBetweenSteps();
  // Evaluate's work on chunk `chunk` (every evaluation piece through its layers, in `slot`).
  struct EvalTotals {
    double loss_sum = 0;
    int64_t correct = 0;
  };
  absl::Status EvaluateChunk(int64_t eval_index, int chunk, int slot, EvalTotals* totals);
  // Generate's work for the byte at `position` with a context of `context` tokens (stage 0:
  // the last `context` of `text`, which gets the new byte). Last stage: the byte in `*token`.
  absl::Status GenerateByte(int64_t position, int64_t context, int slot, std::vector<int32_t>* text,
                            int32_t* token);

  v1::StageAssignment assignment_;
  const Dataset* train_ = nullptr;
  const Dataset* eval_ = nullptr;
  Transport* transport_ = nullptr;
  bool whole_micro_batches_ = false;   // RankProgram.whole_micro_batches
  bool carries_across_steps_ = false;  // micro-batch ids beyond M: no flush at a step's end
  int64_t total_steps_ = 0;
  int64_t first_step_ = 0;
  int id_space_ = 1;                                 // RankProgram.micro_batch_ids (M when 0)
  std::map<int64_t, double> pending_loss_;           // loss sums of later steps' forwards
  std::unique_ptr<WeightStash> stash_;               // the weight-stash actions' state
  std::unique_ptr<PipeSgdUpdater> async_allreduce_;  // ALLREDUCE_ASYNC's, when the program has it
  bool record_weight_uses_ = false;
  bool inject_ = false;  // InjectNonFinite for this rank
  NonFiniteInjection injection_;
  bool update_skipped_ = false;  // this step's update was skipped (a non-finite value)
  std::string skip_reason_;
  std::vector<WeightUse> weight_uses_;
  std::unique_ptr<GradientExchange> exchange_;
  schedule::LowerOptions lower_;  // the job's (schedule::LowerOptionsFor)
  int stage_ = 0;
  int replica_ = 0;
  int num_replicas_ = 1;  // D of this stage
  int num_stages_ = 1;
  int num_micro_batches_ = 1;
  int64_t micro_batch_size_ = 0;
  int64_t global_batch_ = 0;
  // The loss's targets per sample: 1, or T for a [T, vocab] output.
  int64_t targets_per_sample_ = 1;
  bool generates_sample_ = false;  // GeneratesSample()
  int64_t sample_positions_ = 0;   // T of the model's [T, vocab] output (when it has one)
  int64_t sample_vocab_ = 0;       // vocab of that output
  int64_t steps_per_epoch_ = 0;
  int64_t eval_chunk_ = kMaxEvalChunk;
  uint64_t seed_ = 0;
  // Split-concat: this replica's rows of every micro-batch, and the neighbours' replicas whose
  // rows overlap them (rank index, rows relative to rows_.begin).
  struct RowPeer {
    int rank = 0;
    int64_t offset = 0;  // first overlapping row, counted from rows_.begin
    int64_t rows = 0;
  };
  schedule::RowRange rows_;
  std::vector<RowPeer> prev_peers_;  // replicas of stage - 1 (mod P with virtual stages)
  std::vector<RowPeer> next_peers_;  // replicas of stage + 1 (mod P with virtual stages)
  std::vector<RowPeer> rr_peer_;     // 1F1B-RR: PeersFor's answer
  int eval_prev_rank_ = 0;           // replica 0 of stage - 1 and stage + 1
  int eval_next_rank_ = 0;
  // One layer range of the rank (schedule::StageChunks): virtual stage c * P + stage.
  struct Chunk {
    int virtual_stage = 0;
    bool first = false;                 // virtual stage 0: reads the inputs
    bool last = false;                  // the last virtual stage: computes the loss
    StageBackend* backend = nullptr;    // backend_->chunk(c)
    std::vector<int64_t> input_shape;   // per sample, of the range's first layer
    std::vector<int64_t> output_shape;  // per sample, of the range's last layer
    int num_slots = 0;                  // backend slots created so far
    std::vector<int> free_slots;
  };
  std::vector<Chunk> chunks_;
  double train_flops_per_sample_ = 0;  // forward + backward of the stage's layers
  // The memory model's prediction for this replica (common/memory_model.h), what one
  // micro-batch of its rows holds (the stage input, every layer's output and saved bytes), and
  // the model's inputs (for the activations of the in-flight count a step really reached).
  memory::ReplicaMemory predicted_memory_;
  int64_t activation_bytes_per_micro_batch_ = 0;
  memory::ReplicaPlace memory_place_;
  memory::StageSizes memory_sizes_;
  // The most the backend's buffers (StageBackend::Held) and the weight stash held after any
  // action of the step; -1 when the backend does not measure (its figures come from the model).
  int64_t held_weight_bytes_ = -1;
  int64_t held_activation_bytes_ = -1;
  int64_t held_peak_bytes_ = -1;
  std::unique_ptr<StageBackend> backend_;

  // Per-step state.
  std::vector<int> slot_of_;  // (chunk, micro-batch) -> slot, -1 when none (SlotOf)
  int live_slots_ = 0;
  int peak_live_slots_ = 0;
  double step_loss_sum_ = 0;
  // The rows the last stage's loss sum covers: this replica's over the step, or the global
  // batch once ALLREDUCE summed the replicas' sums.
  int64_t loss_rows_ = 0;
  double learning_rate_ = 0;  // of this step's update
  // OPTIMIZER_STEP's parts, measured inside RunAction (steady clock, ns).
  int64_t send_wait_ns_ = 0;
  double gradient_sq_norm_ = -1;
  int64_t order_epoch_ = -1;
  std::vector<int64_t> order_;  // sample order of order_epoch_
  std::vector<int64_t> index_scratch_;
  std::vector<int32_t> label_scratch_;
  std::vector<float> input_scratch_;  // stage 0 on a device backend: inputs on the host
};

// Whether global step `step` (0-based) records a timeline under StageAssignment.trace_every_steps
// `every`: the job's first step, the run's first (`first_step`, StageAssignment.first_step: a
// job resumed after a restart traces its new layout at once) and every `every`-th (steps 1, N,
// 2N, ... counted 1-based); never when `every` <= 0.
bool IsTracedStep(int64_t step, int every, int64_t first_step = 0);

// Tags of the messages between stages (the transport adds the sender's rank).
enum class MessageKind : uint64_t {
  kActivation = 1,
  kGradient = 2,
  kEvalActivation = 3,
  kFinish = 4,            // closing handshake between neighbours (worker_daemon.cc)
  kSampleActivation = 5,  // Generate: activations towards the last stage
  kSampleToken = 6,       // Generate: the sampled byte back towards stage 0
};
// 4 bits kind | 6 bits link | 22 bits step or evaluation chunk (modulo 2^22) | 16 bits
// micro-batch = the 48 bits a Transport carries. `link`: the chunk of the lower virtual stage of
// the two a message travels between (0 without virtual stages).
uint64_t MessageTag(MessageKind kind, int64_t index, int micro_batch, int link = 0);
// The kind a MessageTag carries (its top 4 bits).
MessageKind MessageKindOf(uint64_t tag);

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_RUNTIME_STAGE_RUNTIME_H_
