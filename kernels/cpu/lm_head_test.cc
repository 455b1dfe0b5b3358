#include "kernels/cpu/lm_head.h"

#include <cmath>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/grad_check_testing.h"
#include "kernels/cpu/init.h"
#include "kernels/cpu/layer_testing.h"

namespace dapple::kernels {
namespace {

using testing::RandomTensor;

std::unique_ptr<LmHeadLayer> MakeHead(uint64_t stream) {
  auto layer = std::make_unique<LmHeadLayer>(5, 6, 9, "");  // C 6, vocab 9
  layer->weight().value = RandomTensor({9, 6}, stream, -1, 1);
  return layer;
}

TEST(LmHeadLayerTest, UntiedParamAndInit) {
  LmHeadLayer layer(5, 16, 40, "");
  EXPECT_EQ(layer.Type(), "lm_head");
  layer.InitParams(42, -1);
  std::vector<Param*> params = layer.Params();
  ASSERT_EQ(params.size(), 1u);
  EXPECT_EQ(params[0]->name, "layer5.weight");
  EXPECT_TRUE(params[0]->tied_to.empty());
  EXPECT_EQ(params[0]->value.shape, (std::vector<int64_t>{40, 16}));
  Tensor expected = Tensor::Zeros({40, 16});
  FillSymmetricUniform(42, 5, InitTensor::kWeight, Gpt2InitBound(), &expected);
  EXPECT_EQ(params[0]->value.data, expected.data);
  EXPECT_FALSE(layer.ShareTiedParam("layer5.weight", params[0]));  // untied: nothing to share
}

TEST(LmHeadLayerTest, ForwardIsXTimesWeightTransposedOverTheLastDim) {
  std::unique_ptr<LmHeadLayer> layer = MakeHead(1);
  const Tensor x = RandomTensor({2, 3, 6}, 2, -1, 1);
  LayerCache cache;
  Tensor y;
  layer->Forward(x, &y, &cache, {});
  ASSERT_EQ(y.shape, (std::vector<int64_t>{2, 3, 9}));
  for (int64_t r = 0; r < 6; ++r) {
    for (int64_t v = 0; v < 9; ++v) {
      double ref = 0;
      for (int64_t c = 0; c < 6; ++c) {
        ref += static_cast<double>(x.data[r * 6 + c]) * layer->weight().value.data[v * 6 + c];
      }
      EXPECT_NEAR(y.data[r * 9 + v], ref, 1e-5 * (1 + std::fabs(ref)));
    }
  }
}

TEST(LmHeadLayerTest, GradientsMatchFiniteDifferences) {
  std::unique_ptr<LmHeadLayer> layer = MakeHead(3);
  testing::ExpectGradientsMatchFiniteDifferences(layer.get(), RandomTensor({2, 3, 6}, 4, -1, 1), {},
                                                 5, /*check_dx=*/true, 5e-4, 1e-3);
}

TEST(LmHeadLayerTest, SplitBackwardMatchesPlainBackward) {
  testing::ExpectSplitBackwardMatches([] { return MakeHead(6); }, RandomTensor({3, 2, 6}, 7, -1, 1),
                                      {}, RandomTensor({1, 2, 6}, 8, -1, 1), {}, 9, 1e-6);
}

TEST(LmHeadLayerTest, TiedCopyStartsBitwiseAsTheEmbeddingTable) {
  EmbeddingLayer embedding(0, 40, 16, 8, 8, 0.0);
  embedding.InitParams(42);
  LmHeadLayer head(7, 16, 40, "layer0.token_embedding");
  head.InitParams(42, /*tied_layer=*/0);
  EXPECT_EQ(head.weight().tied_to, "layer0.token_embedding");
  EXPECT_EQ(head.weight().value.data, embedding.token_embedding().value.data);
}

TEST(LmHeadLayerTest, SharedTiedParamAccumulatesBothGradients) {
  // Two heads on one embedding: one shares the table, the other keeps its copy. The shared
  // table's gradient must be the embedding's own plus the copy's.
  const int64_t vocab = 9, c = 6, t = 3;
  EmbeddingLayer embedding(0, vocab, c, t, t, 0.0);
  embedding.InitParams(1);
  LmHeadLayer shared(4, c, vocab, "layer0.token_embedding");
  LmHeadLayer separate(4, c, vocab, "layer0.token_embedding");
  shared.InitParams(1, 0);
  separate.InitParams(1, 0);
  EXPECT_FALSE(shared.ShareTiedParam("layer4.bias", &embedding.token_embedding()));
  ASSERT_TRUE(shared.ShareTiedParam("layer4.weight", &embedding.token_embedding()));
  EXPECT_EQ(shared.Params()[0], &embedding.token_embedding());

  Tensor tokens;
  tokens.shape = {2, t};
  tokens.data = {1, 4, 8, 0, 4, 2};
  LayerCache ce, cs, cp;
  Tensor h, logits_shared, logits_separate, dh;
  embedding.Forward(tokens, &h, &ce, {});
  shared.Forward(h, &logits_shared, &cs, {});
  separate.Forward(h, &logits_separate, &cp, {});
  EXPECT_EQ(logits_shared.data, logits_separate.data);  // same values, same computation
  const Tensor dlogits = RandomTensor(logits_shared.shape, 2, -1, 1);
  shared.Backward(h, logits_shared, dlogits, &dh, &cs);
  separate.Backward(h, logits_separate, dlogits, nullptr, &cp);
  const std::vector<float> head_part = embedding.token_embedding().grad.data;
  EXPECT_EQ(head_part, separate.weight().grad.data);
  embedding.Backward(tokens, h, dh, nullptr, &ce);
  // Embedding-only gradient, from a fresh embedding with the same values.
  EmbeddingLayer alone(0, vocab, c, t, t, 0.0);
  alone.InitParams(1);
  LayerCache ca;
  Tensor h2;
  alone.Forward(tokens, &h2, &ca, {});
  alone.Backward(tokens, h2, dh, nullptr, &ca);
  for (size_t i = 0; i < head_part.size(); ++i) {
    EXPECT_FLOAT_EQ(embedding.token_embedding().grad.data[i],
                    head_part[i] + alone.token_embedding().grad.data[i])
        << i;
  }
}

}  // namespace
}  // namespace dapple::kernels
