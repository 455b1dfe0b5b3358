// Test-only checks every Layer of kernels/cpu should pass: gradients against central finite
// differences, and the split backward (BackwardInput / BackwardWeight of several micro-batches
// in any order) against the plain one.
#ifndef DAPPLE_KERNELS_CPU_LAYER_TESTING_H_
#define DAPPLE_KERNELS_CPU_LAYER_TESTING_H_

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/grad_check_testing.h"
#include "kernels/cpu/layer.h"

namespace dapple::kernels::testing {

// A training context whose dropout masks are live.
inline ForwardContext TrainingContext(uint64_t seed, int64_t step, int64_t first_sample) {
  ForwardContext ctx;
  ctx.training = true;
  ctx.seed = seed;
  ctx.step = step;
  ctx.first_sample = first_sample;
  return ctx;
}

// Checks layer->Backward's dx (when `check_dx`) and every parameter gradient against central
// differences of L = sum(Forward(x, ctx) * r), r a random tensor of y's shape. Parameter
// gradients must be zero on entry.
inline void ExpectGradientsMatchFiniteDifferences(Layer* layer, Tensor x, const ForwardContext& ctx,
                                                  uint64_t stream, bool check_dx, double atol,
                                                  double rtol) {
  LayerCache cache;
  Tensor y;
  layer->Forward(x, &y, &cache, ctx);
  const Tensor r = RandomTensor(y.shape, stream, -1, 1);
  Tensor dx;
  layer->Backward(x, y, r, check_dx ? &dx : nullptr, &cache);
  auto objective = [&]() {
    LayerCache c;
    Tensor yy;
    layer->Forward(x, &yy, &c, ctx);
    return Dot(yy, r);
  };
  if (check_dx) {
    ASSERT_EQ(dx.shape, x.shape);
    ExpectGradientsNear(dx.data, NumericalGradient(objective, &x.data), atol, rtol, "dx");
  }
  for (Param* p : layer->Params()) {
    ExpectGradientsNear(p->grad.data, NumericalGradient(objective, &p->value.data), atol, rtol,
                        p->name.c_str());
  }
}

// Largest |v| of `values` (for tolerances relative to a tensor's scale).
inline float MaxAbs(const std::vector<float>& values) {
  float m = 0;
  for (float v : values) m = std::max(m, std::fabs(v));
  return m;
}

// Zero Bubble's B / W split (layer.h): with two identical layers from `make`, BackwardInput of
// micro-batches A then B followed by BackwardWeight of B then A must give the dx of each and
// the parameter gradients of Backward(A); Backward(B), the latter within float rounding of
// the different summation order (rel_tol times the tensor's largest gradient).
inline void ExpectSplitBackwardMatches(const std::function<std::unique_ptr<Layer>()>& make,
                                       const Tensor& xa, const ForwardContext& ctx_a,
                                       const Tensor& xb, const ForwardContext& ctx_b,
                                       uint64_t stream, double rel_tol) {
  std::unique_ptr<Layer> plain = make();
  std::unique_ptr<Layer> split = make();
  LayerCache pa, pb, sa, sb;
  Tensor ya, yb, ya2, yb2;
  plain->Forward(xa, &ya, &pa, ctx_a);
  plain->Forward(xb, &yb, &pb, ctx_b);
  split->Forward(xa, &ya2, &sa, ctx_a);
  split->Forward(xb, &yb2, &sb, ctx_b);
  const Tensor dya = RandomTensor(ya.shape, stream, -1, 1);
  const Tensor dyb = RandomTensor(yb.shape, stream + 1, -1, 1);
  Tensor dxa, dxb, dxa2, dxb2;
  plain->Backward(xa, ya, dya, &dxa, &pa);
  plain->Backward(xb, yb, dyb, &dxb, &pb);
  split->BackwardInput(xa, ya2, dya, &dxa2, &sa);
  split->BackwardInput(xb, yb2, dyb, &dxb2, &sb);
  // BackwardInput changes no parameter gradient.
  for (Param* p : split->Params()) EXPECT_EQ(MaxAbs(p->grad.data), 0.0f) << p->name;
  split->BackwardWeight(xb, yb2, dyb, &sb);
  split->BackwardWeight(xa, ya2, dya, &sa);
  EXPECT_EQ(dxa2.data, dxa.data);
  EXPECT_EQ(dxb2.data, dxb.data);
  std::vector<Param*> pp = plain->Params();
  std::vector<Param*> sp = split->Params();
  ASSERT_EQ(pp.size(), sp.size());
  for (size_t i = 0; i < pp.size(); ++i) {
    const float scale = MaxAbs(pp[i]->grad.data);
    ASSERT_GT(scale, 0) << pp[i]->name;
    ASSERT_EQ(pp[i]->grad.data.size(), sp[i]->grad.data.size());
    for (size_t k = 0; k < pp[i]->grad.data.size(); ++k) {
      EXPECT_NEAR(sp[i]->grad.data[k], pp[i]->grad.data[k], rel_tol * scale)
          << pp[i]->name << " element " << k;
    }
  }
}

}  // namespace dapple::kernels::testing

#endif  // DAPPLE_KERNELS_CPU_LAYER_TESTING_H_
