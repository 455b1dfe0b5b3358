// The GPT kernels of kernels/cuda one by one against their CPU references (kernels/cpu), fp32 and
// bf16: dropout (bitwise the CPU's keep decisions and values), the causal softmax, LayerNorm,
// the head permutes, the strided-batched GEMMs, causal attention, the embedding (bitwise, and
// invalid ids) and the per-token softmax cross-entropy on [N, T, V] logits. Whole layers, the
// B / W split and determinism: layer_test.cc.
//
// Tolerances, per tensor: |got - want| <= rtol * max |want| for every element (NaN failing),
// unless stated otherwise.
// - fp32, 1e-5: one reduction or GEMM, where two correct fp32 evaluations differ by a few ulps
//   of the largest terms; 1e-4 for attention's input gradient (two GEMM chains around the
//   softmax's backward).
// - bf16, 1e-2: inputs are bf16-rounded on both sides, the GPU rounds its outputs (2^-9
//   relative each); 3e-2 for attention (probabilities, scores and their gradients stored in
//   bf16 between GEMMs).
// - exact: dropout, the permutes and the embedding are the CPU's operations one by one.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/loss.h"
#include "kernels/cpu/onednn_ops.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/batched_gemm.h"
#include "kernels/cuda/dropout.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/layernorm.h"
#include "kernels/cuda/loss.h"
#include "kernels/cuda/permute.h"
#include "kernels/cuda/softmax.h"
#include "kernels/cuda/testing.h"

namespace dapple::kernels::cuda {
namespace {

using testing::CheckCuda;
using testing::Context;
using testing::DeviceArray;
using testing::FromDevice;
using testing::RoundToBf16;
using testing::Sync;
using testing::ToDevice;
using testing::Uniform;

// |got - want| <= rtol * scale element by element; scale = max |want| unless given.
void ExpectNear(const std::string& what, const std::vector<float>& got,
                const std::vector<float>& want, double rtol, double scale = -1) {
  ASSERT_EQ(got.size(), want.size()) << what;
  if (scale < 0) {
    scale = 0;
    for (float w : want) scale = std::max(scale, std::fabs(static_cast<double>(w)));
  }
  int64_t misses = 0;
  std::string report;
  for (size_t i = 0; i < want.size(); ++i) {
    const double diff = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (diff <= rtol * scale) continue;
    if (++misses <= 10) {
      absl::StrAppend(&report, "\n  ", what, "[", i, "]: got ", got[i], ", expected ", want[i]);
    }
  }
  EXPECT_EQ(misses, 0) << what << ": " << misses << " of " << want.size() << " outside " << rtol
                       << " x " << scale << report;
}

void ExpectBitwise(const std::string& what, const std::vector<float>& got,
                   const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int64_t misses = 0;
  std::string report;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) == 0) continue;
    if (++misses <= 10) {
      absl::StrAppend(&report, "\n  ", what, "[", i, "]: got ", got[i], ", expected ", want[i]);
    }
  }
  EXPECT_EQ(misses, 0) << what << ": " << misses << " of " << want.size() << " differ" << report;
}

void ExpectOk(const absl::Status& s) { EXPECT_TRUE(s.ok()) << s; }

ForwardContext Training(uint64_t seed, int64_t step, int64_t first_sample) {
  ForwardContext ctx;
  ctx.training = true;
  ctx.seed = seed;
  ctx.step = step;
  ctx.first_sample = first_sample;
  return ctx;
}

// ---- dropout ----

struct DropoutCase {
  int64_t rows, per_sample;
  double p;
};

void PrintTo(const DropoutCase& c, std::ostream* os) {
  *os << c.rows << " x " << c.per_sample << " p " << c.p;
}

class DropoutKernelTest : public ::testing::TestWithParam<DropoutCase> {};

