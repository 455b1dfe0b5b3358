#include "kernels/cpu/onednn_conv.h"

#include <unordered_map>
#include <utility>
#include <vector>

#include "kernels/cpu/onednn_util.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace dapple::kernels {

using dnnl::memory;
using onednn::Bound;
using onednn::CpuEngine;
using onednn::Flat;
using onednn::Lookup;
using onednn::Nchw;
using onednn::Unbound;
using onednn::UseComputeThreads;

int64_t WindowOutputSize(int64_t in, int64_t kernel, int64_t stride, int64_t padding) {
  return (in + 2 * padding - kernel) / stride + 1;
}

// ---- convolution ----

namespace {

// A primitive created with format_tag::any, so oneDNN picks its own (blocked) layouts and direct
// JIT kernels: on plain NCHW / OIHW it falls back to im2col + GEMM, which took 2.3x PyTorch's
// convolution time on the ResNet example (docs/benchmarks.md, CNN). Each argument whose chosen
// layout is not the caller's plain one gets a scratch buffer in that layout and a reorder from
// the caller's buffer (inputs) or to it (outputs) around each run.
struct Reordered {
  struct Arg {
    int arg;
    memory plain;
    memory chosen;
    dnnl::reorder reorder;
    bool input;
  };
  dnnl::primitive primitive;
  std::vector<Arg> reordered;
  std::unordered_map<int, memory> plain, args;

  // Binds the caller's plain buffer of `arg`.
  Reordered& Set(int arg, const void* p) {
    plain.at(arg).set_data_handle(const_cast<void*>(p));
    return *this;
  }
  void Run(dnnl::stream& stream) {
    UseComputeThreads();
    for (Arg& a : reordered) {
      if (a.input) a.reorder.execute(stream, a.plain, a.chosen);
    }
    primitive.execute(stream, args);
    for (Arg& a : reordered) {
      if (!a.input) a.reorder.execute(stream, a.chosen, a.plain);
    }
    stream.wait();
  }
};

struct ArgLayout {
  int arg;
  memory::desc plain, chosen;
  bool input;
};

Reordered MakeReordered(dnnl::primitive primitive, const std::vector<ArgLayout>& layouts) {
  Reordered r{std::move(primitive), {}, {}, {}};
  for (const ArgLayout& l : layouts) {
    memory plain = Unbound(l.plain);
    r.plain.emplace(l.arg, plain);
    if (l.chosen == l.plain) {
      r.args.emplace(l.arg, plain);
      continue;
    }
    memory chosen(l.chosen, CpuEngine());  // oneDNN allocates the scratch buffer
    r.args.emplace(l.arg, chosen);
    r.reordered.push_back({l.arg, plain, chosen,
                           l.input ? dnnl::reorder(plain, chosen) : dnnl::reorder(chosen, plain),
                           l.input});
  }
  return r;
}

}  // namespace

