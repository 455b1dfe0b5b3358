#include "kernels/cpu/onednn_ops.h"

#include <vector>

#include "kernels/cpu/onednn_util.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace dapple::kernels {

using dnnl::memory;
using onednn::Bound;
using onednn::CpuEngine;
using onednn::Flat;
using onednn::Lookup;
using onednn::Matrix;
using onednn::Unbound;

// ---- GELU ----

struct GeluOp::Impl {
  struct Entry {
    int64_t n;
    Bound forward, backward;
  };
  Entry& Get(int64_t n) {
    return Lookup(
        &entries, [n](const Entry& e) { return e.n == n; },
        [n] {
          const memory::desc d = Flat(n);
          const auto fpd = dnnl::eltwise_forward::primitive_desc(
              {dnnl::prop_kind::forward_training, dnnl::algorithm::eltwise_gelu_erf, d},
              CpuEngine());
          const auto bpd = dnnl::eltwise_backward::primitive_desc(
              {dnnl::algorithm::eltwise_gelu_erf, d, d}, CpuEngine(), fpd);
          return Entry{n,
                       {dnnl::eltwise_forward(fpd),
                        {{DNNL_ARG_SRC, Unbound(d)}, {DNNL_ARG_DST, Unbound(d)}}},
                       {dnnl::eltwise_backward(bpd),
                        {{DNNL_ARG_SRC, Unbound(d)},
                         {DNNL_ARG_DIFF_DST, Unbound(d)},
                         {DNNL_ARG_DIFF_SRC, Unbound(d)}}}};
        });
  }
  dnnl::stream stream{CpuEngine()};
  std::vector<Entry> entries;
};

GeluOp::GeluOp() : impl_(std::make_unique<Impl>()) {}
GeluOp::~GeluOp() = default;

void GeluOp::Forward(const float* x, float* y, int64_t n) {
  if (n == 0) return;
  impl_->Get(n).forward.Set(DNNL_ARG_SRC, x).Set(DNNL_ARG_DST, y).Run(impl_->stream);
}

void GeluOp::Backward(const float* x, const float* dy, float* dx, int64_t n) {
  if (n == 0) return;
  impl_->Get(n)
      .backward.Set(DNNL_ARG_SRC, x)
      .Set(DNNL_ARG_DIFF_DST, dy)
      .Set(DNNL_ARG_DIFF_SRC, dx)
      .Run(impl_->stream);
}

// ---- softmax ----

struct SoftmaxOp::Impl {
  struct Entry {
    int64_t rows, cols;
    Bound forward, backward;
  };
  Entry& Get(int64_t rows, int64_t cols) {
    return Lookup(
        &entries, [&](const Entry& e) { return e.rows == rows && e.cols == cols; },
        [&] {
          const memory::desc d = Matrix(rows, cols);
          const auto fpd = dnnl::softmax_v2_forward::primitive_desc(
              {dnnl::prop_kind::forward_training, dnnl::algorithm::softmax_accurate, d, d, 1},
              CpuEngine());
          const auto bpd = dnnl::softmax_v2_backward::primitive_desc(
              {dnnl::algorithm::softmax_accurate, d, d, d, 1}, CpuEngine(), fpd);
          return Entry{rows,
                       cols,
                       {dnnl::softmax_v2_forward(fpd),
                        {{DNNL_ARG_SRC, Unbound(d)}, {DNNL_ARG_DST, Unbound(d)}}},
                       {dnnl::softmax_v2_backward(bpd),
                        {{DNNL_ARG_DST, Unbound(d)},
                         {DNNL_ARG_DIFF_DST, Unbound(d)},
                         {DNNL_ARG_DIFF_SRC, Unbound(d)}}}};
        });
  }
  dnnl::stream stream{CpuEngine()};
  std::vector<Entry> entries;
};

SoftmaxOp::SoftmaxOp() : impl_(std::make_unique<Impl>()) {}
SoftmaxOp::~SoftmaxOp() = default;

void SoftmaxOp::Forward(float* s, int64_t rows, int64_t cols) {
  if (rows == 0) return;
  impl_->Get(rows, cols).forward.Set(DNNL_ARG_SRC, s).Set(DNNL_ARG_DST, s).Run(impl_->stream);
}

