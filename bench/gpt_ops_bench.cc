// The element-wise and normalisation steps of the GPT layers: oneDNN (kernels/cpu/onednn_ops.h,
// what the kernels use) against plain single-thread loops (the alternative, written here), at
// the example shapes: T = 128, C = 128 or 256, micro-batches of 8 or 32 samples, 4 heads, MLP
// hidden 4C. Also the whole transformer block (forward, BackwardInput, BackwardWeight) for the
// share these steps take. Results and the per-op decision: docs/benchmarks.md, "GPT layer ops".
//
//   build/bench/gpt_ops_bench --benchmark_min_time=0.2 [--benchmark_filter=REGEX]
//
// Benchmark names: <op>/<Plain|OneDnn>/<samples>/<C>. One compute thread (SetComputeThreads(1)).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/init.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/onednn_ops.h"
#include "kernels/cpu/transformer_block.h"

namespace dapple::kernels {
namespace {

constexpr int64_t kT = 128, kHeads = 4;
constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;

std::vector<float> Random(int64_t n, float lo, float hi, uint64_t stream) {
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = lo + (hi - lo) * UnitFloat24(SplitMix64At(stream, i));
  return v;
}

void SetItems(benchmark::State& state, int64_t per_iteration) {
  state.SetItemsProcessed(state.iterations() * per_iteration);
}

// ---- GELU on the MLP's [N T, 4C] ----

void GeluForwardPlain(benchmark::State& state) {
  const int64_t n = state.range(0) * kT * 4 * state.range(1);
  const std::vector<float> x = Random(n, -4, 4, 1);
  std::vector<float> y(n);
  for (auto _ : state) {
    for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * kInvSqrt2));
    benchmark::DoNotOptimize(y.data());
  }
  SetItems(state, n);
}

void GeluForwardOneDnn(benchmark::State& state) {
  const int64_t n = state.range(0) * kT * 4 * state.range(1);
  const std::vector<float> x = Random(n, -4, 4, 1);
  std::vector<float> y(n);
  GeluOp op;
  for (auto _ : state) {
    op.Forward(x.data(), y.data(), n);
    benchmark::DoNotOptimize(y.data());
  }
  SetItems(state, n);
}

void GeluBackwardPlain(benchmark::State& state) {
  const int64_t n = state.range(0) * kT * 4 * state.range(1);
  const std::vector<float> x = Random(n, -4, 4, 1), dy = Random(n, -1, 1, 2);
  std::vector<float> dx(n);
  for (auto _ : state) {
    for (int64_t i = 0; i < n; ++i) {
      const float v = x[i];
      const float cdf = 0.5f * (1.0f + std::erf(v * kInvSqrt2));
      dx[i] = dy[i] * (cdf + v * kInvSqrt2Pi * std::exp(-0.5f * v * v));
    }
    benchmark::DoNotOptimize(dx.data());
  }
  SetItems(state, n);
}

void GeluBackwardOneDnn(benchmark::State& state) {
  const int64_t n = state.range(0) * kT * 4 * state.range(1);
  const std::vector<float> x = Random(n, -4, 4, 1), dy = Random(n, -1, 1, 2);
  std::vector<float> dx(n);
  GeluOp op;
  for (auto _ : state) {
    op.Backward(x.data(), dy.data(), dx.data(), n);
    benchmark::DoNotOptimize(dx.data());
  }
  SetItems(state, n);
}

// ---- causal softmax on the attention's [N heads T, T] (C only sets the name) ----

// Scores with the causal mask (-inf above the diagonal), as the attention hands them over.
std::vector<float> MaskedScores(int64_t rows) {
  std::vector<float> s = Random(rows * kT, -6, 6, 3);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = r % kT + 1; j < kT; ++j) s[r * kT + j] = -INFINITY;
  }
  return s;
}

void SoftmaxForwardPlain(benchmark::State& state) {
  const int64_t rows = state.range(0) * kHeads * kT;
  const std::vector<float> scores = MaskedScores(rows);
  std::vector<float> p(scores.size());
  for (auto _ : state) {
    for (int64_t r = 0; r < rows; ++r) {
      const float* a = scores.data() + r * kT;
      float* o = p.data() + r * kT;
      const int64_t last = r % kT;  // the plain loop skips the masked tail
      float m = a[0];
      for (int64_t j = 1; j <= last; ++j) m = std::max(m, a[j]);
      float sum = 0;
      for (int64_t j = 0; j <= last; ++j) sum += (o[j] = std::exp(a[j] - m));
      const float inv = 1.0f / sum;
      for (int64_t j = 0; j <= last; ++j) o[j] *= inv;
      for (int64_t j = last + 1; j < kT; ++j) o[j] = 0;
    }
    benchmark::DoNotOptimize(p.data());
  }
  SetItems(state, rows * kT);
}

