// The planners on the example CNNs (examples/vgg_fmnist.yaml, examples/resnet_fmnist.yaml):
// the image layers' FLOPs and activation sizes reach the cost and memory models through the
// layer registry, and the early, wide stages hold most of the activations.
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/model_info.h"
#include "coordinator/planner/planner.h"
#include "coordinator/planner/planning_testing.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

// Weights + gradients + SGD's momentum of layers [first, last].
int64_t SgdMomentumWeightBytes(const std::vector<LayerInfo>& layers, int first, int last) {
  int64_t params = 0;
  for (int l = first; l <= last; ++l) params += layers[l].param_count;
  return params * 4 * 3;
}

// As stage [first, last] runs them: stage 0's backward stops at the first layer with parameters
// (a convolution here), which computes its weight gradient only.
double Flops(const std::vector<LayerInfo>& layers, int first, int last) {
  double flops = 0;
  bool below_first_trained = first == 0;
  for (int l = first; l <= last; ++l) {
    flops += layers[l].forward_flops;
    if (below_first_trained && !layers[l].params.empty()) {
      flops += layers[l].backward_weight_flops;
      below_first_trained = false;
    } else if (!below_first_trained) {
      flops += layers[l].backward_flops;
    }
  }
  return flops;
}

class CnnPlanningTest : public ::testing::TestWithParam<const char*> {};

TEST_P(CnnPlanningTest, TwoStagesWhoseMemoryIsWhatTheRuntimeAccounts) {
  const v1::JobSpec spec = ExampleSpec(GetParam());
  const std::vector<LayerInfo> layers = InferLayers(spec.model()).value();
  const int last_layer = static_cast<int>(layers.size()) - 1;
  const v1::ParallelPlan plan = PlanOrDie(spec);
  const v1::ParallelPlanSummary& s = plan.summary();
  ASSERT_EQ(s.stages_size(), 2);
  EXPECT_EQ(s.stages(0).first_layer(), 0);
  EXPECT_EQ(s.stages(1).first_layer(), s.stages(0).last_layer() + 1);
  EXPECT_EQ(s.stages(1).last_layer(), last_layer);
  EXPECT_EQ(s.micro_batches(), 4);
  EXPECT_GT(s.predicted_step_ms(), 0);
  const int64_t rows = 32;  // micro_batch 32, one replica per stage
  int64_t activations[2] = {0, 0};
  for (int st = 0; st < 2; ++st) {
    SCOPED_TRACE(absl::StrCat("stage ", st));
    const int first = s.stages(st).first_layer(), last = s.stages(st).last_layer();
    // The convolutions' FLOPs (from the registry) are the estimate's.
    EXPECT_DOUBLE_EQ(s.stages(st).compute_flops(), Flops(layers, first, last));
    EXPECT_GT(s.stages(st).compute_flops(), 0);
    activations[st] =
        s.stages(st).peak_in_flight() * rows * StageActivationBytesPerSample(layers, first, last);
    EXPECT_EQ(s.stages(st).peak_memory_bytes(),
              SgdMomentumWeightBytes(layers, first, last) + activations[st] +
                  BufferBytes(layers, first, last, s.micro_batches(), s.stages(st).peak_in_flight(),
                              rows));
  }
  // The first stage reads 28 x 28 images and keeps their 16-channel feature maps: its
  // activations outweigh its few weights and the later stage's activations, although the later
  // stage holds most of the parameters.
  const int cut = s.stages(0).last_layer();
  EXPECT_GT(activations[0], activations[1]);
  EXPECT_GT(activations[0], SgdMomentumWeightBytes(layers, 0, cut));
  EXPECT_GT(StageActivationBytesPerSample(layers, 0, cut),
            StageActivationBytesPerSample(layers, cut + 1, last_layer));
  EXPECT_LT(SgdMomentumWeightBytes(layers, 0, cut),
            SgdMomentumWeightBytes(layers, cut + 1, last_layer));
}

INSTANTIATE_TEST_SUITE_P(
    Examples, CnnPlanningTest, ::testing::Values("vgg_fmnist.yaml", "resnet_fmnist.yaml"),
    [](const ::testing::TestParamInfo<const char*>& info) {
      return std::string(info.param).substr(0, std::string(info.param).find('.'));
    });

TEST(CnnPlanningTest, EarlyConvolutionsHoldMostOfTheActivations) {
  // VGG: the first block (conv 16 on 28 x 28, batch norm, ReLU, pool) keeps more activation
  // bytes per sample than the rest of the model together.
  const std::vector<LayerInfo> layers = InferLayers(ExampleSpec("vgg_fmnist.yaml").model()).value();
  const int last = static_cast<int>(layers.size()) - 1;
  EXPECT_GT(StageActivationBytesPerSample(layers, 0, 3),
            StageActivationBytesPerSample(layers, 4, last));
  // A 16 x 28 x 28 map per layer output: 50176 bytes each for the conv, batch norm and ReLU.
  EXPECT_EQ(layers[0].output_bytes, 16 * 28 * 28 * 4);
  // ResNet: each block saves three (four with a projection) maps of its output's size, and
  // keeps two (three) gradients of that size from BackwardInput for BackwardWeight.
  const std::vector<LayerInfo> resnet =
      InferLayers(ExampleSpec("resnet_fmnist.yaml").model()).value();
  EXPECT_EQ(resnet[4].saved_bytes, (3 + 2) * 16 * 14 * 14 * 4);
  EXPECT_EQ(resnet[5].saved_bytes, (4 + 3) * 32 * 7 * 7 * 4);
}

}  // namespace
}  // namespace dapple::coordinator
