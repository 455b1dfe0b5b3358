// The CUDA image layers (conv2d, maxpool2d, avgpool2d, global_avgpool, batchnorm2d,
// residual_block; cuDNN, fp32) against their CPU twins (kernels/cpu, built by MakeCpuLayer from
// the same declaration and with the same parameters): two training micro-batches A and B through
// the split backward (BackwardInput A, B, then BackwardWeight B, A, against the CPU's Backward of
// A then B): outputs, dL/dx and every parameter gradient; then the step statistics of both
// micro-batches (the same layout and values as the CPU's), their application to the running
// statistics (the same buffers) and an evaluation forward with them. bf16 is refused.
//
// Tolerances (per tensor, |got - want| <= rtol x max |want|, NaN failing):
// - 1e-5: conv2d, avgpool2d, global_avgpool, batchnorm2d's output (one convolution, window sum
//   or per-channel reduction: two correct fp32 orders differ by a few ulps of the largest term);
// - 0 (bitwise): maxpool2d (a selection and a routing);
// - 1e-4: batchnorm2d's dx and dgamma (two reductions subtracted, cudnn_ops_test.cc) and the
//   whole residual_block (two convolutions and two or three batch norms in series);
// - step statistics (double sums of each batch norm's input): 1e-12 where that input is the
//   layer's own x (batchnorm2d: the same floats summed in another order), 1e-5 in the residual
//   block, whose batch norms sum its convolutions' outputs (which agree with oneDNN's to the
//   convolution's 1e-5, cudnn_ops_test.cc); running statistics 1e-6 (the same double formula,
//   rounded to float once).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "common/model/image_layers_testing.h"
#include "common/model_info.h"
#include "gtest/gtest.h"
#include "kernels/cpu/grad_check_testing.h"
#include "kernels/cpu/layer_factory.h"
#include "kernels/cuda/layer_factory.h"
#include "kernels/cuda/testing.h"

