#include "worker/runtime/pipesgd_updater.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grad_clip.h"
#include "common/status.h"
#include "worker/runtime/step_statistics.h"

namespace dapple::worker {

absl::StatusOr<std::unique_ptr<PipeSgdUpdater>> PipeSgdUpdater::Create(
    Collective* collective, StageBackend* backend, const PipeSgdOptions& options,
    int64_t first_step) {
  if (collective == nullptr || backend == nullptr) {
    return absl::InvalidArgumentError("Pipe-SGD needs a collective and a backend");
  }
  if (options.warmup_steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Pipe-SGD warmup_steps ", options.warmup_steps, " must be >= 0"));
  }
  if (backend->GradientFloats() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Pipe-SGD needs the backend's gradients as one vector, but backend ", backend->device(),
        " reports ", backend->GradientFloats(), " gradient floats"));
  }
  return std::unique_ptr<PipeSgdUpdater>(
      new PipeSgdUpdater(collective, backend, options, first_step));
}

PipeSgdUpdater::PipeSgdUpdater(Collective* collective, StageBackend* backend,
                               const PipeSgdOptions& options, int64_t first_step)
    : collective_(collective),
      backend_(backend),
      options_(options),
      first_step_(first_step),
      floats_(static_cast<size_t>(backend->GradientFloats())),
      next_step_(first_step) {
  buffers_[0].resize(floats_);
  buffers_[1].resize(floats_);
  const auto stats = static_cast<size_t>(backend->StepStatisticsSize());
  statistics_[0].resize(stats);
  statistics_[1].resize(stats);
  thread_ = std::thread([this] { Loop(); });
}

PipeSgdUpdater::~PipeSgdUpdater() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void PipeSgdUpdater::Loop() {
  absl::MutexLock lock(&mu_);
  while (true) {
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !queue_.empty(); };
    mu_.Await(absl::Condition(&ready));
    // Stopping without Finish (an error path) drops queued AllReduces: the job is failing.
    if (stop_) return;
    const Job job = queue_.front();
    queue_.erase(queue_.begin());
    if (thread_status_.ok()) {
      absl::Status status;
      {
        // The AllReduce runs unlocked, overlapping the runtime's next step.
        mu_.Unlock();
        status = CompressedAllReduce(*collective_, options_.compression,
                                     buffers_[job.buffer].data(), floats_);
        // The step statistics travel uncompressed, as doubles (step_statistics.h).
        if (status.ok()) {
          status = SumOverReplicas(*collective_, &statistics_[job.buffer], &gathered_);
        }
        mu_.Lock();
      }
      if (status.ok()) {
        ++done_count_;
      } else {
        // collective.h: a failed collective is not used again; later jobs just finish.
        thread_status_ = absl::Status(
            status.code(),
            absl::StrCat("Pipe-SGD AllReduce of step ", job.step, ": ", status.message()));
      }
    }
    done_step_ = job.step;
  }
}

void PipeSgdUpdater::Submit(int buffer, int64_t step) {
  absl::MutexLock lock(&mu_);
  queue_.push_back({buffer, step});
}

absl::Status PipeSgdUpdater::WaitFor(int64_t step) {
  absl::MutexLock lock(&mu_);
  auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done_step_ >= step; };
  mu_.Await(absl::Condition(&done));
  return thread_status_;
}

int64_t PipeSgdUpdater::allreduces_done() const {
  absl::MutexLock lock(&mu_);
  return done_count_;
}

absl::Status PipeSgdUpdater::Fail(absl::Status status) {
  if (error_.ok() && !status.ok()) error_ = status;
  return status;
}

absl::Status PipeSgdUpdater::Apply(int buffer) {
  DAPPLE_RETURN_IF_ERROR(Fail(backend_->WriteGradients(buffers_[buffer].data())));
  if (options_.max_grad_norm > 0) {
    absl::StatusOr<double> sq = backend_->GradientSquaredNorm();
    DAPPLE_RETURN_IF_ERROR(Fail(sq.status()));
    // Negative: the backend does not measure it (emulated), so nothing to clip.
    const double factor = *sq < 0 ? 1.0 : ClipCoefficient(options_.max_grad_norm, *sq);
    if (factor < 1) {
      DAPPLE_RETURN_IF_ERROR(Fail(backend_->ScaleGradients(static_cast<float>(factor))));
    }
  }
  DAPPLE_RETURN_IF_ERROR(Fail(backend_->OptimizerStep()));
  return Fail(backend_->ApplyStepStatistics(statistics_[buffer].data()));
}

