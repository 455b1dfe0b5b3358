#include "kernels/cuda/optimizer.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dapple/v1/job.pb.h"
#include "gtest/gtest.h"
#include "kernels/cpu/optimizer.h"
#include "kernels/cuda/testing.h"

namespace dapple::kernels::cuda {
namespace {

using testing::Context;
using testing::DeviceArray;
using testing::ExpectClose;
using testing::kFp32Rtol;
using testing::Uniform;

constexpr int kSteps = 3;

// kernels/cpu/optimizer.cc keeps its state private, so the expected state comes from this
// transcription of its loops (same float scalars, same operation order); the test checks the
// transcription's weights against the real CPU optimizer before trusting its state.
struct HostState {
  std::vector<float> w, m, v;
};

void HostSgdStep(HostState* s, const std::vector<float>& g, float lr, float momentum,
                 float weight_decay) {
  for (size_t i = 0; i < g.size(); ++i) {
    const float d = g[i] + weight_decay * s->w[i];
    s->v[i] = momentum * s->v[i] + d;
    s->w[i] -= lr * s->v[i];
  }
}

void HostAdamWStep(HostState* s, const std::vector<float>& g, double lr, double beta1, double beta2,
                   double eps, double weight_decay, int64_t t) {
  const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(t));
  const float decay = static_cast<float>(1.0 - lr * weight_decay);
  const float step_size = static_cast<float>(lr / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float b1 = static_cast<float>(beta1), b2 = static_cast<float>(beta2);
  const float omb1 = static_cast<float>(1.0 - beta1), omb2 = static_cast<float>(1.0 - beta2);
  const float e = static_cast<float>(eps);
  for (size_t i = 0; i < g.size(); ++i) {
    s->w[i] *= decay;
    s->m[i] = b1 * s->m[i] + omb1 * g[i];
    s->v[i] = b2 * s->v[i] + omb2 * g[i] * g[i];
    s->w[i] -= step_size * (s->m[i] / (std::sqrt(s->v[i]) / bc2_sqrt + e));
  }
}

struct Case {
  bool adamw;
  int64_t count;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << (c.adamw ? "adamw" : "sgd") << " count " << c.count;
}

class OptimizerTest : public ::testing::TestWithParam<Case> {};

// Three steps on fresh random weights and gradients; weights against kernels/cpu's optimizer,
// state (velocity, or m and v) against the transcription, 1e-5 relative per element. (The GPU
// kernels round every operation in the CPU's order, so in practice the match is exact.)
TEST_P(OptimizerTest, ThreeStepsMatchCpuReference) {
  DAPPLE_SKIP_WITHOUT_GPU();
  const Case& c = GetParam();
  v1::OptimizerSpec spec;
  spec.set_type(c.adamw ? "adamw" : "sgd");
  spec.set_lr(c.adamw ? 1e-2 : 5e-2);
  spec.set_momentum(0.9);
  spec.set_weight_decay(c.adamw ? 0.1 : 1e-3);
  absl::StatusOr<std::unique_ptr<Optimizer>> cpu = MakeOptimizer(spec);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  // AdamW with MakeOptimizer's defaults for the unset betas and eps.
  const double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;

  Param p;
  p.name = "layer0.weight";
  p.value.shape = {c.count};
  p.value.data = Uniform(c.count, 400 + c.count, -1, 1);
  p.grad.shape = {c.count};
  HostState host{p.value.data, std::vector<float>(c.count, 0.0f),
                 std::vector<float>(c.count, 0.0f)};
  DeviceArray<float> w(p.value.data), g(c.count), m(std::vector<float>(c.count, 0.0f)),
      v(std::vector<float>(c.count, 0.0f));
  std::vector<Param*> params = {&p};
  for (int t = 1; t <= kSteps; ++t) {
    SCOPED_TRACE(absl::StrCat("step ", t));
    p.grad.data = Uniform(c.count, 500 + 10 * t + c.count, -1, 1);
    g.Upload(p.grad.data);
    (*cpu)->Step(params, spec.lr());
    absl::Status s;
    if (c.adamw) {
      HostAdamWStep(&host, p.grad.data, spec.lr(), beta1, beta2, eps, spec.weight_decay(), t);
      s = AdamWStep(Context(), w.get(), g.get(), m.get(), v.get(), c.count, spec.lr(), beta1, beta2,
                    eps, spec.weight_decay(), t);
    } else {
      const float lr = static_cast<float>(spec.lr());
      const float momentum = static_cast<float>(spec.momentum());
      const float wd = static_cast<float>(spec.weight_decay());
      HostSgdStep(&host, p.grad.data, lr, momentum, wd);
      s = SgdStep(Context(), w.get(), g.get(), v.get(), c.count, lr, momentum, wd);
    }
    ASSERT_TRUE(s.ok()) << s;
    ExpectClose("transcription w vs kernels/cpu", host.w, p.value.data, p.value.data, kFp32Rtol);
    ExpectClose("w", w.Download(), p.value.data, p.value.data, kFp32Rtol);
    ExpectClose(c.adamw ? "v (second moment)" : "v (velocity)", v.Download(), host.v, host.v,
                kFp32Rtol);
    if (c.adamw) ExpectClose("m", m.Download(), host.m, host.m, kFp32Rtol);
  }
}

INSTANTIATE_TEST_SUITE_P(Counts, OptimizerTest,
                         ::testing::Values(Case{false, 1}, Case{false, 1000}, Case{false, 100003},
                                           Case{true, 1}, Case{true, 1000}, Case{true, 100003}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return absl::StrCat(info.param.adamw ? "AdamW_" : "Sgd_",
                                               info.param.count);
                         });

uint16_t Bits(bf16 h) {
  uint16_t b;
  std::memcpy(&b, &h, sizeof(b));
  return b;
}

// Round to nearest even, bit for bit as cuda_bf16's host conversion, including the halfway
// cases (1 + 2^-8 rounds down to 1, 1 + 3 * 2^-8 up), signed zeros, infinities and NaN; back to
// float exactly.
TEST(CastTest, RoundTripsMatchHostConversionBitForBit) {
  DAPPLE_SKIP_WITHOUT_GPU();
  std::vector<float> in = Uniform(10007, 600, -100, 100);
  const float specials[] = {0.0f,
                            -0.0f,
                            1.0f + 1.0f / 256,
                            1.0f + 3.0f / 256,
                            -(1.0f + 1.0f / 256),
                            3.0e38f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::denorm_min()};
  for (size_t i = 0; i < std::size(specials); ++i) in[i] = specials[i];
  DeviceArray<float> d_in(in);
  DeviceArray<bf16> d_half(in.size());
  DeviceArray<float> d_back(in.size());
  ASSERT_TRUE(CastToBf16(Context(), d_in.get(), d_half.get(), in.size()).ok());
  ASSERT_TRUE(CastToFloat(Context(), d_half.get(), d_back.get(), in.size()).ok());
  const std::vector<bf16> half = d_half.Download();
  const std::vector<float> back = d_back.Download();
  int64_t misses = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const bf16 want = __float2bfloat16_rn(in[i]);
    const bool nan = std::isnan(in[i]);
    // Any NaN is a NaN: only its payload may differ.
    const bool half_ok = nan ? std::isnan(__bfloat162float(half[i])) : Bits(half[i]) == Bits(want);
    const float want_back = __bfloat162float(half[i]);
    const bool back_ok =
        nan ? std::isnan(back[i]) : std::memcmp(&back[i], &want_back, sizeof(float)) == 0;
    if ((!half_ok || !back_ok) && ++misses <= 10) {
      ADD_FAILURE() << "element " << i << " in " << in[i] << ": bf16 bits 0x" << std::hex
                    << Bits(half[i]) << " expected 0x" << Bits(want) << std::dec << ", back "
                    << back[i] << " expected " << want_back;
    }
  }
  EXPECT_EQ(misses, 0);
}

// Argument checks come before any CUDA call, so they hold without a GPU.
TEST(OptimizerArgsTest, RejectsNegativeCountsNullArraysAndStepZero) {
  KernelContext ctx;
  float f = 0;
  bf16 h;
  EXPECT_EQ(SgdStep(ctx, &f, &f, &f, -1, 0.1f, 0.9f, 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SgdStep(ctx, &f, nullptr, &f, 3, 0.1f, 0.9f, 0).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AdamWStep(ctx, &f, &f, &f, &f, -1, 1e-3, 0.9, 0.999, 1e-8, 0, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AdamWStep(ctx, &f, &f, &f, &f, 3, 1e-3, 0.9, 0.999, 1e-8, 0, 0).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CastToBf16(ctx, &f, &h, -1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CastToFloat(ctx, nullptr, &f, 2).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(SgdStep(ctx, nullptr, nullptr, nullptr, 0, 0.1f, 0.9f, 0).ok());
  EXPECT_TRUE(CastToFloat(ctx, nullptr, nullptr, 0).ok());
}

}  // namespace
}  // namespace dapple::kernels::cuda
