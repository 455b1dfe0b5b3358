// What the image layer types share (conv2d, maxpool2d, avgpool2d, global_avgpool, batchnorm2d,
// residual_block): the [C, H, W] input they read, the sliding window of convolution and pooling
// (its keys' rules and its output size), and the costs of the steps they are made of. Internal to
// common/model: one place for each rule and formula, which the types' files reuse.
//
// Thread safety: pure functions.
#ifndef DAPPLE_COMMON_MODEL_IMAGE_LAYERS_H_
#define DAPPLE_COMMON_MODEL_IMAGE_LAYERS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/model/layer_type.h"

namespace dapple::model_types {

// Per-element cost guesses of batch normalisation (statistics, normalisation, the step sums;
// backward: the two reductions and dx), as layernorm's; of the backward's 12, the reductions
// giving the gradients of gamma and beta are the weight gradient's 4.
inline constexpr double kBatchNormForwardPerElement = 8;
inline constexpr double kBatchNormBackwardPerElement = 12;
inline constexpr double kBatchNormBackwardWeightPerElement = 4;
// ReLU, and the residual add.
inline constexpr double kReluPerElement = 1;

// One sample's image.
struct Image {
  int64_t c = 0, h = 0, w = 0;
  std::vector<int64_t> Shape() const { return {c, h, w}; }
  int64_t Elements() const { return c * h * w; }
};

// ctx's input as [C, H, W], or kInvalidArgument naming both shapes and the fix ("model.layers[2]
// (conv2d) needs a [C, H, W] input (channels, height, width), got [784] from model.layers[1]
// (flatten): image layers go before the flatten, on a model.input_shape like [1, 28, 28]");
// token ids are refused.
absl::StatusOr<Image> ImageInput(const InferContext& ctx, absl::string_view type);

// The keys of a square sliding window (convolution, pooling), defaults applied.
struct Window {
  int64_t kernel = 0;
  int64_t stride = 1;
  int64_t padding = 0;
};

// Which padding a window allows: convolution any in [0, kernel); pooling at most kernel / 2, so
// that every window holds an input element (PyTorch's rule for nn.MaxPool2d / nn.AvgPool2d).
enum class PaddingRule { kConvolution, kPooling };

// Checks `w` for a layer at ctx on `in` and returns the output image of `out_channels` channels:
// kernel, stride and padding in [1, 2^24] (padding from 0) and the padding rule, each
// refused at its key with its value ("model.layers[2].stride 0 must be in [1, 2^24]"); a kernel
// larger than the padded input (which would leave an empty output) is refused naming the side
// and the layer the input comes from ("model.layers[2].kernel 7 is larger than the padded input
// height 5 (H 3 + 2 x padding 1) of [16, 3, 3] from model.layers[1] (maxpool2d): ..."); an
// output of more than 2^24 elements per sample is refused naming its shape. `type` names the
// layer in messages.
absl::StatusOr<Image> SlideWindow(const InferContext& ctx, absl::string_view type, const Image& in,
                                  const Window& w, PaddingRule rule, int64_t out_channels);

// floor((in + 2 padding - kernel) / stride) + 1: the positions of a window along one side
// (PyTorch's nn.Conv2d and pooling with dilation 1 and ceil_mode false). Requires
// kernel <= in + 2 padding and stride >= 1.
int64_t WindowPositions(int64_t in, int64_t kernel, int64_t stride, int64_t padding);

// Multiply-accumulates per sample of a convolution of `in` channels with a k x k kernel giving
// `out` (out.c x out.h x out.w outputs, each of in.c k^2 products); its FLOPs are twice that
// forward and twice again backward (input and weight gradients).
double ConvMacs(const Image& in, const Image& out, int64_t kernel);

// The bytes per output element of the workspace oneDNN's max pooling keeps for its backward
// (the position of each maximum in its window): 1 when a window has at most 255 elements
// (kernel <= 15), else 4.
int64_t MaxPoolWorkspaceBytesPerOutput(int64_t kernel);

// Appends a batch normalisation of the image `normalised` (its c channels, each over its h x w
// values per sample) to info's parameters and buffers, each name prefixed by `prefix` ("" for
// batchnorm2d, "bn1." in a residual block): parameters <prefix>weight, <prefix>bias [c];
// buffers <prefix>running_mean, <prefix>running_var [c]; and lowers
// info->batch_norm_values_per_sample to h x w (batchnorm2d.cc).
void AddBatchNorm(absl::string_view prefix, const Image& normalised, LayerInfo* info);

}  // namespace dapple::model_types

#endif  // DAPPLE_COMMON_MODEL_IMAGE_LAYERS_H_