void SoftmaxForwardOneDnn(benchmark::State& state) {
  const int64_t rows = state.range(0) * kHeads * kT;
  const std::vector<float> scores = MaskedScores(rows);
  std::vector<float> p(scores.size());
  SoftmaxOp op;
  for (auto _ : state) {
    // The op works in place; the copy stands for the attention's score GEMM writing there.
    std::copy(scores.begin(), scores.end(), p.begin());
    op.Forward(p.data(), rows, kT);
    benchmark::DoNotOptimize(p.data());
  }
  SetItems(state, rows * kT);
}

void SoftmaxBackwardPlain(benchmark::State& state) {
  const int64_t rows = state.range(0) * kHeads * kT;
  const std::vector<float> p = Random(rows * kT, 0, 0.05f, 4), dp = Random(rows * kT, -1, 1, 5);
  std::vector<float> ds(p.size());
  for (auto _ : state) {
    for (int64_t r = 0; r < rows; ++r) {
      const float* a = p.data() + r * kT;
      const float* g = dp.data() + r * kT;
      float* o = ds.data() + r * kT;
      const int64_t last = r % kT;
      float dot = 0;
      for (int64_t j = 0; j <= last; ++j) dot += a[j] * g[j];
      for (int64_t j = 0; j <= last; ++j) o[j] = a[j] * (g[j] - dot);
      for (int64_t j = last + 1; j < kT; ++j) o[j] = 0;
    }
    benchmark::DoNotOptimize(ds.data());
  }
  SetItems(state, rows * kT);
}

void SoftmaxBackwardOneDnn(benchmark::State& state) {
  const int64_t rows = state.range(0) * kHeads * kT;
  const std::vector<float> p = Random(rows * kT, 0, 0.05f, 4), dp = Random(rows * kT, -1, 1, 5);
  std::vector<float> ds(p.size());
  SoftmaxOp op;
  for (auto _ : state) {
    op.Backward(p.data(), dp.data(), ds.data(), rows, kT);
    benchmark::DoNotOptimize(ds.data());
  }
  SetItems(state, rows * kT);
}

// ---- LayerNorm on [N T, C] ----

void LayerNormForwardPlain(benchmark::State& state) {
  const int64_t rows = state.range(0) * kT, c = state.range(1);
  const std::vector<float> x = Random(rows * c, -2, 2, 6), w = Random(c, 0.5, 1.5, 7),
                           b = Random(c, -1, 1, 8);
  std::vector<float> y(x.size()), mean(rows), rstd(rows);
  for (auto _ : state) {
    for (int64_t r = 0; r < rows; ++r) {
      const float* a = x.data() + r * c;
      double s = 0, v = 0;
      for (int64_t j = 0; j < c; ++j) s += a[j];
      const double m = s / c;
      for (int64_t j = 0; j < c; ++j) v += (a[j] - m) * (a[j] - m);
      const float mf = static_cast<float>(m);
      const float rs = static_cast<float>(1 / std::sqrt(v / c + 1e-5));
      mean[r] = mf;
      rstd[r] = rs;
      float* o = y.data() + r * c;
      for (int64_t j = 0; j < c; ++j) o[j] = (a[j] - mf) * rs * w[j] + b[j];
    }
    benchmark::DoNotOptimize(y.data());
  }
  SetItems(state, rows * c);
}

void LayerNormForwardOneDnn(benchmark::State& state) {
  const int64_t rows = state.range(0) * kT, c = state.range(1);
  const std::vector<float> x = Random(rows * c, -2, 2, 6), w = Random(c, 0.5, 1.5, 7),
                           b = Random(c, -1, 1, 8);
  std::vector<float> y(x.size()), mean(rows), var(rows);
  LayerNormRows norm(c, 1e-5f);
  for (auto _ : state) {
    norm.Forward(x.data(), rows, w.data(), b.data(), y.data(), mean.data(), var.data());
    benchmark::DoNotOptimize(y.data());
  }
  SetItems(state, rows * c);
}

// Input and parameter gradients together (BackwardInput + BackwardWeight).
void LayerNormBackwardPlain(benchmark::State& state) {
  const int64_t rows = state.range(0) * kT, c = state.range(1);
  const std::vector<float> x = Random(rows * c, -2, 2, 6), w = Random(c, 0.5, 1.5, 7),
                           dy = Random(rows * c, -1, 1, 9);
  const std::vector<float> mean(rows, 0.01f), rstd(rows, 0.9f);
  std::vector<float> dx(x.size()), dw(c), db(c);
  std::vector<double> sw(c), sb(c);
  for (auto _ : state) {
    std::fill(sw.begin(), sw.end(), 0.0);
    std::fill(sb.begin(), sb.end(), 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      const float* a = x.data() + r * c;
      const float* g = dy.data() + r * c;
      double m1 = 0, m2 = 0;
      for (int64_t j = 0; j < c; ++j) {
        const float xh = (a[j] - mean[r]) * rstd[r];
        m1 += g[j] * w[j];
        m2 += g[j] * w[j] * xh;
        sw[j] += g[j] * xh;
        sb[j] += g[j];
      }
      const float f1 = static_cast<float>(m1 / c), f2 = static_cast<float>(m2 / c);
      float* o = dx.data() + r * c;
      for (int64_t j = 0; j < c; ++j) {
        o[j] = rstd[r] * (g[j] * w[j] - f1 - (a[j] - mean[r]) * rstd[r] * f2);
      }
    }
    for (int64_t j = 0; j < c; ++j) {
      dw[j] += static_cast<float>(sw[j]);
      db[j] += static_cast<float>(sb[j]);
    }
    benchmark::DoNotOptimize(dx.data());
    benchmark::DoNotOptimize(dw.data());
  }
  SetItems(state, rows * c);
}

