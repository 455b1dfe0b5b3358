#include "kernels/cpu/residual_block.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/activations.h"
#include "kernels/cpu/batchnorm2d.h"
#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/grad_check_testing.h"
#include "kernels/cpu/layer_testing.h"

namespace dapple::kernels {
namespace {

using testing::RandomTensor;

struct Case {
  int64_t c, h, w, out, stride;
};
constexpr Case kIdentity{3, 6, 5, 3, 1};
constexpr Case kProjection{2, 7, 6, 4, 2};

std::unique_ptr<ResidualBlockLayer> MakeBlock(const Case& k) {
  auto block = std::make_unique<ResidualBlockLayer>(5, k.c, k.h, k.w, k.out, k.stride, 1e-5, 0.1);
  block->InitParams(3);
  // Batch norm parameters away from their initial 1 and 0, so that a swapped one shows.
  uint64_t stream = 40;
  for (Param* p : block->Params()) {
    if (p->value.shape.size() == 1) p->value = RandomTensor(p->value.shape, stream++, 0.5, 1.5);
  }
  return block;
}

TEST(ResidualBlockLayerTest, ParamsAndBuffersAreNamedInRegistryOrder) {
  std::unique_ptr<ResidualBlockLayer> id = MakeBlock(kIdentity);
  EXPECT_EQ(id->Type(), "residual_block");
  EXPECT_FALSE(id->has_projection());
  std::vector<std::string> names;
  for (const Param* p : id->Params()) names.push_back(p->name);
  EXPECT_EQ(names, (std::vector<std::string>{"layer5.conv1.weight", "layer5.bn1.weight",
                                             "layer5.bn1.bias", "layer5.conv2.weight",
                                             "layer5.bn2.weight", "layer5.bn2.bias"}));
  EXPECT_EQ(id->Params()[0]->value.shape, (std::vector<int64_t>{3, 3, 3, 3}));
  EXPECT_EQ(id->StepStatisticsSize(), 2 * 7);

  std::unique_ptr<ResidualBlockLayer> proj = MakeBlock(kProjection);
  EXPECT_TRUE(proj->has_projection());
  names.clear();
  for (const Param* p : proj->Params()) names.push_back(p->name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"layer5.conv1.weight", "layer5.bn1.weight", "layer5.bn1.bias",
                                      "layer5.conv2.weight", "layer5.bn2.weight", "layer5.bn2.bias",
                                      "layer5.shortcut.conv.weight", "layer5.shortcut.bn.weight",
                                      "layer5.shortcut.bn.bias"}));
  EXPECT_EQ(proj->Params()[0]->value.shape, (std::vector<int64_t>{4, 2, 3, 3}));
  EXPECT_EQ(proj->Params()[3]->value.shape, (std::vector<int64_t>{4, 4, 3, 3}));
  EXPECT_EQ(proj->Params()[6]->value.shape, (std::vector<int64_t>{4, 2, 1, 1}));
  names.clear();
  for (const Param* p : proj->Buffers()) names.push_back(p->name);
  EXPECT_EQ(names, (std::vector<std::string>{"layer5.bn1.running_mean", "layer5.bn1.running_var",
                                             "layer5.bn2.running_mean", "layer5.bn2.running_var",
                                             "layer5.shortcut.bn.running_mean",
                                             "layer5.shortcut.bn.running_var"}));
  EXPECT_EQ(proj->StepStatisticsSize(), 3 * 9);
  // Convolution weights: PyTorch's default bound 1 / sqrt(fan_in).
  EXPECT_LE(testing::MaxAbs(proj->conv1().value.data), 1 / std::sqrt(18.0f));
  EXPECT_LE(testing::MaxAbs(proj->conv2().value.data), 1 / std::sqrt(36.0f));
  EXPECT_LE(testing::MaxAbs(proj->shortcut_conv().value.data), 1 / std::sqrt(2.0f));
  EXPECT_GT(testing::MaxAbs(proj->shortcut_conv().value.data), 0.5 / std::sqrt(2.0f));
}

// The block built from the separately checked layers (conv2d_test, batchnorm2d_test, ReLU).
struct Composition {
  std::unique_ptr<Conv2dLayer> conv1, conv2, sconv;
  std::unique_ptr<BatchNorm2dLayer> bn1, bn2, sbn;
  ReluLayer relu1, relu2;

