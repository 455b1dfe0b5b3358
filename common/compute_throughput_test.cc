#include "common/compute_throughput.h"

#include <vector>

#include "common/model_info.h"
#include "gtest/gtest.h"

namespace dapple {
namespace {

TEST(DevicePeakTflopsTest, StatedDensePeaksByCudaName) {
  // The brief's figures: H100 / H200 SXM dense bf16 989 TFLOP/s, fp32 67.
  EXPECT_EQ(DevicePeakTflops("NVIDIA H200", true), 989);
  EXPECT_EQ(DevicePeakTflops("NVIDIA H200", false), 67);
  EXPECT_EQ(DevicePeakTflops("NVIDIA H100 80GB HBM3", true), 989);
  EXPECT_EQ(DevicePeakTflops("NVIDIA H100 PCIe", true), 756);
  EXPECT_EQ(DevicePeakTflops("NVIDIA H100 NVL", false), 60);
  EXPECT_EQ(DevicePeakTflops("NVIDIA H200 NVL", true), 835);
  EXPECT_EQ(DevicePeakTflops("NVIDIA A100-SXM4-80GB", false), 19.5);
  EXPECT_EQ(DevicePeakTflops("cpu", true), std::nullopt);
  EXPECT_EQ(DevicePeakTflops("NVIDIA GeForce RTX 4090", true), std::nullopt);
  EXPECT_EQ(DevicePeakTflops("", false), std::nullopt);
}

TEST(StageTrainFlopsTest, SumsForwardAndBackwardOfTheStagesLayers) {
  v1::ModelSpec model;
  model.add_input_shape(784);
  for (int out : {1024, 10}) {
    v1::LayerSpec* l = model.add_layers();
    l->set_type("linear");
    l->mutable_linear()->set_out(out);
  }
  const std::vector<LayerInfo> infos = InferLayers(model).value();
  // A linear layer: 2 in out forward, twice that backward (input and weight gradients), plus
  // the bias terms its type declares; the sum is the registry's, layer by layer. The model's
  // first layer with parameters computes no input gradient (nothing below it trains): 4 in out,
  // not 6.
  const double first = infos[0].forward_flops + infos[0].backward_weight_flops;
  const double second = infos[1].forward_flops + infos[1].backward_flops;
  EXPECT_GE(first, 2.0 * 2 * 784 * 1024);
  EXPECT_LT(first, 2.1 * 2 * 784 * 1024);
  EXPECT_GE(second, 3.0 * 2 * 1024 * 10);
  EXPECT_EQ(StageTrainFlopsPerSample(infos, 0, 0), first);
  EXPECT_EQ(StageTrainFlopsPerSample(infos, 1, 1), second);
  EXPECT_EQ(StageTrainFlopsPerSample(infos, 0, 1), first + second);
}

TEST(StageTrainFlopsTest, TheFirstStagesBackwardStopsAtTheFirstLayerWithParameters) {
  v1::ModelSpec model;
  model.add_input_shape(1);
  model.add_input_shape(28);
  model.add_input_shape(28);
  model.add_layers()->set_type("flatten");
  for (int out : {64, 10}) {
    v1::LayerSpec* l = model.add_layers();
    l->set_type("linear");
    l->mutable_linear()->set_out(out);
  }
  const std::vector<LayerInfo> infos = InferLayers(model).value();
  const double flatten = infos[0].forward_flops;  // and no backward
  const double first_linear = infos[1].forward_flops + infos[1].backward_weight_flops;
  const double second_linear = infos[2].forward_flops + infos[2].backward_flops;
  EXPECT_EQ(StageTrainFlopsPerSample(infos, 0, 0), flatten);
  EXPECT_EQ(StageTrainFlopsPerSample(infos, 0, 1), flatten + first_linear);
  EXPECT_EQ(StageTrainFlopsPerSample(infos, 0, 2), flatten + first_linear + second_linear);
  // A later stage that starts at the first linear computes its input gradient.
  EXPECT_EQ(StageTrainFlopsPerSample(infos, 1, 1),
            infos[1].forward_flops + infos[1].backward_flops);
}

TEST(SetComputeThroughputTest, AchievedAndMfu) {
  v1::StageStepStats s;
  SetComputeThroughput(989e12 * 0.5, 1.0, "NVIDIA H200", true, &s);
  EXPECT_DOUBLE_EQ(s.achieved_tflops(), 494.5);
  ASSERT_TRUE(s.has_mfu());
  EXPECT_DOUBLE_EQ(s.mfu(), 0.5);
  EXPECT_EQ(FormatMfu(s), "50.0%");
  EXPECT_EQ(s.device_name(), "NVIDIA H200");
  EXPECT_EQ(s.flops(), 989e12 * 0.5);
  EXPECT_EQ(s.compute_seconds(), 1.0);
  // fp32 on the same device: against the fp32 peak.
  SetComputeThroughput(6.7e12, 0.5, "NVIDIA H200", false, &s);
  EXPECT_DOUBLE_EQ(s.achieved_tflops(), 13.4);
  EXPECT_DOUBLE_EQ(s.mfu(), 0.2);
  // A CPU: the achieved figure only.
  SetComputeThroughput(2e9, 0.02, "cpu", false, &s);
  EXPECT_DOUBLE_EQ(s.achieved_tflops(), 0.1);
  EXPECT_FALSE(s.has_mfu());
  EXPECT_EQ(FormatMfu(s), "-");
  // Nothing timed: no rate, no MFU.
  SetComputeThroughput(2e9, 0, "NVIDIA H200", true, &s);
  EXPECT_EQ(s.achieved_tflops(), 0);
  EXPECT_FALSE(s.has_mfu());
}

}  // namespace
}  // namespace dapple
