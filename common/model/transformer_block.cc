// transformer_block: one pre-LayerNorm GPT-2 block as ONE pipeline layer, so the planner cuts
// between blocks as DAPPLE's BERT profiles do. On a sample's [T, C] input x:
//   a = x + dropout(proj(attention(ln1(x))))      causal multi-head self-attention, h heads
//   y = a + dropout(fc2(gelu(fc(ln2(a)))))         MLP of hidden width H (default 4C), GELU erf
// attention(u) = concat over heads of softmax(q k^T / sqrt(C / h) + causal mask) v, where
// [q, k, v] = u Wqkv^T + bqkv. LayerNorm eps 1e-5, with scale and shift.
//
// Parameters (in this order): ln1.weight [C], ln1.bias [C], attn.qkv.weight [3C, C],
// attn.qkv.bias [3C], attn.proj.weight [C, C], attn.proj.bias [C], ln2.weight [C], ln2.bias [C],
// mlp.fc.weight [H, C], mlp.fc.bias [H], mlp.proj.weight [C, H], mlp.proj.bias [C].
//
// Saved per sample for the backward (the kernels keep exactly these; dropout masks are
// recomputed from their seed): ln1 output, qkv, the attention probabilities [h, T, T], the merged
// attention output, a, ln2 output, fc output and gelu output, plus the mean and (biased)
// variance of both LayerNorms per position: 7TC + 2TH + hT^2 + 4T floats.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/model/layer_types.h"
#include "common/model/limits.h"
#include "common/spec_text.h"

