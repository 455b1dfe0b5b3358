// The GPT kernels of kernels/cuda on the GPU: each step of the transformer block (LayerNorm,
// the causal softmax, attention's batched GEMMs, GELU, dropout with the residual add, the head
// permutes), the embedding, and the whole block (kernels/cuda/layer_factory.h, forward +
// BackwardInput + BackwardWeight), in fp32 and bf16, at a GPT-2-small shape: N samples of
// T = 1024 tokens, C = 768, 12 heads, MLP 3072 (--quick: N 4, T 256).
//
// Each row is the median of the timed iterations (CUDA events on one stream, after warm-up),
// with what it moves or computes counted as stated per op:
//   memory-bound ops: GB/s = bytes read + bytes written (each tensor once; the causal softmax
//     reads the lower triangle and writes the whole matrix) / time;
//   GEMMs: TFLOP/s = 2 m n k per product / time (attention: QK^T and PV forward, 4 products
//     backward); the block: common/model's forward + backward FLOPs (LayerInfo, the planner's
//     numbers) / time.
// Usage: gpt_cuda_bench [--quick]. Exits 0 printing "no GPU: skipped" where no GPU is usable.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "bench/cuda_bench_util.cuh"
#include "common/model_info.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cuda/activations.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/context.h"
#include "kernels/cuda/dropout.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/layer_factory.h"
#include "kernels/cuda/layernorm.h"
#include "kernels/cuda/optimizer.h"
#include "kernels/cuda/permute.h"
#include "kernels/cuda/softmax.h"

namespace dapple::kernels::cuda {
namespace {

using ::dapple::bench::Check;
using ::dapple::bench::Die;
using ::dapple::bench::Fill;
using ::dapple::bench::MedianMs;

// Device arrays freed at exit of the scope.
class Arena {
 public:
  ~Arena() {
    for (void* p : blocks_) cudaFree(p);
  }
  template <typename T>
  T* Alloc(int64_t count, cudaStream_t stream, float lo = -1, float hi = 1) {
    T* p = nullptr;
    Check(cudaMalloc(&p, std::max<int64_t>(count, 1) * sizeof(T)), "cudaMalloc");
    blocks_.push_back(p);
    Fill(p, count, blocks_.size(), lo, hi, stream);
    return p;
  }
  void* Bytes(size_t bytes) {
    void* p = nullptr;
    Check(cudaMalloc(&p, std::max<size_t>(bytes, 1)), "cudaMalloc");
    blocks_.push_back(p);
    return p;
  }

 private:
  std::vector<void*> blocks_;
};

struct Shape {
  int64_t n, t, c, heads, hidden, vocab;
};

struct Bench {
  const KernelContext& ctx;
  int warmup, iters;
  const char* dtype;

