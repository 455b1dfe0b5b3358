// Pipe-SGD's update rule for one replica of a data-parallel (P = 1) job (Li et al., "Pipe-SGD:
// A Decentralized Pipelined SGD Framework for Distributed Deep Net Training", NeurIPS 2018,
// section 3): the AllReduce of step t's gradient runs on a background thread while the replica
// computes step t + 1 (a pipeline of width 2), and the update applies a gradient one step
// stale.
//
// The runtime calls, once per step t = 0, 1, 2, ... in this order:
//   OnGradients(t)      after the step's last backward (the ALLREDUCE action): the backend's
//                       accumulated gradient of step t, g(w_t), is read (ReadGradients);
//   OnOptimizerStep(t)  at the OPTIMIZER_STEP action;
// and Finish() once after the last step (before a checkpoint, too: it drains the pipeline).
// With W = warmup_steps and G(t) = the sum over the D replicas of g_r(w_t) (compressed as
// `compression` says: worker/comm/compressed_allreduce.h):
//   t < W    synchronous: OnGradients(t) AllReduces g(w_t) and waits; OnOptimizerStep(t)
//            writes G(t) (WriteGradients) and runs the backend's OptimizerStep:
//              w_{t+1} = w_t - lr G(t)                  (plain SGD; the backend's rule in general)
//   t = W    pipeline fill: OnGradients(W) hands g(w_W) to the AllReduce thread and returns;
//            no gradient of step W - 1 is pending (it was applied synchronously), so
//            OnOptimizerStep(W) applies nothing: it zeroes the backend's accumulated gradient
//            (WriteGradients of zeros) and skips OptimizerStep (momentum does not move either):
//              w_{W+1} = w_W
//   t > W    OnGradients(t) hands g(w_t) to the AllReduce thread (queued behind step t - 1's
//            AllReduce if that still runs); OnOptimizerStep(t) waits for step t - 1's AllReduce
//            and applies it:
//              w_{t+1} = w_t - lr G(t - 1)
//   Finish() waits for the last step's AllReduce (if any is pending) and applies it the same
//            way: every step's gradient is applied exactly once, in step order.
// The SUM over replicas is applied, not the mean: the runtime scales the loss by
// 1 / global_batch, so the sum of the replicas' gradients is the global batch's gradient.
// Gradient clipping (max_grad_norm > 0) clips the gradient each update applies, G(t) or the
// stale G(t - 1), by ITS global norm, computed locally (the backend's GradientSquaredNorm after
// WriteGradients): every replica holds the identical reduced gradient, so every replica gets
// the same factor without a collective (common/grad_clip.h). A stale update is clipped by the
// norm of the gradient it applies, not of the step's own. Each applied update runs the backend's
// OptimizerStep, whose learning rate is the schedule's at the backend's update count
// (common/lr_schedule.h): the fill step applies none, so from then on the update of step t uses
// the rate of update t - 1.
// With D = 1 (a one-member collective) the rule is the same, which makes staleness testable on
// one process.
// Step statistics (batch norm's running statistics; step_statistics.h) follow their gradient:
// OnGradients(t) also reads the backend's statistics of step t, the AllReduce thread sums them
// over the replicas (uncompressed, in double) after the gradient, and the update that applies
// G(t) then applies them (ApplyStepStatistics), so the buffers lag like the weights and stay
// identical on every replica. The fill step applies zeros (it clears the accumulation, whose
// copy is in the AllReduce, and leaves the buffers).
//
// Memory: two flat gradient buffers of GradientFloats() fp32 each (one in the AllReduce, one
// being filled or waiting to be applied), two of StepStatisticsSize() doubles, plus the
// compression's temporaries.
// Threads: one AllReduce thread, started by the constructor and joined by the destructor; it
// sleeps on a condition variable between AllReduces. It alone uses the Collective while the
// updater lives (collective.h: one thread at a time). The updater's methods are called by one
// thread (the runtime's); they are not thread-safe against each other.
// Errors: an AllReduce failure (the collective's status, collective.h) is returned by the next
// call after it (or the call waiting for it), prefixed "Pipe-SGD AllReduce of step <t>: ", with the
// collective's code; after an error every call returns it. Backend errors come back
// unchanged. kFailedPrecondition for calls out of order (a step other than the next one,
// Finish between OnGradients and OnOptimizerStep, or OnGradients / OnOptimizerStep after
// Finish), naming the call expected. Finish twice is a no-op. To go on after a Finish (a
// checkpoint), make a new updater with first_step = the next step: it warms up again.
#ifndef DAPPLE_WORKER_RUNTIME_PIPESGD_UPDATER_H_
#define DAPPLE_WORKER_RUNTIME_PIPESGD_UPDATER_H_

