// maxpool2d, avgpool2d: pooling over square k x k windows of a [C, H, W] input, each channel on
// its own (PyTorch's nn.MaxPool2d, and nn.AvgPool2d with count_include_pad true: a window's
// padding counts as zeros in its average, so every window divides by k^2). stride defaults to
// the kernel (windows side by side), padding to 0 and is at most kernel / 2. -> [C, H', W'],
// H' = floor((H + 2 padding - kernel) / stride) + 1 (ceil_mode false).
//
// No parameters. Max pooling's backward sends each output gradient to its window's maximum: the
// forward keeps where each maximum is (oneDNN's workspace: a byte per output when a window holds
// at most 255 elements, image_layers.h MaxPoolWorkspaceBytesPerOutput); average pooling keeps
// nothing.
#include "absl/strings/str_cat.h"
#include "common/model/image_layers.h"
#include "common/model/layer_types.h"

namespace dapple::model_types {
namespace {

class Pool2dType : public LayerType {
 public:
  Pool2dType(absl::string_view name, absl::string_view example, bool max)
      : name_(name), example_(example), max_(max) {}
  absl::string_view name() const override { return name_; }
  absl::string_view example() const override { return example_; }
  absl::StatusOr<LayerInfo> Infer(const v1::LayerSpec& spec,
                                  const InferContext& ctx) const override {
    const v1::Pool2dParams& p = max_ ? spec.maxpool2d() : spec.avgpool2d();
    if (!p.has_kernel()) {
      return LayerError(
          ctx, absl::StrCat(".kernel is required for ", name_, " layers, e.g. ", example_));
    }
    absl::StatusOr<Image> in = ImageInput(ctx, name_);
    if (!in.ok()) return in.status();
    const Window w{p.kernel(), p.has_stride() ? p.stride() : p.kernel(), p.padding()};
    absl::StatusOr<Image> out = SlideWindow(ctx, name_, *in, w, PaddingRule::kPooling, in->c);
    if (!out.ok()) return out.status();
    LayerInfo info;
    info.output_shape = out->Shape();
    const double window = static_cast<double>(w.kernel) * static_cast<double>(w.kernel);
    const double outputs = static_cast<double>(out->Elements());
    info.forward_flops = window * outputs;  // a comparison or an add per window element
    if (max_) {
      // Zero dx, then add each output gradient at its maximum.
      info.backward_flops = static_cast<double>(in->Elements()) + outputs;
      info.saved_bytes = out->Elements() * MaxPoolWorkspaceBytesPerOutput(w.kernel);
    } else {
      info.backward_flops = window * outputs;  // each output gradient / k^2 into its window
    }
    return info;
  }

 private:
  absl::string_view name_;
  absl::string_view example_;
  bool max_;
};

}  // namespace

const LayerType& MaxPool2d() {
  static const Pool2dType kType("maxpool2d", "{type: maxpool2d, kernel: 2}", /*max=*/true);
  return kType;
}

const LayerType& AvgPool2d() {
  static const Pool2dType kType("avgpool2d", "{type: avgpool2d, kernel: 2}", /*max=*/false);
  return kType;
}

}  // namespace dapple::model_types
