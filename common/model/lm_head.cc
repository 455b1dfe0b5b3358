// lm_head: the language-model head, logits = x W^T over the last dimension ([T, C] ->
// [T, vocab]), no bias. With `tied: true` W is the model's embedding table (Press & Wolf, "Using
// the Output Embedding to Improve Language Models", EACL 2017). A pipeline keeps a copy of it on
// the head's stage, as Megatron-LM and DeepSpeed do: both copies start equal and their gradients
// are summed every step, so they stay bitwise equal; the gradient norm and checkpoints count the
// table once (as the embedding's).
#include "absl/strings/str_cat.h"
#include "common/model/layer_types.h"
#include "common/model/limits.h"

namespace dapple::model_types {
namespace {

class LmHeadType : public LayerType {
 public:
  absl::string_view name() const override { return "lm_head"; }
  absl::string_view example() const override { return "{type: lm_head, tied: true}"; }
  absl::StatusOr<LayerInfo> Infer(const v1::LayerSpec& spec,
                                  const InferContext& ctx) const override {
    const v1::LmHeadParams& p = spec.lm_head();
    if (ctx.token_input || ctx.input_shape.empty()) {
      return LayerError(ctx, absl::StrCat(" (lm_head) needs an input of vectors [..., C], got ",
                                          ShapeText(ctx.input_shape), " from ", ctx.input_from));
    }
    const int64_t c = ctx.input_shape.back();
    LayerInfo info;
    int64_t vocab = p.has_vocab() ? p.vocab() : 0;
    if (p.tied()) {
      const LayerInfo* embedding = nullptr;
      for (const LayerInfo& e : *ctx.earlier) {
        if (e.type == "embedding") embedding = &e;
      }
      if (embedding == nullptr) {
        return LayerError(ctx,
                          ".tied true needs an embedding layer earlier in the model to share "
                          "its table with: add one, or set tied: false with a vocab");
      }
      const std::vector<int64_t>& table = embedding->params[0].shape;  // [vocab, dim]
      if (table[1] != c) {
        return LayerError(
            ctx, absl::StrCat(" (lm_head, tied: true) reads ", ShapeText(ctx.input_shape), " from ",
                              ctx.input_from, ", of width ", c,
                              ", but the table it shares, model.layers[", embedding->index,
                              "] (embedding)'s ", ShapeText(table), ", has width ", table[1],
                              ": tied layers share one table, so the widths must match: make "
                              "its input ",
                              table[1], " wide or set tied: false with vocab: ", table[0]));
      }
      if (p.has_vocab() && vocab != table[0]) {
        return LayerError(ctx, absl::StrCat(".vocab ", vocab, " differs from the vocab ", table[0],
                                            " of model.layers[", embedding->index,
                                            "] (embedding) it is tied to: leave it out or make "
                                            "them equal"));
      }
      vocab = table[0];
      info.tied_layer = embedding->index;
      info.params = {{"weight", {vocab, c}, ParamName(embedding->index, "token_embedding")}};
    } else {
      if (!p.has_vocab()) {
        return LayerError(ctx,
                          ".vocab is required for an lm_head that is not tied, e.g. "
                          "{type: lm_head, vocab: 256}");
      }
      if (vocab <= 0 || vocab > kMaxSampleElements) {
        return LayerError(ctx, absl::StrCat(".vocab ", vocab, " must be in [1, 2^24]"));
      }
      info.params = {{"weight", {vocab, c}, ""}};
    }
    const int64_t rows = NumElements(ctx.input_shape) / c;
    if (rows * vocab > kMaxSampleElements) {
      return LayerError(ctx, absl::StrCat(" (lm_head) output of ", rows, " x ", vocab,
                                          " logits has more than 2^24 elements per sample"));
    }
    info.output_shape = ctx.input_shape;
    info.output_shape.back() = vocab;
    info.param_count = vocab * c;
    const double n =
        static_cast<double>(rows) * static_cast<double>(c) * static_cast<double>(vocab);
    info.forward_flops = 2 * n;
    info.backward_flops = 4 * n;
    info.backward_weight_flops = 2 * n;
    return info;
  }
};

}  // namespace

const LayerType& LmHead() {
  static const LmHeadType kType;
  return kType;
}

}  // namespace dapple::model_types
