// StageRuntime::Generate (stage_runtime.h): a text sample from the trained weights, one byte at a
// time through the pipeline.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"
#include "worker/runtime/stage_runtime.h"
#include "worker/runtime/token_sampler.h"

namespace dapple::worker {

absl::StatusOr<GenerateResult> StageRuntime::Generate() {
  if (!generates_sample_) {
    return absl::FailedPreconditionError(
        "no text sample: the model must read tokens, predict [T, vocab] and sample.tokens be > 0");
  }
  // Replicas hold identical weights: replica 0 of every stage generates for all of them.
  if (replica_ != 0) return GenerateResult{};
  const v1::SampleSpec& sample = assignment_.spec().sample();
  const std::string& prompt = sample.prompt();
  std::vector<int32_t> text;
  text.reserve(prompt.size() + sample.tokens());
  for (size_t k = 0; k < prompt.size(); ++k) {
    const auto byte = static_cast<uint8_t>(prompt[k]);
    if (byte >= sample_vocab_) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "sample.prompt byte %d (0x%02X) is outside the model's vocabulary of %d tokens: use "
          "a prompt of bytes below %d",
          k, byte, sample_vocab_, sample_vocab_));
    }
    text.push_back(byte);
  }
  DAPPLE_ASSIGN_OR_RETURN(const int slot, SlotBetweenSteps());
  GenerateResult result;
  result.has_text = stage_ == num_stages_ - 1;
  for (int64_t i = 0; i < sample.tokens(); ++i) {
    const int64_t context =
        std::min<int64_t>(sample_positions_, static_cast<int64_t>(prompt.size()) + i);
    int32_t token = 0;
    absl::Status s = GenerateByte(i, context, slot, &text, &token);
    if (!s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("stage ", stage_, " sample byte ", i, ": ", s.message()));
    }
    if (result.has_text) result.bytes.push_back(static_cast<char>(token));
  }
  return result;
}

absl::Status StageRuntime::GenerateByte(int64_t position, int64_t context, int slot,
                                        std::vector<int32_t>* text, int32_t* token) {
  const bool first = stage_ == 0;
  const bool last = stage_ == num_stages_ - 1;
  StageBackend& b = *chunks_[0].backend;  // one chunk: GeneratesSample is off with more
  const uint64_t act_tag = MessageTag(MessageKind::kSampleActivation, position, 0);
  const uint64_t token_tag = MessageTag(MessageKind::kSampleToken, position, 0);
  if (first) {
    // Token ids are exact floats (kernels/cpu/layer.h); positions past the context hold 0.
    input_scratch_.assign(static_cast<size_t>(sample_positions_), 0.0f);
    const int32_t* window = text->data() + text->size() - context;
    for (int64_t k = 0; k < context; ++k) input_scratch_[k] = static_cast<float>(window[k]);
    DAPPLE_RETURN_IF_ERROR(b.LoadInput(slot, input_scratch_.data(), 1));
  } else {
    DAPPLE_ASSIGN_OR_RETURN(void* in, b.Input(slot, 1));
    DAPPLE_RETURN_IF_ERROR(transport_->Recv(eval_prev_rank_, act_tag, in, InputBytes(1)));
  }
  DAPPLE_RETURN_IF_ERROR(b.Forward(slot, 1, kernels::ForwardContext{}));
  if (last) {
    std::vector<float> logits(static_cast<size_t>(sample_vocab_));
    DAPPLE_RETURN_IF_ERROR(
        b.ReadOutput(slot, (context - 1) * sample_vocab_, sample_vocab_, logits.data()));
    const v1::JobSpec& spec = assignment_.spec();
    *token = static_cast<int32_t>(
        SampleToken(logits.data(), sample_vocab_, spec.sample().temperature(), seed_, position));
    if (first) {
      text->push_back(*token);
      return absl::OkStatus();
    }
    DAPPLE_ASSIGN_OR_RETURN(void* message, b.MessageBuffer(sizeof(int32_t)));
    DAPPLE_RETURN_IF_ERROR(b.WriteMessage(token, sizeof(int32_t)));
    DAPPLE_RETURN_IF_ERROR(transport_->Send(eval_prev_rank_, token_tag, message, sizeof(int32_t)));
    return transport_->WaitSends();
  }
  DAPPLE_ASSIGN_OR_RETURN(const void* out, b.OutputForSend(slot, 0, 1));
  DAPPLE_RETURN_IF_ERROR(transport_->Send(eval_next_rank_, act_tag, out, OutputBytes(1)));
  // The byte comes back from the next stage; a middle stage passes the same buffer on.
  DAPPLE_ASSIGN_OR_RETURN(void* message, b.MessageBuffer(sizeof(int32_t)));
  DAPPLE_RETURN_IF_ERROR(transport_->Recv(eval_next_rank_, token_tag, message, sizeof(int32_t)));
  if (first) {
    DAPPLE_RETURN_IF_ERROR(b.ReadMessage(token, sizeof(int32_t)));
    text->push_back(*token);
  } else {
    DAPPLE_RETURN_IF_ERROR(transport_->Send(eval_prev_rank_, token_tag, message, sizeof(int32_t)));
  }
  return transport_->WaitSends();
}

}  // namespace dapple::worker
