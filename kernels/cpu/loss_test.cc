#include "kernels/cpu/loss.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/grad_check_testing.h"

namespace dapple::kernels {
namespace {

using testing::ExpectGradientsNear;
using testing::NumericalGradient;
using testing::RandomTensor;

Tensor Logits(const std::vector<int64_t>& shape, const std::vector<float>& values) {
  Tensor t;
  t.shape = shape;
  t.data = values;
  return t;
}

TEST(SoftmaxCrossEntropyTest, KnownValuesStableAndCorrectCount) {
  // Row 0: log(e^1 + e^2 + e^3) - 3 = 0.4076059644443806 (argmax 2 = label: correct).
  // Row 1: logits 1000 / 0 / -1000, label 1: 1000 exactly in double (a naive exp overflows).
  // Row 2: all equal, label 0: log 3 = 1.0986122886681098; the tie resolves to index 0: correct.
  const Tensor logits = Logits({3, 3}, {1, 2, 3, 1000, 0, -1000, 0, 0, 0});
  const std::vector<int32_t> labels = {2, 1, 0};
  Tensor dlogits;
  int64_t correct = -1;
  const double loss = SoftmaxCrossEntropy(logits, labels.data(), 0.5f, &dlogits, &correct);
  EXPECT_NEAR(loss, 1001.5062182531126, 1e-9);
  EXPECT_EQ(correct, 2);
  ASSERT_EQ(dlogits.shape, logits.shape);
  // (softmax - onehot) * 0.5; softmax([1, 2, 3]) = 0.0900305732, 0.2447284711, 0.6652409558.
  const std::vector<double> expected = {0.5 * 0.09003057317038046,
                                        0.5 * 0.24472847105479767,
                                        0.5 * (0.6652409557748219 - 1),
                                        0.5,
                                        -0.5,
                                        0,
                                        0.5 * (1.0 / 3 - 1),
                                        0.5 / 3,
                                        0.5 / 3};
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(dlogits.data[i], expected[i], 1e-7) << i;

  int64_t eval_correct = -1;
  EXPECT_EQ(SoftmaxCrossEntropyEval(logits, labels.data(), &eval_correct), loss);
  EXPECT_EQ(eval_correct, 2);
}

TEST(SoftmaxCrossEntropyTest, DlogitsMatchFiniteDifferences) {
  // Central differences of grad_scale * loss. The loss is evaluated in double and the perturbed
  // logits are exact in float, so the reference is good to the O(h^2) truncation (h = 1/128:
  // h^2 / 6 * |f'''| * grad_scale < 1e-6); the kernel's float rounding of dlogits is ~1e-8.
  const int64_t n = 4, c = 5;
  Tensor logits = RandomTensor({n, c}, 51, -3, 3);
  const std::vector<int32_t> labels = {0, 4, 2, 2};
  const float scale = 0.25f;
  Tensor dlogits;
  SoftmaxCrossEntropy(logits, labels.data(), scale, &dlogits, nullptr);
  auto objective = [&]() {
    return scale * SoftmaxCrossEntropyEval(logits, labels.data(), nullptr);
  };
  ExpectGradientsNear(dlogits.data, NumericalGradient(objective, &logits.data), 2e-6, 0, "dlogits");
  // Each row of softmax - onehot sums to zero.
  for (int64_t r = 0; r < n; ++r) {
    double s = 0;
    for (int64_t j = 0; j < c; ++j) s += dlogits.data[r * c + j];
    EXPECT_NEAR(s, 0, 1e-7) << "row " << r;
  }
}

TEST(SoftmaxCrossEntropyTest, MicroBatchesAddUpToTheBatch) {
  const Tensor logits = RandomTensor({6, 4}, 61, -2, 2);
  const std::vector<int32_t> labels = {3, 1, 0, 0, 2, 1};
  Tensor full_grad, half_grad;
  const double full = SoftmaxCrossEntropy(logits, labels.data(), 1.0f / 6, &full_grad, nullptr);
  double halves = 0;
  for (int h = 0; h < 2; ++h) {
    const Tensor part = Logits({3, 4}, std::vector<float>(logits.data.begin() + 12 * h,
                                                          logits.data.begin() + 12 * (h + 1)));
    halves += SoftmaxCrossEntropy(part, labels.data() + 3 * h, 1.0f / 6, &half_grad, nullptr);
    for (int i = 0; i < 12; ++i) EXPECT_EQ(half_grad.data[i], full_grad.data[12 * h + i]);
  }
  EXPECT_NEAR(halves, full, 1e-12);
}

TEST(SoftmaxCrossEntropyTest, LabelOutOfRangeGivesNan) {
  const Tensor logits = Logits({2, 2}, {1, 2, 3, 4});
  const std::vector<int32_t> labels = {0, 2};
  Tensor dlogits;
  EXPECT_TRUE(std::isnan(SoftmaxCrossEntropy(logits, labels.data(), 1.0f, &dlogits, nullptr)));
  EXPECT_EQ(dlogits.data[2], 0.0f);
  EXPECT_EQ(dlogits.data[3], 0.0f);
  EXPECT_NE(dlogits.data[0], 0.0f);  // the valid row still gets its gradient
}

TEST(SoftmaxCrossEntropyTest, EmptyBatch) {
  const Tensor logits = Tensor::Zeros({0, 10});
  Tensor dlogits;
  int64_t correct = -1;
  EXPECT_EQ(SoftmaxCrossEntropy(logits, nullptr, 1.0f, &dlogits, &correct), 0.0);
  EXPECT_EQ(correct, 0);
  EXPECT_EQ(dlogits.shape, (std::vector<int64_t>{0, 10}));
}

}  // namespace
}  // namespace dapple::kernels