namespace dapple::kernels::cuda {
namespace {

using testing::CheckCuda;
using testing::Context;
using testing::DeviceArray;

struct ImageCase {
  std::string name;
  v1::ModelSpec model;
  int64_t rows;
  double rtol;
  double stats_rtol = 1e-12;  // the step statistics' (see above)
};

void PrintTo(const ImageCase& c, std::ostream* os) { *os << c.name; }

std::vector<ImageCase> Cases() {
  using dapple::testing::Block;
  using dapple::testing::Conv;
  using dapple::testing::ImageModel;
  using dapple::testing::Plain;
  using dapple::testing::Pool;
  v1::LayerSpec conv_no_bias = Conv(5, 3, 2, 1);
  conv_no_bias.mutable_conv2d()->set_bias(false);
  return {
      {"Conv2d", ImageModel({3, 9, 7}, {Conv(6, 3, 1, 1)}), 2, 1e-5},
      {"Conv2dStridedNoBias", ImageModel({4, 8, 8}, {conv_no_bias}), 3, 1e-5},
      {"MaxPool2d", ImageModel({3, 9, 9}, {Pool("maxpool2d", 3, 2, 1)}), 2, 0},
      {"AvgPool2d", ImageModel({3, 8, 6}, {Pool("avgpool2d", 2)}), 2, 1e-5},
      {"AvgPool2dPadded", ImageModel({2, 7, 7}, {Pool("avgpool2d", 3, 2, 1)}), 2, 1e-5},
      {"GlobalAvgPool", ImageModel({4, 5, 6}, {Plain("global_avgpool")}), 3, 1e-5},
      {"BatchNorm2d", ImageModel({4, 5, 5}, {Plain("batchnorm2d")}), 3, 1e-4},
      {"ResidualBlockIdentity", ImageModel({4, 6, 6}, {Block(4)}), 2, 1e-4, 1e-5},
      {"ResidualBlockProjection", ImageModel({3, 8, 8}, {Block(6, 2)}), 2, 1e-4, 1e-5},
  };
}

void ExpectNear(const std::string& what, const std::vector<float>& got,
                const std::vector<float>& want, double rtol) {
  double scale = 0;
  for (float w : want) scale = std::max(scale, std::fabs(static_cast<double>(w)));
  testing::ExpectClose(what, got, want, std::vector<double>(want.size(), scale), rtol);
}

void ExpectOk(const absl::Status& s) { EXPECT_TRUE(s.ok()) << s; }

// Random parameters at unit scale (batch-norm gains around 1) and running statistics away from
// their initial 0 / 1, so that evaluation and the update both see them.
void Randomise(Layer* layer) {
  uint64_t stream = 100;
  for (Param* p : layer->Params()) {
    const std::vector<int64_t>& shape = p->value.shape;
    const bool gain =
        shape.size() == 1 && p->name.size() >= 6 && p->name.substr(p->name.size() - 6) == "weight";
    const float a =
        shape.size() == 1 ? 0.5f : static_cast<float>(1.0 / std::sqrt(double(shape[1] * 9)));
    p->value = kernels::testing::RandomTensor(shape, stream++, gain ? 0.5f : -a, gain ? 1.5f : a);
  }
  for (Param* b : layer->Buffers()) {
    const bool var = b->name.find("running_var") != std::string::npos;
    b->value = kernels::testing::RandomTensor(b->value.shape, stream++, var ? 0.5f : -0.5f,
                                              var ? 1.5f : 0.5f);
  }
}

class CudaImageLayerTest : public ::testing::TestWithParam<ImageCase> {};

TEST_P(CudaImageLayerTest, MatchesCpuLayerWithStatistics) {
  DAPPLE_SKIP_WITHOUT_GPU();
  const ImageCase& c = GetParam();
  absl::StatusOr<std::vector<LayerInfo>> infos = InferLayers(c.model);
  ASSERT_TRUE(infos.ok()) << infos.status();
  const LayerInfo& info = (*infos)[0];
  const v1::LayerSpec& spec = c.model.layers(0);
  absl::StatusOr<std::unique_ptr<Layer>> made_cpu = MakeCpuLayer(info, spec, 42);
  ASSERT_TRUE(made_cpu.ok()) << made_cpu.status();
  Layer& cpu = **made_cpu;
  Randomise(&cpu);
  absl::StatusOr<std::unique_ptr<DeviceLayer>> made_gpu = MakeCudaLayer(info, spec, Dtype::kFp32);
  ASSERT_TRUE(made_gpu.ok()) << made_gpu.status();
  DeviceLayer& gpu = **made_gpu;
  EXPECT_FALSE(MakeCudaLayer(info, spec, Dtype::kBf16).ok());
  const KernelContext& ctx = Context();

  // Device copies of the parameters (zero gradients) and buffers, before the CPU moves them.
  std::vector<std::unique_ptr<DeviceArray<float>>> memory;
  std::vector<DeviceParam> params;
  for (Param* p : cpu.Params()) {
    memory.push_back(std::make_unique<DeviceArray<float>>(p->value.data));
    float* value = memory.back()->get();
    memory.push_back(std::make_unique<DeviceArray<float>>(std::vector<float>(p->grad.data.size())));
    params.push_back(
        {value, memory.back()->get(), nullptr, static_cast<int64_t>(p->value.data.size())});
  }
  std::vector<float*> buffers;
  std::vector<DeviceArray<float>*> buffer_arrays;
  for (Param* b : cpu.Buffers()) {
    memory.push_back(std::make_unique<DeviceArray<float>>(b->value.data));
    buffers.push_back(memory.back()->get());
    buffer_arrays.push_back(memory.back().get());
  }
  ASSERT_TRUE(gpu.BindParams(params).ok());
  if (!buffers.empty()) {
    ASSERT_TRUE(gpu.BindBuffers(buffers).ok());
  }

  const int64_t x_count = c.rows * NumElements(info.input_shape);
  const int64_t y_count = c.rows * NumElements(info.output_shape);
  auto shaped = [&](std::vector<float> data, const std::vector<int64_t>& per_sample) {
    Tensor t;
    t.shape = {c.rows};
    t.shape.insert(t.shape.end(), per_sample.begin(), per_sample.end());
    t.data = std::move(data);
    return t;
  };
  auto random = [](int64_t count, uint64_t stream) {
    return kernels::testing::RandomTensor({count}, stream, -1, 1).data;
  };
  const Tensor xa = shaped(random(x_count, 1), info.input_shape),
               xb = shaped(random(x_count, 2), info.input_shape),
               dya = shaped(random(y_count, 3), info.output_shape),
               dyb = shaped(random(y_count, 4), info.output_shape);
  ForwardContext train;
  train.training = true;

  // CPU: Forward A, B; Backward A, B.
  LayerCache ca, cb;
  Tensor ya, yb, dxa, dxb;
  cpu.Forward(xa, &ya, &ca, train);
  cpu.Forward(xb, &yb, &cb, train);
  cpu.Backward(xa, ya, dya, &dxa, &ca);
  cpu.Backward(xb, yb, dyb, &dxb, &cb);
  const int64_t stats = cpu.StepStatisticsSize();
  ASSERT_EQ(gpu.StepStatisticsSize(), stats);
  std::vector<double> want_stats(stats), got_stats(stats);
  cpu.ReadStepStatistics(want_stats.data());

  // GPU: the split sequence.
  absl::StatusOr<LayerBuffers> sizes = gpu.Buffers(c.rows);
  ASSERT_TRUE(sizes.ok()) << sizes.status();
  std::vector<std::unique_ptr<DeviceArray<unsigned char>>> cache_memory;
  auto make_cache = [&] {
    DeviceCache cache;
    for (size_t bytes : sizes->saved) {
      cache_memory.push_back(
          std::make_unique<DeviceArray<unsigned char>>(std::max<size_t>(bytes, 1)));
      cache.saved.push_back(cache_memory.back()->get());
    }
    for (size_t bytes : sizes->grads) {
      cache_memory.push_back(
          std::make_unique<DeviceArray<unsigned char>>(std::max<size_t>(bytes, 1)));
      cache.grads.push_back(cache_memory.back()->get());
    }
    return cache;
  };
  DeviceCache ga = make_cache(), gb = make_cache();
  DeviceArray<unsigned char> scratch(std::max<size_t>(sizes->scratch, 1));
  const Scratch s{scratch.get(), sizes->scratch};
  DeviceArray<float> d_xa(xa.data), d_xb(xb.data), d_dya(dya.data), d_dyb(dyb.data);
  DeviceArray<float> d_ya(y_count), d_yb(y_count), d_dxa(x_count), d_dxb(x_count);
  ExpectOk(gpu.Forward(ctx, d_xa.get(), d_ya.get(), c.rows, &ga, train, s));
  ExpectOk(gpu.Forward(ctx, d_xb.get(), d_yb.get(), c.rows, &gb, train, s));
  ExpectOk(
      gpu.BackwardInput(ctx, d_xa.get(), d_ya.get(), d_dya.get(), d_dxa.get(), c.rows, &ga, s));
  ExpectOk(
      gpu.BackwardInput(ctx, d_xb.get(), d_yb.get(), d_dyb.get(), d_dxb.get(), c.rows, &gb, s));
  ExpectOk(gpu.BackwardWeight(ctx, d_xb.get(), d_yb.get(), d_dyb.get(), c.rows, &gb, s));
  ExpectOk(gpu.BackwardWeight(ctx, d_xa.get(), d_ya.get(), d_dya.get(), c.rows, &ga, s));
  ExpectOk(gpu.ReadStepStatistics(ctx, got_stats.data()));
  CheckCuda(cudaStreamSynchronize(ctx.stream), "layer kernels");

  ExpectNear("ya", d_ya.Download(), ya.data, c.rtol);
  ExpectNear("yb", d_yb.Download(), yb.data, c.rtol);
  ExpectNear("dxa", d_dxa.Download(), dxa.data, c.rtol);
  ExpectNear("dxb", d_dxb.Download(), dxb.data, c.rtol);
  const std::vector<Param*> cpu_params = cpu.Params();
  for (size_t i = 0; i < cpu_params.size(); ++i) {
    std::vector<float> got(cpu_params[i]->grad.data.size());
    CheckCuda(
        cudaMemcpy(got.data(), params[i].grad, got.size() * sizeof(float), cudaMemcpyDeviceToHost),
        "download gradient");
    ExpectNear(cpu_params[i]->name + ".grad", got, cpu_params[i]->grad.data,
               std::max(c.rtol, 1e-4));
  }
  if (stats == 0) return;

  std::vector<double> scale(stats);
  for (int64_t i = 0; i < stats; ++i) scale[i] = std::fabs(want_stats[i]) + 1;
  testing::ExpectClose("step statistics", got_stats, want_stats, scale, c.stats_rtol);
  // Apply the CPU's statistics on both (the sum over one replica), then evaluate with them.
  cpu.ApplyStepStatistics(want_stats.data());
  ExpectOk(gpu.ApplyStepStatistics(ctx, want_stats.data()));
  const std::vector<Param*> cpu_buffers = cpu.Buffers();
  for (size_t i = 0; i < cpu_buffers.size(); ++i) {
    ExpectNear(cpu_buffers[i]->name, buffer_arrays[i]->Download(), cpu_buffers[i]->value.data,
               1e-6);
  }
  ExpectOk(gpu.ReadStepStatistics(ctx, got_stats.data()));
  for (int64_t i = 0; i < stats; ++i) EXPECT_EQ(got_stats[i], 0.0) << "cleared statistic " << i;
  LayerCache ce;
  Tensor ye;
  cpu.Forward(xa, &ye, &ce, ForwardContext());
  DeviceCache ge = make_cache();
  ExpectOk(gpu.Forward(ctx, d_xa.get(), d_ya.get(), c.rows, &ge, ForwardContext(), s));
  ExpectNear("evaluation y", d_ya.Download(), ye.data, c.rtol);
  ExpectOk(gpu.ReadStepStatistics(ctx, got_stats.data()));
  for (int64_t i = 0; i < stats; ++i) EXPECT_EQ(got_stats[i], 0.0) << "evaluation statistic " << i;
}

INSTANTIATE_TEST_SUITE_P(Layers, CudaImageLayerTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<ImageCase>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace dapple::kernels::cuda