// Every variant against ApplyDropout (plus the residual add in fp32) on the same inputs,
// bitwise; the first sample, layer and site are not 0 so that each key ingredient counts.
TEST_P(DropoutKernelTest, KeepsExactlyTheCpuElements) {
  DAPPLE_SKIP_WITHOUT_GPU();
  const DropoutCase& c = GetParam();
  const int64_t n = c.rows * c.per_sample;
  const ForwardContext ctx = Training(77, 5, 123);
  const int layer = 6;
  const uint32_t site = 1;
  const DropoutMask mask = MakeDropoutMask(ctx, layer, site, c.p);
  const std::vector<float> in = RoundToBf16(Uniform(n, 1, -2, 2));  // exact in bf16 too
  const std::vector<float> residual = RoundToBf16(Uniform(n, 2, -2, 2));
  std::vector<float> want(n), want_residual(n);
  ApplyDropout(ctx, layer, site, c.p, c.rows, c.per_sample, in.data(), want.data());
  for (int64_t i = 0; i < n; ++i) want_residual[i] = residual[i] + want[i];
  int64_t kept = 0;
  for (float v : want) kept += v != 0.0f;
  EXPECT_NEAR(static_cast<double>(kept) / n, 1 - c.p, n > 10000 ? 0.01 : 1.0);

  DeviceArray<float> d_in(in), d_res(residual), d_out(n), d_inplace(in), d_res_out(n);
  ExpectOk(Dropout(Context(), &mask, c.rows, c.per_sample, d_in.get(), nullptr, d_out.get()));
  ExpectOk(
      Dropout(Context(), &mask, c.rows, c.per_sample, d_inplace.get(), nullptr, d_inplace.get()));
  ExpectOk(
      Dropout(Context(), &mask, c.rows, c.per_sample, d_in.get(), d_res.get(), d_res_out.get()));
  ExpectBitwise("fp32", d_out.Download(), want);
  ExpectBitwise("fp32 in place", d_inplace.Download(), want);
  ExpectBitwise("fp32 + residual", d_res_out.Download(), want_residual);

  DeviceArray<bf16> h_in(testing::ToBf16(in)), h_res(testing::ToBf16(residual)), h_out(n),
      h_res_out(n);
  DeviceArray<float> f_out(n);
  ExpectOk(Dropout(Context(), &mask, c.rows, c.per_sample, h_in.get(),
                   static_cast<const bf16*>(nullptr), h_out.get()));
  ExpectOk(
      Dropout(Context(), &mask, c.rows, c.per_sample, h_in.get(), h_res.get(), h_res_out.get()));
  ExpectOk(Dropout(Context(), &mask, c.rows, c.per_sample, h_in.get(),
                   static_cast<const float*>(nullptr), f_out.get()));
  ExpectBitwise("bf16", testing::ToFloat(h_out.Download()), RoundToBf16(want));
  ExpectBitwise("bf16 + residual", testing::ToFloat(h_res_out.Download()),
                RoundToBf16(want_residual));
  ExpectBitwise("bf16 -> fp32", f_out.Download(), want);

  // No mask: the identity (and the residual add).
  ExpectOk(Dropout(Context(), nullptr, c.rows, c.per_sample, d_in.get(), nullptr, d_out.get()));
  ExpectOk(
      Dropout(Context(), nullptr, c.rows, c.per_sample, d_in.get(), d_res.get(), d_res_out.get()));
  std::vector<float> sum(n);
  for (int64_t i = 0; i < n; ++i) sum[i] = residual[i] + in[i];
  ExpectBitwise("identity", d_out.Download(), in);
  ExpectBitwise("identity + residual", d_res_out.Download(), sum);
}

// More rows than a grid's y dimension (65535), a row longer than one block's sweep, one element.
INSTANTIATE_TEST_SUITE_P(Shapes, DropoutKernelTest,
                         ::testing::Values(DropoutCase{3, 1000, 0.1}, DropoutCase{1, 1, 0.5},
                                           DropoutCase{70000, 3, 0.25},
                                           DropoutCase{2, 300001, 0.9}));

// ---- causal softmax ----

struct SoftmaxCase {
  int64_t batch, seq;
  bool bf16;
};

void PrintTo(const SoftmaxCase& c, std::ostream* os) {
  *os << c.batch << " x [" << c.seq << ", " << c.seq << "]" << (c.bf16 ? " bf16" : " fp32");
}

class CausalSoftmaxTest : public ::testing::TestWithParam<SoftmaxCase> {};

