// residual_block (residual_block.cc).
#include <string>
#include <vector>

#include "common/model/image_layers_testing.h"
#include "common/model_info.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple {
namespace {

using ::dapple::testing::Block;
using ::dapple::testing::ImageModel;
using ::dapple::testing::InferError;
using ::dapple::testing::Names;
using ::dapple::testing::Plain;
using ::testing::ElementsAre;

TEST(ResidualBlockTest, IdentityShortcut) {
  const std::vector<LayerInfo> l = InferLayers(ImageModel({16, 14, 14}, {Block(16)})).value();
  EXPECT_THAT(l[0].output_shape, ElementsAre(16, 14, 14));
  EXPECT_THAT(Names(l[0].params), ElementsAre("conv1.weight", "bn1.weight", "bn1.bias",
                                              "conv2.weight", "bn2.weight", "bn2.bias"));
  EXPECT_THAT(l[0].params[0].shape, ElementsAre(16, 16, 3, 3));
  EXPECT_THAT(l[0].params[3].shape, ElementsAre(16, 16, 3, 3));
  EXPECT_EQ(l[0].param_count, 2 * 16 * 16 * 9 + 4 * 16);
  EXPECT_THAT(Names(l[0].buffers), ElementsAre("bn1.running_mean", "bn1.running_var",
                                               "bn2.running_mean", "bn2.running_var"));
  EXPECT_EQ(l[0].buffer_count, 4 * 16);
  const double n = 16.0 * 14 * 14;
  const double macs = 2 * (n * 16 * 9);  // two 3x3 convolutions of 16 channels
  EXPECT_EQ(l[0].forward_flops, 2 * macs + 2 * 8 * n + 2 * n + n);
  EXPECT_EQ(l[0].backward_weight_flops, 2 * macs + 2 * 4 * n);
  EXPECT_EQ(l[0].backward_flops, 4 * macs + 2 * 12 * n + 2 * n + n);
  // a1, r1 and a2, then dL/dz1 and dL/dz2 (kept from BackwardInput for BackwardWeight).
  EXPECT_EQ(l[0].saved_bytes, (3 + 2) * 16 * 14 * 14 * 4);
}

TEST(ResidualBlockTest, ProjectionShortcutOnStrideOrChannels) {
  const std::vector<LayerInfo> l =
      InferLayers(ImageModel({16, 7, 7}, {Block(32, 2), Block(64)})).value();
  EXPECT_THAT(l[0].output_shape, ElementsAre(32, 4, 4));  // (7 - 1) / 2 + 1
  EXPECT_THAT(
      Names(l[0].params),
      ElementsAre("conv1.weight", "bn1.weight", "bn1.bias", "conv2.weight", "bn2.weight",
                  "bn2.bias", "shortcut.conv.weight", "shortcut.bn.weight", "shortcut.bn.bias"));
  EXPECT_THAT(l[0].params[0].shape, ElementsAre(32, 16, 3, 3));
  EXPECT_THAT(l[0].params[3].shape, ElementsAre(32, 32, 3, 3));
  EXPECT_THAT(l[0].params[6].shape, ElementsAre(32, 16, 1, 1));
  EXPECT_EQ(l[0].param_count, 32 * 16 * 9 + 32 * 32 * 9 + 32 * 16 + 6 * 32);
  EXPECT_THAT(
      Names(l[0].buffers),
      ElementsAre("bn1.running_mean", "bn1.running_var", "bn2.running_mean", "bn2.running_var",
                  "shortcut.bn.running_mean", "shortcut.bn.running_var"));
  EXPECT_EQ(l[0].buffer_count, 6 * 32);
  const double n = 32.0 * 4 * 4;
  const double macs = n * 16 * 9 + n * 32 * 9 + n * 16;
  EXPECT_EQ(l[0].forward_flops, 2 * macs + 3 * 8 * n + 2 * n + n);
  EXPECT_EQ(l[0].backward_weight_flops, 2 * macs + 3 * 4 * n);
  EXPECT_EQ(l[0].saved_bytes,
            (4 + 3) * 32 * 4 * 4 * 4);  // a1, r1, a2, the shortcut conv; 3 gradients
  // Stride 1 but more channels: a projection too.
  EXPECT_THAT(l[1].output_shape, ElementsAre(64, 4, 4));
  EXPECT_EQ(l[1].params.size(), 9u);
  // Down to 1 x 1 and beyond: a 3x3 window with padding 1 always fits.
  EXPECT_EQ(InferError({8, 1, 1}, {Block(8, 2), Block(8, 5)}), "");
}

TEST(ResidualBlockTest, KeysAreChecked) {
  v1::LayerSpec none = Block(16);
  none.mutable_residual_block()->clear_out_channels();
  EXPECT_EQ(InferError({16, 8, 8}, {none}),
            "model.layers[0].out_channels is required for residual_block layers, e.g. {type: "
            "residual_block, out_channels: 32, stride: 2}");
  EXPECT_EQ(InferError({16, 8, 8}, {Block(-3)}),
            "model.layers[0].out_channels -3 must be in [1, 2^24]");
  EXPECT_EQ(InferError({16, 8, 8}, {Block(16, 0)}),
            "model.layers[0].stride 0 must be in [1, 2^24]");
  EXPECT_EQ(InferError({16, 8, 8}, {Plain("global_avgpool"), Block(16)}),
            "model.layers[1] (residual_block) needs a [C, H, W] input (channels, height, width), "
            "got [16] from model.layers[0] (global_avgpool): image layers go before the flatten, "
            "on a model.input_shape like [1, 28, 28]");
  EXPECT_EQ(InferError({8192, 2, 2}, {Block(8192)}),
            "model.layers[0] (residual_block) from 8192 to 8192 channels has more than the "
            "maximum 2^28 (268435456) parameters");
}

}  // namespace
}  // namespace dapple
