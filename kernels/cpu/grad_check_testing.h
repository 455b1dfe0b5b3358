// Test-only helpers: deterministic random tensors and central finite differences in double.
#ifndef DAPPLE_KERNELS_CPU_GRAD_CHECK_TESTING_H_
#define DAPPLE_KERNELS_CPU_GRAD_CHECK_TESTING_H_

#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/init.h"
#include "kernels/cpu/tensor.h"

namespace dapple::kernels::testing {

// Step of the central differences: a power of two, and every random value below is a multiple of
// kGrid, so x +- kFdStep is exact in float and the only error left is the kernel's own rounding
// (and the O(h^2) truncation for curved functions).
constexpr float kFdStep = 1.0f / 128;
constexpr float kGrid = 1.0f / 4096;

// Values uniform on the kGrid lattice in [lo, hi), a pure function of `stream`.
inline Tensor RandomTensor(const std::vector<int64_t>& shape, uint64_t stream, float lo, float hi) {
  Tensor t;
  t.Resize(shape);
  for (size_t i = 0; i < t.data.size(); ++i) {
    const float u = UnitFloat24(SplitMix64At(stream, i));
    t.data[i] = std::round((lo + (hi - lo) * u) / kGrid) * kGrid;
  }
  return t;
}

// Moves every value with |v| < margin to +-margin (keeps finite differences off a kink at 0).
inline void PushAwayFromZero(Tensor* t, float margin) {
  for (float& v : t->data) {
    if (std::fabs(v) < margin) v = v < 0 ? -margin : margin;
  }
}

// sum(y * r) in double.
inline double Dot(const Tensor& y, const Tensor& r) {
  EXPECT_EQ(y.shape, r.shape);
  double s = 0;
  for (size_t i = 0; i < y.data.size(); ++i) {
    s += static_cast<double>(y.data[i]) * static_cast<double>(r.data[i]);
  }
  return s;
}

// d objective / d values[i] for every i by central differences, restoring each value.
inline std::vector<double> NumericalGradient(const std::function<double()>& objective,
                                             std::vector<float>* values) {
  std::vector<double> grad(values->size());
  for (size_t i = 0; i < values->size(); ++i) {
    const float saved = (*values)[i];
    (*values)[i] = saved + kFdStep;
    const double plus = objective();
    (*values)[i] = saved - kFdStep;
    const double minus = objective();
    (*values)[i] = saved;
    grad[i] = (plus - minus) / (2.0 * static_cast<double>(kFdStep));
  }
  return grad;
}

// Every element: |analytic - numeric| <= atol + rtol * |numeric|.
inline void ExpectGradientsNear(const std::vector<float>& analytic,
                                const std::vector<double>& numeric, double atol, double rtol,
                                const char* what) {
  ASSERT_EQ(analytic.size(), numeric.size()) << what;
  for (size_t i = 0; i < numeric.size(); ++i) {
    EXPECT_NEAR(analytic[i], numeric[i], atol + rtol * std::fabs(numeric[i]))
        << what << " element " << i;
  }
}

}  // namespace dapple::kernels::testing

#endif  // DAPPLE_KERNELS_CPU_GRAD_CHECK_TESTING_H_
