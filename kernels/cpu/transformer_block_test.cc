#include "kernels/cpu/transformer_block.h"

#include <cmath>
#include <memory>
#include <vector>

#include "common/model_info.h"
#include "gtest/gtest.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cpu/grad_check_testing.h"
#include "kernels/cpu/init.h"
#include "kernels/cpu/layer_testing.h"

namespace dapple::kernels {
namespace {

using testing::RandomTensor;
using testing::TrainingContext;
using B = TransformerBlockLayer;

// T 4, C 8, 2 heads, hidden 12: every code path, small enough for finite differences of all
// 582 parameters.
constexpr int64_t kT = 4, kC = 8, kHeads = 2, kHidden = 12;

// Random parameters (not the 0.02-scale init, under which the block is nearly the identity).
std::unique_ptr<B> MakeBlock(double dropout, uint64_t stream) {
  auto block = std::make_unique<B>(3, kT, kC, kHeads, kHidden, dropout);
  for (Param* p : block->Params()) p->value = RandomTensor(p->value.shape, stream++, -0.5, 0.5);
  for (B::ParamIndex i : {B::kLn1Weight, B::kLn2Weight}) {
    block->param(i).value = RandomTensor({kC}, stream++, 0.5, 1.5);
  }
  return block;
}

// ---- a plain double-precision reference of the block, straight from its definition ----

using Mat = std::vector<double>;  // row-major

Mat LayerNormRef(const Mat& x, int64_t rows, int64_t c, const Param& w, const Param& b) {
  Mat y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double m = 0, v = 0;
    for (int64_t j = 0; j < c; ++j) m += x[r * c + j] / c;
    for (int64_t j = 0; j < c; ++j) v += (x[r * c + j] - m) * (x[r * c + j] - m) / c;
    for (int64_t j = 0; j < c; ++j) {
      y[r * c + j] = (x[r * c + j] - m) / std::sqrt(v + 1e-5) * w.value.data[j] + b.value.data[j];
    }
  }
  return y;
}

Mat LinearRef(const Mat& x, int64_t rows, int64_t in, const Param& w, const Param& b) {
  const int64_t out = b.value.numel();
  Mat y(rows * out);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double s = b.value.data[o];
      for (int64_t k = 0; k < in; ++k) s += x[r * in + k] * w.value.data[o * in + k];
      y[r * out + o] = s;
    }
  }
  return y;
}

// The block on x [n, T, C] with dropout from dropout.h's mask at sites 0 and 1.
Mat BlockRef(B& block, const Tensor& x, const ForwardContext& ctx, double p) {
  const int64_t n = x.rows(), rows = n * kT, d = kC / kHeads;
  Mat xd(x.data.begin(), x.data.end());
  auto param = [&](B::ParamIndex i) -> const Param& { return block.param(i); };
  auto dropout = [&](Mat m, uint32_t site) {
    std::vector<float> ones(m.size(), 1.0f), mask(m.size());
    ApplyDropout(ctx, 3, site, p, n, kT * kC, ones.data(), mask.data());
    for (size_t i = 0; i < m.size(); ++i) m[i] *= mask[i];
    return m;
  };
  const Mat u = LayerNormRef(xd, rows, kC, param(B::kLn1Weight), param(B::kLn1Bias));
  const Mat qkv = LinearRef(u, rows, kC, param(B::kQkvWeight), param(B::kQkvBias));
  Mat attn(rows * kC, 0.0);
  for (int64_t s = 0; s < n; ++s) {
    for (int64_t h = 0; h < kHeads; ++h) {
      for (int64_t i = 0; i < kT; ++i) {
        std::vector<double> w(i + 1);
        double mx = -1e300, sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < d; ++e) {
            dot += qkv[(s * kT + i) * 3 * kC + h * d + e] *
                   qkv[(s * kT + j) * 3 * kC + kC + h * d + e];
          }
          w[j] = dot / std::sqrt(static_cast<double>(d));
          mx = std::max(mx, w[j]);
        }
        for (int64_t j = 0; j <= i; ++j) sum += (w[j] = std::exp(w[j] - mx));
        for (int64_t j = 0; j <= i; ++j) {
          for (int64_t e = 0; e < d; ++e) {
            attn[(s * kT + i) * kC + h * d + e] +=
                w[j] / sum * qkv[(s * kT + j) * 3 * kC + 2 * kC + h * d + e];
          }
        }
      }
    }
  }
  Mat a = dropout(LinearRef(attn, rows, kC, param(B::kProjWeight), param(B::kProjBias)), 0);
  for (size_t i = 0; i < a.size(); ++i) a[i] += xd[i];
  const Mat v = LayerNormRef(a, rows, kC, param(B::kLn2Weight), param(B::kLn2Bias));
  Mat f = LinearRef(v, rows, kC, param(B::kFcWeight), param(B::kFcBias));
  for (double& e : f) e = 0.5 * e * (1 + std::erf(e / std::sqrt(2.0)));
  Mat y = dropout(LinearRef(f, rows, kHidden, param(B::kFc2Weight), param(B::kFc2Bias)), 1);
  for (size_t i = 0; i < y.size(); ++i) y[i] += a[i];
  return y;
}