// Against oneDNN's softmax (kernels/cpu/onednn_ops.h) on the scores with -inf above the
// diagonal, as kernels/cpu/attention.cc masks them. The GPU's input holds NaN above the
// diagonal: it must never read there.
TEST_P(CausalSoftmaxTest, MatchesCpuSoftmaxOfTheMaskedScores) {
  DAPPLE_SKIP_WITHOUT_GPU();
  const SoftmaxCase& c = GetParam();
  const int64_t t = c.seq, n = c.batch * t * t;
  std::vector<float> s = Uniform(n, 3, -4, 4);
  std::vector<float> dp = Uniform(n, 4, -1, 1);
  if (c.bf16) {
    s = RoundToBf16(s);
    dp = RoundToBf16(dp);
  }
  std::vector<float> masked = s, gpu_in = s;
  for (int64_t r = 0; r < c.batch * t; ++r) {
    for (int64_t j = r % t + 1; j < t; ++j) {
      masked[r * t + j] = -std::numeric_limits<float>::infinity();
      gpu_in[r * t + j] = std::numeric_limits<float>::quiet_NaN();
    }
  }
  SoftmaxOp op;
  std::vector<float> p = masked;
  op.Forward(p.data(), c.batch * t, t);
  std::vector<float> ds(n);
  op.Backward(p.data(), dp.data(), ds.data(), c.batch * t, t);

  std::vector<float> got_p, got_ds;
  if (c.bf16) {
    DeviceArray<bf16> d_s(testing::ToBf16(gpu_in)), d_dp(testing::ToBf16(dp)), d_ds(n);
    DeviceArray<bf16> d_p(testing::ToBf16(p));  // the backward reads the CPU's (rounded) P
    ExpectOk(CausalSoftmaxForward(Context(), d_s.get(), c.batch, t));
    ExpectOk(CausalSoftmaxBackward(Context(), d_p.get(), d_dp.get(), d_ds.get(), c.batch, t));
    got_p = testing::ToFloat(d_s.Download());
    got_ds = testing::ToFloat(d_ds.Download());
    std::vector<float> p_rounded = RoundToBf16(p);
    op.Backward(p_rounded.data(), dp.data(), ds.data(), c.batch * t, t);
  } else {
    DeviceArray<float> d_s(gpu_in), d_dp(dp), d_p(p);
    ExpectOk(CausalSoftmaxForward(Context(), d_s.get(), c.batch, t));
    // In place (ds in dp's buffer), as attention runs it.
    ExpectOk(CausalSoftmaxBackward(Context(), d_p.get(), d_dp.get(), d_dp.get(), c.batch, t));
    got_p = d_s.Download();
    got_ds = d_dp.Download();
  }
  const double rtol = c.bf16 ? 1e-2 : 1e-5;
  ExpectNear("p", got_p, p, rtol);
  ExpectNear("ds", got_ds, ds, rtol);
  for (int64_t r = 0; r < c.batch * t; ++r) {
    for (int64_t j = r % t + 1; j < t; ++j) {
      ASSERT_EQ(got_p[r * t + j], 0.0f) << "p above the diagonal, row " << r;
      ASSERT_EQ(got_ds[r * t + j], 0.0f) << "ds above the diagonal, row " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CausalSoftmaxTest,
                         ::testing::Values(SoftmaxCase{1, 1, false}, SoftmaxCase{6, 7, false},
                                           SoftmaxCase{4, 33, false}, SoftmaxCase{2, 300, false},
                                           SoftmaxCase{6, 7, true}, SoftmaxCase{2, 300, true}));

// ---- LayerNorm ----

struct LayerNormCase {
  int64_t rows, cols;
  bool bf16;
  bool workspace;  // false: ctx.workspace null (no partial sums)
};

void PrintTo(const LayerNormCase& c, std::ostream* os) {
  *os << c.rows << " x " << c.cols << (c.bf16 ? " bf16" : " fp32")
      << (c.workspace ? "" : " without workspace");
}

class LayerNormKernelTest : public ::testing::TestWithParam<LayerNormCase> {};

// Against kernels/cpu's LayerNormRows: y, the saved mean and variance, dx with a residual (the
// CPU's accumulate), and dgamma / dbeta added onto existing values.
TEST_P(LayerNormKernelTest, MatchesCpuLayerNormRows) {
  DAPPLE_SKIP_WITHOUT_GPU();
  const LayerNormCase& c = GetParam();
  const int64_t n = c.rows * c.cols;
  const float eps = 1e-5f;
  std::vector<float> x = Uniform(n, 5, -1, 1);
  for (int64_t i = 0; i < n; ++i) x[i] += 0.5f * static_cast<float>((i / c.cols) % 3);  // means
  std::vector<float> dy = Uniform(n, 6, -1, 1);
  std::vector<float> residual = Uniform(n, 7, -1, 1);
  const std::vector<float> gamma = Uniform(c.cols, 8, 0.5, 1.5);
  const std::vector<float> beta = Uniform(c.cols, 9, -0.5, 0.5);
  const std::vector<float> dgamma0 = Uniform(c.cols, 10, -1, 1);
  const std::vector<float> dbeta0 = Uniform(c.cols, 11, -1, 1);
  if (c.bf16) {
    x = RoundToBf16(x);
    dy = RoundToBf16(dy);
    residual = RoundToBf16(residual);
  }
  LayerNormRows cpu(c.cols, eps);
  std::vector<float> y(n), mean(c.rows), var(c.rows), dx = residual;
  std::vector<float> dgamma = dgamma0, dbeta = dbeta0;
  cpu.Forward(x.data(), c.rows, gamma.data(), beta.data(), y.data(), mean.data(), var.data());
  cpu.BackwardInput(x.data(), dy.data(), c.rows, mean.data(), var.data(), gamma.data(),
                    /*accumulate=*/true, dx.data());
  cpu.BackwardWeight(x.data(), dy.data(), c.rows, mean.data(), var.data(), dgamma.data(),
                     dbeta.data());

  KernelContext ctx = Context();
  if (!c.workspace) {
    ctx.workspace = nullptr;
    ctx.workspace_bytes = 0;
  }
  DeviceArray<float> d_gamma(gamma), d_beta(beta), d_mean(c.rows), d_var(c.rows);
  DeviceArray<float> d_dgamma(dgamma0), d_dbeta(dbeta0);
  std::vector<float> got_y, got_dx;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    DeviceArray<T> d_x(ToDevice<T>(x)), d_dy(ToDevice<T>(dy)), d_res(ToDevice<T>(residual));
    DeviceArray<T> d_y(n), d_dx(n);
    ExpectOk(LayerNormForward(ctx, d_x.get(), d_gamma.get(), d_beta.get(), c.rows, c.cols, eps,
                              d_y.get(), d_mean.get(), d_var.get()));
    ExpectOk(LayerNormBackwardInput(ctx, d_x.get(), d_dy.get(), d_mean.get(), d_var.get(),
                                    d_gamma.get(), c.rows, c.cols, eps, d_res.get(), d_dx.get()));
    ExpectOk(LayerNormBackwardWeight(ctx, d_x.get(), d_dy.get(), d_mean.get(), d_var.get(), c.rows,
                                     c.cols, eps, d_dgamma.get(), d_dbeta.get()));
    // dx into its residual's buffer (allowed): the same values.
    ExpectOk(LayerNormBackwardInput(ctx, d_x.get(), d_dy.get(), d_mean.get(), d_var.get(),
                                    d_gamma.get(), c.rows, c.cols, eps, d_res.get(), d_res.get()));
    got_y = FromDevice(d_y.Download());
    got_dx = FromDevice(d_dx.Download());
    ExpectBitwise("dx in place", FromDevice(d_res.Download()), got_dx);
  };
  if (c.bf16) {
    run(bf16());
  } else {
    run(float());
  }
  const double rtol = c.bf16 ? 1e-2 : 1e-5;
  double max_x = 0;
  for (float v : x) max_x = std::max(max_x, std::fabs(static_cast<double>(v)));
  ExpectNear("y", got_y, y, rtol);
  // The mean against the inputs' scale (a mean may be near 0): the CPU sums in fp32.
  ExpectNear("mean", d_mean.Download(), mean, 1e-5, max_x);
  ExpectNear("var", d_var.Download(), var, 1e-5);
  ExpectNear("dx", got_dx, dx, rtol);
  // fp32 sums of fp32 products on both sides (the bf16 inputs are exact): fp32's bound.
  ExpectNear("dgamma", d_dgamma.Download(), dgamma, 1e-5);
  ExpectNear("dbeta", d_dbeta.Download(), dbeta, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, LayerNormKernelTest,
    ::testing::Values(LayerNormCase{1, 1, false, true}, LayerNormCase{5, 40, false, true},
                      LayerNormCase{300, 97, false, true}, LayerNormCase{300, 97, false, false},
                      LayerNormCase{64, 1024, false, true}, LayerNormCase{300, 97, true, true},
                      LayerNormCase{64, 1024, true, false}));

// ---- permutes ----

TEST(PermuteTest, TokensToHeadsAndBackAreTheStatedLayouts) {
  DAPPLE_SKIP_WITHOUT_GPU();
  const HeadLayout l{3, 5, 3, 2, 4};  // n, seq, parts, heads, head_dim
  const int64_t count = l.n * l.seq * l.parts * l.heads * l.head_dim;
  std::vector<float> tokens(count);
  for (int64_t i = 0; i < count; ++i) tokens[i] = static_cast<float>(i);
  std::vector<float> heads(count);
  for (int64_t s = 0; s < l.n; ++s) {
    for (int64_t t = 0; t < l.seq; ++t) {
      for (int64_t p = 0; p < l.parts; ++p) {
        for (int64_t h = 0; h < l.heads; ++h) {
          for (int64_t d = 0; d < l.head_dim; ++d) {
            const int64_t from = (((s * l.seq + t) * l.parts + p) * l.heads + h) * l.head_dim + d;
            const int64_t to = (((p * l.n + s) * l.heads + h) * l.seq + t) * l.head_dim + d;
            heads[to] = tokens[from];
          }
        }
      }
    }
  }
  DeviceArray<float> d_tokens(tokens), d_heads(count), d_back(count);
  ExpectOk(TokensToHeads(Context(), l, d_tokens.get(), d_heads.get()));
  ExpectOk(HeadsToTokens(Context(), l, d_heads.get(), d_back.get()));
  ExpectBitwise("heads", d_heads.Download(), heads);
  ExpectBitwise("tokens again", d_back.Download(), tokens);
  DeviceArray<bf16> h_tokens(testing::ToBf16(tokens)), h_heads(count);
  ExpectOk(TokensToHeads(Context(), l, h_tokens.get(), h_heads.get()));
  ExpectBitwise("bf16 heads", testing::ToFloat(h_heads.Download()), RoundToBf16(heads));
}

// ---- strided-batched GEMM ----

struct GemmCase {
  bool trans_a, trans_b, bf16;
};

void PrintTo(const GemmCase& c, std::ostream* os) {
  *os << (c.trans_a ? "A^T " : "A ") << (c.trans_b ? "B^T" : "B") << (c.bf16 ? " bf16" : " fp32");
}

class BatchedGemmTest : public ::testing::TestWithParam<GemmCase> {};

// C_b = 0.5 op(A_b) op(B_b) + 0.25 C_b with padded rows and gaps between matrices, against a
// double-precision loop; per-element scale sum |0.5 a b| + |0.25 c| (testing.h's convention).
TEST_P(BatchedGemmTest, MatchesDoubleReference) {
  DAPPLE_SKIP_WITHOUT_GPU();
  const GemmCase& c = GetParam();
  const int64_t m = 5, n = 7, k = 3, batch = 4;
  const int64_t a_rows = c.trans_a ? k : m, a_cols = c.trans_a ? m : k;
  const int64_t b_rows = c.trans_b ? n : k, b_cols = c.trans_b ? k : n;
  const int64_t lda = a_cols + 2, ldb = b_cols + 1, ldc = n + 3;
  const int64_t sa = a_rows * lda + 5, sb = b_rows * ldb + 1, sc = m * ldc + 2;
  std::vector<float> a = Uniform(sa * batch, 12, -1, 1), b = Uniform(sb * batch, 13, -1, 1);
  std::vector<float> c0 = Uniform(sc * batch, 14, -1, 1);
  if (c.bf16) {
    a = RoundToBf16(a);
    b = RoundToBf16(b);
    c0 = RoundToBf16(c0);
  }
  std::vector<float> want = c0, scale(c0.size());
  for (int64_t q = 0; q < batch; ++q) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0, abs = 0;
        for (int64_t e = 0; e < k; ++e) {
          const double av = c.trans_a ? a[q * sa + e * lda + i] : a[q * sa + i * lda + e];
          const double bv = c.trans_b ? b[q * sb + j * ldb + e] : b[q * sb + e * ldb + j];
          sum += av * bv;
          abs += std::fabs(av * bv);
        }
        const int64_t o = q * sc + i * ldc + j;
        want[o] = static_cast<float>(0.5 * sum + 0.25 * c0[o]);
        scale[o] = static_cast<float>(0.5 * abs + 0.25 * std::fabs(c0[o]));
      }
    }
  }
  std::vector<float> got;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    DeviceArray<T> d_a(ToDevice<T>(a)), d_b(ToDevice<T>(b)), d_c(ToDevice<T>(c0));
    ExpectOk(BatchedGemm(Context(), c.trans_a, c.trans_b, m, n, k, 0.5f,
                         MatrixBatch<const T>{d_a.get(), lda, sa},
                         MatrixBatch<const T>{d_b.get(), ldb, sb}, 0.25f,
                         MatrixBatch<T>{d_c.get(), ldc, sc}, batch));
    got = FromDevice(d_c.Download());
  };
  if (c.bf16) {
    run(bf16());
  } else {
    run(float());
  }
  // Outside the C matrices (padding and gaps) nothing changes.
  for (int64_t q = 0; q < batch; ++q) {
    for (int64_t o = q * sc; o < (q + 1) * sc; ++o) {
      const int64_t i = (o - q * sc) / ldc, j = (o - q * sc) % ldc;
      if (i >= m || j >= n) scale[o] = 0;  // want = c0 exactly
    }
  }
  testing::ExpectClose("C", got, want, scale, c.bf16 ? 1e-2 : 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Transposes, BatchedGemmTest,
                         ::testing::Values(GemmCase{false, false, false},
                                           GemmCase{false, true, false},
                                           GemmCase{true, false, false},
                                           GemmCase{true, true, false}, GemmCase{false, true, true},
                                           GemmCase{true, false, true}));

