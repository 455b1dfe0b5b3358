// maxpool2d, avgpool2d (pool2d.cc) and global_avgpool (global_avgpool.cc).
#include <string>
#include <vector>

#include "common/model/image_layers_testing.h"
#include "common/model_info.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple {
namespace {

using ::dapple::testing::ImageModel;
using ::dapple::testing::InferError;
using ::dapple::testing::Plain;
using ::dapple::testing::Pool;
using ::testing::ElementsAre;

TEST(Pool2dTest, MaxPoolShapesFlopsAndWorkspace) {
  const std::vector<LayerInfo> l =
      InferLayers(ImageModel({16, 28, 28}, {Pool("maxpool2d", 2), Pool("maxpool2d", 3, 2, 1)}))
          .value();
  EXPECT_THAT(l[0].output_shape, ElementsAre(16, 14, 14));  // stride defaults to the kernel
  EXPECT_TRUE(l[0].params.empty());
  EXPECT_EQ(l[0].forward_flops, 4.0 * 16 * 14 * 14);
  EXPECT_EQ(l[0].backward_flops, 16.0 * 28 * 28 + 16 * 14 * 14);
  EXPECT_EQ(l[0].backward_weight_flops, 0);
  EXPECT_EQ(l[0].saved_bytes, 16 * 14 * 14);              // a byte per output: where its maximum is
  EXPECT_THAT(l[1].output_shape, ElementsAre(16, 7, 7));  // (14 + 2 - 3) / 2 + 1
  // Windows of more than 255 elements index their maximum with 4 bytes.
  const std::vector<LayerInfo> big =
      InferLayers(ImageModel({2, 32, 32}, {Pool("maxpool2d", 16)})).value();
  EXPECT_THAT(big[0].output_shape, ElementsAre(2, 2, 2));
  EXPECT_EQ(big[0].saved_bytes, 2 * 2 * 2 * 4);
}

TEST(Pool2dTest, AvgPoolShapesAndFlops) {
  const std::vector<LayerInfo> l =
      InferLayers(ImageModel({2, 5, 5}, {Pool("avgpool2d", 3, 1, 1)})).value();
  EXPECT_THAT(l[0].output_shape, ElementsAre(2, 5, 5));
  EXPECT_EQ(l[0].forward_flops, 9.0 * 50);
  EXPECT_EQ(l[0].backward_flops, 9.0 * 50);
  EXPECT_EQ(l[0].saved_bytes, 0);
}

TEST(Pool2dTest, KeysAreChecked) {
  v1::LayerSpec no_kernel = Pool("maxpool2d", 2);
  no_kernel.mutable_maxpool2d()->clear_kernel();
  EXPECT_EQ(InferError({1, 28, 28}, {no_kernel}),
            "model.layers[0].kernel is required for maxpool2d layers, e.g. {type: maxpool2d, "
            "kernel: 2}");
  EXPECT_EQ(InferError({1, 28, 28}, {Pool("avgpool2d", 2, 0)}),
            "model.layers[0].stride 0 must be in [1, 2^24]");
  EXPECT_EQ(InferError({1, 28, 28}, {Pool("maxpool2d", 3, 1, 2)}),
            "model.layers[0].padding 2 is more than half the kernel 3 (every pooling window must "
            "hold an input element, as in PyTorch): use at most 1");
  EXPECT_EQ(InferError({1, 28, 28}, {Pool("avgpool2d", 2, 2, 1)}), "");
}

TEST(Pool2dTest, PoolingThatLeavesNothingIsRefused) {
  // 28 -> 14 -> 7 -> 3 -> 1: a fifth 2x2 window fits nowhere.
  const v1::LayerSpec pool = Pool("maxpool2d", 2);
  EXPECT_EQ(InferError({1, 28, 28}, {pool, pool, pool, pool}), "");
  EXPECT_EQ(InferError({1, 28, 28}, {pool, pool, pool, pool, pool}),
            "model.layers[4].kernel 2 is larger than the padded input height 1 (H 1 + 2 x padding "
            "0) of [1, 1, 1] from model.layers[3] (maxpool2d): the maxpool2d window fits nowhere "
            "and its output would be empty: use a kernel of at most 1, more padding, or fewer "
            "downsampling layers before it");
}

TEST(Pool2dTest, PoolingNeedsAnImage) {
  EXPECT_EQ(InferError({784}, {Pool("avgpool2d", 2)}),
            "model.layers[0] (avgpool2d) needs a [C, H, W] input (channels, height, width), got "
            "[784] from model.input_shape: image layers go before the flatten, on a "
            "model.input_shape like [1, 28, 28]");
}

TEST(GlobalAvgPoolTest, ChannelsOut) {
  const std::vector<LayerInfo> l =
      InferLayers(ImageModel({8, 7, 7}, {Plain("global_avgpool")})).value();
  EXPECT_THAT(l[0].output_shape, ElementsAre(8));
  EXPECT_TRUE(l[0].params.empty());
  EXPECT_EQ(l[0].forward_flops, 8.0 * 49);
  EXPECT_EQ(l[0].backward_flops, 8.0 * 49);
  EXPECT_EQ(l[0].saved_bytes, 0);
  EXPECT_EQ(InferError({8, 7, 7}, {Plain("global_avgpool"), Plain("global_avgpool")}),
            "model.layers[1] (global_avgpool) needs a [C, H, W] input (channels, height, width), "
            "got [8] from model.layers[0] (global_avgpool): image layers go before the flatten, "
            "on a model.input_shape like [1, 28, 28]");
}

}  // namespace
}  // namespace dapple