TEST(TransformerBlockLayerTest, ParamsAndSavedBytesAreCommonModels) {
  v1::ModelSpec m;
  m.add_input_shape(kT);
  m.set_input_type("tokens");
  v1::LayerSpec* e = m.add_layers();
  e->set_type("embedding");
  e->mutable_embedding()->set_vocab(16);
  e->mutable_embedding()->set_dim(kC);
  v1::LayerSpec* b = m.add_layers();
  b->set_type("transformer_block");
  b->mutable_transformer_block()->set_heads(kHeads);
  b->mutable_transformer_block()->set_mlp_hidden(kHidden);
  m.set_loss("softmax_cross_entropy");
  absl::StatusOr<std::vector<LayerInfo>> infos = InferLayers(m);
  ASSERT_TRUE(infos.ok()) << infos.status();
  const LayerInfo& info = (*infos)[1];

  B block(1, kT, kC, kHeads, kHidden, 0.0);
  EXPECT_EQ(block.Type(), "transformer_block");
  std::vector<Param*> params = block.Params();
  ASSERT_EQ(params.size(), info.params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(params[i]->name, ParamName(1, info.params[i].name));
    EXPECT_EQ(params[i]->value.shape, info.params[i].shape) << params[i]->name;
  }
  // What Forward keeps, and BackwardInput adds for BackwardWeight in the same cache, is exactly
  // what common/model charges for.
  const int64_t n = 3;
  LayerCache cache;
  Tensor y, dx;
  const Tensor x = RandomTensor({n, kT, kC}, 1, -1, 1);
  block.Forward(x, &y, &cache, {});
  block.BackwardInput(x, y, RandomTensor({n, kT, kC}, 2, -1, 1), &dx, &cache);
  int64_t kept = 0;
  for (const Tensor& t : cache.saved) kept += t.bytes();
  for (const Tensor& t : cache.grads) kept += t.bytes();
  EXPECT_EQ(kept, n * info.saved_bytes);
}

TEST(TransformerBlockLayerTest, InitIsGpt2s) {
  B block(2, kT, 16, 4, 64, 0.0);
  block.InitParams(42);
  const float a = Gpt2InitBound();
  for (B::ParamIndex i : {B::kQkvWeight, B::kProjWeight, B::kFcWeight, B::kFc2Weight}) {
    const std::vector<float>& w = block.param(i).value.data;
    double sum2 = 0;
    for (float v : w) {
      EXPECT_GE(v, -a);
      EXPECT_LT(v, a);
      sum2 += static_cast<double>(v) * v;
    }
    EXPECT_NEAR(std::sqrt(sum2 / w.size()), 0.02, 0.002) << block.param(i).name;
  }
  // Four different streams.
  EXPECT_NE(block.param(B::kQkvWeight).value.data[0], block.param(B::kProjWeight).value.data[0]);
  EXPECT_NE(block.param(B::kFcWeight).value.data[0], block.param(B::kFc2Weight).value.data[0]);
  for (B::ParamIndex i : {B::kLn1Weight, B::kLn2Weight}) {
    EXPECT_EQ(block.param(i).value.data, std::vector<float>(16, 1.0f));
  }
  for (B::ParamIndex i :
       {B::kLn1Bias, B::kQkvBias, B::kProjBias, B::kLn2Bias, B::kFcBias, B::kFc2Bias}) {
    EXPECT_EQ(testing::MaxAbs(block.param(i).value.data), 0.0f) << block.param(i).name;
  }
}