struct Conv2dOp::Impl {
  struct Entry {
    ConvGeometry g;
    bool bias;
    Reordered forward, backward_data, backward_weights;
  };
  Entry& Get(const ConvGeometry& g, bool bias) {
    return Lookup(
        &entries, [&](const Entry& e) { return e.g == g && e.bias == bias; },
        [&] {
          const memory::desc src = Nchw(g.n, g.c, g.h, g.w);
          const memory::desc dst = Nchw(g.n, g.out_channels, g.OutH(), g.OutW());
          const memory::desc weights{{g.out_channels, g.c, g.kernel, g.kernel},
                                     memory::data_type::f32,
                                     memory::format_tag::oihw};
          const auto any = [](const memory::desc& d) {
            return memory::desc(d.dims(), memory::data_type::f32, memory::format_tag::any);
          };
          const memory::desc src_any = any(src), dst_any = any(dst), weights_any = any(weights);
          const memory::desc bias_md = Flat(g.out_channels);
          const memory::dims strides{g.stride, g.stride};
          // The same padding on both sides: oneDNN's output size is floor((in + 2 padding -
          // kernel) / stride) + 1 like PyTorch's, so trailing input a stride skips is ignored.
          const memory::dims pad{g.padding, g.padding};
          const auto direct = dnnl::algorithm::convolution_direct;
          const auto fpd = dnnl::convolution_forward::primitive_desc(
              bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, direct,
                                                     src_any, weights_any, bias_md, dst_any,
                                                     strides, pad, pad)
                   : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, direct,
                                                     src_any, weights_any, dst_any, strides, pad,
                                                     pad),
              CpuEngine());
          const auto dpd = dnnl::convolution_backward_data::primitive_desc(
              {direct, src_any, weights_any, dst_any, strides, pad, pad}, CpuEngine(), fpd);
          const auto wpd = dnnl::convolution_backward_weights::primitive_desc(
              bias ? dnnl::convolution_backward_weights::desc(direct, src_any, weights_any, bias_md,
                                                              dst_any, strides, pad, pad)
                   : dnnl::convolution_backward_weights::desc(direct, src_any, weights_any, dst_any,
                                                              strides, pad, pad),
              CpuEngine(), fpd);
          std::vector<ArgLayout> forward = {{DNNL_ARG_SRC, src, fpd.src_desc(), true},
                                            {DNNL_ARG_WEIGHTS, weights, fpd.weights_desc(), true},
                                            {DNNL_ARG_DST, dst, fpd.dst_desc(), false}};
          std::vector<ArgLayout> backward_weights = {
              {DNNL_ARG_SRC, src, wpd.src_desc(), true},
              {DNNL_ARG_DIFF_DST, dst, wpd.diff_dst_desc(), true},
              {DNNL_ARG_DIFF_WEIGHTS, weights, wpd.diff_weights_desc(), false}};
          if (bias) {
            forward.push_back({DNNL_ARG_BIAS, bias_md, bias_md, true});
            backward_weights.push_back({DNNL_ARG_DIFF_BIAS, bias_md, bias_md, false});
          }
          return Entry{g, bias, MakeReordered(dnnl::convolution_forward(fpd), forward),
                       MakeReordered(dnnl::convolution_backward_data(dpd),
                                     {{DNNL_ARG_DIFF_DST, dst, dpd.diff_dst_desc(), true},
                                      {DNNL_ARG_WEIGHTS, weights, dpd.weights_desc(), true},
                                      {DNNL_ARG_DIFF_SRC, src, dpd.diff_src_desc(), false}}),
                       MakeReordered(dnnl::convolution_backward_weights(wpd), backward_weights)};
        });
  }
  dnnl::stream stream{CpuEngine()};
  std::vector<Entry> entries;
};

Conv2dOp::Conv2dOp() : impl_(std::make_unique<Impl>()) {}
Conv2dOp::~Conv2dOp() = default;

void Conv2dOp::Forward(const ConvGeometry& g, const float* x, const float* weight,
                       const float* bias, float* y) {
  if (g.n == 0) return;
  Reordered& b = impl_->Get(g, bias != nullptr).forward;
  b.Set(DNNL_ARG_SRC, x).Set(DNNL_ARG_WEIGHTS, weight).Set(DNNL_ARG_DST, y);
  if (bias != nullptr) b.Set(DNNL_ARG_BIAS, bias);
  b.Run(impl_->stream);
}

void Conv2dOp::BackwardData(const ConvGeometry& g, const float* dy, const float* weight,
                            float* dx) {
  if (g.n == 0) return;
  impl_->Get(g, false)
      .backward_data.Set(DNNL_ARG_DIFF_DST, dy)
      .Set(DNNL_ARG_WEIGHTS, weight)
      .Set(DNNL_ARG_DIFF_SRC, dx)
      .Run(impl_->stream);
}

void Conv2dOp::BackwardWeights(const ConvGeometry& g, const float* x, const float* dy,
                               float* dweight, float* dbias) {
  Reordered& b = impl_->Get(g, dbias != nullptr).backward_weights;
  b.Set(DNNL_ARG_SRC, x).Set(DNNL_ARG_DIFF_DST, dy).Set(DNNL_ARG_DIFF_WEIGHTS, dweight);
  if (dbias != nullptr) b.Set(DNNL_ARG_DIFF_BIAS, dbias);
  b.Run(impl_->stream);
}

// ---- pooling ----

