#include "kernels/cpu/embedding.h"

#include <cmath>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/grad_check_testing.h"
#include "kernels/cpu/init.h"
#include "kernels/cpu/layer_testing.h"

namespace dapple::kernels {
namespace {

using testing::RandomTensor;
using testing::TrainingContext;

// Token ids [n, t] in [0, vocab), a pure function of `stream`.
Tensor Tokens(int64_t n, int64_t t, int64_t vocab, uint64_t stream) {
  Tensor x;
  x.Resize({n, t});
  for (size_t i = 0; i < x.data.size(); ++i) {
    x.data[i] = static_cast<float>(SplitMix64At(stream, i) % static_cast<uint64_t>(vocab));
  }
  return x;
}

std::unique_ptr<EmbeddingLayer> MakeLayer(double dropout, uint64_t stream) {
  // vocab 7, dim 3, positions 6, sequence 4.
  auto layer = std::make_unique<EmbeddingLayer>(2, 7, 3, 6, 4, dropout);
  layer->token_embedding().value = RandomTensor({7, 3}, stream, -1, 1);
  layer->position_embedding().value = RandomTensor({6, 3}, stream + 1, -1, 1);
  return layer;
}

TEST(EmbeddingLayerTest, ParamsAndInit) {
  EmbeddingLayer layer(0, 50, 8, 16, 12, 0.1);
  EXPECT_EQ(layer.Type(), "embedding");
  layer.InitParams(42);
  std::vector<Param*> params = layer.Params();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0]->name, "layer0.token_embedding");
  EXPECT_EQ(params[0]->value.shape, (std::vector<int64_t>{50, 8}));
  EXPECT_EQ(params[1]->name, "layer0.position_embedding");
  EXPECT_EQ(params[1]->value.shape, (std::vector<int64_t>{16, 8}));
  const float a = Gpt2InitBound();
  EXPECT_FLOAT_EQ(a, 0.034641016f);  // 0.02 sqrt(3): standard deviation 0.02
  for (const Param* p : params) {
    double sum2 = 0;
    for (float v : p->value.data) {
      EXPECT_GE(v, -a);
      EXPECT_LT(v, a);
      sum2 += static_cast<double>(v) * v;
    }
    // 400 and 128 draws of U(-a, a): the sample standard deviation is 0.02 within ~10%.
    EXPECT_NEAR(std::sqrt(sum2 / p->value.data.size()), 0.02, 0.003) << p->name;
  }
  EXPECT_NE(params[0]->value.data[0], params[1]->value.data[0]);  // different streams
  Tensor table = Tensor::Zeros({50, 8});
  InitTokenEmbedding(42, 0, &table);
  EXPECT_EQ(table.data, params[0]->value.data);  // the function a tied lm_head uses
}

TEST(EmbeddingLayerTest, ForwardAddsTokenAndPositionRows) {
  std::unique_ptr<EmbeddingLayer> layer = MakeLayer(0.5, 1);
  const Tensor x = Tokens(3, 4, 7, 2);
  LayerCache cache;
  Tensor y;
  ForwardContext eval;  // training false: no dropout
  layer->Forward(x, &y, &cache, eval);
  ASSERT_EQ(y.shape, (std::vector<int64_t>{3, 4, 3}));
  const std::vector<float>& tok = layer->token_embedding().value.data;
  const std::vector<float>& pos = layer->position_embedding().value.data;
  for (int64_t n = 0; n < 3; ++n) {
    for (int64_t t = 0; t < 4; ++t) {
      const int64_t id = static_cast<int64_t>(x.data[n * 4 + t]);
      for (int64_t c = 0; c < 3; ++c) {
        EXPECT_EQ(y.data[(n * 4 + t) * 3 + c], tok[id * 3 + c] + pos[t * 3 + c]);
      }
    }
  }
}

TEST(EmbeddingLayerTest, GradientsMatchFiniteDifferencesWithDropout) {
  for (double p : {0.0, 0.3}) {
    std::unique_ptr<EmbeddingLayer> layer = MakeLayer(p, 3);
    // Linear in the tables: central differences are exact up to float rounding.
    testing::ExpectGradientsMatchFiniteDifferences(layer.get(), Tokens(5, 4, 7, 4),
                                                   TrainingContext(8, 3, 20), 5,
                                                   /*check_dx=*/false, 5e-4, 1e-3);
  }
}

TEST(EmbeddingLayerTest, SplitBackwardMatchesPlainBackward) {
  testing::ExpectSplitBackwardMatches([] { return MakeLayer(0.2, 6); }, Tokens(3, 4, 7, 7),
                                      TrainingContext(1, 0, 0), Tokens(2, 4, 7, 8),
                                      TrainingContext(1, 0, 3), 9, 1e-6);
}

TEST(EmbeddingLayerTest, BatchEqualsItsHalvesWithFirstSampleOffsets) {
  std::unique_ptr<EmbeddingLayer> layer = MakeLayer(0.5, 10);
  const Tensor x = Tokens(4, 4, 7, 11);
  LayerCache cache;
  Tensor whole, first, second;
  layer->Forward(x, &whole, &cache, TrainingContext(3, 1, 8));
  Tensor a, b;
  a.shape = b.shape = {2, 4};
  a.data.assign(x.data.begin(), x.data.begin() + 8);
  b.data.assign(x.data.begin() + 8, x.data.end());
  layer->Forward(a, &first, &cache, TrainingContext(3, 1, 8));
  layer->Forward(b, &second, &cache, TrainingContext(3, 1, 10));
  first.data.insert(first.data.end(), second.data.begin(), second.data.end());
  EXPECT_EQ(whole.data, first.data);
}

TEST(EmbeddingLayerTest, BackwardInputGivesZeroDxAndNoParamGrads) {
  std::unique_ptr<EmbeddingLayer> layer = MakeLayer(0.0, 12);
  const Tensor x = Tokens(2, 4, 7, 13);
  LayerCache cache;
  Tensor y, dx = RandomTensor({1, 1}, 14, 1, 2);
  layer->Forward(x, &y, &cache, {});
  layer->BackwardInput(x, y, RandomTensor(y.shape, 15, -1, 1), &dx, &cache);
  EXPECT_EQ(dx.shape, x.shape);
  EXPECT_EQ(testing::MaxAbs(dx.data), 0.0f);
  layer->BackwardInput(x, y, RandomTensor(y.shape, 15, -1, 1), nullptr, &cache);
  for (Param* p : layer->Params()) EXPECT_EQ(testing::MaxAbs(p->grad.data), 0.0f);
}

TEST(EmbeddingLayerDeathTest, BadTokenIdsAbortBeforeAnyAccess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::unique_ptr<EmbeddingLayer> layer = MakeLayer(0.0, 16);
  LayerCache cache;
  Tensor y;
  for (float bad : {7.0f, -1.0f, 2.5f, std::nanf("")}) {
    Tensor x = Tokens(2, 4, 7, 17);
    x.data[5] = bad;
    EXPECT_DEATH(layer->Forward(x, &y, &cache, {}),
                 "layer2 \\(embedding\\): token id .* at sample 1 position 1 is not an integer "
                 "in \\[0, 7\\)")
        << bad;
  }
  EXPECT_DEATH(layer->Forward(Tensor::Zeros({2, 5}), &y, &cache, {}),
               "layer2 \\(embedding\\) expects token ids x \\[N, 4\\], got \\[2, 5\\]");
}

}  // namespace
}  // namespace dapple::kernels
