// conv2d (conv2d.cc) and the window rules it shares with pooling (image_layers.h).
#include <string>
#include <vector>

#include "common/model/image_layers.h"
#include "common/model/image_layers_testing.h"
#include "common/model_info.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple {
namespace {

using ::dapple::testing::Conv;
using ::dapple::testing::ImageModel;
using ::dapple::testing::InferError;
using ::dapple::testing::Names;
using ::dapple::testing::Plain;
using ::dapple::testing::Pool;
using ::testing::ElementsAre;

TEST(Conv2dTest, ShapesParametersAndFlops) {
  const std::vector<LayerInfo> l =
      InferLayers(ImageModel({1, 28, 28}, {Conv(16, 3, 1, 1)})).value();
  EXPECT_THAT(l[0].output_shape, ElementsAre(16, 28, 28));
  EXPECT_THAT(Names(l[0].params), ElementsAre("weight", "bias"));
  EXPECT_THAT(l[0].params[0].shape, ElementsAre(16, 1, 3, 3));  // OIHW
  EXPECT_THAT(l[0].params[1].shape, ElementsAre(16));
  EXPECT_EQ(l[0].param_count, 16 * 9 + 16);
  EXPECT_TRUE(l[0].buffers.empty());
  const double macs = 16.0 * 28 * 28 * 1 * 9;
  const double outputs = 16.0 * 28 * 28;
  EXPECT_EQ(l[0].forward_flops, 2 * macs + outputs);
  EXPECT_EQ(l[0].backward_weight_flops, 2 * macs + outputs);
  EXPECT_EQ(l[0].backward_flops, 4 * macs + outputs);
  EXPECT_EQ(l[0].output_bytes, 16 * 28 * 28 * 4);
  EXPECT_EQ(l[0].saved_bytes, 0);
}

TEST(Conv2dTest, StridePaddingAndNoBias) {
  v1::LayerSpec conv = Conv(8, 3, 2);
  conv.mutable_conv2d()->set_bias(false);
  const std::vector<LayerInfo> l =
      InferLayers(ImageModel({3, 28, 20}, {conv, Conv(4, 5, 3, 2)})).value();
  EXPECT_THAT(l[0].output_shape, ElementsAre(8, 13, 9));  // (28 - 3) / 2 + 1, (20 - 3) / 2 + 1
  EXPECT_THAT(Names(l[0].params), ElementsAre("weight"));
  EXPECT_EQ(l[0].param_count, 8 * 3 * 9);
  const double macs = 8.0 * 13 * 9 * 3 * 9;
  EXPECT_EQ(l[0].forward_flops, 2 * macs);
  EXPECT_EQ(l[0].backward_flops, 4 * macs);
  // (13 + 4 - 5) / 3 + 1, (9 + 4 - 5) / 3 + 1
  EXPECT_THAT(l[1].output_shape, ElementsAre(4, 5, 3));
}

TEST(Conv2dTest, WindowPositionsIsPyTorchsFloor) {
  EXPECT_EQ(model_types::WindowPositions(28, 3, 1, 1), 28);
  EXPECT_EQ(model_types::WindowPositions(28, 2, 2, 0), 14);
  EXPECT_EQ(model_types::WindowPositions(7, 2, 2, 0), 3);
  EXPECT_EQ(model_types::WindowPositions(7, 3, 2, 1), 4);
  EXPECT_EQ(model_types::WindowPositions(1, 1, 5, 0), 1);
}

TEST(Conv2dTest, KeysAreChecked) {
  v1::LayerSpec no_out = Conv(16, 3);
  no_out.mutable_conv2d()->clear_out_channels();
  EXPECT_EQ(InferError({1, 28, 28}, {no_out}),
            "model.layers[0].out_channels is required for conv2d layers, e.g. {type: conv2d, "
            "out_channels: 16, kernel: 3, padding: 1}");
  v1::LayerSpec no_kernel = Conv(16, 3);
  no_kernel.mutable_conv2d()->clear_kernel();
  EXPECT_EQ(InferError({1, 28, 28}, {no_kernel}),
            "model.layers[0].kernel is required for conv2d layers, e.g. {type: conv2d, "
            "out_channels: 16, kernel: 3, padding: 1}");
  EXPECT_EQ(InferError({1, 28, 28}, {Conv(0, 3)}),
            "model.layers[0].out_channels 0 must be in [1, 2^24]");
  EXPECT_EQ(InferError({1, 28, 28}, {Conv(4, 0)}), "model.layers[0].kernel 0 must be in [1, 2^24]");
  EXPECT_EQ(InferError({1, 28, 28}, {Conv(4, 3, 0)}),
            "model.layers[0].stride 0 must be in [1, 2^24]");
  v1::LayerSpec negative = Conv(4, 3);
  negative.mutable_conv2d()->set_padding(-1);
  EXPECT_EQ(InferError({1, 28, 28}, {negative}), "model.layers[0].padding -1 must be in [0, 2^24]");
  EXPECT_EQ(InferError({1, 28, 28}, {Conv(4, 3, 1, 3)}),
            "model.layers[0].padding 3 is not less than the kernel 3: a window would see only "
            "padding: use at most 2");
}

TEST(Conv2dTest, KernelLargerThanThePaddedInputIsRefusedNamingTheSide) {
  EXPECT_EQ(InferError({1, 28, 28}, {Pool("maxpool2d", 2), Conv(4, 15)}),
            "model.layers[1].kernel 15 is larger than the padded input height 14 (H 14 + 2 x "
            "padding 0) of [1, 14, 14] from model.layers[0] (maxpool2d): the conv2d window fits "
            "nowhere and its output would be empty: use a kernel of at most 14, more padding, or "
            "fewer downsampling layers before it");
  EXPECT_EQ(InferError({1, 20, 4}, {Conv(4, 7, 1, 1)}),
            "model.layers[0].kernel 7 is larger than the padded input width 6 (W 4 + 2 x padding "
            "1) of [1, 20, 4] from model.input_shape: the conv2d window fits nowhere and its "
            "output would be empty: use a kernel of at most 6, more padding, or fewer "
            "downsampling layers before it");
  EXPECT_EQ(InferError({1, 4, 4}, {Conv(4, 7, 1, 1)}).substr(0, 40),
            "model.layers[0].kernel 7 is larger than ");
  EXPECT_EQ(InferError({1, 4, 4}, {Conv(4, 6, 1, 2)}), "");  // padded to 8
}

TEST(Conv2dTest, ShapesThatDoNotChainNameBothShapes) {
  EXPECT_EQ(InferError({1, 28, 28}, {Plain("flatten"), Conv(4, 3)}),
            "model.layers[1] (conv2d) needs a [C, H, W] input (channels, height, width), got "
            "[784] from model.layers[0] (flatten): image layers go before the flatten, on a "
            "model.input_shape like [1, 28, 28]");
  EXPECT_EQ(InferError({28, 28}, {Conv(4, 3)}),
            "model.layers[0] (conv2d) needs a [C, H, W] input (channels, height, width), got "
            "[28, 28] from model.input_shape: image layers go before the flatten, on a "
            "model.input_shape like [1, 28, 28]");
  v1::LayerSpec linear;
  linear.set_type("linear");
  linear.mutable_linear()->set_out(10);
  EXPECT_EQ(InferError({1, 28, 28}, {Conv(16, 3, 1, 1), linear}),
            "model.layers[1] (linear) needs a flat input, got [16, 28, 28] from model.layers[0] "
            "(conv2d): add a flatten layer before it");
  v1::ModelSpec tokens = ImageModel({16}, {Conv(4, 3)});
  tokens.set_input_type("tokens");
  EXPECT_EQ(InferLayers(tokens).status().message(),
            "model.layers[0] (conv2d) cannot read token ids [16] from model.input_shape: image "
            "layers read [C, H, W] images");
}

TEST(Conv2dTest, SizesAreBoundedBeforeTheyOverflow) {
  EXPECT_EQ(InferError({4096, 8, 8}, {Conv(4096, 5)}),
            "model.layers[0] (conv2d) weight [4096, 4096, 5, 5] has more than the maximum 2^28 "
            "(268435456) parameters");
  EXPECT_EQ(InferError({1, 4096, 4096}, {Conv(2, 1)}),
            "model.layers[0] (conv2d) output [2, 4096, 4096] has more than the maximum 2^24 "
            "(16777216) elements per sample");
  // Stride and padding at their limits: the padded input and the products stay in range.
  EXPECT_EQ(InferError({1, 1, 1}, {Conv(1, 2, 16777216, 1)}), "");
  EXPECT_EQ(InferError({1, 1, 1}, {Conv(1, 16777216, 1, 16777215)}),
            "model.layers[0] (conv2d) output [1, 16777216, 16777216] has more than the maximum "
            "2^24 (16777216) elements per sample");
}

}  // namespace
}  // namespace dapple
