// StageRuntime::Evaluate: the evaluation split through the pipeline between steps (replica 0
// of every stage), and the slot evaluation and generation borrow.
#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "worker/runtime/stage_runtime.h"

namespace dapple::worker {

absl::StatusOr<EvalResult> StageRuntime::Evaluate(int64_t eval_index) {
  // Replicas hold identical weights: replica 0 of every stage evaluates for all of them.
  if (replica_ != 0) return EvalResult{};
  if (eval_ == nullptr) return absl::FailedPreconditionError("evaluation without an eval split");
  // Sent chunks keep their own send buffers (ids 0..chunks-1) until WaitSends (Transport rules).
  DAPPLE_ASSIGN_OR_RETURN(const int slot, SlotBetweenSteps());
  EvalTotals totals;
  // Virtual stages: the rank's chunks in order, each over the whole split (sends do not block,
  // so chunk c's sends are all out before chunk c + 1 waits for its inputs).
  for (int c = 0; c < static_cast<int>(chunks_.size()); ++c) {
    DAPPLE_RETURN_IF_ERROR(EvaluateChunk(eval_index, c, slot, &totals));
  }
  if (transport_ != nullptr) DAPPLE_RETURN_IF_ERROR(transport_->WaitSends());
  EvalResult result;
  if (stage_ == num_stages_ - 1) {
    const Dataset& eval = *eval_;
    result.has_metrics = true;
    // Means per target, as the training loss (per sample, or per token).
    const auto targets_total = static_cast<double>(eval.size() * targets_per_sample_);
    result.samples = eval.size();
    result.loss = totals.loss_sum / targets_total;
    result.accuracy = static_cast<double>(totals.correct) / targets_total;
  }
  return result;
}

absl::Status StageRuntime::EvaluateChunk(int64_t eval_index, int chunk, int slot,
                                         EvalTotals* totals) {
  const Chunk& ck = chunks_[chunk];
  const Dataset& eval = *eval_;
  const int64_t pieces = (eval.size() + eval_chunk_ - 1) / eval_chunk_;
  StageBackend& b = *ck.backend;
  std::vector<int64_t> indices;
  std::vector<int32_t> targets;
  auto with_chunk = [&](int64_t c, const absl::Status& s) {
    return absl::Status(s.code(),
                        absl::StrCat("stage ", stage_, " evaluation chunk ", c, ": ", s.message()));
  };
  // The link of a message: the chunk of the lower virtual stage (MessageTag).
  const int recv_link = ck.first ? 0 : (ck.virtual_stage - 1) / num_stages_;
  // Send buffers. A flushed program has no send in flight between steps, so evaluation reuses
  // the training's first send ids, and with one chunk per rank it keeps at most
  // kEvalSendsInFlight pieces in flight: it waits for the sent ones before reusing their ids, so
  // an evaluation holds no more than a step (one buffer per piece held every piece's activations
  // at once: gigabytes for a GPT's validation split). A program without a flush (PipeDream)
  // has training sends still out that the neighbour receives only after its own evaluation, so
  // it cannot wait for all sends: it waits for the one of the piece kEvalSendsInFlight earlier
  // instead (Transport::WaitSend), in two ids after the training's so that no evaluation piece
  // overwrites a training send in flight (memory_model.h counts them). Virtual stages (a
  // rank's later chunk receives what its earlier chunk's neighbour sends) and a program without
  // a flush on a transport that waits for all sends at once keep one buffer per piece.
  const bool one_send_waits = transport_ != nullptr && transport_->WaitsForOneSend();
  const bool bounded_sends = chunks_.size() == 1 && (!carries_across_steps_ || one_send_waits);
  const int first_id = carries_across_steps_ ? id_space_ : 0;
  for (int64_t c = 0; c < pieces; ++c) {
    const int64_t begin = c * eval_chunk_;
    const int64_t n = std::min(eval_chunk_, eval.size() - begin);
    const auto piece = static_cast<int>(c);
    absl::StatusOr<void*> in = b.Input(slot, n);
    if (!in.ok()) return with_chunk(c, in.status());
    // The evaluation split in its stored order, chunk after chunk.
    indices.resize(n);
    for (int64_t i = 0; i < n; ++i) indices[i] = begin + i;
    if (ck.first) {
      float* host = static_cast<float*>(*in);
      if (b.device_memory()) {
        input_scratch_.resize(static_cast<size_t>(InputBytes(n, chunk) / sizeof(float)));
        host = input_scratch_.data();
      }
      eval.Gather(indices.data(), n, host, nullptr);
      absl::Status s = b.LoadInput(slot, host, n);
      if (!s.ok()) return with_chunk(c, s);
    } else {
      absl::Status s = transport_->Recv(
          eval_prev_rank_, MessageTag(MessageKind::kEvalActivation, eval_index, piece, recv_link),
          *in, InputBytes(n, chunk));
      if (!s.ok()) return with_chunk(c, s);
    }
    absl::Status s = b.Forward(slot, n, kernels::ForwardContext{});
    if (!s.ok()) return with_chunk(c, s);
    if (ck.last) {
      targets.resize(n * targets_per_sample_);
      eval.Gather(indices.data(), n, nullptr, targets.data());
      int64_t ok = 0;
      absl::StatusOr<double> sum = b.Loss(slot, targets.data(), n, 0.0f, /*training=*/false, &ok);
      if (!sum.ok()) return with_chunk(c, sum.status());
      totals->loss_sum += *sum;
      totals->correct += ok;
    } else {
      if (bounded_sends && carries_across_steps_ && c >= kEvalSendsInFlight) {
        const int earlier = piece - kEvalSendsInFlight;
        s = transport_->WaitSend(
            eval_next_rank_, MessageTag(MessageKind::kEvalActivation, eval_index, earlier, chunk));
        if (!s.ok()) return with_chunk(c, s);
      } else if (bounded_sends && c > 0 && c % kEvalSendsInFlight == 0) {
        s = transport_->WaitSends();
        if (!s.ok()) return with_chunk(c, s);
      }
      const int send_id = first_id + (bounded_sends ? piece % kEvalSendsInFlight : piece);
      absl::StatusOr<const void*> out = b.OutputForSend(slot, send_id, n);
      if (!out.ok()) return with_chunk(c, out.status());
      s = transport_->Send(eval_next_rank_,
                           MessageTag(MessageKind::kEvalActivation, eval_index, piece, chunk), *out,
                           OutputBytes(n, chunk));
      if (!s.ok()) return with_chunk(c, s);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int> StageRuntime::SlotBetweenSteps() {
  // Between steps no micro-batch holds a slot: borrow slot 0. A program without a flush
  // (PipeDream) keeps forwards of the next step in flight: a free slot instead.
  // Every chunk's backend creates a slot on its first use, so the index serves them all
  // (programs that carry micro-batches across steps have one chunk).
  if (live_slots_ != 0 && !carries_across_steps_) {
    return absl::InternalError("evaluation or generation during a step");
  }
  Chunk& c = chunks_[0];
  if (live_slots_ == 0 && c.num_slots == 0) c.free_slots.push_back(c.num_slots++);
  if (c.free_slots.empty()) c.free_slots.push_back(c.num_slots++);
  return live_slots_ == 0 ? 0 : c.free_slots.back();
}

}  // namespace dapple::worker
