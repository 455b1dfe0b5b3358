// StageRuntime::Evaluate: the evaluation split through the pipeline between steps (replica 0
// of every stage), and the slot evaluation and generation borrow.
#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "worker/runtime/stage_runtime.h"

namespace dapple::worker {

absl::StatusOr<EvalResult> StageRuntime::Evaluate(int64_t eval_index) {
  const bool first = stage_ == 0;
  const bool last = stage_ == num_stages_ - 1;
  // Replicas hold identical weights: replica 0 of every stage evaluates for all of them.
  if (replica_ != 0) return EvalResult{};
  if (eval_ == nullptr) return absl::FailedPreconditionError("evaluation without an eval split");
  const Dataset& eval = *eval_;
  const int64_t chunks = (eval.size() + eval_chunk_ - 1) / eval_chunk_;
  StageBackend& b = *backend_;
  // Sent chunks keep their own send buffers (ids 0..chunks-1) until WaitSends (Transport rules).
  DAPPLE_ASSIGN_OR_RETURN(const int slot, SlotBetweenSteps());
  std::vector<int64_t> indices;
  std::vector<int32_t> targets;
  EvalResult result;
  double loss_sum = 0;
  int64_t correct = 0;
  auto with_chunk = [&](int64_t c, const absl::Status& s) {
    return absl::Status(s.code(),
                        absl::StrCat("stage ", stage_, " evaluation chunk ", c, ": ", s.message()));
  };
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * eval_chunk_;
    const int64_t n = std::min(eval_chunk_, eval.size() - begin);
    const uint64_t tag = MessageTag(MessageKind::kEvalActivation, eval_index, static_cast<int>(c));
    absl::StatusOr<void*> in = b.Input(slot, n);
    if (!in.ok()) return with_chunk(c, in.status());
    // The evaluation split in its stored order, chunk after chunk.
    indices.resize(n);
    for (int64_t i = 0; i < n; ++i) indices[i] = begin + i;
    if (first) {
      float* host = static_cast<float*>(*in);
      if (b.device_memory()) {
        input_scratch_.resize(static_cast<size_t>(InputBytes(n) / sizeof(float)));
        host = input_scratch_.data();
      }
      eval.Gather(indices.data(), n, host, nullptr);
      absl::Status s = b.LoadInput(slot, host, n);
      if (!s.ok()) return with_chunk(c, s);
    } else {
      absl::Status s = transport_->Recv(eval_prev_rank_, tag, *in, InputBytes(n));
      if (!s.ok()) return with_chunk(c, s);
    }
    absl::Status s = b.Forward(slot, n, kernels::ForwardContext{});
    if (!s.ok()) return with_chunk(c, s);
    if (last) {
      targets.resize(n * targets_per_sample_);
      eval.Gather(indices.data(), n, nullptr, targets.data());
      int64_t ok = 0;
      absl::StatusOr<double> sum = b.Loss(slot, targets.data(), n, 0.0f, /*training=*/false, &ok);
      if (!sum.ok()) return with_chunk(c, sum.status());
      loss_sum += *sum;
      correct += ok;
    } else {
      absl::StatusOr<const void*> out = b.OutputForSend(slot, static_cast<int>(c), n);
      if (!out.ok()) return with_chunk(c, out.status());
      s = transport_->Send(eval_next_rank_, tag, *out, OutputBytes(n));
      if (!s.ok()) return with_chunk(c, s);
    }
  }
  if (transport_ != nullptr) DAPPLE_RETURN_IF_ERROR(transport_->WaitSends());
  if (last) {
    result.has_metrics = true;
    // Means per target, as the training loss (per sample, or per token).
    const auto targets_total = static_cast<double>(eval.size() * targets_per_sample_);
    result.samples = eval.size();
    result.loss = loss_sum / targets_total;
    result.accuracy = static_cast<double>(correct) / targets_total;
  }
  return result;
}

absl::StatusOr<int> StageRuntime::SlotBetweenSteps() {
  // Between steps no micro-batch holds a slot: borrow slot 0. A program without a flush
  // (PipeDream) keeps forwards of the next step in flight: a free slot instead.
  if (live_slots_ != 0 && !carries_across_steps_) {
    return absl::InternalError("evaluation or generation during a step");
  }
  if (live_slots_ == 0 && num_slots_ == 0) free_slots_.push_back(num_slots_++);
  if (free_slots_.empty()) free_slots_.push_back(num_slots_++);
  return live_slots_ == 0 ? 0 : free_slots_.back();
}

}  // namespace dapple::worker
