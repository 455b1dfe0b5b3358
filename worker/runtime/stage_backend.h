// The math of one pipeline stage behind the runtime's interpreter: CPU (kernels/cpu, host memory)
// or CUDA (kernels/cuda, device memory; worker/runtime/cuda). StageRuntime owns the schedule,
// slots, data order and transport; a backend owns the layers, parameters, optimizer state and
// every activation buffer, so the same interpreter loop drives either.
//
// Buffers: "slot" s holds one in-flight micro-batch (or one evaluation chunk): the stage input,
// every layer's output and, on the last stage, dL/dlogits. Send buffers are separate, indexed by
// a send id (the micro-batch, or the evaluation chunk), and stay untouched until the next call
// that writes the same id, so they outlive the slot (Transport: a sent buffer must not change
// until WaitSends). Pointers returned here are in the backend's memory (host for CPU, device for
// CUDA; `device_memory()`), stay valid until the next call that resizes the same buffer, and
// are what the runtime hands to a Transport that accepts that memory. Sizes are rows times the
// per-sample features of the stage's input or output, as fp32.
//
// Ordering: a CUDA backend only enqueues work on its compute stream; a transport that accepts
// device pointers orders its copies after that stream (worker/comm/cuda). Results that the host
// reads (losses) are synchronised by the call that returns them.
//
// Errors: kInvalidArgument for a spec the backend cannot build; kResourceExhausted when memory
// runs out (naming the device); kInternal for a failed kernel. Thread safety: one thread.
#ifndef DAPPLE_WORKER_RUNTIME_STAGE_BACKEND_H_
#define DAPPLE_WORKER_RUNTIME_STAGE_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dapple/v1/job.pb.h"
#include "kernels/cpu/layer.h"
#include "worker/runtime/stage_state.h"

namespace dapple::worker {

class StageBackend {
 public:
  virtual ~StageBackend() = default;

  // "cpu", "cuda:0".
  virtual std::string device() const = 0;
  // True when the buffers below are device memory.
  virtual bool device_memory() const = 0;
  // The device's product name, what its stated peak is looked up by for the MFU
  // (common/compute_throughput.h): "NVIDIA H200" on a GPU; the default is device().
  virtual std::string device_name() const { return device(); }
  // Seconds the device spent in training Forwards and Backwards since the last call, where the
  // backend measures them itself (a GPU stage: CUDA events around them, since the host's action
  // timers see little more than the launches); waits for that work. < 0 (the default): not
  // measured, and the runtime's forward and backward action times are the compute time.
  virtual absl::StatusOr<double> TakeComputeSeconds() { return -1.0; }

  // Interleaved 1F1B (chunked_stage_backend.h): a rank holding v layer ranges has one backend
  // per range behind one that covers them all. The per-slot calls below (Input .. GradForSend,
  // ReadOutput) go to chunk(c), the backend of range c; everything about the rank's parameters
  // (gradients, the update, state, memory) to the whole. A backend of one range (the default)
  // is its own chunk 0. chunk(c) is null outside [0, num_chunks()).
  virtual int num_chunks() const { return 1; }
  virtual StageBackend* chunk(int c) { return c == 0 ? this : nullptr; }