// ---- causal attention ----

struct AttentionCase {
  int64_t n, seq, width, heads;
  bool bf16;
};

void PrintTo(const AttentionCase& c, std::ostream* os) {
  *os << "n " << c.n << " T " << c.seq << " C " << c.width << " heads " << c.heads
      << (c.bf16 ? " bf16" : " fp32");
}

class CausalAttentionTest : public ::testing::TestWithParam<AttentionCase> {};

// Against kernels/cpu's CausalSelfAttention: the probabilities, the merged output and dL/dqkv.
TEST_P(CausalAttentionTest, MatchesCpuAttention) {
  DAPPLE_SKIP_WITHOUT_GPU();
  const AttentionCase& c = GetParam();
  const int64_t rows = c.n * c.seq;
  const int64_t probs_count = c.n * c.heads * c.seq * c.seq;
  std::vector<float> qkv = Uniform(rows * 3 * c.width, 15, -1, 1);
  std::vector<float> dout = Uniform(rows * c.width, 16, -1, 1);
  if (c.bf16) {
    qkv = RoundToBf16(qkv);
    dout = RoundToBf16(dout);
  }
  CausalSelfAttention cpu(c.seq, c.width, c.heads);
  std::vector<float> probs(probs_count), out(rows * c.width), dqkv(rows * 3 * c.width);
  cpu.Forward(qkv.data(), c.n, probs.data(), out.data());
  cpu.Backward(qkv.data(), probs.data(), dout.data(), c.n, dqkv.data());

  const AttentionShape shape{c.n, c.seq, c.width, c.heads};
  std::vector<float> got_probs, got_out, got_dqkv;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    DeviceArray<T> d_qkv(ToDevice<T>(qkv)), d_dout(ToDevice<T>(dout));
    DeviceArray<T> d_heads(rows * 3 * c.width), d_probs(probs_count), d_out(rows * c.width);
    DeviceArray<T> d_dqkv(rows * 3 * c.width);
    DeviceArray<T> scratch(
        std::max(AttentionForwardScratchElements(shape), AttentionBackwardScratchElements(shape)));
    ExpectOk(CausalAttentionForward(Context(), shape, d_qkv.get(), d_heads.get(), d_probs.get(),
                                    scratch.get(), d_out.get()));
    ExpectOk(CausalAttentionBackward(Context(), shape, d_heads.get(), d_probs.get(), d_dout.get(),
                                     scratch.get(), d_dqkv.get()));
    got_probs = FromDevice(d_probs.Download());
    got_out = FromDevice(d_out.Download());
    got_dqkv = FromDevice(d_dqkv.Download());
  };
  if (c.bf16) {
    run(bf16());
  } else {
    run(float());
  }
  ExpectNear("probs", got_probs, probs, c.bf16 ? 3e-2 : 1e-5);
  ExpectNear("out", got_out, out, c.bf16 ? 3e-2 : 1e-5);
  ExpectNear("dqkv", got_dqkv, dqkv, c.bf16 ? 3e-2 : 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CausalAttentionTest,
                         ::testing::Values(AttentionCase{2, 8, 16, 2, false},
                                           AttentionCase{3, 33, 48, 3, false},
                                           AttentionCase{1, 1, 4, 4, false},
                                           AttentionCase{2, 64, 128, 4, false},
                                           AttentionCase{3, 33, 48, 3, true}));