  Composition(const Case& k, ResidualBlockLayer* block) {
    const int64_t oh = WindowOutputSize(k.h, 3, k.stride, 1);
    const int64_t ow = WindowOutputSize(k.w, 3, k.stride, 1);
    conv1 = std::make_unique<Conv2dLayer>(0, k.c, k.h, k.w, k.out, 3, k.stride, 1, false);
    conv2 = std::make_unique<Conv2dLayer>(0, k.out, oh, ow, k.out, 3, 1, 1, false);
    bn1 = std::make_unique<BatchNorm2dLayer>(0, k.out, oh, ow, 1e-5, 0.1);
    bn2 = std::make_unique<BatchNorm2dLayer>(0, k.out, oh, ow, 1e-5, 0.1);
    conv1->weight().value = block->conv1().value;
    conv2->weight().value = block->conv2().value;
    Copy(block->bn1(), bn1.get());
    Copy(block->bn2(), bn2.get());
    if (block->has_projection()) {
      sconv = std::make_unique<Conv2dLayer>(0, k.c, k.h, k.w, k.out, 1, k.stride, 0, false);
      sbn = std::make_unique<BatchNorm2dLayer>(0, k.out, oh, ow, 1e-5, 0.1);
      sconv->weight().value = block->shortcut_conv().value;
      Copy(block->shortcut_bn(), sbn.get());
    }
  }
  static void Copy(BatchNormChannels& from, BatchNorm2dLayer* to) {
    to->norm().weight().value = from.weight().value;
    to->norm().bias().value = from.bias().value;
  }
  // The gradients in the block's Params() order.
  std::vector<const Tensor*> Grads() const {
    std::vector<const Tensor*> g{&conv1->weight().grad,      &bn1->norm().weight().grad,
                                 &bn1->norm().bias().grad,   &conv2->weight().grad,
                                 &bn2->norm().weight().grad, &bn2->norm().bias().grad};
    if (sconv) {
      g.insert(g.end(),
               {&sconv->weight().grad, &sbn->norm().weight().grad, &sbn->norm().bias().grad});
    }
    return g;
  }
  void Run(const Tensor& x, const Tensor& dy, const ForwardContext& ctx, Tensor* y, Tensor* dx) {
    LayerCache c[8];
    Tensor z1, b1, a1, z2, b2, zs, bs, sum, g, ga1, gb1, gz1, gz2, gb2, gs, dxs;
    conv1->Forward(x, &z1, &c[0], ctx);
    bn1->Forward(z1, &b1, &c[1], ctx);
    relu1.Forward(b1, &a1, &c[2], ctx);
    conv2->Forward(a1, &z2, &c[3], ctx);
    bn2->Forward(z2, &b2, &c[4], ctx);
    sum = b2;
    if (sconv) {
      sconv->Forward(x, &zs, &c[5], ctx);
      sbn->Forward(zs, &bs, &c[6], ctx);
      for (size_t i = 0; i < sum.data.size(); ++i) sum.data[i] += bs.data[i];
    } else {
      for (size_t i = 0; i < sum.data.size(); ++i) sum.data[i] += x.data[i];
    }
    relu2.Forward(sum, y, &c[7], ctx);
    if (dx == nullptr) return;
    relu2.Backward(sum, *y, dy, &g, &c[7]);
    bn2->Backward(z2, b2, g, &gz2, &c[4]);
    conv2->Backward(a1, z2, gz2, &ga1, &c[3]);
    relu1.Backward(b1, a1, ga1, &gb1, &c[2]);
    bn1->Backward(z1, b1, gb1, &gz1, &c[1]);
    conv1->Backward(x, z1, gz1, dx, &c[0]);
    if (sconv) {
      sbn->Backward(zs, bs, g, &gs, &c[6]);
      sconv->Backward(x, zs, gs, &dxs, &c[5]);
    } else {
      dxs = g;
    }
    for (size_t i = 0; i < dx->data.size(); ++i) dx->data[i] += dxs.data[i];
  }
};

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const float scale = testing::MaxAbs(want);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-5 * scale) << what << " " << i;
  }
}