struct Pool2dOp::Impl {
  struct Entry {
    PoolGeometry g;
    int64_t workspace_bytes;
    Bound forward, backward;
  };
  Entry& Get(const PoolGeometry& g, PoolKind kind) {
    return Lookup(
        &entries, [&](const Entry& e) { return e.g == g; },
        [&] {
          const memory::desc src = Nchw(g.n, g.c, g.h, g.w);
          const memory::desc dst = Nchw(g.n, g.c, g.OutH(), g.OutW());
          const memory::dims strides{g.stride, g.stride};
          const memory::dims kernel{g.kernel_h, g.kernel_w};
          const memory::dims pad{g.padding, g.padding};
          const auto algorithm = kind == PoolKind::kMax
                                     ? dnnl::algorithm::pooling_max
                                     : dnnl::algorithm::pooling_avg_include_padding;
          const auto fpd = dnnl::pooling_forward::primitive_desc(
              {dnnl::prop_kind::forward_training, algorithm, src, dst, strides, kernel, pad, pad},
              CpuEngine());
          const auto bpd = dnnl::pooling_backward::primitive_desc(
              {algorithm, src, dst, strides, kernel, pad, pad}, CpuEngine(), fpd);
          const memory::desc ws = fpd.workspace_desc();
          Entry e{g,
                  static_cast<int64_t>(ws.get_size()),
                  {dnnl::pooling_forward(fpd),
                   {{DNNL_ARG_SRC, Unbound(src)}, {DNNL_ARG_DST, Unbound(dst)}}},
                  {dnnl::pooling_backward(bpd),
                   {{DNNL_ARG_DIFF_DST, Unbound(dst)}, {DNNL_ARG_DIFF_SRC, Unbound(src)}}}};
          if (e.workspace_bytes > 0) {
            e.forward.args.emplace(DNNL_ARG_WORKSPACE, Unbound(ws));
            e.backward.args.emplace(DNNL_ARG_WORKSPACE, Unbound(ws));
          }
          return e;
        });
  }
  dnnl::stream stream{CpuEngine()};
  std::vector<Entry> entries;
};

Pool2dOp::Pool2dOp(PoolKind kind) : kind_(kind), impl_(std::make_unique<Impl>()) {}
Pool2dOp::~Pool2dOp() = default;

int64_t Pool2dOp::WorkspaceBytes(const PoolGeometry& g) {
  if (g.n == 0) return 0;
  return impl_->Get(g, kind_).workspace_bytes;
}

void Pool2dOp::Forward(const PoolGeometry& g, const float* x, float* y, void* workspace) {
  if (g.n == 0) return;
  Impl::Entry& e = impl_->Get(g, kind_);
  e.forward.Set(DNNL_ARG_SRC, x).Set(DNNL_ARG_DST, y);
  if (e.workspace_bytes > 0) e.forward.Set(DNNL_ARG_WORKSPACE, workspace);
  e.forward.Run(impl_->stream);
}

void Pool2dOp::Backward(const PoolGeometry& g, const float* dy, const void* workspace, float* dx) {
  if (g.n == 0) return;
  Impl::Entry& e = impl_->Get(g, kind_);
  e.backward.Set(DNNL_ARG_DIFF_DST, dy).Set(DNNL_ARG_DIFF_SRC, dx);
  if (e.workspace_bytes > 0) e.backward.Set(DNNL_ARG_WORKSPACE, workspace);
  e.backward.Run(impl_->stream);
}

// ---- batch normalisation ----

