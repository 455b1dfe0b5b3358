// PipeDream's side of the stage runtime (parallel.schedule pipedream): the continuous 1F1B run
// cut into steps, and the weight versions of weight stashing and vertical sync (PipeDream,
// SOSP 2019, section 3.3).
#include <algorithm>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/schedule/action.h"
#include "common/schedule/lowering.h"
#include "common/schedule/pipedream_steps.h"
#include "worker/runtime/stage_runtime.h"

namespace dapple::worker {

absl::Status StageRuntime::SetPipeDreamWarmUpsForTesting(std::vector<int64_t> warm_ups) {
  if (!pipedream_ || static_cast<int>(warm_ups.size()) != num_stages_ || num_slots_ > 0) {
    return absl::FailedPreconditionError(
        "pipedream warm-ups are set once per stage, before the first step");
  }
  layout_.warm_ups = std::move(warm_ups);
  id_space_ = num_micro_batches_ + static_cast<int>(schedule::PipeDreamWarmUp(layout_, stage_));
  slot_of_.assign(id_space_, -1);
  version_of_.assign(id_space_, -1);
  return absl::OkStatus();
}

int64_t StageRuntime::RunSteps() const { return std::max<int64_t>(1, total_steps_ - first_step_); }

absl::Status StageRuntime::PreparePipeDreamStep(int64_t step) {
  if (step < first_step_ || step >= total_steps_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("pipedream step %d outside the job's run [%d, %d)", step + 1,
                        first_step_ + 1, total_steps_));
  }
  const schedule::OpProgram ops =
      schedule::GeneratePipeDreamStepOps(layout_, stage_, replica_, step - first_step_);
  own_micro_batches_ = 0;
  for (const schedule::Op& op : ops) own_micro_batches_ += op.kind == v1::BACKWARD;
  step_program_ = schedule::Lower(schedule::ToActions(stage_, ops), num_stages_, stage_, lower_);
  return absl::OkStatus();
}

// Stage 0's version when it ran the forward of global micro-batch g: its updates before that
// forward in the continuous run (an update follows every M-th backward; the forward of g pairs
// with the backward of g - K0). Vertical sync makes every stage use it.
int64_t StageRuntime::ForwardVersion(int64_t global_mb) const {
  if (!vertical_sync_) return stash_->current();
  const int64_t g = global_mb - first_step_ * num_micro_batches_;
  const int64_t k0 = schedule::PipeDreamWarmUp(layout_, 0);
  const int64_t updates = g < k0 ? 0 : (g - k0 + 1) / num_micro_batches_;
  return first_step_ + updates;
}

// A lower bound of the global index of any forward this stage still runs during or after
// step `step`: its first micro-batch (ForwardVersion grows with the index, so versions are kept
// conservatively).
int64_t StageRuntime::NextForward(int64_t step) const { return step * num_micro_batches_; }

// The oldest version still needed: by a micro-batch in flight, or by the next forward (global
// micro-batch `next_forward` or later, which needs at least ForwardVersion of it).
int64_t StageRuntime::OldestNeededVersion(int64_t next_forward) const {
  int64_t oldest = vertical_sync_ ? ForwardVersion(next_forward) : stash_->current();
  for (int64_t v : version_of_) {
    if (v >= 0) oldest = std::min(oldest, v);
  }
  return oldest;
}

void StageRuntime::RecordWeightUse(int64_t global_mb, v1::ActionKind kind, int64_t version) {
  if (!record_weight_uses_) return;
  WeightUse use;
  use.micro_batch = global_mb;
  use.kind = kind;
  use.version = version;
  use.versions_held = stash_->versions();
  std::vector<float> w(static_cast<size_t>(backend_->WeightFloats()));
  if (backend_->ReadWeights(w.data()).ok()) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the bytes of the weights in use
    const auto* bytes = reinterpret_cast<const unsigned char*>(w.data());
    for (size_t i = 0; i < w.size() * sizeof(float); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
    use.weights_hash = h;
  }
  weight_uses_.push_back(use);
}

}  // namespace dapple::worker
