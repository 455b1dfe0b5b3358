// The pipeline runtime of one rank: a stage's layers, its optimizer and the ONE interpreter loop
// that runs the rank program (design.md, "Schedules are data").
//
// Data: stage 0 reads the input images of each micro-batch itself and the last stage reads the
// labels itself (the sample order is a pure function of seed and epoch), so only activations
// (forward) and their gradients (backward) travel between stages.
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
// Thread safety: one thread drives a StageRuntime.
#ifndef DAPPLE_WORKER_RUNTIME_STAGE_RUNTIME_H_
#define DAPPLE_WORKER_RUNTIME_STAGE_RUNTIME_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "dapple/v1/plan.pb.h"
#include "dapple/v1/trace.pb.h"
#include "kernels/cpu/layer.h"
#include "worker/comm/collective.h"
#include "worker/comm/transport.h"
#include "worker/data/fashion_mnist.h"
#include "worker/runtime/stage_backend.h"

namespace dapple::worker {

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
};

struct EvalResult {
  bool has_metrics = false;  // true on the last stage
  double loss = 0;           // mean loss over the test set
  double accuracy = 0;       // fraction of correct argmax predictions, in [0, 1]
  int64_t samples = 0;
};

class StageRuntime {
 public:
  // Builds the layers of `assignment`'s stage (plan.stages[stage]) and the optimizer on
  // `backend` (null: the CPU backend, stage_backend.h). `train` / `test` must outlive the
  // runtime; `transport` too, and may be null only when P == 1. The transport must accept the
  // backend's memory (host, or device for a CUDA backend: worker/comm/cuda). Peers are addressed
  // by stage index (one replica per stage). kInvalidArgument for a plan that does not fit the
  // spec.
  // Replicas (plan.stages[s].replicas > 1): peers are addressed by schedule::RankIndex, each
  // replica owns its SplitRows share of every micro-batch (split-concat), and `replicas` (the
  // stage's replicas, rank() == assignment.replica; not owned, must outlive the runtime) runs
  // the ALLREDUCE action. Null when the stage has one replica.
  static absl::StatusOr<std::unique_ptr<StageRuntime>> Create(
      const v1::StageAssignment& assignment, const Dataset* train, const Dataset* test,
      Transport* transport, std::unique_ptr<StageBackend> backend = nullptr,
      Collective* replicas = nullptr);

  // Runs the rank program once for global step `step` (0-based; epoch = step / steps per epoch).
  // Errors: whatever the transport returns (kAborted, kUnavailable naming the peer,
  // kDeadlineExceeded), kInternal for a program the runtime cannot run, each prefixed with the
  // action ("stage 1 action 1RECV_ACT3: ...").
  // With `trace`, also records every action's start and end into StepResult::trace.
  //
  // Timing (StepResult::stats, job.proto StageStepStats): every action is timed on the steady
  // clock. step_seconds runs from the first action's start to the last action's end; each
  // action's time goes to its kind (FORWARD: forward, the last stage's loss included;
  // BACKWARD: backward; SEND_ACT / SEND_GRAD: comm; ALLREDUCE: allreduce); OPTIMIZER_STEP
  // splits into its wait for this step's sends (comm) and the gradient norm plus the update
  // (optimizer). idle_seconds is the rest: RECV_ACT / RECV_GRAD waits and the gaps between
  // actions, so the six parts add up to step_seconds exactly (durations are summed as integer
  // nanoseconds). Memory: peak_activation_bytes = peak_in_flight x micro-batch rows x (stage
  // input + every layer output floats per sample) x 4; weight_bytes = parameters x 4 x (2 +
  // optimizer copies: sgd 1 (its velocity), adamw 2). gradient_sq_norm is the backend's
  // GradientSquaredNorm() just before the update (negative when the backend cannot measure
  // it).
  // Trace timestamps (TraceEvent.start_us / end_us, StepTrace.start_us / end_us) are system
  // clock microseconds since the Unix epoch: the system clock is read once per step and every
  // action's offset on the steady clock is added to it, so the events of a step never go back
  // in time. StepTrace.stage / replica / step / stats are filled; job_id, worker_id and device
  // are the caller's.
  absl::StatusOr<StepResult> RunStep(int64_t step, bool trace = false);