struct BatchNormOp::Impl {
  struct Entry {
    int64_t n, c, hw;
    float eps;
    Bound training, inference, backward;
  };
  Entry& Get(int64_t n, int64_t c, int64_t hw, float eps) {
    return Lookup(
        &entries,
        [&](const Entry& e) { return e.n == n && e.c == c && e.hw == hw && e.eps == eps; },
        [&] {
          // [n, c, hw] as NCHW with W = 1: oneDNN normalises over every dimension but C.
          const memory::desc d = Nchw(n, c, hw, 1);
          const memory::desc stats = Flat(c);
          const auto flags =
              dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
          const auto tpd = dnnl::batch_normalization_forward::primitive_desc(
              {dnnl::prop_kind::forward_training, d, eps, flags}, CpuEngine());
          const auto ipd = dnnl::batch_normalization_forward::primitive_desc(
              {dnnl::prop_kind::forward_inference, d, eps,
               flags | dnnl::normalization_flags::use_global_stats},
              CpuEngine());
          // prop_kind::backward: the input gradient and the scale and shift gradients in one
          // pass (they share the two per-channel reductions).
          const auto bpd = dnnl::batch_normalization_backward::primitive_desc(
              {dnnl::prop_kind::backward, d, d, eps, flags}, CpuEngine(), tpd);
          auto args = [&](std::initializer_list<std::pair<int, memory::desc>> list) {
            std::unordered_map<int, memory> out;
            for (const auto& [arg, md] : list) out.emplace(arg, Unbound(md));
            return out;
          };
          return Entry{
              n,
              c,
              hw,
              eps,
              {dnnl::batch_normalization_forward(tpd), args({{DNNL_ARG_SRC, d},
                                                             {DNNL_ARG_DST, d},
                                                             {DNNL_ARG_SCALE, stats},
                                                             {DNNL_ARG_SHIFT, stats},
                                                             {DNNL_ARG_MEAN, stats},
                                                             {DNNL_ARG_VARIANCE, stats}})},
              {dnnl::batch_normalization_forward(ipd), args({{DNNL_ARG_SRC, d},
                                                             {DNNL_ARG_DST, d},
                                                             {DNNL_ARG_SCALE, stats},
                                                             {DNNL_ARG_SHIFT, stats},
                                                             {DNNL_ARG_MEAN, stats},
                                                             {DNNL_ARG_VARIANCE, stats}})},
              // SHIFT too, as oneDNN's layer normalisation backward needs it
              // (toolchain.md): the primitive was created with use_shift.
              {dnnl::batch_normalization_backward(bpd), args({{DNNL_ARG_SRC, d},
                                                              {DNNL_ARG_DIFF_DST, d},
                                                              {DNNL_ARG_DIFF_SRC, d},
                                                              {DNNL_ARG_SCALE, stats},
                                                              {DNNL_ARG_SHIFT, stats},
                                                              {DNNL_ARG_MEAN, stats},
                                                              {DNNL_ARG_VARIANCE, stats},
                                                              {DNNL_ARG_DIFF_SCALE, stats},
                                                              {DNNL_ARG_DIFF_SHIFT, stats}})}};
        });
  }
  dnnl::stream stream{CpuEngine()};
  std::vector<Entry> entries;
};

BatchNormOp::BatchNormOp() : impl_(std::make_unique<Impl>()) {}
BatchNormOp::~BatchNormOp() = default;

void BatchNormOp::ForwardTraining(int64_t n, int64_t c, int64_t hw, float eps, const float* x,
                                  const float* gamma, const float* beta, float* y, float* mean,
                                  float* var) {
  if (n == 0) return;
  impl_->Get(n, c, hw, eps)
      .training.Set(DNNL_ARG_SRC, x)
      .Set(DNNL_ARG_DST, y)
      .Set(DNNL_ARG_SCALE, gamma)
      .Set(DNNL_ARG_SHIFT, beta)
      .Set(DNNL_ARG_MEAN, mean)
      .Set(DNNL_ARG_VARIANCE, var)
      .Run(impl_->stream);
}

void BatchNormOp::ForwardInference(int64_t n, int64_t c, int64_t hw, float eps, const float* x,
                                   const float* gamma, const float* beta, const float* mean,
                                   const float* var, float* y) {
  if (n == 0) return;
  impl_->Get(n, c, hw, eps)
      .inference.Set(DNNL_ARG_SRC, x)
      .Set(DNNL_ARG_DST, y)
      .Set(DNNL_ARG_SCALE, gamma)
      .Set(DNNL_ARG_SHIFT, beta)
      .Set(DNNL_ARG_MEAN, mean)
      .Set(DNNL_ARG_VARIANCE, var)
      .Run(impl_->stream);
}

void BatchNormOp::Backward(int64_t n, int64_t c, int64_t hw, float eps, const float* x,
                           const float* dy, const float* mean, const float* var, const float* gamma,
                           float* dx, float* dgamma, float* dbeta) {
  if (n == 0) return;
  // The shift does not enter any gradient; oneDNN only reads its buffer.
  impl_->Get(n, c, hw, eps)
      .backward.Set(DNNL_ARG_SRC, x)
      .Set(DNNL_ARG_DIFF_DST, dy)
      .Set(DNNL_ARG_DIFF_SRC, dx)
      .Set(DNNL_ARG_SCALE, gamma)
      .Set(DNNL_ARG_SHIFT, gamma)
      .Set(DNNL_ARG_MEAN, mean)
      .Set(DNNL_ARG_VARIANCE, var)
      .Set(DNNL_ARG_DIFF_SCALE, dgamma)
      .Set(DNNL_ARG_DIFF_SHIFT, dbeta)
      .Run(impl_->stream);
}

}  // namespace dapple::kernels