namespace dapple::model_types {
namespace {

// Element-wise work per element (LayerNorm about 8 forward / 12 backward; GELU as the gelu layer;
// softmax about 5 / 4 per probability).
constexpr double kNormForward = 8, kNormBackward = 12;
constexpr double kGeluForward = 20, kGeluBackward = 40;
constexpr double kSoftmaxForward = 5, kSoftmaxBackward = 4;

class TransformerBlockType : public LayerType {
 public:
  absl::string_view name() const override { return "transformer_block"; }
  absl::string_view example() const override { return "{type: transformer_block, heads: 4}"; }
  absl::StatusOr<LayerInfo> Infer(const v1::LayerSpec& spec,
                                  const InferContext& ctx) const override {
    const v1::TransformerBlockParams& p = spec.transformer_block();
    if (ctx.token_input) {
      return LayerError(ctx, absl::StrCat(" (transformer_block) cannot read token ids ",
                                          ShapeText(ctx.input_shape), " from ", ctx.input_from,
                                          ": the first layer of a token model is an embedding"));
    }
    if (ctx.input_shape.size() != 2) {
      return LayerError(ctx, absl::StrCat(" (transformer_block) needs a [T, C] input (a vector "
                                          "of C values per position, as an embedding outputs), "
                                          "got ",
                                          ShapeText(ctx.input_shape), " from ", ctx.input_from));
    }
    const int64_t t = ctx.input_shape[0];
    const int64_t c = ctx.input_shape[1];
    if (!p.has_heads()) {
      return LayerError(
          ctx, ".heads is required for transformer_block layers, e.g. " + std::string(example()));
    }
    const int64_t h = p.heads();
    if (h <= 0) return LayerError(ctx, absl::StrCat(".heads ", h, " must be > 0"));
    if (c % h != 0) {
      return LayerError(
          ctx, absl::StrCat(".heads ", h, " does not divide the width C = ", c, " of its input ",
                            ShapeText(ctx.input_shape), " from ", ctx.input_from,
                            ": each head attends over C / heads values: use a divisor of ", c, " (",
                            job_spec_internal::DivisorsText(c, h), ")"));
    }
    const int64_t hidden = p.has_mlp_hidden() ? p.mlp_hidden() : 4 * c;
    if (hidden <= 0 || hidden > kMaxSampleElements) {
      return LayerError(ctx, absl::StrCat(".mlp_hidden ", hidden, " must be in [1, 2^24]"));
    }
    if (p.has_dropout() && !(p.dropout() >= 0 && p.dropout() < 1)) {
      return LayerError(ctx, absl::StrCat(".dropout ", p.dropout(), " must be in [0, 1)"));
    }
    // T, C <= 2^24 (input limits) and h <= C: bound the per-sample tensors before multiplying.
    if (t * hidden > kMaxSampleElements || 3 * t * c > kMaxSampleElements) {
      return LayerError(ctx, absl::StrCat(" (transformer_block) on ", ShapeText(ctx.input_shape),
                                          " with mlp_hidden ", hidden,
                                          " holds more than 2^24 elements per sample in one "
                                          "tensor"));
    }
    if (t > kMaxSavedElements / t || h * t * t > kMaxSavedElements) {
      // The longest sequence whose h x T^2 probabilities fit: floor(sqrt(2^28 / h)).
      int64_t fits = static_cast<int64_t>(std::sqrt(static_cast<double>(kMaxSavedElements / h)));
      while (fits > 0 && h * fits * fits > kMaxSavedElements) --fits;
      while (h * (fits + 1) * (fits + 1) <= kMaxSavedElements) ++fits;
      return LayerError(
          ctx,
          absl::StrCat(" (transformer_block): its input ", ShapeText(ctx.input_shape),
                       " is a sequence of T = ", t, ": ", h, " heads x T^2 = ",
                       absl::StrFormat("%.0f", static_cast<double>(h) * static_cast<double>(t) *
                                                   static_cast<double>(t)),
                       " attention probabilities per sample exceed 2^28 = ", kMaxSavedElements,
                       ": use sequences of at most ", fits,
                       " (data.seq_len, or the model's input shape) with ", h,
                       h == 1 ? " head" : " heads"));
    }
    if (static_cast<double>(c) * (4 * c + 2 * hidden) > static_cast<double>(kMaxParams)) {
      return LayerError(ctx, absl::StrCat(" (transformer_block) of width ", c, " and mlp_hidden ",
                                          hidden, " has more than 2^28 parameters"));
    }
    LayerInfo info;
    info.output_shape = {t, c};
    info.params = {{"ln1.weight", {c}, ""},
                   {"ln1.bias", {c}, ""},
                   {"attn.qkv.weight", {3 * c, c}, ""},
                   {"attn.qkv.bias", {3 * c}, ""},
                   {"attn.proj.weight", {c, c}, ""},
                   {"attn.proj.bias", {c}, ""},
                   {"ln2.weight", {c}, ""},
                   {"ln2.bias", {c}, ""},
                   {"mlp.fc.weight", {hidden, c}, ""},
                   {"mlp.fc.bias", {hidden}, ""},
                   {"mlp.proj.weight", {c, hidden}, ""},
                   {"mlp.proj.bias", {c}, ""}};
    info.param_count = 4 * c * c + 2 * c * hidden + 9 * c + hidden;
    const double T = static_cast<double>(t), C = static_cast<double>(c);
    const double H = static_cast<double>(hidden), heads = static_cast<double>(h);
    // GEMMs: qkv 6TC^2, scores 2T^2C, probabilities x v 2T^2C, proj 2TC^2, fc 2TCH, fc2 2THC;
    // the backward computes each GEMM twice (input and weight gradients).
    const double gemm = 8 * T * C * C + 4 * T * T * C + 4 * T * C * H;
    const double elementwise_fwd = 2 * kNormForward * T * C + kSoftmaxForward * heads * T * T +
                                   kGeluForward * T * H + 2 * T * C;
    const double elementwise_bwd = 2 * kNormBackward * T * C + kSoftmaxBackward * heads * T * T +
                                   kGeluBackward * T * H + 2 * T * C;
    info.forward_flops = gemm + elementwise_fwd;
    info.backward_flops = 2 * gemm + elementwise_bwd;
    // The weight gradients: one GEMM per weight matrix (qkv 6TC^2, proj 2TC^2, fc and fc2 2TCH
    // each) and the two LayerNorms' scale and shift.
    info.backward_weight_flops = 8 * T * C * C + 4 * T * C * H + 2 * 4 * T * C;
    // What the forward saves for the backward (ln1 and ln2 outputs, attention output, the
    // residual a, qkv: 7TC; fc and gelu outputs: 2TH; the probabilities: heads T^2; the two
    // LayerNorms' mean and variance: 4T), plus the gradients BackwardInput keeps in the same
    // per-micro-batch cache for BackwardWeight (fc2, ln2, proj and ln1 outputs' 4TC, qkv's 3TC,
    // fc's TH), which stay allocated with it (kernels/cpu/transformer_block.cc).
    info.saved_bytes = (7 * t * c + 2 * t * hidden + h * t * t + 4 * t + 7 * t * c + t * hidden) *
                       static_cast<int64_t>(sizeof(float));
    return info;
  }
};

}  // namespace

const LayerType& TransformerBlock() {
  static const TransformerBlockType kType;
  return kType;
}

}  // namespace dapple::model_types