void SoftmaxOp::Backward(const float* p, const float* dp, float* ds, int64_t rows, int64_t cols) {
  if (rows == 0) return;
  impl_->Get(rows, cols)
      .backward.Set(DNNL_ARG_DST, p)
      .Set(DNNL_ARG_DIFF_DST, dp)
      .Set(DNNL_ARG_DIFF_SRC, ds)
      .Run(impl_->stream);
}

// ---- LayerNorm ----

struct LayerNormOp::Impl {
  struct Entry {
    int64_t rows, cols;
    float eps;
    Bound forward, backward;
  };
  Entry& Get(int64_t rows, int64_t cols, float eps) {
    return Lookup(
        &entries, [&](const Entry& e) { return e.rows == rows && e.cols == cols && e.eps == eps; },
        [&] {
          const memory::desc d = Matrix(rows, cols);
          const memory::desc stats = Flat(rows);
          const memory::desc params = Flat(cols);
          const auto fpd = dnnl::layer_normalization_forward::primitive_desc(
              {dnnl::prop_kind::forward_training, d, stats, eps,
               dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift},
              CpuEngine());
          // backward_data with scale and shift has no implementation in oneDNN 2.6, and the
          // full backward would also compute (and overwrite) the parameter gradients: the
          // caller folds gamma into the gradient instead (see BackwardData's contract).
          const auto bpd = dnnl::layer_normalization_backward::primitive_desc(
              {dnnl::prop_kind::backward_data, d, d, stats, eps, dnnl::normalization_flags::none},
              CpuEngine(), fpd);
          return Entry{rows,
                       cols,
                       eps,
                       {dnnl::layer_normalization_forward(fpd),
                        {{DNNL_ARG_SRC, Unbound(d)},
                         {DNNL_ARG_DST, Unbound(d)},
                         {DNNL_ARG_MEAN, Unbound(stats)},
                         {DNNL_ARG_VARIANCE, Unbound(stats)},
                         {DNNL_ARG_SCALE, Unbound(params)},
                         {DNNL_ARG_SHIFT, Unbound(params)}}},
                       {dnnl::layer_normalization_backward(bpd),
                        {{DNNL_ARG_SRC, Unbound(d)},
                         {DNNL_ARG_DIFF_DST, Unbound(d)},
                         {DNNL_ARG_DIFF_SRC, Unbound(d)},
                         {DNNL_ARG_MEAN, Unbound(stats)},
                         {DNNL_ARG_VARIANCE, Unbound(stats)}}}};
        });
  }
  dnnl::stream stream{CpuEngine()};
  std::vector<Entry> entries;
};

LayerNormOp::LayerNormOp() : impl_(std::make_unique<Impl>()) {}
LayerNormOp::~LayerNormOp() = default;

void LayerNormOp::Forward(const float* x, const float* gamma, const float* beta, int64_t rows,
                          int64_t cols, float eps, float* y, float* mean, float* var) {
  if (rows == 0) return;
  impl_->Get(rows, cols, eps)
      .forward.Set(DNNL_ARG_SRC, x)
      .Set(DNNL_ARG_DST, y)
      .Set(DNNL_ARG_MEAN, mean)
      .Set(DNNL_ARG_VARIANCE, var)
      .Set(DNNL_ARG_SCALE, gamma)
      .Set(DNNL_ARG_SHIFT, beta)
      .Run(impl_->stream);
}

void LayerNormOp::BackwardData(const float* x, const float* g, const float* mean, const float* var,
                               int64_t rows, int64_t cols, float eps, float* dx) {
  if (rows == 0) return;
  impl_->Get(rows, cols, eps)
      .backward.Set(DNNL_ARG_SRC, x)
      .Set(DNNL_ARG_DIFF_DST, g)
      .Set(DNNL_ARG_DIFF_SRC, dx)
      .Set(DNNL_ARG_MEAN, mean)
      .Set(DNNL_ARG_VARIANCE, var)
      .Run(impl_->stream);
}

}  // namespace dapple::kernels
