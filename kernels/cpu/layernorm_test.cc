#include "kernels/cpu/layernorm.h"

#include <cmath>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/grad_check_testing.h"
#include "kernels/cpu/layer_testing.h"

namespace dapple::kernels {
namespace {

using testing::RandomTensor;

std::unique_ptr<LayerNormLayer> MakeLayer(int64_t width, uint64_t stream) {
  auto layer = std::make_unique<LayerNormLayer>(4, width, 1e-5);
  layer->weight().value = RandomTensor({width}, stream, 0.5, 1.5);
  layer->bias().value = RandomTensor({width}, stream + 1, -1, 1);
  return layer;
}

TEST(LayerNormLayerTest, ParamsStartAtOneAndZero) {
  LayerNormLayer layer(3, 6, 1e-5);
  EXPECT_EQ(layer.Type(), "layernorm");
  std::vector<Param*> params = layer.Params();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0]->name, "layer3.weight");
  EXPECT_EQ(params[0]->value.data, std::vector<float>(6, 1.0f));
  EXPECT_EQ(params[1]->name, "layer3.bias");
  EXPECT_EQ(params[1]->value.data, std::vector<float>(6, 0.0f));
}

TEST(LayerNormLayerTest, ForwardIsPytorchLayerNormAndSavesMeanAndVariance) {
  const int64_t c = 10;
  std::unique_ptr<LayerNormLayer> layer = MakeLayer(c, 1);
  const Tensor x = RandomTensor({2, 3, c}, 2, -3, 2);
  LayerCache cache;
  Tensor y;
  layer->Forward(x, &y, &cache, {});
  ASSERT_EQ(y.shape, x.shape);
  ASSERT_EQ(cache.saved.size(), 2u);
  ASSERT_EQ(cache.saved[0].numel(), 6);
  for (int64_t r = 0; r < 6; ++r) {
    const float* a = x.data.data() + r * c;
    double m = 0, v = 0;
    for (int64_t j = 0; j < c; ++j) m += a[j];
    m /= c;
    for (int64_t j = 0; j < c; ++j) v += (a[j] - m) * (a[j] - m);
    v /= c;  // biased, as torch.nn.LayerNorm
    EXPECT_NEAR(cache.saved[0].data[r], m, 1e-6);
    EXPECT_NEAR(cache.saved[1].data[r], v, 1e-6 * v);
    for (int64_t j = 0; j < c; ++j) {
      const double ref = (a[j] - m) / std::sqrt(v + 1e-5) * layer->weight().value.data[j] +
                         layer->bias().value.data[j];
      EXPECT_NEAR(y.data[r * c + j], ref, 2e-6 * (1 + std::fabs(ref))) << r << "," << j;
    }
  }
}

TEST(LayerNormLayerTest, ConstantRowGivesBiasAndFiniteGradients) {
  // var = 0: eps keeps rstd finite (1 / sqrt(eps)), and the row's output is the bias.
  std::unique_ptr<LayerNormLayer> layer = MakeLayer(4, 3);
  Tensor x = Tensor::Zeros({1, 4});
  x.Fill(2.5f);
  LayerCache cache;
  Tensor y, dx;
  layer->Forward(x, &y, &cache, {});
  EXPECT_EQ(y.data, layer->bias().value.data);
  layer->Backward(x, y, RandomTensor({1, 4}, 4, -1, 1), &dx, &cache);
  for (float v : dx.data) EXPECT_TRUE(std::isfinite(v));
}

TEST(LayerNormLayerTest, GradientsMatchFiniteDifferences) {
  std::unique_ptr<LayerNormLayer> layer = MakeLayer(6, 5);
  // Rows of spread ~1 (var ~ 0.3): third derivatives are O(1), so the O(h^2) truncation of
  // central differences stays below 1e-4.
  testing::ExpectGradientsMatchFiniteDifferences(layer.get(), RandomTensor({2, 3, 6}, 6, -1, 1), {},
                                                 7, /*check_dx=*/true, 5e-4, 1e-3);
}

TEST(LayerNormLayerTest, SplitBackwardMatchesPlainBackward) {
  testing::ExpectSplitBackwardMatches([] { return MakeLayer(8, 8); },
                                      RandomTensor({3, 2, 8}, 9, -1, 1), {},
                                      RandomTensor({2, 2, 8}, 10, -2, 2), {}, 11, 1e-6);
}

TEST(LayerNormLayerDeathTest, WrongWidthAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  LayerNormLayer layer(2, 4, 1e-5);
  LayerCache cache;
  Tensor y;
  EXPECT_DEATH(layer.Forward(Tensor::Zeros({2, 5}), &y, &cache, {}),
               "layer2 \\(layernorm\\) expects x \\[N, ..., 4\\], got \\[2, 5\\]");
}

}  // namespace
}  // namespace dapple::kernels
