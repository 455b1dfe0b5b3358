// residual_block: ResNet's basic block (He et al., "Deep Residual Learning for Image
// Recognition", CVPR 2016, section 3 and figure 2 left) as ONE pipeline layer, so the planner
// cuts between blocks. On a sample's [C, H, W] input x, with s = stride and O = out_channels:
//   a1 = conv3x3(x; stride s, padding 1, no bias)    r1 = relu(bn1(a1))
//   a2 = conv3x3(r1; stride 1, padding 1, no bias)   y  = relu(bn2(a2) + shortcut(x))
// shortcut(x) = x when s is 1 and O = C (identity), else bn(conv1x1(x; stride s, no bias))
// (projection, option B of the paper). -> [O, H', W'], H' = floor((H - 1) / s) + 1. Batch
// norms as batchnorm2d (eps 1e-5, momentum 0.1; docs/layers.md "Batch normalisation").
//
// Parameters (in this order): conv1.weight [O, C, 3, 3], bn1.weight [O], bn1.bias [O],
// conv2.weight [O, O, 3, 3], bn2.weight [O], bn2.bias [O], and with a projection
// shortcut.conv.weight [O, C, 1, 1], shortcut.bn.weight [O], shortcut.bn.bias [O]. Buffers:
// bn1.running_mean, bn1.running_var, bn2.running_mean, bn2.running_var, and with a projection
// shortcut.bn.running_mean, shortcut.bn.running_var, each [O].
//
// Saved per sample for the backward beyond x and y (the kernels keep exactly these): a1, r1 and
// a2, and with a projection the shortcut convolution's output, each O H' W' floats (the ReLU
// masks come from r1 and y; the batch norms' per-channel statistics are per micro-batch).
#include "absl/strings/str_cat.h"
#include "common/model/image_layers.h"
#include "common/model/layer_types.h"
#include "common/model/limits.h"

namespace dapple::model_types {
namespace {

class ResidualBlockType : public LayerType {
 public:
  absl::string_view name() const override { return "residual_block"; }
  absl::string_view example() const override {
    return "{type: residual_block, out_channels: 32, stride: 2}";
  }
  absl::StatusOr<LayerInfo> Infer(const v1::LayerSpec& spec,
                                  const InferContext& ctx) const override {
    const v1::ResidualBlockParams& p = spec.residual_block();
    if (!p.has_out_channels()) {
      return LayerError(ctx, ".out_channels is required for residual_block layers, e.g. " +
                                 std::string(example()));
    }
    const int64_t o = p.out_channels();
    if (o <= 0 || o > kMaxSampleElements) {
      return LayerError(ctx, absl::StrCat(".out_channels ", o, " must be in [1, 2^24]"));
    }
    absl::StatusOr<Image> in = ImageInput(ctx, name());
    if (!in.ok()) return in.status();
    // The first convolution sets the output size; the 1x1 shortcut of the same stride and no
    // padding gives the same floor((H - 1) / s) + 1, so the sum always fits.
    const Window conv1{3, p.has_stride() ? p.stride() : 1, 1};
    absl::StatusOr<Image> out = SlideWindow(ctx, name(), *in, conv1, PaddingRule::kConvolution, o);
    if (!out.ok()) return out.status();
    const int64_t c = in->c;
    const bool projection = conv1.stride != 1 || c != o;
    const double weights =
        9.0 * static_cast<double>(o) * (static_cast<double>(c) + static_cast<double>(o)) +
        (projection ? static_cast<double>(o) * static_cast<double>(c) : 0.0);
    if (weights > static_cast<double>(kMaxParams)) {
      return LayerError(ctx, absl::StrCat(" (residual_block) from ", c, " to ", o,
                                          " channels has more than the maximum 2^28 (", kMaxParams,
                                          ") parameters"));
    }
    LayerInfo info;
    info.output_shape = out->Shape();
    info.params.push_back({"conv1.weight", {o, c, 3, 3}, ""});
    info.param_count += 9 * o * c;
    AddBatchNorm("bn1.", *out, &info);
    info.params.push_back({"conv2.weight", {o, o, 3, 3}, ""});
    info.param_count += 9 * o * o;
    AddBatchNorm("bn2.", *out, &info);
    if (projection) {
      info.params.push_back({"shortcut.conv.weight", {o, c, 1, 1}, ""});
      info.param_count += o * c;
      AddBatchNorm("shortcut.bn.", *out, &info);
    }
    const Image mid{o, out->h, out->w};  // conv2's input
    const double macs =
        ConvMacs(*in, *out, 3) + ConvMacs(mid, *out, 3) + (projection ? ConvMacs(*in, *out, 1) : 0);
    const double n = static_cast<double>(out->Elements());
    const double norms = projection ? 3 : 2;
    // Forward: the convolutions, the batch norms, two ReLUs and the add. Backward: each
    // convolution's dx and dW (as many MACs as its forward each), the batch norms' dx and their
    // parameters' gradients, the ReLUs' masks and the add's split.
    info.forward_flops =
        2 * macs + norms * kBatchNormForwardPerElement * n + 2 * kReluPerElement * n + n;
    info.backward_weight_flops = 2 * macs + norms * kBatchNormBackwardWeightPerElement * n;
    info.backward_flops =
        info.backward_weight_flops + 2 * macs +
        norms * (kBatchNormBackwardPerElement - kBatchNormBackwardWeightPerElement) * n +
        2 * kReluPerElement * n + n;
    // The forward's saved tensors (3 or 4 per output element), plus the gradients of the batch
    // norms' outputs BackwardInput keeps in the same per-micro-batch cache for BackwardWeight
    // (2 or 3 per output element; kernels/cpu/residual_block.cc).
    info.saved_bytes =
        (projection ? 4 + 3 : 3 + 2) * out->Elements() * static_cast<int64_t>(sizeof(float));
    return info;
  }
};

}  // namespace

const LayerType& ResidualBlock() {
  static const ResidualBlockType kType;
  return kType;
}

}  // namespace dapple::model_types