void LayerNormBackwardOneDnn(benchmark::State& state) {
  const int64_t rows = state.range(0) * kT, c = state.range(1);
  const std::vector<float> x = Random(rows * c, -2, 2, 6), w = Random(c, 0.5, 1.5, 7),
                           dy = Random(rows * c, -1, 1, 9);
  const std::vector<float> mean(rows, 0.01f), var(rows, 1.2f);
  std::vector<float> dx(x.size()), dw(c), db(c);
  LayerNormRows norm(c, 1e-5f);
  for (auto _ : state) {
    norm.BackwardInput(x.data(), dy.data(), rows, mean.data(), var.data(), w.data(),
                       /*accumulate=*/false, dx.data());
    norm.BackwardWeight(x.data(), dy.data(), rows, mean.data(), var.data(), dw.data(), db.data());
    benchmark::DoNotOptimize(dx.data());
    benchmark::DoNotOptimize(dw.data());
  }
  SetItems(state, rows * c);
}

// ---- the whole block (dropout 0.1, training) ----

struct BlockFixture {
  BlockFixture(int64_t n, int64_t c) : block(1, kT, c, kHeads, 4 * c, 0.1) {
    block.InitParams(42);
    x.Resize({n, kT, c});
    x.data = Random(n * kT * c, -1, 1, 10);
    dy.Resize({n, kT, c});
    dy.data = Random(n * kT * c, -1e-3f, 1e-3f, 11);
    ctx.training = true;
    block.Forward(x, &y, &cache, ctx);
    block.BackwardInput(x, y, dy, &dx, &cache);
  }
  TransformerBlockLayer block;
  Tensor x, y, dy, dx;
  LayerCache cache;
  ForwardContext ctx;
};

void BlockForward(benchmark::State& state) {
  BlockFixture f(state.range(0), state.range(1));
  for (auto _ : state) f.block.Forward(f.x, &f.y, &f.cache, f.ctx);
  SetItems(state, state.range(0));
}

void BlockBackwardInput(benchmark::State& state) {
  BlockFixture f(state.range(0), state.range(1));
  for (auto _ : state) f.block.BackwardInput(f.x, f.y, f.dy, &f.dx, &f.cache);
  SetItems(state, state.range(0));
}

void BlockBackwardWeight(benchmark::State& state) {
  BlockFixture f(state.range(0), state.range(1));
  for (auto _ : state) f.block.BackwardWeight(f.x, f.y, f.dy, &f.cache);
  SetItems(state, state.range(0));
}

void Shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"samples", "C"});
  for (int64_t n : {8, 32}) {
    for (int64_t c : {128, 256}) b->Args({n, c});
  }
  b->Unit(benchmark::kMicrosecond);
}

BENCHMARK(GeluForwardPlain)->Name("GeluForward/Plain")->Apply(Shapes);
BENCHMARK(GeluForwardOneDnn)->Name("GeluForward/OneDnn")->Apply(Shapes);
BENCHMARK(GeluBackwardPlain)->Name("GeluBackward/Plain")->Apply(Shapes);
BENCHMARK(GeluBackwardOneDnn)->Name("GeluBackward/OneDnn")->Apply(Shapes);
BENCHMARK(SoftmaxForwardPlain)->Name("SoftmaxForward/Plain")->Apply(Shapes);
BENCHMARK(SoftmaxForwardOneDnn)->Name("SoftmaxForward/OneDnn")->Apply(Shapes);
BENCHMARK(SoftmaxBackwardPlain)->Name("SoftmaxBackward/Plain")->Apply(Shapes);
BENCHMARK(SoftmaxBackwardOneDnn)->Name("SoftmaxBackward/OneDnn")->Apply(Shapes);
BENCHMARK(LayerNormForwardPlain)->Name("LayerNormForward/Plain")->Apply(Shapes);
BENCHMARK(LayerNormForwardOneDnn)->Name("LayerNormForward/OneDnn")->Apply(Shapes);
BENCHMARK(LayerNormBackwardPlain)->Name("LayerNormBackward/Plain")->Apply(Shapes);
BENCHMARK(LayerNormBackwardOneDnn)->Name("LayerNormBackward/OneDnn")->Apply(Shapes);
BENCHMARK(BlockForward)->Name("Block/Forward")->Apply(Shapes);
BENCHMARK(BlockBackwardInput)->Name("Block/BackwardInput")->Apply(Shapes);
BENCHMARK(BlockBackwardWeight)->Name("Block/BackwardWeight")->Apply(Shapes);

}  // namespace
}  // namespace dapple::kernels

int main(int argc, char** argv) {
  dapple::kernels::SetComputeThreads(1);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
