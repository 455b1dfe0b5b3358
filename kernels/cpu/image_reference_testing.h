// Test-only naive references of the image ops (onednn_conv.h), in double: the definitions the
// kernels are checked against. Each output also gets the sum of the absolute values of the terms
// it adds up (`scale`), which bounds the rounding error of any float summation order: tests
// compare |kernel - reference| <= tol * scale.
#ifndef DAPPLE_KERNELS_CPU_IMAGE_REFERENCE_TESTING_H_
#define DAPPLE_KERNELS_CPU_IMAGE_REFERENCE_TESTING_H_

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cpu/onednn_conv.h"

namespace dapple::kernels::testing {

struct Reference {
  std::vector<double> value;
  std::vector<double> scale;  // sum of |terms| per element
  void Resize(size_t n) {
    value.assign(n, 0.0);
    scale.assign(n, 0.0);
  }
  void Add(size_t i, double term) {
    value[i] += term;
    scale[i] += std::fabs(term);
  }
};

// The input element under kernel tap (ky, kx) of output (oy, ox), or -1 in the padding.
inline int64_t WindowInput(int64_t o, int64_t k, int64_t stride, int64_t padding, int64_t in) {
  const int64_t i = o * stride - padding + k;
  return i >= 0 && i < in ? i : -1;
}

// y [n, oc, oh, ow] = conv(x, w) + b (b may be empty).
inline Reference ConvForwardReference(const ConvGeometry& g, const std::vector<float>& x,
                                      const std::vector<float>& w, const std::vector<float>& b) {
  const int64_t oh = g.OutH(), ow = g.OutW(), k = g.kernel;
  Reference r;
  r.Resize(g.n * g.out_channels * oh * ow);
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t o = 0; o < g.out_channels; ++o)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t xo = 0; xo < ow; ++xo) {
          const size_t out = ((n * g.out_channels + o) * oh + y) * ow + xo;
          if (!b.empty()) r.Add(out, b[o]);
          for (int64_t c = 0; c < g.c; ++c)
            for (int64_t ky = 0; ky < k; ++ky)
              for (int64_t kx = 0; kx < k; ++kx) {
                const int64_t iy = WindowInput(y, ky, g.stride, g.padding, g.h);
                const int64_t ix = WindowInput(xo, kx, g.stride, g.padding, g.w);
                if (iy < 0 || ix < 0) continue;
                r.Add(out, static_cast<double>(x[((n * g.c + c) * g.h + iy) * g.w + ix]) *
                               w[((o * g.c + c) * k + ky) * k + kx]);
              }
        }
  return r;
}

// dx [n, c, h, w] (data = true) or dw [oc, c, k, k] (data = false) of sum(y * dy).
inline Reference ConvBackwardReference(const ConvGeometry& g, const std::vector<float>& x,
                                       const std::vector<float>& w, const std::vector<float>& dy,
                                       bool data) {
  const int64_t oh = g.OutH(), ow = g.OutW(), k = g.kernel;
  Reference r;
  r.Resize(data ? x.size() : w.size());
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t o = 0; o < g.out_channels; ++o)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t xo = 0; xo < ow; ++xo) {
          const double d = dy[((n * g.out_channels + o) * oh + y) * ow + xo];
          for (int64_t c = 0; c < g.c; ++c)
            for (int64_t ky = 0; ky < k; ++ky)
              for (int64_t kx = 0; kx < k; ++kx) {
                const int64_t iy = WindowInput(y, ky, g.stride, g.padding, g.h);
                const int64_t ix = WindowInput(xo, kx, g.stride, g.padding, g.w);
                if (iy < 0 || ix < 0) continue;
                const size_t xi = ((n * g.c + c) * g.h + iy) * g.w + ix;
                const size_t wi = ((o * g.c + c) * k + ky) * k + kx;
                if (data) {
                  r.Add(xi, d * w[wi]);
                } else {
                  r.Add(wi, d * x[xi]);
                }
              }
        }
  return r;
}