absl::Status PipeSgdUpdater::CheckThread() {
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    status = thread_status_;
  }
  return Fail(status);
}

absl::Status PipeSgdUpdater::OnGradients(int64_t step) {
  DAPPLE_RETURN_IF_ERROR(error_);
  DAPPLE_RETURN_IF_ERROR(CheckThread());
  if (finished_ || gradients_read_ || step != next_step_) {
    return absl::FailedPreconditionError(
        absl::StrCat("Pipe-SGD: OnGradients(", step, ") out of order: expected ",
                     finished_         ? "no call after Finish"
                     : gradients_read_ ? absl::StrCat("OnOptimizerStep(", next_step_, ")")
                                       : absl::StrCat("OnGradients(", next_step_, ")")));
  }
  // The buffer not holding the pending stale gradient is free: its last gradient (step - 2)
  // was applied by OnOptimizerStep(step - 1) after its AllReduce finished.
  const int buffer = pending_buffer_ == 0 ? 1 : 0;
  DAPPLE_RETURN_IF_ERROR(Fail(backend_->ReadGradients(buffers_[buffer].data())));
  DAPPLE_RETURN_IF_ERROR(Fail(backend_->ReadStepStatistics(statistics_[buffer].data())));
  Submit(buffer, step);
  current_buffer_ = buffer;
  gradients_read_ = true;
  if (step < first_step_ + options_.warmup_steps) {
    // Synchronous warm-up: the update of this step needs this AllReduce.
    DAPPLE_RETURN_IF_ERROR(Fail(WaitFor(step)));
  }
  return absl::OkStatus();
}

absl::Status PipeSgdUpdater::OnOptimizerStep(int64_t step) {
  DAPPLE_RETURN_IF_ERROR(error_);
  DAPPLE_RETURN_IF_ERROR(CheckThread());
  if (finished_ || !gradients_read_ || step != next_step_) {
    return absl::FailedPreconditionError(
        absl::StrCat("Pipe-SGD: OnOptimizerStep(", step, ") out of order: expected ",
                     finished_          ? "no call after Finish"
                     : !gradients_read_ ? absl::StrCat("OnGradients(", next_step_, ")")
                                        : absl::StrCat("OnOptimizerStep(", next_step_, ")")));
  }
  if (step < first_step_ + options_.warmup_steps) {
    DAPPLE_RETURN_IF_ERROR(Apply(current_buffer_));
  } else if (pending_buffer_ < 0) {
    // Pipeline fill: nothing stale to apply yet. Zero the backend's accumulated gradient (its
    // copy is in the AllReduce) so the next step starts clean, and skip OptimizerStep so that
    // momentum or weight decay does not move the weights either.
    std::vector<float>& zeros = buffers_[current_buffer_ == 0 ? 1 : 0];
    std::fill(zeros.begin(), zeros.end(), 0.0f);
    DAPPLE_RETURN_IF_ERROR(Fail(backend_->WriteGradients(zeros.data())));
    // Likewise the step statistics (read, in the AllReduce): zeros clear them and leave the
    // buffers.
    std::vector<double>& no_stats = statistics_[current_buffer_ == 0 ? 1 : 0];
    std::fill(no_stats.begin(), no_stats.end(), 0.0);
    DAPPLE_RETURN_IF_ERROR(Fail(backend_->ApplyStepStatistics(no_stats.data())));
    pending_buffer_ = current_buffer_;
    pending_step_ = step;
  } else {
    DAPPLE_RETURN_IF_ERROR(Fail(WaitFor(pending_step_)));
    DAPPLE_RETURN_IF_ERROR(Apply(pending_buffer_));
    pending_buffer_ = current_buffer_;
    pending_step_ = step;
  }
  gradients_read_ = false;
  ++next_step_;
  return absl::OkStatus();
}

absl::Status PipeSgdUpdater::Finish() {
  DAPPLE_RETURN_IF_ERROR(error_);
  if (finished_) return absl::OkStatus();
  if (gradients_read_) {
    return absl::FailedPreconditionError(absl::StrCat("Pipe-SGD: Finish() in the middle of step ",
                                                      next_step_, ": expected OnOptimizerStep(",
                                                      next_step_, ") first"));
  }
  if (pending_buffer_ >= 0) {
    DAPPLE_RETURN_IF_ERROR(Fail(WaitFor(pending_step_)));
    DAPPLE_RETURN_IF_ERROR(Apply(pending_buffer_));
    pending_buffer_ = -1;
    pending_step_ = -1;
  }
  finished_ = true;
  return absl::OkStatus();
}

}  // namespace dapple::worker
