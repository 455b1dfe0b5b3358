#include "kernels/cuda/loss.h"

#include <cstdint>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cpu/loss.h"
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

enum class Mode { kTrain, kEval, kLossOnly };  // outputs: all; no dlogits; row_loss only

struct Case {
  int64_t n;
  int64_t c;
  bool is_bf16;
  Mode mode;
};

struct Results {
  std::vector<double> loss;
  std::vector<int32_t> correct;
  std::vector<float> dlogits;
};

// kernels/cpu one row at a time, which gives the per-row values the GPU op reports.
Results RunCpu(const Case& c, const std::vector<float>& logits, const std::vector<int32_t>& labels,
               float grad_scale) {
  Results r;
  for (int64_t row = 0; row < c.n; ++row) {
    Tensor t;
    t.shape = {1, c.c};
    t.data.assign(logits.begin() + row * c.c, logits.begin() + (row + 1) * c.c);
    Tensor d;
    int64_t correct = 0;
    r.loss.push_back(
        ::dapple::kernels::SoftmaxCrossEntropy(t, &labels[row], grad_scale, &d, &correct));
    r.correct.push_back(static_cast<int32_t>(correct));
    r.dlogits.insert(r.dlogits.end(), d.data.begin(), d.data.end());
  }
  return r;
}

using testing::FromDevice;
using testing::ToDevice;

absl::Status Run(const float* logits, const int32_t* labels, int64_t n, int64_t c, float scale,
                 float* dlogits, double* loss, int32_t* correct) {
  return SoftmaxCrossEntropy(Context(), logits, labels, n, c, scale, dlogits, loss, correct);
}
absl::Status Run(const bf16* logits, const int32_t* labels, int64_t n, int64_t c, float scale,
                 bf16* dlogits, double* loss, int32_t* correct) {
  return SoftmaxCrossEntropyBf16(Context(), logits, labels, n, c, scale, dlogits, loss, correct);
}

// Outputs start NaN / -1 poisoned.
template <typename T>
Results RunGpu(const Case& c, const std::vector<float>& logits, const std::vector<int32_t>& labels,
               float grad_scale) {
  DeviceArray<T> d_logits(ToDevice<T>(logits));
  DeviceArray<int32_t> d_labels(labels);
  DeviceArray<T> d_dlogits(c.mode == Mode::kTrain ? c.n * c.c : 0);
  DeviceArray<double> d_loss(c.n);
  DeviceArray<int32_t> d_correct(c.mode != Mode::kLossOnly ? c.n : 0);
  const absl::Status s = Run(d_logits.get(), d_labels.get(), c.n, c.c, grad_scale,
                             c.mode == Mode::kTrain ? d_dlogits.get() : nullptr, d_loss.get(),
                             c.mode != Mode::kLossOnly ? d_correct.get() : nullptr);
  EXPECT_TRUE(s.ok()) << s;
  return {d_loss.Download(), d_correct.Download(), FromDevice(d_dlogits.Download())};
}

void PrintTo(const Case& c, std::ostream* os) {
  *os << (c.is_bf16 ? "bf16" : "fp32") << " n " << c.n << " c " << c.c << " mode "
      << static_cast<int>(c.mode);
}

class LossTest : public ::testing::TestWithParam<Case> {};

// Random logits in [-4, 4) and labels, plus (when the shape allows) the special rows: labels -1
// and c (NaN loss, zero dlogits, not correct), a row of equal logits with label 0 (the first
// maximum wins: correct) and a row whose maximum appears at columns 1 and c - 1 with label c - 1
// (not correct). Loss and dlogits are computed in double from the same input values on both
// sides, so they agree to a float rounding: 1e-5 relative per element, also for bf16 logits;
// bf16 dlogits are rounded to bf16 once more (1e-2).
TEST_P(LossTest, MatchesCpuReferencePerRow) {
  DAPPLE_SKIP_WITHOUT_GPU();
  const Case& c = GetParam();
  std::vector<float> logits = Uniform(c.n * c.c, 300 + c.n * 7 + c.c, -4, 4);
  std::vector<int32_t> labels(c.n);
  std::mt19937 rng(static_cast<uint32_t>(c.n + c.c));
  for (int32_t& l : labels) l = static_cast<int32_t>(rng() % c.c);
  if (c.n >= 4 && c.c >= 3) {
    labels[0] = -1;
    labels[1] = static_cast<int32_t>(c.c);
    for (int64_t j = 0; j < c.c; ++j) logits[2 * c.c + j] = 0.5f;
    labels[2] = 0;
    logits[3 * c.c + 1] = 5.0f;
    logits[3 * c.c + c.c - 1] = 5.0f;
    labels[3] = static_cast<int32_t>(c.c - 1);
  }
  if (c.is_bf16) logits = RoundToBf16(logits);
  const float grad_scale = 1.0f / static_cast<float>(c.n);

  const Results want = RunCpu(c, logits, labels, grad_scale);
  const Results got = c.is_bf16 ? RunGpu<bf16>(c, logits, labels, grad_scale)
                                : RunGpu<float>(c, logits, labels, grad_scale);

  ExpectClose("row_loss", got.loss, want.loss, want.loss, kFp32Rtol, 0, /*nan_equal=*/true);
  if (c.mode != Mode::kLossOnly) {
    const std::vector<double> zero(c.n, 0.0);
    ExpectClose("row_correct", got.correct, want.correct, zero, 0.0);
  }
  if (c.mode == Mode::kTrain) {
    ExpectClose("dlogits", got.dlogits, want.dlogits, want.dlogits,
                c.is_bf16 ? kBf16Rtol : kFp32Rtol, c.c);
  }
}

std::vector<Case> Cases() {
  struct Shape {
    int64_t n, c;
  };
  // One class; Fashion-MNIST's 10 classes (one warp per row); odd widths; rows wider than a
  // 256-thread block; more rows than one block size.
  const Shape shapes[] = {{1, 1}, {5, 10}, {6, 7}, {64, 1000}, {300, 10}, {4, 300}};
  std::vector<Case> cases;
  for (bool is_bf16 : {false, true}) {
    for (const Shape& s : shapes) cases.push_back({s.n, s.c, is_bf16, Mode::kTrain});
    cases.push_back({5, 10, is_bf16, Mode::kEval});
    cases.push_back({64, 1000, is_bf16, Mode::kLossOnly});
  }
  return cases;
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  static const char* const kModes[] = {"Train", "Eval", "LossOnly"};
  return absl::StrCat(info.param.is_bf16 ? "Bf16_" : "Fp32_", info.param.n, "x", info.param.c, "_",
                      kModes[static_cast<int>(info.param.mode)]);
}

INSTANTIATE_TEST_SUITE_P(Shapes, LossTest, ::testing::ValuesIn(Cases()), CaseName);

// Argument checks come before any CUDA call, so they hold without a GPU.
TEST(LossArgsTest, RejectsEmptyShapesAndMissingOutputs) {
  KernelContext ctx;
  float f = 0;
  int32_t label = 0;
  double loss = 0;
  EXPECT_EQ(SoftmaxCrossEntropy(ctx, &f, &label, 0, 10, 1, &f, &loss, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SoftmaxCrossEntropy(ctx, &f, &label, 4, 0, 1, &f, &loss, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SoftmaxCrossEntropy(ctx, &f, &label, 4, 10, 1, &f, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SoftmaxCrossEntropyBf16(ctx, nullptr, &label, 4, 10, 1, nullptr, &loss, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dapple::kernels::cuda
