// The cuDNN image ops (cudnn_ops.h) and the batch-norm step statistics (batchnorm_stats.h)
// against the CPU ops on oneDNN (kernels/cpu/onednn_conv.h) on the same inputs, fp32.
//
// Tolerances, per tensor: |got - want| <= rtol x max |want| for every element (NaN failing;
// outputs start NaN-poisoned, so an unwritten element fails):
// - 1e-5: convolution forward, backward data, backward filter and bias (sums of C k^2, O k^2 or
//   N H' W' products: two correct fp32 orders differ by a few ulps of the largest terms), average
//   pooling (k^2 terms), batch-norm forward (training and inference);
// - 1e-4: batch-norm backward (dx = gamma rstd (dy - mean(dy) - x_hat mean(dy x_hat)) subtracts
//   two reductions: their rounding is relative to dy's scale, not dx's);
// - exact: max pooling forward, and its backward where windows do not overlap (a selection and
//   a routing, no arithmetic); 1e-5 for its backward over overlapping windows (stride < kernel:
//   an input that is the maximum of several windows sums their dy, in either library's order);
// - 1e-12 relative to the sum of |terms|: the step statistics (double sums).
// Gradient accumulation (`+=` into a gradient) is checked by starting from a non-zero gradient.
// Without a GPU every test reports skipped.
#include "kernels/cuda/cudnn_ops.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/onednn_conv.h"
#include "kernels/cuda/batchnorm_stats.h"
#include "kernels/cuda/testing.h"