// Pooling forward (dx empty) or backward (dy given: dx of sum(y * dy)). Max: the FIRST maximum
// of a window in row-major order gets the gradient (PyTorch's CPU kernel).
inline Reference PoolReference(const PoolGeometry& g, PoolKind kind, const std::vector<float>& x,
                               const std::vector<float>* dy) {
  const int64_t oh = g.OutH(), ow = g.OutW();
  Reference r;
  r.Resize(dy == nullptr ? g.n * g.c * oh * ow : x.size());
  for (int64_t nc = 0; nc < g.n * g.c; ++nc)
    for (int64_t y = 0; y < oh; ++y)
      for (int64_t xo = 0; xo < ow; ++xo) {
        const size_t out = (nc * oh + y) * ow + xo;
        double best = -std::numeric_limits<double>::infinity();
        int64_t best_i = -1;
        for (int64_t ky = 0; ky < g.kernel_h; ++ky)
          for (int64_t kx = 0; kx < g.kernel_w; ++kx) {
            const int64_t iy = WindowInput(y, ky, g.stride, g.padding, g.h);
            const int64_t ix = WindowInput(xo, kx, g.stride, g.padding, g.w);
            if (iy < 0 || ix < 0) continue;
            const int64_t i = (nc * g.h + iy) * g.w + ix;
            if (kind == PoolKind::kMax) {
              if (x[i] > best) best = x[i], best_i = i;
            } else if (dy == nullptr) {
              r.Add(out, static_cast<double>(x[i]) / (g.kernel_h * g.kernel_w));
            } else {
              r.Add(i, static_cast<double>((*dy)[out]) / (g.kernel_h * g.kernel_w));
            }
          }
        if (kind != PoolKind::kMax) continue;
        if (dy == nullptr) {
          r.Add(out, best);
        } else {
          r.Add(best_i, (*dy)[out]);
        }
      }
  return r;
}

// Batch normalisation of x [n, c, hw] per channel with the batch's biased variance, and its
// backward; all in double.
struct BatchNormReference {
  std::vector<double> mean, var;  // [c]
  std::vector<double> y;          // [n, c, hw]
  std::vector<double> dx, dgamma, dbeta;
};

inline BatchNormReference BatchNormRef(int64_t n, int64_t c, int64_t hw, double eps,
                                       const std::vector<float>& x, const std::vector<float>& gamma,
                                       const std::vector<float>& beta,
                                       const std::vector<float>& dy) {
  BatchNormReference r;
  r.mean.assign(c, 0);
  r.var.assign(c, 0);
  r.y.assign(x.size(), 0);
  r.dx.assign(x.size(), 0);
  r.dgamma.assign(c, 0);
  r.dbeta.assign(c, 0);
  const double count = static_cast<double>(n * hw);
  auto at = [&](int64_t i, int64_t ch, int64_t j) { return (i * c + ch) * hw + j; };
  for (int64_t ch = 0; ch < c; ++ch) {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < hw; ++j) r.mean[ch] += x[at(i, ch, j)];
    r.mean[ch] /= count;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < hw; ++j) {
        const double d = x[at(i, ch, j)] - r.mean[ch];
        r.var[ch] += d * d;
      }
    r.var[ch] /= count;
    const double rstd = 1 / std::sqrt(r.var[ch] + eps);
    double mean_dy = 0, mean_dy_xhat = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < hw; ++j) {
        const double xhat = (x[at(i, ch, j)] - r.mean[ch]) * rstd;
        r.y[at(i, ch, j)] = xhat * gamma[ch] + beta[ch];
        if (dy.empty()) continue;
        mean_dy += dy[at(i, ch, j)];
        mean_dy_xhat += dy[at(i, ch, j)] * xhat;
      }
    r.dbeta[ch] = mean_dy;
    r.dgamma[ch] = mean_dy_xhat;
    mean_dy /= count;
    mean_dy_xhat /= count;
    if (dy.empty()) continue;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < hw; ++j) {
        const double xhat = (x[at(i, ch, j)] - r.mean[ch]) * rstd;
        r.dx[at(i, ch, j)] = gamma[ch] * rstd * (dy[at(i, ch, j)] - mean_dy - xhat * mean_dy_xhat);
      }
  }
  return r;
}

}  // namespace dapple::kernels::testing

#endif  // DAPPLE_KERNELS_CPU_IMAGE_REFERENCE_TESTING_H_
