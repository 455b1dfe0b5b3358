// The emulated device (job spec parallel.device_type: emulated): a StageBackend that replaces
// each layer's compute by a wait of its profiled duration, so that schedules, overlap and
// bubbles can be measured on a machine whose real compute is about one core, while everything
// else is real: buffers have the sizes of the job's model (the activations and gradients that
// travel over UCX, and GradientFloats() for the AllReduce among replicas, are the real byte
// counts), HostParams / ExportState have the real shapes.
//
// Costs: `profile` (StageAssignment.emulated_profile: one layer per model layer, Input nodes
// dropped, times already multiplied by emulation.scale) at profile.batch_size samples.
//   Forward(rows)   waits  sum over the stage's layers of forward_ms  * rows / batch_size
//   Backward(rows)  waits  sum over the stage's layers of backward_ms * rows / batch_size
//   OptimizerStep() waits  sum over the stage's layers of optimizer_ms (independent of rows)
//   BackwardInput(rows) / BackwardWeight(rows) (the zero-bubble split) wait (1 - f) and f of
//   Backward's wait, f = schedule::kBackwardWeightFraction (common/schedule/simulator.h: the
//   profile has one backward time; half/half, the simulator's rule too)
// One wait per call (not per layer), so the sleeper's overshoot is paid once per action.
// One wait per call (not per layer), so the sleeper's overshoot is paid once per action; with
// activation recomputation (`recompute`, layer_recompute.h) Backward waits the stage's forward
// time (the recomputed forward) and then its backward time.
// Nothing is computed: activations, gradients and parameters keep what they were last given
// (zeros at first); ReadGradients returns zeros, WriteGradients checks the size and keeps
// nothing, ScaleGradients does nothing; GradientSquaredNorm is not measured (-1); ReadOutput
// reads the untouched output (zeros), so the worker generates no text sample for an emulated
// job. Step statistics have the real layers' size (the replicas exchange what a real job's
// would) and are zeros; applying them changes nothing, so buffers (HostBuffers, checkpoints)
// keep their initial values. Updates are counted (OptimizerUpdates, checkpoints) as on a real
// device.
//
// Memory: the emulation allocates what the real device would hold, so that the memory a
// schedule makes a stage hold is measured (Held, StageStepStats memory figures): every slot's
// input and output, plus per slot the layers' inner outputs and saved bytes (LayerInfo
// output_bytes and saved_bytes: one buffer of their sum) and on the last stage dL/dlogits, the
// backward's two buffers for the gradients between layers (and, per slot between a
// BackwardInput and its BackwardWeight, every inner layer's output gradient, as the CPU
// backend's split keeps them), the parameters and their gradients
// backward's two buffers for the gradients between layers (with recomputation: no per-slot inner
// outputs and saved bytes, one scratch set of them plus the output instead), the parameters and
// their gradients
// (the real layers'), the optimizer's state (memory::OptimizerStateCopies arrays of the
// parameters, from the first update on), the send and receive buffers.
//
// Loss: kEmulatedLossPerSample (ln 10, the cross-entropy of a uniform guess over 10 classes)
// per row, so Loss returns rows * kEmulatedLossPerSample; `correct` gets 0. Both are constants
// that say nothing about training; every output of an emulated job says so.
//
// Aborts: a job that is cancelled or fails elsewhere must not hold its workers for the rest of
// a long wait (a scaled profile can ask for seconds per action). Every wait goes through the
// Sleeper, which returns kAborted early when its abort flag becomes true (PreciseSleeper: within
// about kAbortPollInterval); Forward, Backward and OptimizerStep then return that kAborted, so
// the runtime stops at the current action like a transport that sees the flag. This is the
// only change the emulation makes to the StageBackend contract: those three calls may return
// kAborted.
//
// Thread safety: one thread, like every StageBackend. The Sleeper is called from that thread;
// the abort flag may be set from any thread.
#ifndef DAPPLE_WORKER_RUNTIME_EMULATED_STAGE_BACKEND_H_
#define DAPPLE_WORKER_RUNTIME_EMULATED_STAGE_BACKEND_H_

#include <atomic>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dapple/v1/job.pb.h"
#include "dapple/v1/profile.pb.h"
#include "worker/runtime/stage_backend.h"

namespace dapple::worker {

// ln(10): the per-sample loss an emulated last stage reports.
inline constexpr double kEmulatedLossPerSample = 2.302585092994046;

// Where the emulated compute waits. Tests inject a recorder; the daemon uses PreciseSleeper.
class Sleeper {
 public:
  virtual ~Sleeper() = default;
  // Returns OK after `duration` (>= 0) has passed, or kAborted before that when the job was
  // aborted (the sleeper's abort flag became true; the message says how much of the wait was
  // left). A sleeper without an abort flag always waits the whole duration.
  virtual absl::Status Sleep(absl::Duration duration) = 0;
};

// Sleeps on CLOCK_MONOTONIC to an absolute deadline (clock_nanosleep TIMER_ABSTIME; never
// spins) with the thread's timer slack lowered to 1 us. The overshoot of one sleep (the
// kernel's wake-up latency, tens of microseconds) is subtracted from the next one, up to
// kMaxCarry, so that many short waits do not drift from their sum.
//
// With an abort flag (not owned; must outlive the sleeper; may be null: never aborted) a wait
// longer than kAbortPollInterval sleeps in slices of at most kAbortPollInterval, each to an
// absolute time, checking the flag before every slice: an abort is seen within about one
// slice and Sleep returns kAborted ("aborted during an emulated wait: 10.9s of 11.2s left").
// The last slice ends at the same absolute deadline as one long sleep would, so slicing costs
// no precision (only a wake-up per slice).
class PreciseSleeper : public Sleeper {
 public:
  static constexpr absl::Duration kMaxCarry = absl::Milliseconds(1);
  // How often a wait checks the abort flag.
  static constexpr absl::Duration kAbortPollInterval = absl::Milliseconds(10);
  explicit PreciseSleeper(const std::atomic<bool>* abort = nullptr);
  absl::Status Sleep(absl::Duration duration) override;

 private:
  const std::atomic<bool>* abort_;               // may be null
  absl::Duration carry_ = absl::ZeroDuration();  // overshoot of the previous sleep
};

// The emulated backend for layers [first_layer, last_layer] of `spec.model()`, waiting on
// `sleeper` (nullptr: a PreciseSleeper without an abort flag; the worker daemon passes
// PreciseSleeper(&its abort flag) so that a cancelled or failed job stops at once). `profile`
// must have one layer per model layer (Input nodes excluded) and batch_size > 0.
// kInvalidArgument naming the field for a bad layer range, a model InferLayers refuses, a
// profile with another layer count ("emulated_profile has 5 layers, the model 6"),
// batch_size <= 0 or a negative / non-finite time.
absl::StatusOr<std::unique_ptr<StageBackend>> MakeEmulatedStageBackend(
    const v1::JobSpec& spec, int first_layer, int last_layer, const v1::ModelProfile& profile,
    std::unique_ptr<Sleeper> sleeper = nullptr, bool recompute = false);

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_RUNTIME_EMULATED_STAGE_BACKEND_H_
