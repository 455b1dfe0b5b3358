// conv2d: 2-D convolution of a [C, H, W] input with out_channels square k x k kernels (PyTorch's
// nn.Conv2d with dilation 1, groups 1, zero padding):
//   y[o, i, j] = bias[o] + sum over c, u, v of weight[o, c, u, v] x[c, s i + u - p, s j + v - p]
// -> [out_channels, H', W'], H' = floor((H + 2p - k) / s) + 1 (image_layers.h WindowPositions).
//
// Parameters (in this order): weight [out_channels, C, k, k] (OIHW), bias [out_channels] (when
// bias is true, the default). Its backward needs only its input and the weights: it keeps
// nothing else (saved bytes 0).
#include "absl/strings/str_cat.h"
#include "common/model/image_layers.h"
#include "common/model/layer_types.h"
#include "common/model/limits.h"

namespace dapple::model_types {
namespace {

class Conv2dType : public LayerType {
 public:
  absl::string_view name() const override { return "conv2d"; }
  absl::string_view example() const override {
    return "{type: conv2d, out_channels: 16, kernel: 3, padding: 1}";
  }
  absl::StatusOr<LayerInfo> Infer(const v1::LayerSpec& spec,
                                  const InferContext& ctx) const override {
    const v1::Conv2dParams& p = spec.conv2d();
    if (!p.has_out_channels()) {
      return LayerError(
          ctx, ".out_channels is required for conv2d layers, e.g. " + std::string(example()));
    }
    if (!p.has_kernel()) {
      return LayerError(ctx,
                        ".kernel is required for conv2d layers, e.g. " + std::string(example()));
    }
    const int64_t out_channels = p.out_channels();
    if (out_channels <= 0 || out_channels > kMaxSampleElements) {
      return LayerError(ctx, absl::StrCat(".out_channels ", out_channels, " must be in [1, 2^24]"));
    }
    absl::StatusOr<Image> in = ImageInput(ctx, name());
    if (!in.ok()) return in.status();
    const Window w{p.kernel(), p.has_stride() ? p.stride() : 1, p.padding()};
    absl::StatusOr<Image> out =
        SlideWindow(ctx, name(), *in, w, PaddingRule::kConvolution, out_channels);
    if (!out.ok()) return out.status();
    // out_channels, C and k are each at most 2^24: bound the weight count before the int64
    // product can overflow.
    const double weights = static_cast<double>(out_channels) * static_cast<double>(in->c) *
                           static_cast<double>(w.kernel) * static_cast<double>(w.kernel);
    if (weights > static_cast<double>(kMaxParams)) {
      return LayerError(
          ctx,
          absl::StrCat(" (conv2d) weight [", out_channels, ", ", in->c, ", ", w.kernel, ", ",
                       w.kernel, "] has more than the maximum 2^28 (", kMaxParams, ") parameters"));
    }
    const bool bias = !p.has_bias() || p.bias();
    LayerInfo info;
    info.output_shape = out->Shape();
    info.params = {{"weight", {out_channels, in->c, w.kernel, w.kernel}, ""}};
    info.param_count = out_channels * in->c * w.kernel * w.kernel;
    if (bias) {
      info.params.push_back({"bias", {out_channels}, ""});
      info.param_count += out_channels;
    }
    const double macs = ConvMacs(*in, *out, w.kernel);
    const double bias_adds = bias ? static_cast<double>(out->Elements()) : 0;
    info.forward_flops = 2 * macs + bias_adds;
    // dx is a transposed convolution and dW a correlation of x with dy: each as many MACs as
    // the forward; the bias gradient sums dy.
    info.backward_weight_flops = 2 * macs + bias_adds;
    info.backward_flops = 2 * macs + info.backward_weight_flops;
    return info;
  }
};

}  // namespace

const LayerType& Conv2d() {
  static const Conv2dType kType;
  return kType;
}

}  // namespace dapple::model_types
