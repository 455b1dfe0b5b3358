#include "kernels/cuda/activations.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cpu/activations.h"
#include "kernels/cuda/testing.h"

namespace dapple::kernels::cuda {
namespace {

using testing::Context;
using testing::DeviceArray;
using testing::ExpectClose;
using testing::kBf16Rtol;
using testing::kFp32Rtol;
using testing::RoundToBf16;
using testing::Uniform;

enum class Act { kRelu, kGelu };

// kernels/cpu's layer on a [count] tensor: y, and dx for the given dy.
void RunCpu(Act act, const std::vector<float>& x, const std::vector<float>& dy,
            std::vector<float>* y, std::vector<float>* dx) {
  ReluLayer relu;
  GeluLayer gelu;
  Layer* layer = act == Act::kRelu ? static_cast<Layer*>(&relu) : &gelu;
  Tensor tx;
  tx.shape = {static_cast<int64_t>(x.size())};
  tx.data = x;
  LayerCache cache;
  Tensor ty;
  layer->Forward(tx, &ty, &cache, {});
  Tensor tdy;
  tdy.shape = tx.shape;
  tdy.data = dy;
  Tensor tdx;
  layer->Backward(tx, ty, tdy, &tdx, &cache);
  *y = ty.data;
  *dx = tdx.data;
}

// GELU's scales (testing.h): y = 0.5 x (1 + erf(x / sqrt 2)) adds 1 and erf, so its scale is
// 0.5 |x| (1 + |erf|); dx = dy (Phi(x) + x phi(x)) gives |dy| (0.5 (1 + |erf|) + |x| phi(x)).
// The cancellation in 1 + erf for x << 0 is the same on both sides; only the few-ulp
// differences between CUDA's and glibc's erff / expf remain, measured against these scales.
void GeluScales(const std::vector<float>& x, const std::vector<float>& dy,
                std::vector<double>* y_scale, std::vector<double>* dx_scale) {
  y_scale->resize(x.size());
  dx_scale->resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    const double e = std::fabs(std::erf(v / std::sqrt(2.0)));
    const double pdf = std::exp(-0.5 * v * v) / std::sqrt(2.0 * M_PI);
    (*y_scale)[i] = 0.5 * std::fabs(v) * (1 + e);
    (*dx_scale)[i] = std::fabs(dy[i]) * (0.5 * (1 + e) + std::fabs(v) * pdf);
  }
}

absl::Status Forward(Act act, const float* x, float* y, int64_t n) {
  return act == Act::kRelu ? ReluForward(Context(), x, y, n) : GeluForward(Context(), x, y, n);
}
absl::Status Forward(Act act, const bf16* x, bf16* y, int64_t n) {
  return act == Act::kRelu ? ReluForwardBf16(Context(), x, y, n)
                           : GeluForwardBf16(Context(), x, y, n);
}
absl::Status Backward(Act act, const float* x, const float* dy, float* dx, int64_t n) {
  return act == Act::kRelu ? ReluBackward(Context(), x, dy, dx, n)
                           : GeluBackward(Context(), x, dy, dx, n);
}
absl::Status Backward(Act act, const bf16* x, const bf16* dy, bf16* dx, int64_t n) {
  return act == Act::kRelu ? ReluBackwardBf16(Context(), x, dy, dx, n)
                           : GeluBackwardBf16(Context(), x, dy, dx, n);
}

using testing::FromDevice;
using testing::ToDevice;

// Runs forward into a poisoned y, backward into a poisoned dx and, separately, in place
// (dx aliasing dy, which the header allows).
template <typename T>
void RunGpu(Act act, const std::vector<float>& x, const std::vector<float>& dy,
            std::vector<float>* y, std::vector<float>* dx, std::vector<float>* dx_in_place) {
  const int64_t n = static_cast<int64_t>(x.size());
  DeviceArray<T> d_x(ToDevice<T>(x)), d_dy(ToDevice<T>(dy)), d_y(n), d_dx(n),
      d_alias(ToDevice<T>(dy));
  absl::Status s = Forward(act, d_x.get(), d_y.get(), n);
  EXPECT_TRUE(s.ok()) << s;
  s = Backward(act, d_x.get(), d_dy.get(), d_dx.get(), n);
  EXPECT_TRUE(s.ok()) << s;
  s = Backward(act, d_x.get(), d_alias.get(), d_alias.get(), n);
  EXPECT_TRUE(s.ok()) << s;
  *y = FromDevice(d_y.Download());
  *dx = FromDevice(d_dx.Download());
  *dx_in_place = FromDevice(d_alias.Download());
}

struct Case {
  Act act;
  bool is_bf16;
  int64_t count;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << (c.act == Act::kRelu ? "relu " : "gelu ") << (c.is_bf16 ? "bf16" : "fp32") << " count "
      << c.count;
}

class ActivationTest : public ::testing::TestWithParam<Case> {};

// x in [-6, 6) reaches GELU's tails; ReLU also gets 0, -0, NaN (passes through) and a large
// value. ReLU is exact on both sides (a select), so it must match exactly (NaN matching NaN).
TEST_P(ActivationTest, MatchesCpuReference) {
  DAPPLE_SKIP_WITHOUT_GPU();
  const Case& c = GetParam();
  std::vector<float> x = Uniform(c.count, 100 + c.count, -6, 6);
  std::vector<float> dy = Uniform(c.count, 200 + c.count, -2, 2);
  if (c.act == Act::kRelu && c.count >= 4) {
    x[0] = 0.0f;
    x[1] = -0.0f;
    x[2] = std::numeric_limits<float>::quiet_NaN();
    x[3] = 3e38f;
  }
  if (c.is_bf16) {
    x = RoundToBf16(x);
    dy = RoundToBf16(dy);
  }
  std::vector<float> want_y, want_dx;
  RunCpu(c.act, x, dy, &want_y, &want_dx);
  std::vector<float> y, dx, dx_in_place;
  if (c.is_bf16) {
    RunGpu<bf16>(c.act, x, dy, &y, &dx, &dx_in_place);
  } else {
    RunGpu<float>(c.act, x, dy, &y, &dx, &dx_in_place);
  }
  if (c.act == Act::kRelu) {
    // Exact: zero tolerance against any scale.
    const std::vector<double> zero(x.size(), 0.0);
    ExpectClose("relu y", y, want_y, zero, 0.0, 0, /*nan_equal=*/true);
    ExpectClose("relu dx", dx, want_dx, zero, 0.0, 0, true);
    ExpectClose("relu dx (in place)", dx_in_place, want_dx, zero, 0.0, 0, true);
    return;
  }
  std::vector<double> y_scale, dx_scale;
  GeluScales(x, dy, &y_scale, &dx_scale);
  const double rtol = c.is_bf16 ? kBf16Rtol : kFp32Rtol;
  ExpectClose("gelu y", y, want_y, y_scale, rtol);
  ExpectClose("gelu dx", dx, want_dx, dx_scale, rtol);
  ExpectClose("gelu dx (in place)", dx_in_place, want_dx, dx_scale, rtol);
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (Act act : {Act::kRelu, Act::kGelu}) {
    for (bool is_bf16 : {false, true}) {
      for (int64_t count : {1, 7, 1000, (1 << 20) + 3}) cases.push_back({act, is_bf16, count});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Counts, ActivationTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return absl::StrCat(info.param.act == Act::kRelu ? "Relu" : "Gelu",
                                               info.param.is_bf16 ? "Bf16_" : "Fp32_",
                                               info.param.count);
                         });

// Argument checks come before any CUDA call, so they hold without a GPU.
TEST(ActivationArgsTest, NegativeCountIsInvalidAndZeroCountDoesNothing) {
  KernelContext ctx;
  float f = 0;
  bf16 h;
  EXPECT_EQ(ReluForward(ctx, &f, &f, -1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReluBackward(ctx, &f, &f, &f, -1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GeluForward(ctx, &f, &f, -1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GeluBackward(ctx, &f, &f, &f, -1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReluForwardBf16(ctx, &h, &h, -1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GeluBackwardBf16(ctx, &h, &h, &h, -1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GeluForward(ctx, nullptr, &f, 4).code(), absl::StatusCode::kInvalidArgument);
  // count 0 enqueues nothing: no GPU, stream or pointer needed.
  EXPECT_TRUE(ReluForward(ctx, nullptr, nullptr, 0).ok());
  EXPECT_TRUE(GeluBackwardBf16(ctx, nullptr, nullptr, nullptr, 0).ok());
}

}  // namespace
}  // namespace dapple::kernels::cuda
