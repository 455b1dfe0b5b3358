// embedding: GPT-2's token embedding plus learned position embedding, then dropout. Its input is
// a sample's T token ids; y[t] = token_embedding[x[t]] + position_embedding[t].
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/model/layer_types.h"
#include "common/model/limits.h"

namespace dapple::model_types {
namespace {

class EmbeddingType : public LayerType {
 public:
  absl::string_view name() const override { return "embedding"; }
  absl::string_view example() const override { return "{type: embedding, vocab: 256, dim: 128}"; }
  absl::StatusOr<LayerInfo> Infer(const v1::LayerSpec& spec,
                                  const InferContext& ctx) const override {
    const v1::EmbeddingParams& p = spec.embedding();
    if (!p.has_vocab()) {
      return LayerError(ctx,
                        ".vocab is required for embedding layers, e.g. " + std::string(example()));
    }
    if (!p.has_dim()) {
      return LayerError(ctx,
                        ".dim is required for embedding layers, e.g. " + std::string(example()));
    }
    if (p.vocab() <= 0 || p.vocab() > kMaxSampleElements) {
      return LayerError(ctx, absl::StrCat(".vocab ", p.vocab(), " must be in [1, 2^24]"));
    }
    if (p.dim() <= 0 || p.dim() > kMaxSampleElements) {
      return LayerError(ctx, absl::StrCat(".dim ", p.dim(), " must be in [1, 2^24]"));
    }
    if (!ctx.token_input || ctx.index != 0) {
      return LayerError(ctx, absl::StrCat(" (embedding) reads token ids, so it must be the first "
                                          "layer of a model whose input_type is tokens; it gets ",
                                          ShapeText(ctx.input_shape), " from ", ctx.input_from));
    }
    if (ctx.input_shape.size() != 1) {
      return LayerError(ctx, absl::StrCat(" (embedding) needs a [T] input of token ids, got ",
                                          ShapeText(ctx.input_shape), " from ", ctx.input_from));
    }
    const int64_t t = ctx.input_shape[0];
    const int64_t positions = p.has_positions() ? p.positions() : t;
    if (positions <= 0 || positions > kMaxSampleElements) {
      return LayerError(ctx, absl::StrCat(".positions ", positions, " must be in [1, 2^24]"));
    }
    if (t > positions) {
      return LayerError(
          ctx, absl::StrCat(".positions ", positions, " is smaller than the sequence length ", t,
                            " (model.input_shape ", ShapeText(ctx.input_shape),
                            ", which data.seq_len sets for text data): the position table has a "
                            "row per position: set positions to at least ",
                            t,
                            " (or leave it out to take the sequence length) or data.seq_len "
                            "to at most ",
                            positions));
    }
    if (p.has_dropout() && !(p.dropout() >= 0 && p.dropout() < 1)) {
      return LayerError(ctx, absl::StrCat(".dropout ", p.dropout(), " must be in [0, 1)"));
    }
    if (t * p.dim() > kMaxSampleElements) {
      return LayerError(ctx, absl::StrCat(" (embedding) output [", t, ", ", p.dim(),
                                          "] has more than the maximum 2^24 elements per sample"));
    }
    LayerInfo info;
    info.token_input = true;
    info.output_shape = {t, p.dim()};
    info.params = {{"token_embedding", {p.vocab(), p.dim()}, ""},
                   {"position_embedding", {positions, p.dim()}, ""}};
    info.param_count = (p.vocab() + positions) * p.dim();
    const double n = static_cast<double>(t * p.dim());
    info.forward_flops = n;                            // one add per output element
    info.backward_flops = 2.0 * n;                     // scatter-adds into both tables
    info.backward_weight_flops = info.backward_flops;  // token ids have no gradient
    return info;
  }
};

}  // namespace

const LayerType& Embedding() {
  static const EmbeddingType kType;
  return kType;
}

}  // namespace dapple::model_types