#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "worker/comm/collective.h"
#include "worker/comm/compressed_allreduce.h"
#include "worker/runtime/stage_backend.h"

namespace dapple::worker {

struct PipeSgdOptions {
  int warmup_steps = 2;  // W >= 0: synchronous steps first
  Compression compression = Compression::kNone;
  double max_grad_norm = 0;  // training.max_grad_norm: > 0 clips each applied gradient
};

class PipeSgdUpdater {
 public:
  // `collective` (D members: this stage's replicas) and `backend` are not owned and must
  // outlive the updater. The first step is `first_step` (the runtime's step counter, e.g.
  // after a resume); warm-up counts from it. kInvalidArgument for warmup_steps < 0 or a
  // backend without gradient access (GradientFloats() <= 0).
  static absl::StatusOr<std::unique_ptr<PipeSgdUpdater>> Create(Collective* collective,
                                                                StageBackend* backend,
                                                                const PipeSgdOptions& options,
                                                                int64_t first_step = 0);
  ~PipeSgdUpdater();
  PipeSgdUpdater(const PipeSgdUpdater&) = delete;
  PipeSgdUpdater& operator=(const PipeSgdUpdater&) = delete;

  absl::Status OnGradients(int64_t step);
  absl::Status OnOptimizerStep(int64_t step);
  absl::Status Finish();

  // AllReduces completed so far (for tests and metrics). Thread-safe.
  int64_t allreduces_done() const;
  // Bytes of its two flat gradient buffers (allocated at Create, constant): what the memory
  // model counts as gradient_buffers (common/memory_model.h) and the runtime's measured peak
  // adds to the backend's. Thread-safe.
  int64_t buffer_bytes() const { return static_cast<int64_t>(2 * floats_ * sizeof(float)); }

 private:
  PipeSgdUpdater(Collective* collective, StageBackend* backend, const PipeSgdOptions& options,
                 int64_t first_step);
  void Loop();
  // Queues buffers_[buffer] for the AllReduce of step `step`.
  void Submit(int buffer, int64_t step);
  // Waits until the AllReduce of step `step` is done; its status, prefixed.
  absl::Status WaitFor(int64_t step);
  // WriteGradients(buffers_[buffer]), clipping, OptimizerStep.
  absl::Status Apply(int buffer);
  // Records a non-OK status as the sticky error_; returns it.
  absl::Status Fail(absl::Status status);
  // The AllReduce thread's error so far (non-blocking).
  absl::Status CheckThread();

  Collective* const collective_;
  StageBackend* const backend_;
  const PipeSgdOptions options_;
  const int64_t first_step_;
  const size_t floats_;
  std::vector<float> buffers_[2];
  std::vector<double> statistics_[2];  // the step statistics that go with buffers_[i]
  std::vector<double> gathered_;       // the AllReduce thread's scratch

  // Runtime thread only.
  int64_t next_step_;            // the step the next OnGradients must name
  bool gradients_read_ = false;  // OnGradients(next_step_) done, OnOptimizerStep not yet
  int current_buffer_ = 0;       // the buffer of step next_step_'s gradient
  int pending_buffer_ = -1;      // the buffer of the stale gradient not applied yet (-1: none)
  int64_t pending_step_ = -1;    // its step
  bool finished_ = false;
  absl::Status error_;  // sticky

  mutable absl::Mutex mu_;
  // The queue: at most two AllReduces (step t - 1 running, step t waiting), in step order.
  struct Job {
    int buffer;
    int64_t step;
  };
  std::vector<Job> queue_ ABSL_GUARDED_BY(mu_);
  int64_t done_step_ ABSL_GUARDED_BY(mu_) = -1;  // the last step whose AllReduce finished
  int64_t done_count_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status thread_status_ ABSL_GUARDED_BY(mu_);  // first AllReduce error, prefixed
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_RUNTIME_PIPESGD_UPDATER_H_
