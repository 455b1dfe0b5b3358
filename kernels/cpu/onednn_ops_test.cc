#include "kernels/cpu/onednn_ops.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/grad_check_testing.h"

namespace dapple::kernels {
namespace {

using testing::RandomTensor;

double GeluRef(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double GeluGradRef(double x) {
  return 0.5 * (1 + std::erf(x / std::sqrt(2.0))) +
         x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
}

TEST(GeluOpTest, MatchesDoubleReferenceInPlaceToo) {
  const int64_t n = 20001;
  std::vector<float> x(n), y(n), dy(n), dx(n);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = -10.0f + 20.0f * static_cast<float>(i) / static_cast<float>(n - 1);
    dy[i] = 1.0f + static_cast<float>(i % 7) / 8;
  }
  GeluOp op;
  op.Forward(x.data(), y.data(), n);
  op.Backward(x.data(), dy.data(), dx.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    // 4e-7: oneDNN's polynomial erf; float erff is as far (4.5e-7 measured) from the double
    // reference. The tanh approximation is off by up to 1.5e-4 in value: rejected.
    ASSERT_NEAR(y[i], GeluRef(x[i]), 4e-7 * (1 + std::fabs(x[i]))) << "x " << x[i];
    ASSERT_NEAR(dx[i], dy[i] * GeluGradRef(x[i]), 1e-6 * dy[i]) << "x " << x[i];
  }
  std::vector<float> inplace = x;
  op.Forward(inplace.data(), inplace.data(), n);
  EXPECT_EQ(inplace, y);
  std::vector<float> dinplace = dy;
  op.Backward(x.data(), dinplace.data(), dinplace.data(), n);
  EXPECT_EQ(dinplace, dx);
}

TEST(SoftmaxOpTest, ForwardBackwardMatchDoubleReferenceWithMaskedEntries) {
  const int64_t rows = 6, cols = 5;
  Tensor s = RandomTensor({rows, cols}, 1, -8, 8);
  // A causal pattern: row r keeps columns <= r % cols.
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = r % cols + 1; j < cols; ++j) {
      s.data[r * cols + j] = -std::numeric_limits<float>::infinity();
    }
  }
  const Tensor scores = s;
  SoftmaxOp op;
  op.Forward(s.data.data(), rows, cols);
  const Tensor dp = RandomTensor({rows, cols}, 2, -1, 1);
  std::vector<float> ds(rows * cols);
  op.Backward(s.data.data(), dp.data.data(), ds.data(), rows, cols);
  for (int64_t r = 0; r < rows; ++r) {
    const float* a = scores.data.data() + r * cols;
    double m = -INFINITY, sum = 0;
    for (int64_t j = 0; j < cols; ++j) m = std::max(m, static_cast<double>(a[j]));
    for (int64_t j = 0; j < cols; ++j) sum += std::exp(a[j] - m);
    double dot = 0;
    std::vector<double> p(cols);
    for (int64_t j = 0; j < cols; ++j) {
      p[j] = std::exp(a[j] - m) / sum;
      dot += p[j] * dp.data[r * cols + j];
    }
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t i = r * cols + j;
      if (j > r % cols) {
        EXPECT_EQ(s.data[i], 0.0f) << r << "," << j;  // exactly zero: no leak past the mask
        EXPECT_EQ(ds[i], 0.0f) << r << "," << j;
      } else {
        EXPECT_NEAR(s.data[i], p[j], 1e-6 * p[j] + 1e-7) << r << "," << j;
        EXPECT_NEAR(ds[i], p[j] * (dp.data[i] - dot), 1e-6) << r << "," << j;
      }
    }
  }
  // In place (ds over dp).
  std::vector<float> inplace = dp.data;
  op.Backward(s.data.data(), inplace.data(), inplace.data(), rows, cols);
  EXPECT_EQ(inplace, ds);
}

// (mean, biased variance, y) of one row in double.
void LayerNormRef(const float* x, int64_t c, const float* gamma, const float* beta, double eps,
                  double* mean, double* var, std::vector<double>* y) {
  double m = 0, v = 0;
  for (int64_t j = 0; j < c; ++j) m += x[j];
  m /= c;
  for (int64_t j = 0; j < c; ++j) v += (x[j] - m) * (x[j] - m);
  v /= c;
  y->resize(c);
  for (int64_t j = 0; j < c; ++j) (*y)[j] = (x[j] - m) / std::sqrt(v + eps) * gamma[j] + beta[j];
  *mean = m;
  *var = v;
}

TEST(LayerNormOpTest, ForwardAndBackwardDataMatchDoubleReference) {
  LayerNormOp op;
  // Several row counts: a new shape each, past the cache's capacity and back.
  for (int64_t rows : {3, 1, 7, 2, 5, 3}) {
    const int64_t c = 12;
    const float eps = 1e-5f;
    Tensor x = RandomTensor({rows, c}, 10 + rows, -2, 3);
    const Tensor gamma = RandomTensor({c}, 20, 0.5, 1.5);
    const Tensor beta = RandomTensor({c}, 21, -1, 1);
    std::vector<float> y(rows * c), mean(rows), var(rows);
    op.Forward(x.data.data(), gamma.data.data(), beta.data.data(), rows, c, eps, y.data(),
               mean.data(), var.data());
    const Tensor g = RandomTensor({rows, c}, 30 + rows, -1, 1);
    std::vector<float> dx(rows * c);
    op.BackwardData(x.data.data(), g.data.data(), mean.data(), var.data(), rows, c, eps, dx.data());
    for (int64_t r = 0; r < rows; ++r) {
      double m, v;
      std::vector<double> yr;
      LayerNormRef(x.data.data() + r * c, c, gamma.data.data(), beta.data.data(), eps, &m, &v, &yr);
      EXPECT_NEAR(mean[r], m, 1e-6);
      EXPECT_NEAR(var[r], v, 1e-6 * v);
      const double rstd = 1 / std::sqrt(v + eps);
      double mg = 0, mgx = 0;
      for (int64_t j = 0; j < c; ++j) {
        const double xh = (x.data[r * c + j] - m) * rstd;
        mg += g.data[r * c + j] / c;
        mgx += g.data[r * c + j] * xh / c;
      }
      for (int64_t j = 0; j < c; ++j) {
        EXPECT_NEAR(y[r * c + j], yr[j], 2e-6 * (1 + std::fabs(yr[j])));
        const double xh = (x.data[r * c + j] - m) * rstd;
        const double ref = rstd * (g.data[r * c + j] - mg - xh * mgx);
        EXPECT_NEAR(dx[r * c + j], ref, 2e-6 * (1 + std::fabs(ref)));
      }
    }
    std::vector<float> inplace = g.data;
    op.BackwardData(x.data.data(), inplace.data(), mean.data(), var.data(), rows, c, eps,
                    inplace.data());
    EXPECT_EQ(inplace, dx);
  }
}

}  // namespace
}  // namespace dapple::kernels