// ---- embedding ----

// Forward and both tables' gradients (added onto random existing values) against
// kernels/cpu's EmbeddingLayer, bitwise: a small vocabulary makes long runs of equal ids, whose
// sums must go in the CPU's order; dropout on and off.
TEST(EmbeddingKernelTest, ForwardAndScatterAddAreBitwiseTheCpus) {
  DAPPLE_SKIP_WITHOUT_GPU();
  for (const double p : {0.0, 0.2}) {
    for (const int64_t vocab : {int64_t{3}, int64_t{1000}}) {
      SCOPED_TRACE(absl::StrCat("p ", p, " vocab ", vocab));
      const EmbeddingShape s{7, 50, 24, vocab};
      const int64_t positions = 64, count = s.rows * s.seq;
      EmbeddingLayer cpu(4, vocab, s.dim, positions, s.seq, p);
      cpu.token_embedding().value.data = Uniform(vocab * s.dim, 17, -1, 1);
      cpu.position_embedding().value.data = Uniform(positions * s.dim, 18, -1, 1);
      cpu.token_embedding().grad.data = Uniform(vocab * s.dim, 19, -1, 1);
      cpu.position_embedding().grad.data = Uniform(positions * s.dim, 20, -1, 1);
      const std::vector<float> dtable0 = cpu.token_embedding().grad.data;
      const std::vector<float> dpos0 = cpu.position_embedding().grad.data;
      Tensor x, y, dy;
      x.shape = {s.rows, s.seq};
      x.data.resize(count);
      for (int64_t i = 0; i < count; ++i) {
        x.data[i] = static_cast<float>(SplitMix64At(21, i) % static_cast<uint64_t>(vocab));
      }
      dy.shape = {s.rows, s.seq, s.dim};
      dy.data = Uniform(count * s.dim, 22, -1, 1);
      const ForwardContext ctx = Training(9, 2, 16);
      LayerCache cache;
      cpu.Forward(x, &y, &cache, ctx);
      cpu.Backward(x, y, dy, nullptr, &cache);

      DeviceArray<float> d_x(x.data), d_table(cpu.token_embedding().value.data);
      DeviceArray<float> d_pos(cpu.position_embedding().value.data), d_y(count * s.dim);
      DeviceArray<float> d_dy(dy.data), d_dtable(dtable0), d_dpos(dpos0);
      const absl::StatusOr<size_t> bytes = EmbeddingBackwardScratchBytes(s, p > 0);
      ASSERT_TRUE(bytes.ok()) << bytes.status();
      DeviceArray<unsigned char> scratch(*bytes);
      DropoutMask mask = MakeDropoutMask(ctx, 4, EmbeddingLayer::kDropoutSite, p);
      const DropoutMask* m = p > 0 ? &mask : nullptr;
      ExpectOk(EmbeddingForward(Context(), s, d_x.get(), d_table.get(), d_pos.get(), m, d_y.get()));
      ExpectOk(EmbeddingBackwardWeight(Context(), s, d_x.get(), d_dy.get(), m, scratch.get(),
                                       *bytes, d_dtable.get(), d_dpos.get()));
      ExpectBitwise("y", d_y.Download(), y.data);
      ExpectBitwise("dtable", d_dtable.Download(), cpu.token_embedding().grad.data);
      ExpectBitwise("dpositions", d_dpos.Download(), cpu.position_embedding().grad.data);
    }
  }
}

