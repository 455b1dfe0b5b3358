#include "kernels/cpu/dropout.h"

#include <cmath>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/grad_check_testing.h"
#include "kernels/cpu/layer_testing.h"

namespace dapple::kernels {
namespace {

using testing::RandomTensor;
using testing::TrainingContext;

// The masks of `rows` samples of `per_sample` ones (1: kept, scaled; 0: dropped).
std::vector<float> Mask(const ForwardContext& ctx, int layer, uint32_t site, double p, int64_t rows,
                        int64_t per_sample) {
  std::vector<float> ones(rows * per_sample, 1.0f), out(rows * per_sample);
  ApplyDropout(ctx, layer, site, p, rows, per_sample, ones.data(), out.data());
  for (float& v : out) v = v != 0.0f;
  return out;
}

double Differing(const std::vector<float>& a, const std::vector<float>& b) {
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
  return static_cast<double>(n) / static_cast<double>(a.size());
}

// The key is a compile-time function (dropout_mask.h), the same code on the host and the GPU.
static_assert(DropoutKey(42, 7, 3, 5, 1) == 0xA32B2410C2E84680ULL);

TEST(DropoutMaskTest, MatchesTheHashingStatedInTheHeader) {
  // Computed independently (Python, from dropout_mask.h's formulas) for seed 42, step 7, sample
  // 3, layer 5, site 1, p = 0.25: the key, then keep for elements 0..15. Another backend must
  // reproduce exactly these (kernels/cuda's dropout runs the same functions).
  EXPECT_EQ(DropoutKey(42, 7, 3, 5, 1), 0xA32B2410C2E84680ULL);
  EXPECT_EQ(DropoutThreshold(0.25), 4194304u);
  EXPECT_EQ(DropoutThreshold(0.1), 1677722u);  // round(0.1 * 2^24 = 1677721.6)
  ForwardContext ctx = TrainingContext(42, 7, 3);
  const std::vector<float> keep = Mask(ctx, 5, 1, 0.25, 1, 16);
  EXPECT_EQ(keep, (std::vector<float>{0, 1, 0, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1}));
}

TEST(DropoutMaskTest, KeptValuesAreScaledAndRateIsNearP) {
  const double p = 0.1;
  const int64_t rows = 4, per_sample = 25000;
  const Tensor x = RandomTensor({rows, per_sample}, 5, -2, 2);
  std::vector<float> y(x.data.size());
  ApplyDropout(TrainingContext(1, 0, 0), 2, 0, p, rows, per_sample, x.data.data(), y.data());
  const float scale = static_cast<float>(1 / (1 - p));
  int64_t dropped = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    if (y[i] == 0.0f && x.data[i] != 0.0f) {
      ++dropped;
    } else {
      EXPECT_EQ(y[i], x.data[i] * scale) << i;
    }
  }
  // 100000 Bernoulli(0.1) draws: standard deviation 9.5e-4; 5 sigma.
  EXPECT_NEAR(static_cast<double>(dropped) / static_cast<double>(y.size()), p, 5 * 9.5e-4);
}

TEST(DropoutMaskTest, IdentityInEvaluationAndAtPZero) {
  const Tensor x = RandomTensor({3, 50}, 6, -1, 1);
  std::vector<float> y(x.data.size(), 7.0f);
  ForwardContext eval = TrainingContext(1, 2, 3);
  eval.training = false;
  ApplyDropout(eval, 1, 0, 0.5, 3, 50, x.data.data(), y.data());
  EXPECT_EQ(y, x.data);
  std::fill(y.begin(), y.end(), 7.0f);
  ApplyDropout(TrainingContext(1, 2, 3), 1, 0, 0.0, 3, 50, x.data.data(), y.data());
  EXPECT_EQ(y, x.data);
  std::vector<float> inplace = x.data;
  ApplyDropout(eval, 1, 0, 0.5, 3, 50, inplace.data(), inplace.data());
  EXPECT_EQ(inplace, x.data);
}

TEST(DropoutMaskTest, ChangesWithStepSeedLayerSiteAndSample) {
  const double p = 0.5;
  const int64_t n = 4000;
  const std::vector<float> base = Mask(TrainingContext(9, 4, 0), 3, 0, p, 1, n);
  // Independent masks differ in 2 p (1 - p) = half of the elements.
  const std::vector<std::vector<float>> others = {
      Mask(TrainingContext(9, 5, 0), 3, 0, p, 1, n),   // step
      Mask(TrainingContext(10, 4, 0), 3, 0, p, 1, n),  // seed
      Mask(TrainingContext(9, 4, 0), 4, 0, p, 1, n),   // layer
      Mask(TrainingContext(9, 4, 0), 3, 1, p, 1, n),   // site
      Mask(TrainingContext(9, 4, 1), 3, 0, p, 1, n),   // sample
  };
  for (size_t i = 0; i < others.size(); ++i) {
    EXPECT_NEAR(Differing(base, others[i]), 0.5, 0.05) << "variation " << i;
  }
  EXPECT_EQ(Mask(TrainingContext(9, 4, 0), 3, 0, p, 1, n), base);  // a pure function
}

TEST(DropoutLayerTest, BatchEqualsItsHalvesWithFirstSampleOffsets) {
  // P/D invariance: how a global batch is cut into micro-batches does not change a sample's mask.
  DropoutLayer layer(3, 0.3);
  const Tensor x = RandomTensor({6, 2, 5}, 7, -1, 1);
  LayerCache cache;
  Tensor whole;
  layer.Forward(x, &whole, &cache, TrainingContext(11, 2, 10));
  std::vector<float> halves;
  for (int64_t first : {0, 3}) {
    Tensor part;
    part.shape = {3, 2, 5};
    part.data.assign(x.data.begin() + first * 10, x.data.begin() + (first + 3) * 10);
    Tensor y;
    layer.Forward(part, &y, &cache, TrainingContext(11, 2, 10 + first));
    halves.insert(halves.end(), y.data.begin(), y.data.end());
  }
  EXPECT_EQ(whole.data, halves);
}

TEST(DropoutLayerTest, BackwardUsesTheForwardsMask) {
  DropoutLayer layer(1, 0.4);
  EXPECT_EQ(layer.Type(), "dropout");
  EXPECT_TRUE(layer.Params().empty());
  testing::ExpectGradientsMatchFiniteDifferences(&layer, RandomTensor({3, 8}, 8, -1, 1),
                                                 TrainingContext(5, 1, 2), 9, true, 5e-4, 1e-3);
  // The backward reads the mask from the cache's context, not from a later forward's.
  const Tensor x = RandomTensor({2, 40}, 10, -1, 1);
  LayerCache a, b;
  Tensor ya, yb, dxa;
  layer.Forward(x, &ya, &a, TrainingContext(5, 1, 0));
  layer.Forward(x, &yb, &b, TrainingContext(5, 2, 0));
  Tensor ones;
  ones.shape = x.shape;
  ones.data.assign(x.data.size(), 1.0f);
  layer.BackwardInput(x, ya, ones, &dxa, &a);
  for (size_t i = 0; i < x.data.size(); ++i) {
    EXPECT_EQ(dxa.data[i] == 0.0f, ya.data[i] == 0.0f) << i;
  }
}

TEST(DropoutLayerTest, SplitBackwardMatchesPlainBackward) {
  testing::ExpectSplitBackwardMatches(
      [] { return std::make_unique<DropoutLayer>(2, 0.5); }, RandomTensor({3, 6}, 11, -1, 1),
      TrainingContext(4, 0, 0), RandomTensor({2, 6}, 12, -1, 1), TrainingContext(4, 0, 3), 13, 0);
}

}  // namespace
}  // namespace dapple::kernels