  // Forward-only pass over the whole test set, through all stages, in chunks of EvalChunk()
  // samples. `eval_index` distinguishes evaluations on the wire (use the epoch).
  absl::StatusOr<EvalResult> Evaluate(int64_t eval_index);

  // Samples per evaluation chunk: kMaxEvalChunk, fewer for wide models so that no activation
  // tensor exceeds kMaxEvalActivationFloats. A function of the whole model, so every stage
  // splits the test set the same way.
  int64_t EvalChunk() const { return eval_chunk_; }

  // This stage's parameters on the host, in layer order (names "layer<i>.weight" /
  // "layer<i>.bias"); copied back from the device first on a GPU backend. Pointers stay valid
  // until the next call.
  absl::StatusOr<std::vector<kernels::Param*>> Params();
  StageBackend& backend() { return *backend_; }

  static constexpr int64_t kMaxEvalChunk = 1000;
  static constexpr int64_t kMaxEvalActivationFloats = int64_t{1} << 26;  // 256 MiB

 private:
  StageRuntime() = default;
  absl::Status RunAction(const v1::Action& action, int64_t step);
  // The backend slot of `micro_batch`, taken from the free list at its first action.
  int SlotFor(int micro_batch);
  void ReleaseSlot(int micro_batch);
  void MicroBatchIndices(int64_t step, int micro_batch, std::vector<int64_t>* out);
  int64_t InputBytes(int64_t rows) const;
  int64_t OutputBytes(int64_t rows) const;

  v1::StageAssignment assignment_;
  const Dataset* train_ = nullptr;
  const Dataset* test_ = nullptr;
  Transport* transport_ = nullptr;
  int stage_ = 0;
  int num_stages_ = 1;
  int num_micro_batches_ = 1;
  int64_t micro_batch_size_ = 0;
  int64_t global_batch_ = 0;
  int64_t steps_per_epoch_ = 0;
  int64_t eval_chunk_ = kMaxEvalChunk;
  uint64_t seed_ = 0;
  std::vector<int64_t> input_shape_;   // per sample, of this stage's first layer
  std::vector<int64_t> output_shape_;  // per sample, of this stage's last layer
  // Floats per sample a slot holds: the stage input and every layer's output.
  int64_t slot_floats_per_sample_ = 0;
  int64_t weight_bytes_ = 0;  // parameters, gradients and optimizer state
  double learning_rate_ = 0;
  std::unique_ptr<StageBackend> backend_;

  // Per-step state.
  int num_slots_ = 0;  // backend slots created so far
  std::vector<int> free_slots_;
  std::vector<int> slot_of_;  // micro-batch -> slot, -1 when none
  int live_slots_ = 0;
  int peak_live_slots_ = 0;
  double step_loss_sum_ = 0;
  // OPTIMIZER_STEP's parts, measured inside RunAction (steady clock, ns).
  int64_t send_wait_ns_ = 0;
  double gradient_sq_norm_ = -1;
  int64_t order_epoch_ = -1;
  std::vector<int64_t> order_;  // sample order of order_epoch_
  std::vector<int64_t> index_scratch_;
  std::vector<int32_t> label_scratch_;
  std::vector<float> input_scratch_;  // stage 0 on a device backend: images on the host
};

// Whether global step `step` (0-based) records a timeline under StageAssignment.trace_every_steps
// `every`: the first step and every `every`-th (steps 1, N, 2N, ... counted 1-based); never
// when `every` <= 0.
bool IsTracedStep(int64_t step, int every);

// Tags of the messages between stages (the transport adds the sender's rank).
enum class MessageKind : uint64_t {
  kActivation = 1,
  kGradient = 2,
  kEvalActivation = 3,
  kFinish = 4,  // closing handshake between neighbours (worker_daemon.cc)
};
uint64_t MessageTag(MessageKind kind, int64_t index, int micro_batch);

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_RUNTIME_STAGE_RUNTIME_H_