// An id outside [0, vocab) or not an integer gives a NaN row and adds nothing to the token
// table (the CPU aborts on it); the valid ones are unaffected.
TEST(EmbeddingKernelTest, InvalidIdsGiveNanRowsAndTouchNoTokenRow) {
  DAPPLE_SKIP_WITHOUT_GPU();
  const EmbeddingShape s{1, 5, 3, 4};
  const std::vector<float> x = {1, -1, 4, 2.5f, std::numeric_limits<float>::quiet_NaN()};
  DeviceArray<float> d_x(x), d_table(Uniform(12, 23, -1, 1)), d_pos(Uniform(15, 24, -1, 1));
  DeviceArray<float> d_y(15), d_dy(std::vector<float>(15, 1.0f));
  DeviceArray<float> d_dtable(std::vector<float>(12, 0.0f)), d_dpos(std::vector<float>(15, 0.0f));
  const size_t bytes = EmbeddingBackwardScratchBytes(s, false).value();
  DeviceArray<unsigned char> scratch(bytes);
  ExpectOk(
      EmbeddingForward(Context(), s, d_x.get(), d_table.get(), d_pos.get(), nullptr, d_y.get()));
  ExpectOk(EmbeddingBackwardWeight(Context(), s, d_x.get(), d_dy.get(), nullptr, scratch.get(),
                                   bytes, d_dtable.get(), d_dpos.get()));
  const std::vector<float> y = d_y.Download();
  for (int64_t t = 1; t < 5; ++t) {
    for (int64_t c = 0; c < 3; ++c) EXPECT_TRUE(std::isnan(y[t * 3 + c])) << t << ", " << c;
  }
  for (int64_t c = 0; c < 3; ++c) EXPECT_FALSE(std::isnan(y[c]));
  const std::vector<float> dtable = d_dtable.Download();
  for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(dtable[i], i / 3 == 1 ? 1.0f : 0.0f) << i;
}

