// batchnorm2d (batchnorm2d.cc).
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
using ::dapple::testing::Names;
using ::dapple::testing::Plain;
using ::testing::ElementsAre;

TEST(BatchNorm2dTest, ParametersBuffersAndFlops) {
  const std::vector<LayerInfo> l =
      InferLayers(ImageModel({16, 14, 14}, {Plain("batchnorm2d")})).value();
  EXPECT_THAT(l[0].output_shape, ElementsAre(16, 14, 14));
  EXPECT_THAT(Names(l[0].params), ElementsAre("weight", "bias"));
  EXPECT_THAT(l[0].params[0].shape, ElementsAre(16));
  EXPECT_THAT(l[0].params[1].shape, ElementsAre(16));
  EXPECT_EQ(l[0].param_count, 32);
  EXPECT_THAT(Names(l[0].buffers), ElementsAre("running_mean", "running_var"));
  EXPECT_THAT(l[0].buffers[0].shape, ElementsAre(16));
  EXPECT_THAT(l[0].buffers[1].shape, ElementsAre(16));
  EXPECT_EQ(l[0].buffer_count, 32);
  const double n = 16.0 * 14 * 14;
  EXPECT_EQ(l[0].forward_flops, 8 * n);
  EXPECT_EQ(l[0].backward_flops, 12 * n);
  EXPECT_EQ(l[0].backward_weight_flops, 4 * n);
  // Its statistics are per micro-batch and channel, not per sample.
  EXPECT_EQ(l[0].saved_bytes, 0);
}

TEST(BatchNorm2dTest, KeysAreChecked) {
  v1::LayerSpec bn = Plain("batchnorm2d");
  bn.mutable_batchnorm2d()->set_eps(0);
  EXPECT_EQ(InferError({4, 8, 8}, {bn}), "model.layers[0].eps 0 must be in (0, 1)");
  bn.mutable_batchnorm2d()->set_eps(1e-3);
  bn.mutable_batchnorm2d()->set_momentum(1.5);
  EXPECT_EQ(InferError({4, 8, 8}, {bn}),
            "model.layers[0].momentum 1.5 must be in [0, 1]: the weight of a step's batch "
            "statistics in the running ones");
  bn.mutable_batchnorm2d()->set_momentum(0);
  EXPECT_EQ(InferError({4, 8, 8}, {bn}), "");
}

TEST(BatchNorm2dTest, NeedsAnImage) {
  EXPECT_EQ(InferError({4, 8, 8}, {Plain("flatten"), Plain("batchnorm2d")}),
            "model.layers[1] (batchnorm2d) needs a [C, H, W] input (channels, height, width), got "
            "[256] from model.layers[0] (flatten): image layers go before the flatten, on a "
            "model.input_shape like [1, 28, 28]");
}

}  // namespace
}  // namespace dapple
