#include "common/model/image_layers.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/model/limits.h"

namespace dapple::model_types {
namespace {

// Checks one key of a window against [lowest, 2^24].
absl::Status CheckWindowKey(const InferContext& ctx, absl::string_view key, int64_t value,
                            int64_t lowest) {
  if (value < lowest || value > kMaxSampleElements) {
    return LayerError(ctx, absl::StrCat(".", key, " ", value, " must be in [", lowest, ", 2^24]"));
  }
  return absl::OkStatus();
}

// The window must fit the padded input along one side ("height" or "width") of `in`.
absl::Status CheckSide(const InferContext& ctx, absl::string_view type, const Image& in,
                       const Window& w, absl::string_view side, absl::string_view letter,
                       int64_t size) {
  const int64_t padded = size + 2 * w.padding;
  if (w.kernel <= padded) return absl::OkStatus();
  return LayerError(
      ctx, absl::StrCat(".kernel ", w.kernel, " is larger than the padded input ", side, " ",
                        padded, " (", letter, " ", size, " + 2 x padding ", w.padding, ") of ",
                        ShapeText(in.Shape()), " from ", ctx.input_from, ": the ", type,
                        " window fits nowhere and its output would be empty: use a kernel of at "
                        "most ",
                        padded, ", more padding, or fewer downsampling layers before it"));
}

}  // namespace

absl::StatusOr<Image> ImageInput(const InferContext& ctx, absl::string_view type) {
  if (ctx.token_input) {
    return LayerError(
        ctx, absl::StrCat(" (", type, ") cannot read token ids ", ShapeText(ctx.input_shape),
                          " from ", ctx.input_from, ": image layers read [C, H, W] images"));
  }
  if (ctx.input_shape.size() != 3) {
    return LayerError(
        ctx, absl::StrCat(" (", type, ") needs a [C, H, W] input (channels, height, width), got ",
                          ShapeText(ctx.input_shape), " from ", ctx.input_from,
                          ": image layers go before the flatten, on a model.input_shape like "
                          "[1, 28, 28]"));
  }
  return Image{ctx.input_shape[0], ctx.input_shape[1], ctx.input_shape[2]};
}

absl::StatusOr<Image> SlideWindow(const InferContext& ctx, absl::string_view type, const Image& in,
                                  const Window& w, PaddingRule rule, int64_t out_channels) {
  if (absl::Status s = CheckWindowKey(ctx, "kernel", w.kernel, 1); !s.ok()) return s;
  if (absl::Status s = CheckWindowKey(ctx, "stride", w.stride, 1); !s.ok()) return s;
  if (absl::Status s = CheckWindowKey(ctx, "padding", w.padding, 0); !s.ok()) return s;
  if (rule == PaddingRule::kConvolution && w.padding >= w.kernel) {
    return LayerError(
        ctx, absl::StrCat(".padding ", w.padding, " is not less than the kernel ", w.kernel,
                          ": a window would see only padding: use at most ", w.kernel - 1));
  }
  if (rule == PaddingRule::kPooling && w.padding > w.kernel / 2) {
    return LayerError(
        ctx, absl::StrCat(".padding ", w.padding, " is more than half the kernel ", w.kernel,
                          " (every pooling window must hold an input element, as "
                          "in PyTorch): use at most ",
                          w.kernel / 2));
  }
  if (absl::Status s = CheckSide(ctx, type, in, w, "height", "H", in.h); !s.ok()) return s;
  if (absl::Status s = CheckSide(ctx, type, in, w, "width", "W", in.w); !s.ok()) return s;
  const Image out{out_channels, WindowPositions(in.h, w.kernel, w.stride, w.padding),
                  WindowPositions(in.w, w.kernel, w.stride, w.padding)};
  // Each factor is at most 3 x 2^24: multiply in double before the int64 product can overflow.
  if (static_cast<double>(out.c) * static_cast<double>(out.h) * static_cast<double>(out.w) >
      static_cast<double>(kMaxSampleElements)) {
    return LayerError(ctx, absl::StrCat(" (", type, ") output ", ShapeText(out.Shape()),
                                        " has more than the maximum 2^24 (", kMaxSampleElements,
                                        ") elements per sample"));
  }
  return out;
}

int64_t WindowPositions(int64_t in, int64_t kernel, int64_t stride, int64_t padding) {
  return (in + 2 * padding - kernel) / stride + 1;
}

double ConvMacs(const Image& in, const Image& out, int64_t kernel) {
  return static_cast<double>(out.Elements()) * static_cast<double>(in.c) *
         static_cast<double>(kernel) * static_cast<double>(kernel);
}

int64_t MaxPoolWorkspaceBytesPerOutput(int64_t kernel) { return kernel <= 15 ? 1 : 4; }

}  // namespace dapple::model_types