// ---- per-token softmax cross-entropy ----

// [N, T, V] logits are N T rows of V (kernels/cpu/loss.h): the per-row losses summed in row order
// give the CPU's sum, the gradients its gradients, the argmax count its count.
TEST(PerTokenLossTest, NtvLogitsMatchTheCpuLoss) {
  DAPPLE_SKIP_WITHOUT_GPU();
  const int64_t n = 3, t = 17, v = 300, rows = n * t;
  Tensor logits;
  logits.shape = {n, t, v};
  logits.data = Uniform(rows * v, 25, -5, 5);
  std::vector<int32_t> labels(rows);
  for (int64_t r = 0; r < rows; ++r) labels[r] = static_cast<int32_t>((r * 37) % v);
  const float scale = 1.0f / static_cast<float>(rows);
  Tensor dlogits;
  int64_t correct = 0;
  const double want =
      ::dapple::kernels::SoftmaxCrossEntropy(logits, labels.data(), scale, &dlogits, &correct);
  DeviceArray<float> d_logits(logits.data), d_dlogits(rows * v);
  DeviceArray<int32_t> d_labels(labels), d_correct(rows);
  DeviceArray<double> d_loss(rows);
  ExpectOk(SoftmaxCrossEntropy(Context(), d_logits.get(), d_labels.get(), rows, v, scale,
                               d_dlogits.get(), d_loss.get(), d_correct.get()));
  double got = 0;
  for (double l : d_loss.Download()) got += l;
  int64_t got_correct = 0;
  for (int32_t c : d_correct.Download()) got_correct += c;
  // Both sum double per-row losses whose log-sum-exp ran in double: only the libraries' exp
  // and log differ (an ulp or two of double).
  EXPECT_NEAR(got, want, 1e-10 * std::fabs(want));
  EXPECT_EQ(got_correct, correct);
  ExpectNear("dlogits", d_dlogits.Download(), dlogits.data, 1e-6);
}

}  // namespace
}  // namespace dapple::kernels::cuda
