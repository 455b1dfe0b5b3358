#include "kernels/cpu/loss.h"

#include <cmath>
#include <limits>

#include "kernels/cpu/check.h"

namespace dapple::kernels {
namespace {

// One row: returns -log softmax(row)[label] and, when `drow` is not null, writes
// (softmax(row) - onehot(label)) * grad_scale. The log-sum-exp runs in double: the loss is
// compared across schedules at 1e-5 and float exp/log sums would eat much of that margin.
double RowLoss(const float* row, int64_t c, int32_t label, float grad_scale, float* drow,
               bool* is_correct) {
  int64_t argmax = 0;
  for (int64_t j = 1; j < c; ++j) {
    if (row[j] > row[argmax]) argmax = j;
  }
  const double max = row[argmax];
  double sum = 0;
  for (int64_t j = 0; j < c; ++j) sum += std::exp(static_cast<double>(row[j]) - max);
  const double log_sum = std::log(sum);
  *is_correct = argmax == label;
  if (label < 0 || label >= c) {
    if (drow != nullptr) {
      for (int64_t j = 0; j < c; ++j) drow[j] = 0.0f;
    }
    return std::numeric_limits<double>::quiet_NaN();
  }
  if (drow != nullptr) {
    for (int64_t j = 0; j < c; ++j) {
      const double p = std::exp(static_cast<double>(row[j]) - max - log_sum);
      drow[j] = static_cast<float>((p - (j == label ? 1.0 : 0.0)) * grad_scale);
    }
  }
  return log_sum - (static_cast<double>(row[label]) - max);
}

double LossImpl(const Tensor& logits, const int32_t* labels, float grad_scale, Tensor* dlogits,
                int64_t* correct) {
  DAPPLE_KERNEL_CHECK(logits.shape.size() >= 2 && logits.shape.back() > 0,
                      "softmax cross-entropy expects logits [N, ..., C], got ",
                      ShapeToString(logits.shape));
  // Every position of every sample is one row of C classes with its own label.
  const int64_t c = logits.shape.back();
  const int64_t n = logits.numel() / c;
  if (dlogits != nullptr) dlogits->Resize(logits.shape);
  double total = 0;
  int64_t right = 0;
  for (int64_t r = 0; r < n; ++r) {
    bool is_correct = false;
    total += RowLoss(logits.data.data() + r * c, c, labels[r], grad_scale,
                     dlogits == nullptr ? nullptr : dlogits->data.data() + r * c, &is_correct);
    if (is_correct) ++right;
  }
  if (correct != nullptr) *correct = right;
  return total;
}

}  // namespace

double SoftmaxCrossEntropy(const Tensor& logits, const int32_t* labels, float grad_scale,
                           Tensor* dlogits, int64_t* correct) {
  DAPPLE_KERNEL_CHECK(dlogits != nullptr, "SoftmaxCrossEntropy needs dlogits");
  return LossImpl(logits, labels, grad_scale, dlogits, correct);
}

double SoftmaxCrossEntropyEval(const Tensor& logits, const int32_t* labels, int64_t* correct) {
  return LossImpl(logits, labels, 0.0f, nullptr, correct);
}

}  // namespace dapple::kernels