namespace dapple::kernels::cuda {
namespace {

using testing::Context;
using testing::DeviceArray;
using testing::Uniform;

constexpr double kRtol = 1e-5;
constexpr double kBatchNormBackwardRtol = 1e-4;

void ExpectNear(const std::string& what, const std::vector<float>& got,
                const std::vector<float>& want, double rtol) {
  double scale = 0;
  for (float w : want) scale = std::max(scale, std::fabs(static_cast<double>(w)));
  testing::ExpectClose(what, got, want, std::vector<double>(want.size(), scale), rtol);
}

void ExpectOk(const absl::Status& s) { ASSERT_TRUE(s.ok()) << s; }

std::vector<float> Plus(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = a[i] + b[i];
  return out;
}

struct ConvCase {
  ConvGeometry g;
  bool bias;
};

class CudnnConvTest : public ::testing::TestWithParam<ConvCase> {};

TEST_P(CudnnConvTest, MatchesOneDnn) {
  DAPPLE_SKIP_WITHOUT_GPU();
  const ConvGeometry g = GetParam().g;
  const bool has_bias = GetParam().bias;
  const size_t nx = g.n * g.c * g.h * g.w;
  const size_t ny = g.n * g.out_channels * g.OutH() * g.OutW();
  const size_t nw = g.out_channels * g.c * g.kernel * g.kernel;
  const std::vector<float> x = Uniform(nx, 1, -1, 1), w = Uniform(nw, 2, -0.5f, 0.5f),
                           b = Uniform(g.out_channels, 3, -1, 1), dy = Uniform(ny, 4, -1, 1),
                           w0 = Uniform(nw, 5, -1, 1), b0 = Uniform(g.out_channels, 6, -1, 1);
  Conv2dOp cpu;
  std::vector<float> want_y(ny), want_dx(nx), want_dw(nw), want_db(g.out_channels);
  cpu.Forward(g, x.data(), w.data(), has_bias ? b.data() : nullptr, want_y.data());
  cpu.BackwardData(g, dy.data(), w.data(), want_dx.data());
  cpu.BackwardWeights(g, x.data(), dy.data(), want_dw.data(), want_db.data());

  CudnnConv2d gpu;
  DeviceArray<float> d_x(x), d_w(w), d_b(b), d_dy(dy), d_y(ny), d_dx(nx), d_dw(w0), d_db(b0);
  ExpectOk(
      gpu.Forward(Context(), g, d_x.get(), d_w.get(), has_bias ? d_b.get() : nullptr, d_y.get()));
  ExpectOk(gpu.BackwardData(Context(), g, d_dy.get(), d_w.get(), d_dx.get()));
  ExpectOk(gpu.BackwardFilter(Context(), g, d_x.get(), d_dy.get(), d_dw.get(),
                              has_bias ? d_db.get() : nullptr));
  ExpectNear("y", d_y.Download(), want_y, kRtol);
  ExpectNear("dx", d_dx.Download(), want_dx, kRtol);
  ExpectNear("dweight (accumulated)", d_dw.Download(), Plus(w0, want_dw), kRtol);
  ExpectNear("dbias (accumulated)", d_db.Download(), has_bias ? Plus(b0, want_db) : b0, kRtol);
  // dx accumulated into: the residual block's two input gradients.
  ExpectOk(gpu.BackwardData(Context(), g, d_dy.get(), d_w.get(), d_dx.get(), true));
  ExpectNear("dx (accumulated)", d_dx.Download(), Plus(want_dx, want_dx), kRtol);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudnnConvTest,
    ::testing::Values(ConvCase{{2, 3, 9, 7, 5, 3, 1, 1}, true},     // LeNet-like, padded
                      ConvCase{{3, 4, 8, 8, 6, 3, 2, 1}, false},    // residual block conv1
                      ConvCase{{2, 4, 8, 8, 6, 1, 2, 0}, false},    // 1x1 projection shortcut
                      ConvCase{{1, 1, 28, 28, 8, 5, 1, 2}, true}),  // first layer on MNIST
    [](const ::testing::TestParamInfo<ConvCase>& info) {
      const ConvGeometry& g = info.param.g;
      return "k" + std::to_string(g.kernel) + "s" + std::to_string(g.stride) + "p" +
             std::to_string(g.padding) + "c" + std::to_string(g.c) +
             (info.param.bias ? "bias" : "nobias");
    });

struct PoolCase {
  PoolKind kind;
  PoolGeometry g;
};

class CudnnPoolTest : public ::testing::TestWithParam<PoolCase> {};

TEST_P(CudnnPoolTest, MatchesOneDnn) {
  DAPPLE_SKIP_WITHOUT_GPU();
  const PoolCase& c = GetParam();
  const PoolGeometry& g = c.g;
  const size_t nx = g.n * g.c * g.h * g.w;
  const size_t ny = g.n * g.c * g.OutH() * g.OutW();
  // Distinct values (no ties): max pooling's backward has one right answer.
  const std::vector<float> x = Uniform(nx, 7, -1, 1), dy = Uniform(ny, 8, -1, 1);
  Pool2dOp cpu(c.kind);
  std::vector<uint8_t> workspace(static_cast<size_t>(std::max<int64_t>(cpu.WorkspaceBytes(g), 1)));
  std::vector<float> want_y(ny), want_dx(nx);
  cpu.Forward(g, x.data(), want_y.data(), workspace.data());
  cpu.Backward(g, dy.data(), workspace.data(), want_dx.data());

  CudnnPool2d gpu(c.kind);
  DeviceArray<float> d_x(x), d_dy(dy), d_y(ny), d_dx(nx);
  ExpectOk(gpu.Forward(Context(), g, d_x.get(), d_y.get()));
  ExpectOk(gpu.Backward(Context(), g, d_x.get(), d_y.get(), d_dy.get(), d_dx.get()));
  const bool max = c.kind == PoolKind::kMax;
  const bool overlapping = g.stride < g.kernel_h || g.stride < g.kernel_w;
  ExpectNear("y", d_y.Download(), want_y, max ? 0 : kRtol);
  ExpectNear("dx", d_dx.Download(), want_dx, max && !overlapping ? 0 : kRtol);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudnnPoolTest,
    ::testing::Values(PoolCase{PoolKind::kMax, {2, 3, 8, 8, 2, 2, 2, 0}},
                      PoolCase{PoolKind::kMax, {2, 3, 9, 9, 3, 3, 2, 1}},  // padding never wins
                      PoolCase{PoolKind::kAverage, {2, 3, 8, 8, 2, 2, 2, 0}},
                      PoolCase{PoolKind::kAverage, {2, 3, 9, 7, 3, 3, 2, 1}},   // pads count
                      PoolCase{PoolKind::kAverage, {3, 4, 5, 5, 5, 5, 1, 0}}),  // global
    [](const ::testing::TestParamInfo<PoolCase>& info) {
      const PoolGeometry& g = info.param.g;
      return std::string(info.param.kind == PoolKind::kMax ? "max" : "avg") + "k" +
             std::to_string(g.kernel_h) + "s" + std::to_string(g.stride) + "p" +
             std::to_string(g.padding) + "h" + std::to_string(g.h);
    });

TEST(CudnnBatchNormTest, TrainingForwardBackwardAndInferenceMatchOneDnn) {
  DAPPLE_SKIP_WITHOUT_GPU();
  const int64_t n = 3, c = 4, hw = 20;
  const float eps = 1e-5f;
  const size_t count = n * c * hw;
  // A per-channel offset: the statistics are not all about zero.
  std::vector<float> x = Uniform(count, 9, -1, 1);
  for (size_t i = 0; i < count; ++i) x[i] += static_cast<float>((i / hw) % c) - 1.5f;
  const std::vector<float> gamma = Uniform(c, 10, 0.5f, 1.5f), beta = Uniform(c, 11, -1, 1),
                           dy = Uniform(count, 12, -1, 1), rm = Uniform(c, 13, -1, 1),
                           rv = Uniform(c, 14, 0.5f, 2);
  BatchNormOp cpu;
  std::vector<float> want_y(count), mean(c), var(c), want_dx(count), want_dg(c), want_db(c),
      want_inf(count);
  cpu.ForwardTraining(n, c, hw, eps, x.data(), gamma.data(), beta.data(), want_y.data(),
                      mean.data(), var.data());
  cpu.Backward(n, c, hw, eps, x.data(), dy.data(), mean.data(), var.data(), gamma.data(),
               want_dx.data(), want_dg.data(), want_db.data());
  cpu.ForwardInference(n, c, hw, eps, x.data(), gamma.data(), beta.data(), rm.data(), rv.data(),
                       want_inf.data());
  std::vector<float> want_rstd(c);
  for (int64_t i = 0; i < c; ++i) want_rstd[i] = 1.0f / std::sqrt(var[i] + eps);

  CudnnBatchNorm gpu;
  DeviceArray<float> d_x(x), d_g(gamma), d_b(beta), d_dy(dy), d_rm(rm), d_rv(rv), d_y(count),
      d_mean(c), d_rstd(c), d_dx(count), d_dg(c), d_db(c), d_inf(count);
  ExpectOk(gpu.ForwardTraining(Context(), n, c, hw, eps, d_x.get(), d_g.get(), d_b.get(), d_y.get(),
                               d_mean.get(), d_rstd.get()));
  ExpectOk(gpu.Backward(Context(), n, c, hw, eps, d_x.get(), d_dy.get(), d_mean.get(), d_rstd.get(),
                        d_g.get(), d_dx.get(), d_dg.get(), d_db.get()));
  ExpectOk(gpu.ForwardInference(Context(), n, c, hw, eps, d_x.get(), d_g.get(), d_b.get(),
                                d_rm.get(), d_rv.get(), d_inf.get()));
  ExpectNear("y", d_y.Download(), want_y, kRtol);
  ExpectNear("mean", d_mean.Download(), mean, kRtol);
  ExpectNear("rstd", d_rstd.Download(), want_rstd, kRtol);
  ExpectNear("dx", d_dx.Download(), want_dx, kBatchNormBackwardRtol);
  ExpectNear("dgamma", d_dg.Download(), want_dg, kBatchNormBackwardRtol);
  ExpectNear("dbeta", d_db.Download(), want_db, kRtol);
  ExpectNear("inference y", d_inf.Download(), want_inf, kRtol);
}

TEST(CudnnBatchNormTest, ChannelSumsAreTheDoubleSumsAndAccumulate) {
  DAPPLE_SKIP_WITHOUT_GPU();
  const int64_t n = 5, c = 3, hw = 300;  // more elements per channel than a block has threads
  const std::vector<float> x = Uniform(n * c * hw, 15, -2, 3);
  std::vector<double> want(2 * c, 0.0), scale(2 * c, 0.0), start(2 * c);
  for (int64_t i = 0; i < 2 * c; ++i) start[i] = 0.25 * static_cast<double>(i + 1);
  for (int64_t s = 0; s < n; ++s) {
    for (int64_t ch = 0; ch < c; ++ch) {
      for (int64_t j = 0; j < hw; ++j) {
        const double v = x[(s * c + ch) * hw + j];
        want[ch] += 2 * v;  // two calls
        want[c + ch] += 2 * v * v;
        scale[ch] += 2 * std::fabs(v);
        scale[c + ch] += 2 * v * v;
      }
    }
  }
  for (int64_t i = 0; i < 2 * c; ++i) {
    want[i] += start[i];
    scale[i] += start[i];
  }
  DeviceArray<float> d_x(x);
  DeviceArray<double> d_sums(start);
  ExpectOk(AccumulateChannelSums(Context(), d_x.get(), n, c, hw, d_sums.get()));
  ExpectOk(AccumulateChannelSums(Context(), d_x.get(), n, c, hw, d_sums.get()));
  testing::ExpectClose("sums", d_sums.Download(), want, scale, 1e-12);
}

TEST(CudnnOpsTest, NoHandleIsInvalidArgument) {
  KernelContext ctx;  // no stream, no handles: refused before touching a GPU
  CudnnConv2d conv;
  const absl::Status s =
      conv.Forward(ctx, {1, 1, 3, 3, 1, 3, 1, 1}, nullptr, nullptr, nullptr, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  CudnnBatchNorm bn;
  EXPECT_EQ(
      bn.ForwardTraining(ctx, 1, 1, 1, 1e-5, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr)
          .code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dapple::kernels::cuda