  // Stage input of slot `slot` sized for `rows` samples; the runtime receives into it.
  virtual absl::StatusOr<void*> Input(int slot, int64_t rows) = 0;
  // Copies `rows` samples of host fp32 input into slot `slot`'s input (stage 0 reads images on
  // the host). May return the host pointer of Input() untouched for a host backend.
  virtual absl::Status LoadInput(int slot, const float* host, int64_t rows) = 0;
  // Forward through every layer of the stage for the slot's `rows` samples. `ctx` (step, first
  // sample, training) is what dropout's masks depend on (kernels/cpu/layer.h); the backward of
  // the slot reuses it.
  virtual absl::Status Forward(int slot, int64_t rows, const kernels::ForwardContext& ctx) = 0;
  // Last stage: softmax cross-entropy of the slot's logits against `labels` (host,
  // rows x targets-per-sample values: 1 per sample, or 1 per position of a [T, vocab] output;
  // kernels/cpu/loss.h). Returns the loss SUM over every target (double, row order) and keeps
  // dL/dlogits * grad_scale in the slot for Backward. `correct` (may be null) gets the count of
  // right argmax predictions over the targets. `training` false computes no gradient
  // (evaluation).
  virtual absl::StatusOr<double> Loss(int slot, const int32_t* labels, int64_t rows,
                                      float grad_scale, bool training, int64_t* correct) = 0;
  // Copies the slot's stage output into send buffer `send_id` and returns it.
  virtual absl::StatusOr<const void*> OutputForSend(int slot, int send_id, int64_t rows) = 0;
  // Buffer for the gradient received for micro-batch `micro_batch` (dL/d output of the stage).
  virtual absl::StatusOr<void*> GradInput(int micro_batch, int64_t rows) = 0;
  // Backward through every layer for the slot's `rows` samples: dy is the slot's dlogits on the
  // last stage, else GradInput(micro_batch). Accumulates parameter gradients; unless this is
  // stage 0 (`need_dx` false), writes dL/d input into the gradient send buffer of
  // `micro_batch`, returned by GradForSend.
  virtual absl::Status Backward(int slot, int micro_batch, int64_t rows, bool last_stage,
                                bool need_dx) = 0;
  // The zero-bubble split of Backward (BACKWARD_INPUT / BACKWARD_WEIGHT actions; Qi et al.,
  // ICLR 2024; common/schedule/generators.h). BackwardInput takes Backward's arguments and does
  // its input-gradient part: dL/d input into the gradient send buffer of `micro_batch` unless
  // `need_dx` is false, no parameter gradient; it keeps in the slot what the weight part needs
  // (every layer's output gradient and backward cache). BackwardWeight, later, with the same
  // slot, micro-batch, rows and last_stage (other micro-batches' actions may run in between),
  // ADDS the parameter gradients. Together they accumulate what Backward does (each parameter
  // gets the same sum; layers compute the two parts with the same kernels). The slot's buffers
  // and the gradient received for `micro_batch` (GradInput) must stay untouched until
  // BackwardWeight: the runtime frees the slot after it. kUnimplemented by default: a backend
  // without the split (job submission refuses the zero-bubble schedules for it).
  virtual absl::Status BackwardInput(int slot, int micro_batch, int64_t rows, bool last_stage,
                                     bool need_dx) {
    (void)slot, (void)micro_batch, (void)rows, (void)last_stage, (void)need_dx;
    return absl::UnimplementedError(
        "this backend cannot split its backward (BACKWARD_INPUT / BACKWARD_WEIGHT)");
  }
  virtual absl::Status BackwardWeight(int slot, int micro_batch, int64_t rows, bool last_stage) {
    (void)slot, (void)micro_batch, (void)rows, (void)last_stage;
    return absl::UnimplementedError(
        "this backend cannot split its backward (BACKWARD_INPUT / BACKWARD_WEIGHT)");
  }
  virtual const void* GradForSend(int micro_batch) const = 0;
  // Zeroes the accumulated gradients without an update: a step skipped for a non-finite value
  // (gradient_exchange.h). The default writes zeros through WriteGradients (nothing to do when
  // GradientFloats() is 0); its errors.
  virtual absl::Status DropGradients() {
    const int64_t floats = GradientFloats();
    if (floats <= 0) return absl::OkStatus();
    const std::vector<float> zeros(static_cast<size_t>(floats), 0.0f);
    return WriteGradients(zeros.data());
  }
  // One optimizer update from the accumulated gradients, then zeroes them. The learning rate is
  // that of update OptimizerUpdates() of the spec's schedule (common/lr_schedule.h
  // LearningRate(spec.training(), OptimizerUpdates(), TotalSteps(spec))).
  virtual absl::Status OptimizerStep() = 0;
  // Updates applied so far (OptimizerStep calls, plus those of an imported checkpoint). The CPU,
  // CUDA and emulated backends count; the default (0) is for test doubles that never update.
  virtual int64_t OptimizerUpdates() const { return 0; }
  // Multiplies every accumulated gradient (tied copies included) by `factor`, in fp32
  // (g = g * factor, one rounding, as torch.nn.utils.clip_grad_norm_'s mul_): gradient clipping.
  // kUnimplemented by default (a backend that cannot be clipped).
  virtual absl::Status ScaleGradients(float factor) {
    (void)factor;
    return absl::UnimplementedError("this backend cannot scale its gradients");
  }
  // Sum of squares of the accumulated gradients of the stage's parameters, summed in double, a
  // tied copy (kernels::Param::tied_to non-empty) left out: its owner counts it (the runtime
  // calls it just before OptimizerStep: StageStepStats.gradient_sq_norm, and for GLOBAL_NORM).
  // Negative: this backend does not measure it (the default). kInternal for a failed kernel.
  virtual absl::StatusOr<double> GradientSquaredNorm() { return -1.0; }
  // Gradients as one flat fp32 vector, for the AllReduce among a stage's replicas (DAPPLE) and
  // Pipe-SGD's stale update: every parameter's accumulated gradient in HostParams order.
  // Number of floats of that vector.
  virtual int64_t GradientFloats() const { return 0; }
  // Copies the accumulated gradients into `host` (GradientFloats() floats; a device backend
  // synchronises first). kUnimplemented for a backend without replicas support.
  virtual absl::Status ReadGradients(float* host) {
    (void)host;
    return absl::UnimplementedError("this backend cannot read its gradients");
  }
  // Replaces the accumulated gradients by `host` (GradientFloats() floats).
  virtual absl::Status WriteGradients(const float* host) {
    (void)host;
    return absl::UnimplementedError("this backend cannot write its gradients");
  }
  // The same for some parameters only (the replicas' AllReduce leaves tied tensors out, the
  // tied weights' AllReduce takes only them): `params` are positions in HostParams order,
  // strictly increasing; `host` holds their gradients concatenated in that order.
  // kInvalidArgument for a position outside HostParams.
  virtual absl::Status ReadGradientsOf(const std::vector<int>& params, float* host) {
    (void)params, (void)host;
    return absl::UnimplementedError("this backend cannot read its gradients");
  }
  virtual absl::Status WriteGradientsOf(const std::vector<int>& params, const float* host) {
    (void)params, (void)host;
    return absl::UnimplementedError("this backend cannot write its gradients");
  }
  // The parameters (weights) as one flat fp32 vector in HostParams order, for PipeDream's weight
  // stashing (worker/runtime/weight_stash.h). Number of floats:
  virtual int64_t WeightFloats() const { return 0; }
  // Copies the parameters into `host` (WeightFloats() floats; a device backend synchronises).
  virtual absl::Status ReadWeights(float* host) {
    (void)host;
    return absl::UnimplementedError("this backend cannot read its weights");
  }
  // Replaces the parameters by `host` (WeightFloats() floats); gradients and optimizer state
  // are untouched.
  virtual absl::Status WriteWeights(const float* host) {
    (void)host;
    return absl::UnimplementedError("this backend cannot write its weights");
  }
  // Step statistics (kernels/cpu/layer.h): what training Forwards accumulate over a step for
  // the once-per-update change of the stage's buffers (batch norm's per-channel sums and count),
  // every layer's in layer order, concatenated. Once per update the runtime reads them on every
  // replica, sums them element-wise over the replicas in double and applies the sum on every
  // replica, so the buffers stay identical everywhere (gradient_exchange.h). The defaults are for
  // a backend whose layers have none. Number of doubles (fixed for the backend's lifetime):
  virtual int64_t StepStatisticsSize() const { return 0; }
  // Copies the statistics accumulated since the last ApplyStepStatistics into `host`
  // (StepStatisticsSize() doubles; a device backend synchronises first).
  virtual absl::Status ReadStepStatistics(double* host) {
    (void)host;
    return absl::OkStatus();
  }
  // Updates the buffers from `summed` (StepStatisticsSize() doubles: the sum over the stage's
  // replicas of ReadStepStatistics) and clears the accumulation. Statistics are sums over
  // samples, so all zeros (no samples) leaves the buffers unchanged and only clears.
  virtual absl::Status ApplyStepStatistics(const double* summed) {
    (void)summed;
    return absl::OkStatus();
  }
  // The stage's buffers on the host (kernels::Layer::Buffers: non-trainable state such as
  // batch norm's running statistics, named like parameters, "layer3.running_mean"), in layer
  // order; a device backend copies them back first. Pointers stay valid until the next call.
  // Empty by default.
  virtual absl::StatusOr<std::vector<kernels::Param*>> HostBuffers() {
    return std::vector<kernels::Param*>{};
  }
  // Text generation (StageRuntime::Generate), last stage: copies `count` floats of the slot's
  // stage output (row-major [rows, output_shape...] of its last Forward), starting at float
  // `offset`, to `host` (a device backend synchronises first, so they are the Forward's).
  // kInternal when [offset, offset + count) lies outside that output.
  virtual absl::Status ReadOutput(int slot, int64_t offset, int64_t count, float* host) = 0;
  // A buffer of `bytes` bytes in the backend's memory (what its transport sends from and
  // receives into) for the small messages the runtime exchanges itself: Generate's sampled
  // token travelling back to stage 0. One buffer, kept until the next MessageBuffer call that
  // needs more bytes; a buffer that was sent must stay untouched until the transport's
  // WaitSends (transport.h).
  virtual absl::StatusOr<void*> MessageBuffer(int64_t bytes) = 0;
  // Copies `bytes` bytes from `host` into the MessageBuffer, or from it into `host` (a device
  // backend orders the copy after its enqueued work, including a transport's copy into the
  // buffer, and waits for it). kInternal when `bytes` exceeds the buffer.
  virtual absl::Status WriteMessage(const void* host, int64_t bytes) = 0;
  virtual absl::Status ReadMessage(void* host, int64_t bytes) = 0;
  // What the backend's buffers hold now, in bytes of allocated capacity (host memory for the CPU
  // backend, what a device backend allocated on its device): `parameters` the weights, their
  // gradients (tied copies included) and the optimizer state once created; `activations` every
  // slot's tensors (stage input, layer outputs, what layers keep for their backward, the last
  // stage's dL/dlogits) plus the send and receive buffers and the message buffer. The runtime
  // reads it between actions (StageStepStats memory figures). -1 for both: the backend does not
  // measure (the default; the runtime then reports the memory model's figures).
  struct HeldBytes {
    int64_t parameters = -1;
    int64_t activations = -1;
  };
  virtual HeldBytes Held() const { return {}; }
  // Waits for all enqueued work (a no-op on the CPU).
  virtual absl::Status Synchronize() = 0;
  // The stage's parameters on the host, in layer order ("layer<i>.weight" / ".bias"); a device
  // backend copies them back first. Pointers stay valid until the next call of HostParams. A
  // tied copy whose owner is on another stage is listed (with Param::tied_to); one whose owner
  // is on this stage is the owner's parameter, listed once.
  virtual absl::StatusOr<std::vector<kernels::Param*>> HostParams() = 0;
  // Checkpoints (stage_state.h): copies the parameters, the buffers (HostBuffers) and the
  // optimizer state to the host (a device backend synchronises first). Optimizer state not created
  // yet (before the first update) is exported as zeros, the value the optimizer starts from. A tied
  // copy is not exported (its owner's stage exports the tensor: a checkpoint counts it once).
  virtual absl::StatusOr<StageState> ExportState() = 0;
  // Replaces the parameters, the buffers, the optimizer state and the update count by
  // `state`'s and zeroes the gradients. `state` must hold exactly this stage's tensors
  // (stage_state.h MatchStageState: params: every HostParams name, a tied copy by its owner's
  // name; buffers: every HostBuffers name; optimizer_state: "<that name>.<state>" for every
  // OptimizerStateNames entry of the job's optimizer), each with the parameter's shape.
  // kInvalidArgument naming the tensor (missing, extra, wrong shape: stage_state.h FindTensor);
  // nothing is changed then.
  virtual absl::Status ImportState(const StageState& state) = 0;
};

// Allocated bytes of a host tensor (its capacity, which a smaller Resize keeps).
inline int64_t HeldBytesOf(const kernels::Tensor& t) {
  return static_cast<int64_t>(t.data.capacity() * sizeof(float));
}

// The CPU backend on kernels/cpu: layers [first_layer, last_layer] of `spec.model()` with the
// deterministic initial weights of kernels/cpu/model.h and spec.training().optimizer().
// `recompute` (the plan's PlanStageSummary.recompute): activation recomputation
// (layer_recompute.h): a slot keeps only its input and output, and Backward runs the slot's
// forward again before its backward; same results, one more forward per micro-batch.
absl::StatusOr<std::unique_ptr<StageBackend>> MakeCpuStageBackend(const v1::JobSpec& spec,
                                                                  int first_layer, int last_layer,
                                                                  bool recompute = false);

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_RUNTIME_STAGE_BACKEND_H_