TEST(TransformerBlockLayerTest, ForwardMatchesDoubleReference) {
  for (double p : {0.0, 0.25}) {
    std::unique_ptr<B> block = MakeBlock(p, 10);
    const Tensor x = RandomTensor({3, kT, kC}, 2, -1, 1);
    const ForwardContext ctx = TrainingContext(5, 2, 7);
    LayerCache cache;
    Tensor y;
    block->Forward(x, &y, &cache, ctx);
    const Mat ref = BlockRef(*block, x, ctx, p);
    ASSERT_EQ(y.data.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i) {
      // fp32 through four GEMMs, two LayerNorms and a softmax on values of order 1-10.
      EXPECT_NEAR(y.data[i], ref[i], 2e-5 * (1 + std::fabs(ref[i]))) << "p " << p << " at " << i;
    }
  }
}

TEST(TransformerBlockLayerTest, EvaluationHasNoDropout) {
  std::unique_ptr<B> with = MakeBlock(0.5, 20);
  std::unique_ptr<B> without = MakeBlock(0.0, 20);
  const Tensor x = RandomTensor({2, kT, kC}, 3, -1, 1);
  LayerCache c1, c2;
  Tensor y1, y2;
  ForwardContext eval = TrainingContext(1, 1, 0);
  eval.training = false;
  with->Forward(x, &y1, &c1, eval);
  without->Forward(x, &y2, &c2, TrainingContext(1, 1, 0));
  EXPECT_EQ(y1.data, y2.data);
}

TEST(TransformerBlockLayerTest, AttentionIsCausal) {
  std::unique_ptr<B> block = MakeBlock(0.0, 30);
  Tensor x = RandomTensor({1, kT, kC}, 4, -1, 1);
  LayerCache cache;
  Tensor before, after;
  block->Forward(x, &before, &cache, {});
  for (int64_t c = 0; c < kC; ++c) x.data[(kT - 1) * kC + c] += 0.5f;  // change the last token
  block->Forward(x, &after, &cache, {});
  for (int64_t i = 0; i < (kT - 1) * kC; ++i) EXPECT_EQ(after.data[i], before.data[i]) << i;
  EXPECT_NE(after.data[(kT - 1) * kC], before.data[(kT - 1) * kC]);
}

TEST(TransformerBlockLayerTest, GradientsMatchFiniteDifferences) {
  // Smooth in x and every parameter (LayerNorm, softmax, GELU): values of order 1 with h = 1/128
  // leave truncation errors of order h^2 |f'''| / 6 ~ 1e-5 to 1e-4; the float forward's
  // rounding adds ~1e-7 |L| / 2h ~ 5e-5. 1e-3 absolute + 1e-3 relative still catches a
  // missing term or a wrong transpose (errors of order 0.1).
  for (double p : {0.0, 0.3}) {
    SCOPED_TRACE(p);
    std::unique_ptr<B> block = MakeBlock(p, 40);
    testing::ExpectGradientsMatchFiniteDifferences(block.get(), RandomTensor({2, kT, kC}, 5, -1, 1),
                                                   TrainingContext(2, 3, 4), 6,
                                                   /*check_dx=*/true, 1e-3, 1e-3);
  }
}

TEST(TransformerBlockLayerTest, SplitBackwardMatchesPlainBackward) {
  testing::ExpectSplitBackwardMatches([] { return MakeBlock(0.2, 50); },
                                      RandomTensor({3, kT, kC}, 7, -1, 1), TrainingContext(3, 0, 0),
                                      RandomTensor({2, kT, kC}, 8, -1, 1), TrainingContext(3, 0, 3),
                                      9, 1e-6);
}

TEST(TransformerBlockLayerTest, BatchMatchesItsHalvesWithFirstSampleOffsets) {
  std::unique_ptr<B> block = MakeBlock(0.4, 60);
  const Tensor x = RandomTensor({4, kT, kC}, 10, -1, 1);
  LayerCache cache;
  Tensor whole;
  block->Forward(x, &whole, &cache, TrainingContext(6, 2, 12));
  std::vector<float> halves;
  for (int64_t first : {0, 2}) {
    Tensor part, y;
    part.shape = {2, kT, kC};
    part.data.assign(x.data.begin() + first * kT * kC, x.data.begin() + (first + 2) * kT * kC);
    block->Forward(part, &y, &cache, TrainingContext(6, 2, 12 + first));
    halves.insert(halves.end(), y.data.begin(), y.data.end());
  }
  // The same masks; the GEMMs may sum in another order for another row count.
  ASSERT_EQ(whole.data.size(), halves.size());
  for (size_t i = 0; i < halves.size(); ++i) {
    EXPECT_NEAR(whole.data[i], halves[i], 1e-6 * (1 + std::fabs(halves[i]))) << i;
  }
}

}  // namespace
}  // namespace dapple::kernels
