#include "kernels/cuda/linear.h"

#include <cstdint>
#include <iostream>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cpu/linear.h"
#include "kernels/cuda/linear_internal.h"
#include "kernels/cuda/testing.h"

namespace dapple::kernels::cuda {
namespace {

using testing::Abs;
using testing::Context;
using testing::DeviceArray;
using testing::ExpectClose;
using testing::kBf16Rtol;
using testing::kFp32Rtol;
using testing::RoundToBf16;
using testing::Uniform;

enum class Dtype { kFp32, kBf16 };
// Which GEMM path the Linear ops may take (linear_internal.h); kDefault lets them choose.
// kSeparateBiasGrad: the bias gradient by the column-sum kernel, not the BGRADB epilogue.
enum class Path { kDefault, kNoWorkspace, kSeparateBias, kGemmEx, kSeparateBiasGrad };

struct Case {
  int64_t n;
  int64_t in;
  int64_t out;
  Dtype dtype;
  Path path;
  bool with_dx;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << (c.dtype == Dtype::kFp32 ? "fp32" : "bf16") << " n " << c.n << " in " << c.in << " out "
      << c.out << " path " << static_cast<int>(c.path) << (c.with_dx ? "" : " without dx");
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  static const char* const kPaths[] = {"Default", "NoWorkspace", "SeparateBias", "GemmEx",
                                       "SeparateBiasGrad"};
  return absl::StrCat(c.dtype == Dtype::kFp32 ? "Fp32_" : "Bf16_", c.n, "x", c.in, "x", c.out, "_",
                      kPaths[static_cast<int>(c.path)], c.with_dx ? "" : "_NoDx");
}

struct Results {
  std::vector<float> y, dw, db, dx;
};

// kernels/cpu's LinearLayer: y = x W^T + b, then dW += dy^T x, db += colsum(dy), dx = dy W.
Results RunCpu(const Case& c, const std::vector<float>& x, const std::vector<float>& w,
               const std::vector<float>& b, const std::vector<float>& dy,
               const std::vector<float>& dw0, const std::vector<float>& db0) {
  LinearLayer layer(0, c.in, c.out);
  layer.weight().value.data = w;
  layer.bias().value.data = b;
  layer.weight().grad.data = dw0;
  layer.bias().grad.data = db0;
  Tensor tx;
  tx.shape = {c.n, c.in};
  tx.data = x;
  LayerCache cache;
  Tensor ty;
  layer.Forward(tx, &ty, &cache, {});
  Tensor tdy;
  tdy.shape = {c.n, c.out};
  tdy.data = dy;
  Tensor tdx;
  layer.Backward(tx, ty, tdy, c.with_dx ? &tdx : nullptr, &cache);
  return {ty.data, layer.weight().grad.data, layer.bias().grad.data, tdx.data};
}

using testing::FromDevice;
using testing::ToDevice;

absl::Status Forward(const KernelContext& ctx, const float* x, const float* w, const float* b,
                     float* y, int64_t n, int64_t in, int64_t out) {
  return LinearForward(ctx, x, w, b, y, n, in, out);
}
absl::Status Forward(const KernelContext& ctx, const bf16* x, const bf16* w, const float* b,
                     bf16* y, int64_t n, int64_t in, int64_t out) {
  return LinearForwardBf16(ctx, x, w, b, y, n, in, out);
}
absl::Status Backward(const KernelContext& ctx, const float* x, const float* w, const float* dy,
                      float* dw, float* db, float* dx, int64_t n, int64_t in, int64_t out) {
  return LinearBackward(ctx, x, w, dy, dw, db, dx, n, in, out);
}
absl::Status Backward(const KernelContext& ctx, const bf16* x, const bf16* w, const bf16* dy,
                      float* dw, float* db, bf16* dx, int64_t n, int64_t in, int64_t out) {
  return LinearBackwardBf16(ctx, x, w, dy, dw, db, dx, n, in, out);
}

// y and dx start NaN-poisoned; dW and db start at dw0 / db0 (the ops accumulate into them).
template <typename T>
Results RunGpu(const KernelContext& ctx, const Case& c, const std::vector<float>& x,
               const std::vector<float>& w, const std::vector<float>& b,
               const std::vector<float>& dy, const std::vector<float>& dw0,
               const std::vector<float>& db0) {
  DeviceArray<T> d_x(ToDevice<T>(x)), d_w(ToDevice<T>(w)), d_dy(ToDevice<T>(dy));
  DeviceArray<float> d_b(b), d_dw(dw0), d_db(db0);
  DeviceArray<T> d_y(c.n * c.out);
  DeviceArray<T> d_dx(c.with_dx ? c.n * c.in : 0);
  absl::Status s = Forward(ctx, d_x.get(), d_w.get(), d_b.get(), d_y.get(), c.n, c.in, c.out);
  EXPECT_TRUE(s.ok()) << s;
  s = Backward(ctx, d_x.get(), d_w.get(), d_dy.get(), d_dw.get(), d_db.get(),
               c.with_dx ? d_dx.get() : nullptr, c.n, c.in, c.out);
  EXPECT_TRUE(s.ok()) << s;
  testing::CheckCuda(cudaStreamSynchronize(ctx.stream), "Linear kernels");
  return {FromDevice(d_y.Download()), d_dw.Download(), d_db.Download(),
          FromDevice(d_dx.Download())};
}

class LinearTest : public ::testing::TestWithParam<Case> {};

// Every output element against kernels/cpu on fresh random inputs in [-1, 1), with the
// per-element scale of testing.h: the same CPU layer run on |x|, |W|, |b|, |dy|, |dW0|, |db0|
// gives sum_k |a_k b_k| + |bias or accumulated value| for y, dW, db and dx.
TEST_P(LinearTest, MatchesCpuReference) {
  DAPPLE_SKIP_WITHOUT_GPU();
  const Case& c = GetParam();
  const bool is_bf16 = c.dtype == Dtype::kBf16;
  const uint64_t seed = static_cast<uint64_t>(c.n * 1000003 + c.in * 1009 + c.out) * 8;
  std::vector<float> x = Uniform(c.n * c.in, seed, -1, 1);
  std::vector<float> w = Uniform(c.out * c.in, seed + 1, -1, 1);
  const std::vector<float> b = Uniform(c.out, seed + 2, -1, 1);
  std::vector<float> dy = Uniform(c.n * c.out, seed + 3, -1, 1);
  const std::vector<float> dw0 = Uniform(c.out * c.in, seed + 4, -1, 1);
  const std::vector<float> db0 = Uniform(c.out, seed + 5, -1, 1);
  if (is_bf16) {  // the reference runs on exactly the values the GPU sees
    x = RoundToBf16(x);
    w = RoundToBf16(w);
    dy = RoundToBf16(dy);
  }
  const Results want = RunCpu(c, x, w, b, dy, dw0, db0);
  const Results scale = RunCpu(c, Abs(x), Abs(w), Abs(b), Abs(dy), Abs(dw0), Abs(db0));

  KernelContext ctx = Context();
  if (c.path == Path::kNoWorkspace) {
    ctx.workspace = nullptr;
    ctx.workspace_bytes = 0;
  }
  internal::GemmPaths paths;
  paths.fused_bias = c.path != Path::kSeparateBias;
  paths.fused_bias_grad = c.path != Path::kSeparateBiasGrad;
  paths.lt = c.path != Path::kGemmEx;
  internal::SetGemmPathsForTesting(paths);
  const internal::GemmPathCounts before = internal::GetGemmPathCounts();
  const Results got = is_bf16 ? RunGpu<bf16>(ctx, c, x, w, b, dy, dw0, db0)
                              : RunGpu<float>(ctx, c, x, w, b, dy, dw0, db0);
  const internal::GemmPathCounts after = internal::GetGemmPathCounts();
  internal::SetGemmPathsForTesting(internal::GemmPaths());

  const double rtol = is_bf16 ? kBf16Rtol : kFp32Rtol;
  ExpectClose("y", got.y, want.y, scale.y, rtol, c.out);
  ExpectClose("dW", got.dw, want.dw, scale.dw, rtol, c.in);
  ExpectClose("db", got.db, want.db, scale.db, rtol);
  if (c.with_dx) ExpectClose("dx", got.dx, want.dx, scale.dx, rtol, c.in);

  const int64_t gemms = c.with_dx ? 3 : 2;
  const int64_t fused = after.fused_bias - before.fused_bias;
  const int64_t separate = after.separate_bias - before.separate_bias;
  const int64_t fused_grad = after.fused_bias_grad - before.fused_bias_grad;
  const int64_t separate_grad = after.separate_bias_grad - before.separate_bias_grad;
  EXPECT_EQ(fused + separate, 1);
  EXPECT_EQ(fused_grad + separate_grad, 1);
  EXPECT_EQ((after.lt - before.lt) + (after.gemm_ex - before.gemm_ex), gemms);
  if (c.path == Path::kSeparateBias || c.path == Path::kGemmEx) {
    EXPECT_EQ(separate, 1);
  }
  // Without cuBLASLt or a workspace to stage it in, the bias gradient cannot be fused.
  if (c.path == Path::kSeparateBiasGrad || c.path == Path::kGemmEx ||
      c.path == Path::kNoWorkspace) {
    EXPECT_EQ(separate_grad, 1);
  }
  if (c.path == Path::kGemmEx) {
    EXPECT_EQ(after.lt - before.lt, 0);
  }
  // Which path the default took on this GPU (the fused epilogue is the fast one).
  std::cout << "  paths: bias " << (fused ? "fused in the epilogue" : "separate kernel")
            << ", bias gradient "
            << (fused_grad ? "fused in the epilogue (BGRADB)" : "column-sum kernel")
            << ", GEMMs by cuBLASLt " << after.lt - before.lt << ", by cublasGemmEx "
            << after.gemm_ex - before.gemm_ex << "\n";
}

std::vector<Case> Cases() {
  struct Shape {
    int64_t n, in, out;
  };
  // Odd sizes (no vector alignment anywhere), a single element, several row chunks in the bias
  // gradient (n = 300, out = 33), and an MLP layer of the Fashion-MNIST example.
  const Shape shapes[] = {{3, 5, 7}, {1, 1, 1}, {37, 65, 129}, {300, 97, 33}, {256, 784, 1024}};
  std::vector<Case> cases;
  for (Dtype dtype : {Dtype::kFp32, Dtype::kBf16}) {
    for (const Shape& s : shapes) {
      cases.push_back({s.n, s.in, s.out, dtype, Path::kDefault, true});
    }
    for (const Shape& s : {shapes[0], shapes[3], shapes[4]}) {
      for (Path path :
           {Path::kNoWorkspace, Path::kSeparateBias, Path::kGemmEx, Path::kSeparateBiasGrad}) {
        cases.push_back({s.n, s.in, s.out, dtype, path, true});
      }
    }
    cases.push_back({37, 65, 129, dtype, Path::kDefault, false});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, LinearTest, ::testing::ValuesIn(Cases()), CaseName);

// The fused bias gradient (and the rest of the backward) is bitwise the same on every run of a
// shape on one GPU: cuBLAS's reproducibility guarantee, the algorithm chosen once per shape.
TEST(LinearDeterminismTest, BackwardIsBitwiseReproducible) {
  DAPPLE_SKIP_WITHOUT_GPU();
  KernelContext ctx = Context();
  for (Dtype dtype : {Dtype::kFp32, Dtype::kBf16}) {
    const Case c{2048, 1024, 1024, dtype, Path::kDefault, true};
    SCOPED_TRACE(dtype == Dtype::kFp32 ? "fp32" : "bf16");
    std::vector<float> x = RoundToBf16(Uniform(c.n * c.in, 11, -1, 1));
    std::vector<float> w = RoundToBf16(Uniform(c.out * c.in, 12, -1, 1));
    const std::vector<float> b = Uniform(c.out, 13, -1, 1);
    std::vector<float> dy = RoundToBf16(Uniform(c.n * c.out, 14, -1, 1));
    const std::vector<float> dw0 = Uniform(c.out * c.in, 15, -1, 1);
    const std::vector<float> db0 = Uniform(c.out, 16, -1, 1);
    auto run = [&] {
      return dtype == Dtype::kBf16 ? RunGpu<bf16>(ctx, c, x, w, b, dy, dw0, db0)
                                   : RunGpu<float>(ctx, c, x, w, b, dy, dw0, db0);
    };
    const Results first = run();
    const Results second = run();
    EXPECT_EQ(first.db, second.db);
    EXPECT_EQ(first.dw, second.dw);
    EXPECT_EQ(first.dx, second.dx);
    EXPECT_EQ(first.y, second.y);
  }
}

// Argument checks come before any CUDA call, so they hold without a GPU.
TEST(LinearArgsTest, RejectsNonPositiveSizesNullPointersAndNoHandle) {
  KernelContext ctx;  // no stream, no handle
  float f = 0;
  bf16 h;
  const int64_t bad[][3] = {{0, 5, 7}, {3, 0, 7}, {3, 5, 0}, {-1, 5, 7}};
  for (const auto& d : bad) {
    SCOPED_TRACE(absl::StrCat("n ", d[0], " in ", d[1], " out ", d[2]));
    EXPECT_EQ(LinearForward(ctx, &f, &f, &f, &f, d[0], d[1], d[2]).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(LinearBackward(ctx, &f, &f, &f, &f, &f, &f, d[0], d[1], d[2]).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(LinearForwardBf16(ctx, &h, &h, &f, &h, d[0], d[1], d[2]).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(LinearBackwardBf16(ctx, &h, &h, &h, &f, &f, &h, d[0], d[1], d[2]).code(),
              absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(LinearForward(ctx, nullptr, &f, &f, &f, 3, 5, 7).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LinearBackward(ctx, &f, &f, &f, &f, nullptr, &f, 3, 5, 7).code(),
            absl::StatusCode::kInvalidArgument);
  const absl::Status no_handle = LinearForward(ctx, &f, &f, &f, &f, 3, 5, 7);
  EXPECT_EQ(no_handle.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(no_handle.message().find("cuBLAS handle"), absl::string_view::npos) << no_handle;
}

}  // namespace
}  // namespace dapple::kernels::cuda