  void Bytes(const char* op, double bytes, const std::function<void()>& body) const {
    const double ms = MedianMs(ctx.stream, warmup, iters, body);
    std::printf("%-5s %-34s %9.3f ms %9.1f GB/s\n", dtype, op, ms, bytes / (ms * 1e-3) / 1e9);
    std::fflush(stdout);
  }
  void Flops(const char* op, double flops, const std::function<void()>& body) const {
    const double ms = MedianMs(ctx.stream, warmup, iters, body);
    std::printf("%-5s %-34s %9.3f ms %9.1f TFLOP/s\n", dtype, op, ms, flops / (ms * 1e-3) / 1e12);
    std::fflush(stdout);
  }
};

// The block as the backend runs it: its device layer, bound to random parameters.
template <typename T>
void RunBlock(const Bench& b, const Shape& s, Arena& arena) {
  v1::ModelSpec model;
  model.add_input_shape(s.t);
  model.add_input_shape(s.c);
  model.set_input_type("float");
  v1::LayerSpec* spec = model.add_layers();
  spec->set_type("transformer_block");
  spec->mutable_transformer_block()->set_heads(s.heads);
  spec->mutable_transformer_block()->set_mlp_hidden(s.hidden);
  spec->mutable_transformer_block()->set_dropout(0.1);
  const LayerInfo info = InferLayers(model).value().at(0);
  constexpr Dtype kDtype = std::is_same_v<T, float> ? Dtype::kFp32 : Dtype::kBf16;
  std::unique_ptr<DeviceLayer> layer = MakeCudaLayer(info, *spec, kDtype).value();
  std::vector<DeviceParam> params;
  for (const ParamInfo& p : info.params) {
    const int64_t count = NumElements(p.shape);
    DeviceParam d{arena.Alloc<float>(count, b.ctx.stream, -0.03f, 0.03f),
                  arena.Alloc<float>(count, b.ctx.stream, 0, 0), nullptr, count};
    if (kDtype == Dtype::kBf16) {
      d.value_bf16 = arena.Alloc<bf16>(count, b.ctx.stream);
      Check(CastToBf16(b.ctx, d.value, d.value_bf16, count), "CastToBf16");
    }
    params.push_back(d);
  }
  Check(layer->BindParams(params), "BindParams");
  const LayerBuffers buffers = layer->Buffers(s.n).value();
  DeviceCache cache;
  for (size_t bytes : buffers.saved) cache.saved.push_back(arena.Bytes(bytes));
  for (size_t bytes : buffers.grads) cache.grads.push_back(arena.Bytes(bytes));
  const Scratch scratch{arena.Bytes(buffers.scratch), buffers.scratch};
  const int64_t count = s.n * s.t * s.c;
  T* x = arena.Alloc<T>(count, b.ctx.stream);
  T* y = arena.Alloc<T>(count, b.ctx.stream);
  T* dy = arena.Alloc<T>(count, b.ctx.stream);
  T* dx = arena.Alloc<T>(count, b.ctx.stream);
  ForwardContext fctx;
  fctx.training = true;
  fctx.seed = 1;
  const double flops = (info.forward_flops + info.backward_flops) * static_cast<double>(s.n);
  b.Flops("transformer_block fwd+bwd (dropout .1)", flops, [&] {
    Check(layer->Forward(b.ctx, x, y, s.n, &cache, fctx, scratch), "block forward");
    Check(layer->BackwardInput(b.ctx, x, y, dy, dx, s.n, &cache, scratch), "block B");
    Check(layer->BackwardWeight(b.ctx, x, y, dy, s.n, &cache, scratch), "block W");
  });
}

template <typename T>
void RunShape(const KernelContext& ctx, const Shape& s, int warmup, int iters) {
  constexpr bool kBf16 = std::is_same_v<T, bf16>;
  const Bench b{ctx, warmup, iters, kBf16 ? "bf16" : "fp32"};
  const double e = sizeof(T);
  const int64_t rows = s.n * s.t, tc = rows * s.c, th = rows * s.hidden;
  const int64_t scores = s.n * s.heads * s.t * s.t;
  const double lower = static_cast<double>(s.n * s.heads) * s.t * (s.t + 1) / 2;
  Arena arena;
  T* x = arena.Alloc<T>(tc, ctx.stream);
  T* y = arena.Alloc<T>(tc, ctx.stream);
  T* dy = arena.Alloc<T>(tc, ctx.stream);
  T* dx = arena.Alloc<T>(tc, ctx.stream);
  float* gamma = arena.Alloc<float>(s.c, ctx.stream, 0.5f, 1.5f);
  float* beta = arena.Alloc<float>(s.c, ctx.stream);
  float* dgamma = arena.Alloc<float>(s.c, ctx.stream);
  float* dbeta = arena.Alloc<float>(s.c, ctx.stream);
  float* mean = arena.Alloc<float>(rows, ctx.stream);
  float* var = arena.Alloc<float>(rows, ctx.stream, 0.5f, 1.5f);
  b.Bytes("layernorm forward", e * 2 * tc + 8.0 * rows, [&] {
    Check(LayerNormForward(ctx, x, gamma, beta, rows, s.c, 1e-5f, y, mean, var), "ln");
  });
  b.Bytes("layernorm backward input (+res)", e * 4 * tc, [&] {
    Check(LayerNormBackwardInput(ctx, x, dy, mean, var, gamma, rows, s.c, 1e-5f, y, dx), "ln B");
  });
  b.Bytes("layernorm backward weight", e * 2 * tc, [&] {
    Check(LayerNormBackwardWeight(ctx, x, dy, mean, var, rows, s.c, 1e-5f, dgamma, dbeta), "ln W");
  });

  T* h = arena.Alloc<T>(th, ctx.stream, -3, 3);
  T* dh = arena.Alloc<T>(th, ctx.stream);
  auto gelu = [&](auto fwd, auto bwd) {
    b.Bytes("gelu forward", e * 2 * th, [&] { Check(fwd(), "gelu"); });
    b.Bytes("gelu backward", e * 3 * th, [&] { Check(bwd(), "gelu backward"); });
  };
  if constexpr (kBf16) {
    gelu([&] { return GeluForwardBf16(ctx, h, dh, th); },
         [&] { return GeluBackwardBf16(ctx, h, dh, dh, th); });
  } else {
    gelu([&] { return GeluForward(ctx, h, dh, th); },
         [&] { return GeluBackward(ctx, h, dh, dh, th); });
  }

  ForwardContext fctx;
  fctx.training = true;
  const DropoutMask mask = MakeDropoutMask(fctx, 1, 0, 0.1);
  b.Bytes("dropout + residual", e * 3 * tc,
          [&] { Check(Dropout(ctx, &mask, s.n, s.t * s.c, x, dy, y), "dropout"); });

  T* qkv = arena.Alloc<T>(3 * tc, ctx.stream);
  T* heads = arena.Alloc<T>(3 * tc, ctx.stream);
  const HeadLayout layout{s.n, s.t, 3, s.heads, s.c / s.heads};
  b.Bytes("permute qkv to heads", e * 6 * tc,
          [&] { Check(TokensToHeads(ctx, layout, qkv, heads), "permute"); });

  T* probs = arena.Alloc<T>(scores, ctx.stream, -4, 4);
  T* dprobs = arena.Alloc<T>(scores, ctx.stream);
  b.Bytes("causal softmax forward", e * (lower + scores),
          [&] { Check(CausalSoftmaxForward(ctx, probs, s.n * s.heads, s.t), "softmax"); });
  b.Bytes("causal softmax backward", e * (2 * lower + scores), [&] {
    Check(CausalSoftmaxBackward(ctx, probs, dprobs, dprobs, s.n * s.heads, s.t), "softmax bwd");
  });

  const AttentionShape shape{s.n, s.t, s.c, s.heads};
  T* scratch = arena.Alloc<T>(
      std::max(AttentionForwardScratchElements(shape), AttentionBackwardScratchElements(shape)),
      ctx.stream);
  T* out = arena.Alloc<T>(tc, ctx.stream);
  T* dqkv = arena.Alloc<T>(3 * tc, ctx.stream);
  const double attention_flops = 4.0 * s.n * s.t * static_cast<double>(s.t) * s.c;
  b.Flops("attention forward (GEMMs + softmax)", attention_flops, [&] {
    Check(CausalAttentionForward(ctx, shape, qkv, heads, probs, scratch, out), "attention");
  });
  b.Flops("attention backward", 2 * attention_flops, [&] {
    Check(CausalAttentionBackward(ctx, shape, heads, probs, dy, scratch, dqkv), "attention bwd");
  });

  const EmbeddingShape es{s.n, s.t, s.c, s.vocab};
  float* tokens = arena.Alloc<float>(rows, ctx.stream, 0, 0);  // id 0 everywhere: one long run
  float* table = arena.Alloc<float>(s.vocab * s.c, ctx.stream);
  float* positions = arena.Alloc<float>(s.t * s.c, ctx.stream);
  float* dtable = arena.Alloc<float>(s.vocab * s.c, ctx.stream);
  float* dpositions = arena.Alloc<float>(s.t * s.c, ctx.stream);
  b.Bytes("embedding forward", (4.0 * 2 + e) * tc, [&] {
    Check(EmbeddingForward(ctx, es, tokens, table, positions, &mask, y), "embedding");
  });
  const size_t eb = EmbeddingBackwardScratchBytes(es, true).value();
  void* escratch = arena.Bytes(eb);
  // Worst case for the scatter: every position holds the same id (one sequential run). Bytes:
  // dy read, its masked copy written and read (the tables' rows are counted as cached).
  b.Bytes("embedding backward (one id)", (e + 8.0) * tc, [&] {
    Check(EmbeddingBackwardWeight(ctx, es, tokens, dy, &mask, escratch, eb, dtable, dpositions),
          "embedding backward");
  });

  RunBlock<T>(b, s, arena);
  Check(cudaStreamSynchronize(ctx.stream), "cudaStreamSynchronize");
}

int Main(int argc, char** argv) {
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else {
      std::fprintf(stderr, "usage: %s [--quick]\n", argv[0]);
      return 2;
    }
  }
  int devices = 0;  // left untouched when the call fails
  const cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess || devices == 0) {
    std::printf("no GPU: skipped (%s)\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    return 0;
  }
  cudaDeviceProp prop;
  Check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  KernelContext ctx;
  Check(cudaStreamCreateWithFlags(&ctx.stream, cudaStreamNonBlocking), "cudaStreamCreate");
  if (cublasCreate(&ctx.cublas) != CUBLAS_STATUS_SUCCESS ||
      cublasSetStream(ctx.cublas, ctx.stream) != CUBLAS_STATUS_SUCCESS) {
    Die("cublasCreate / cublasSetStream");
  }
  ctx.workspace_bytes = size_t{32} << 20;
  Check(cudaMalloc(&ctx.workspace, ctx.workspace_bytes), "cudaMalloc(workspace)");
  if (cublasSetWorkspace(ctx.cublas, ctx.workspace, ctx.workspace_bytes) != CUBLAS_STATUS_SUCCESS) {
    Die("cublasSetWorkspace");
  }
  const Shape s = quick ? Shape{4, 256, 768, 12, 3072, 256} : Shape{8, 1024, 768, 12, 3072, 256};
  const int warmup = quick ? 1 : 3;
  const int iters = quick ? 3 : 10;
  std::printf("GPU: %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount);
  std::printf(
      "N %lld, T %lld, C %lld, heads %lld, MLP %lld, vocab %lld; median of %d after %d "
      "warm-up (GB/s: bytes read + written; TFLOP/s: 2mnk per GEMM, the block: "
      "common/model's FLOPs)\n",
      static_cast<long long>(s.n), static_cast<long long>(s.t), static_cast<long long>(s.c),
      static_cast<long long>(s.heads), static_cast<long long>(s.hidden),
      static_cast<long long>(s.vocab), iters, warmup);
  RunShape<float>(ctx, s, warmup, iters);
  RunShape<bf16>(ctx, s, warmup, iters);
  cublasDestroy(ctx.cublas);
  cudaFree(ctx.workspace);
  cudaStreamDestroy(ctx.stream);
  return 0;
}

}  // namespace
}  // namespace dapple::kernels::cuda

int main(int argc, char** argv) {
  dapple::bench::BenchName() = "gpt_cuda_bench";
  return dapple::kernels::cuda::Main(argc, argv);
}