TEST(ResidualBlockLayerTest, EqualsItsCompositionForwardBackwardAndStatistics) {
  for (const Case& k : {kIdentity, kProjection}) {
    std::unique_ptr<ResidualBlockLayer> block = MakeBlock(k);
    Composition ref(k, block.get());
    const Tensor x = RandomTensor({3, k.c, k.h, k.w}, 1, -1, 2);
    const ForwardContext ctx = testing::TrainingContext(1, 0, 0);
    Tensor y, dx, want_y, want_dx;
    LayerCache cache;
    block->Forward(x, &y, &cache, ctx);
    const Tensor dy = RandomTensor(y.shape, 2, -1, 1);
    block->Backward(x, y, dy, &dx, &cache);
    ref.Run(x, dy, ctx, &want_y, &want_dx);
    ExpectClose(y.data, want_y.data, "y");
    ExpectClose(dx.data, want_dx.data, "dx");
    std::vector<Param*> params = block->Params();
    std::vector<const Tensor*> want_grads = ref.Grads();
    ASSERT_EQ(params.size(), want_grads.size());
    for (size_t i = 0; i < params.size(); ++i) {
      ExpectClose(params[i]->grad.data, want_grads[i]->data, params[i]->name.c_str());
    }
    // Step statistics: each batch norm's, in order.
    std::vector<double> stats(block->StepStatisticsSize());
    block->ReadStepStatistics(stats.data());
    std::vector<BatchNorm2dLayer*> norms{ref.bn1.get(), ref.bn2.get()};
    if (ref.sbn) norms.push_back(ref.sbn.get());
    size_t offset = 0;
    for (BatchNorm2dLayer* n : norms) {
      std::vector<double> want(n->StepStatisticsSize());
      n->ReadStepStatistics(want.data());
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_NEAR(stats[offset + i], want[i], 1e-9 * (1 + std::fabs(want[i])));
      }
      n->ApplyStepStatistics(want.data());
      offset += want.size();
    }
    block->ApplyStepStatistics(stats.data());
    std::vector<Param*> buffers = block->Buffers();
    for (size_t i = 0; i < norms.size(); ++i) {
      ExpectClose(buffers[2 * i]->value.data, norms[i]->Buffers()[0]->value.data, "mean");
      ExpectClose(buffers[2 * i + 1]->value.data, norms[i]->Buffers()[1]->value.data, "var");
    }
    // Evaluation with the running statistics.
    LayerCache eval_cache;
    block->Forward(x, &y, &eval_cache, ForwardContext{});
    ref.Run(x, dy, ForwardContext{}, &want_y, nullptr);
    ExpectClose(y.data, want_y.data, "evaluation y");
  }
}

TEST(ResidualBlockLayerTest, SplitBackwardMatchesPlainBackward) {
  for (const Case& k : {kIdentity, kProjection}) {
    const ForwardContext ctx = testing::TrainingContext(1, 0, 0);
    testing::ExpectSplitBackwardMatches([&] { return MakeBlock(k); },
                                        RandomTensor({3, k.c, k.h, k.w}, 3, -1, 1), ctx,
                                        RandomTensor({2, k.c, k.h, k.w}, 4, -2, 2), ctx, 5, 1e-6);
  }
}

TEST(ResidualBlockLayerTest, FirstLayerWithoutDxGetsTheSameParameterGradients) {
  for (const Case& k : {kIdentity, kProjection}) {
    std::unique_ptr<ResidualBlockLayer> with = MakeBlock(k);
    std::unique_ptr<ResidualBlockLayer> without = MakeBlock(k);
    const Tensor x = RandomTensor({2, k.c, k.h, k.w}, 6, -1, 1);
    const ForwardContext ctx = testing::TrainingContext(1, 0, 0);
    LayerCache c1, c2;
    Tensor y1, y2, dx;
    with->Forward(x, &y1, &c1, ctx);
    without->Forward(x, &y2, &c2, ctx);
    const Tensor dy = RandomTensor(y1.shape, 7, -1, 1);
    with->Backward(x, y1, dy, &dx, &c1);
    without->Backward(x, y2, dy, nullptr, &c2);
    for (size_t i = 0; i < with->Params().size(); ++i) {
      EXPECT_EQ(without->Params()[i]->grad.data, with->Params()[i]->grad.data)
          << with->Params()[i]->name;
    }
  }
}

TEST(ResidualBlockLayerDeathTest, WrongShapeAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::unique_ptr<ResidualBlockLayer> block = MakeBlock(kProjection);
  LayerCache cache;
  Tensor y;
  EXPECT_DEATH(block->Forward(Tensor::Zeros({2, 3, 7, 6}), &y, &cache, {}),
               "layer5 \\(residual_block\\) expects x \\[N, 2, 7, 6\\], got \\[2, 3, 7, 6\\]");
}

}  // namespace
}  // namespace dapple::kernels
