#include <cublasLt.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/linear_internal.h"

// Row-major (ours, PyTorch's) versus column-major (cuBLAS's) layouts.
//
// A row-major [r, c] buffer with row stride c, read column-major, is the matrix M^T of shape
// [c, r] with leading dimension c. So each product is computed transposed, D = op(A) op(B) in
// cuBLAS's terms (D [m, n], op(A) [m, k], op(B) [k, n], all column-major):
//
//   forward  y = x W^T     y^T [out, n]  = W [out, in]    x^T [in, n]
//            m = out, n = n, k = in; A = w buffer (col-major [in, out], lda = in), op = T;
//            B = x buffer (col-major [in, n], ldb = in), op = N; D = y buffer (ldd = out).
//            Bias b[o] is per row of D (length m): CUBLASLT_EPILOGUE_BIAS.
//   dW      dW += dy^T x   dW^T [in, out] = x^T [in, n]   dy [n, out]
//            m = in, n = out, k = n; A = x buffer (col-major [in, n], lda = in), op = N;
//            B = dy buffer (col-major [out, n], ldb = out), op = T; D = dW buffer (ldd = in).
//   dx      dx = dy W      dx^T [in, n]   = W^T [in, out] dy^T [out, n]
//            m = in, n = n, k = out; A = w buffer (col-major [in, out], lda = in), op = N;
//            B = dy buffer (col-major [out, n], ldb = out), op = N; D = dx buffer (ldd = in).
//   db      db[o] += sum_r dy[r, o] = sum over the dW GEMM's k of op(B)(k, o): fused into the dW
//            GEMM as CUBLASLT_EPILOGUE_BGRADB (a bias gradient of length n = out, the columns of
//            D, reduced over k), which overwrites its output, so it goes to the workspace and
//            one small kernel adds it to db; else a column sum of dy (ColumnSumKernel).
//
// Check of the forward (the others follow the same way): D(o, r) = sum_i W^T_cm(i, o) x^T_cm(i, r)
// = sum_i w[o * in + i] * x[r * in + i] = y[r, o], stored at o + r * out = y's row-major index.

namespace dapple::kernels::cuda {
namespace {

using internal::FromFloat;
using internal::ToFloat;

thread_local internal::GemmPaths g_paths;
thread_local internal::GemmPathCounts g_counts;

// One GEMM D = alpha op(A) op(B) + beta D (C is D), column-major, fp32 accumulation.
struct Gemm {
  const char* what;  // "y = x W^T": names the product in errors
  cublasOperation_t transa;
  cublasOperation_t transb;
  int64_t m;
  int64_t n;
  int64_t k;
  cudaDataType_t ab_type;
  cudaDataType_t d_type;
  const void* a;
  int64_t lda;
  const void* b;
  int64_t ldb;
  void* d;
  int64_t ldd;
  float beta;
  const void* bias = nullptr;  // the epilogue's vector, when not null
  cudaDataType_t bias_type = CUDA_R_32F;
  // With a bias: CUBLASLT_EPILOGUE_BIAS adds bias (length m) to D; CUBLASLT_EPILOGUE_BGRADB
  // writes the column sums of op(B) (length n, reduced over k) into bias.
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
};

std::string Describe(const Gemm& g) {
  return absl::StrCat("Linear GEMM ", g.what, " (m ", g.m, ", n ", g.n, ", k ", g.k,
                      g.ab_type == CUDA_R_16BF ? ", bf16 inputs" : ", fp32",
                      g.bias == nullptr                        ? ""
                      : g.epilogue == CUBLASLT_EPILOGUE_BGRADB ? ", bias gradient epilogue"
                      : g.bias_type == CUDA_R_32F              ? ", fp32 bias epilogue"
                                                               : ", bf16 bias epilogue",
                      ")");
}

// Largest power of two <= 256 dividing the address: what cuBLASLt's heuristic may assume.
uint32_t Alignment(const void* p) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(p);
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

struct LtDeleter {
  void operator()(cublasLtMatmulDescOpaque_t* p) const { cublasLtMatmulDescDestroy(p); }
  void operator()(cublasLtMatrixLayoutOpaque_t* p) const { cublasLtMatrixLayoutDestroy(p); }
  void operator()(cublasLtMatmulPreferenceOpaque_t* p) const { cublasLtMatmulPreferenceDestroy(p); }
};
using LtDesc = std::unique_ptr<cublasLtMatmulDescOpaque_t, LtDeleter>;
using LtLayout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, LtDeleter>;
using LtPreference = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, LtDeleter>;

// Per thread (no locks; a handful of shapes per layer), per problem: the cuBLASLt descriptors
// and the heuristic's algorithm, built on first use, so later calls only set the bias pointer
// and enqueue. Everything the descriptors and the choice depend on is in the key: device,
// operations, shapes, leading dimensions, types, epilogue, alignments and workspace size.
using LtKey = std::array<int64_t, 17>;
struct LtPlan {
  LtDesc desc;
  LtLayout a;
  LtLayout b;
  LtLayout d;
  bool found = false;  // false: cuBLASLt has no algorithm for this problem
  cublasLtMatmulAlgo_t algo;
};
thread_local std::map<LtKey, LtPlan> g_lt_plans;

absl::Status LtError(cublasStatus_t err, const Gemm& g, const char* call) {
  return CublasStatus(err, absl::StrCat(Describe(g), ": ", call));
}

// Descriptors and algorithm for `g` (bias pointer excluded: set per call).
absl::Status MakePlan(const KernelContext& ctx, const Gemm& g, uint64_t workspace_bytes,
                      LtPlan* plan) {
  cublasLtMatmulDesc_t raw_desc = nullptr;
  cublasStatus_t st = cublasLtMatmulDescCreate(&raw_desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  if (st != CUBLAS_STATUS_SUCCESS) return LtError(st, g, "cublasLtMatmulDescCreate");
  plan->desc.reset(raw_desc);
  const int32_t transa = g.transa;
  const int32_t transb = g.transb;
  st = cublasLtMatmulDescSetAttribute(raw_desc, CUBLASLT_MATMUL_DESC_TRANSA, &transa,
                                      sizeof(transa));
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = cublasLtMatmulDescSetAttribute(raw_desc, CUBLASLT_MATMUL_DESC_TRANSB, &transb,
                                        sizeof(transb));
  }
  if (st != CUBLAS_STATUS_SUCCESS) return LtError(st, g, "cublasLtMatmulDescSetAttribute");
  if (g.bias != nullptr) {
    const uint32_t epilogue = g.epilogue;
    const void* bias = g.bias;  // its alignment steers the heuristic
    const int32_t bias_type = g.bias_type;
    st = cublasLtMatmulDescSetAttribute(raw_desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                        sizeof(epilogue));
    if (st == CUBLAS_STATUS_SUCCESS) {
      st = cublasLtMatmulDescSetAttribute(raw_desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                          sizeof(bias));
    }
    if (st == CUBLAS_STATUS_SUCCESS) {
      st = cublasLtMatmulDescSetAttribute(raw_desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                          sizeof(bias_type));
    }
    // An attribute this cuBLAS rejects means no fused path: the caller falls back.
    if (st != CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  }

  // Stored (pre-op) shapes: op = N stores [m, k] / [k, n], op = T the transpose.
  const bool a_n = g.transa == CUBLAS_OP_N;
  const bool b_n = g.transb == CUBLAS_OP_N;
  cublasLtMatrixLayout_t raw = nullptr;
  st = cublasLtMatrixLayoutCreate(&raw, g.ab_type, a_n ? g.m : g.k, a_n ? g.k : g.m, g.lda);
  if (st != CUBLAS_STATUS_SUCCESS) return LtError(st, g, "cublasLtMatrixLayoutCreate(A)");
  plan->a.reset(raw);
  st = cublasLtMatrixLayoutCreate(&raw, g.ab_type, b_n ? g.k : g.n, b_n ? g.n : g.k, g.ldb);
  if (st != CUBLAS_STATUS_SUCCESS) return LtError(st, g, "cublasLtMatrixLayoutCreate(B)");
  plan->b.reset(raw);
  st = cublasLtMatrixLayoutCreate(&raw, g.d_type, g.m, g.n, g.ldd);
  if (st != CUBLAS_STATUS_SUCCESS) return LtError(st, g, "cublasLtMatrixLayoutCreate(D)");
  plan->d.reset(raw);

  cublasLtMatmulPreference_t raw_pref = nullptr;
  st = cublasLtMatmulPreferenceCreate(&raw_pref);
  if (st != CUBLAS_STATUS_SUCCESS) return LtError(st, g, "cublasLtMatmulPreferenceCreate");
  LtPreference pref(raw_pref);
  const uint32_t align_a = Alignment(g.a);
  const uint32_t align_b = Alignment(g.b);
  const uint32_t align_d = Alignment(g.d);
  cublasLtMatmulPreferenceSetAttribute(raw_pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                       &workspace_bytes, sizeof(workspace_bytes));
  cublasLtMatmulPreferenceSetAttribute(raw_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                       &align_a, sizeof(align_a));
  cublasLtMatmulPreferenceSetAttribute(raw_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                       &align_b, sizeof(align_b));
  cublasLtMatmulPreferenceSetAttribute(raw_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                       &align_d, sizeof(align_d));
  cublasLtMatmulPreferenceSetAttribute(raw_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                       &align_d, sizeof(align_d));
  cublasLtMatmulHeuristicResult_t result = {};
  int returned = 0;
  // A cublasHandle_t may be used wherever a cublasLtHandle_t is expected (cuBLAS docs).
  st = cublasLtMatmulAlgoGetHeuristic(reinterpret_cast<cublasLtHandle_t>(ctx.cublas), raw_desc,
                                      plan->a.get(), plan->b.get(), plan->d.get(), plan->d.get(),
                                      raw_pref, 1, &result, &returned);
  if (st == CUBLAS_STATUS_SUCCESS && returned > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
    plan->found = true;
    plan->algo = result.algo;
  } else if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED &&
             g.bias == nullptr) {
    // With an epilogue any refusal only means "not fused here" (cuBLAS 13.1 on an H200 answers
    // INVALID_VALUE for an fp32 bias on a bf16 output); without one it is an error.
    return LtError(st, g, "cublasLtMatmulAlgoGetHeuristic");
  }
  return absl::OkStatus();
}

// The workspace cuBLASLt may use: `bytes` from `base`, or none unless 256-byte aligned.
struct Workspace {
  void* base = nullptr;
  uint64_t bytes = 0;
};
Workspace LtWorkspace(void* base, uint64_t bytes) {
  if (base == nullptr || Alignment(base) < 256) return {};
  return {base, bytes};
}

// The plan for `g` with workspace `ws` (made on first use); plan->found says whether cuBLASLt
// has an algorithm for it.
absl::StatusOr<LtPlan*> GetPlan(const KernelContext& ctx, const Gemm& g, const Workspace& ws) {
  int device = 0;
  DAPPLE_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  const LtKey key = {
      device,
      g.transa,
      g.transb,
      g.m,
      g.n,
      g.k,
      g.ab_type,
      g.d_type,
      g.lda,
      g.ldb,
      g.ldd,
      g.bias != nullptr
          ? (int64_t{g.epilogue} * 1024 + int64_t{g.bias_type}) * 1024 + Alignment(g.bias)
          : int64_t{-1},
      Alignment(g.a),
      Alignment(g.b),
      Alignment(g.d),
      static_cast<int64_t>(ws.bytes),
      g.beta != 0.0f};
  auto it = g_lt_plans.find(key);
  if (it == g_lt_plans.end()) {
    LtPlan plan;
    DAPPLE_RETURN_IF_ERROR(MakePlan(ctx, g, ws.bytes, &plan));
    it = g_lt_plans.emplace(key, std::move(plan)).first;
  }
  return &it->second;
}

// Enqueues `g` with a plan that has an algorithm.
absl::Status RunPlan(const KernelContext& ctx, const Gemm& g, LtPlan& plan, const Workspace& ws) {
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  if (g.bias != nullptr) {
    const void* bias = g.bias;
    st = cublasLtMatmulDescSetAttribute(plan.desc.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                        sizeof(bias));
    if (st != CUBLAS_STATUS_SUCCESS) return LtError(st, g, "cublasLtMatmulDescSetAttribute");
  }
  const float alpha = 1.0f;
  st = cublasLtMatmul(reinterpret_cast<cublasLtHandle_t>(ctx.cublas), plan.desc.get(), &alpha, g.a,
                      plan.a.get(), g.b, plan.b.get(), &g.beta, g.d, plan.d.get(), g.d,
                      plan.d.get(), &plan.algo, ws.base, ws.bytes, ctx.stream);
  if (st != CUBLAS_STATUS_SUCCESS) return LtError(st, g, "cublasLtMatmul");
  ++g_counts.lt;
  return absl::OkStatus();
}

// A plain GEMM (no epilogue): cuBLASLt, else cublasGemmEx on the context's handle (whose stream
// the owner set to ctx.stream). cuBLASLt's CUBLAS_COMPUTE_32F is pure fp32 whatever the handle;
// cublasGemmEx's is too as long as the handle's math mode allows no TF32 (CUBLAS_DEFAULT_MATH,
// as worker/device sets it).
absl::Status RunGemm(const KernelContext& ctx, const Gemm& g) {
  if (g_paths.lt) {
    const Workspace ws = LtWorkspace(ctx.workspace, ctx.workspace_bytes);
    DAPPLE_ASSIGN_OR_RETURN(LtPlan* const plan, GetPlan(ctx, g, ws));
    if (plan->found) return RunPlan(ctx, g, *plan, ws);
  }
  const float alpha = 1.0f;
  const cublasStatus_t st = cublasGemmEx_64(
      ctx.cublas, g.transa, g.transb, g.m, g.n, g.k, &alpha, g.a, g.ab_type, g.lda, g.b, g.ab_type,
      g.ldb, &g.beta, g.d, g.d_type, g.ldd, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (st != CUBLAS_STATUS_SUCCESS) return LtError(st, g, "cublasGemmEx_64");
  ++g_counts.gemm_ex;
  return absl::OkStatus();
}

// y[r, o] = b[o]: the bias under a beta = 1 GEMM when the epilogue cannot take it.
template <typename T>
__global__ void BroadcastBiasKernel(const float* __restrict__ b, T* __restrict__ y, int64_t n,
                                    int64_t out) {
  const int64_t count = n * out;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    y[i] = FromFloat<T>(b[i % out]);
  }
}

// Column sums of the row-major dy [n, out], per chunk of rows. Block (32, 8): the 32 threads of
// a warp read 32 consecutive columns of one row (coalesced), the 8 warps interleave rows; the
// 8 partial sums of a column are added in a fixed order, so results are bitwise reproducible.
// With one chunk the sums go straight into db (db += sum); otherwise into
// partial[chunk * out + column] for FinishColumnSumKernel.
constexpr int kColTile = 32;
constexpr int kRowThreads = 8;

template <typename T>
__global__ void ColumnSumKernel(const T* __restrict__ dy, int64_t n, int64_t out,
                                int64_t rows_per_chunk, float* __restrict__ partial,
                                float* __restrict__ db) {
  __shared__ float tile[kRowThreads][kColTile + 1];
  const int64_t column = static_cast<int64_t>(blockIdx.x) * kColTile + threadIdx.x;
  const int64_t row_begin = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
  const int64_t row_end = min(n, row_begin + rows_per_chunk);
  float sum = 0.0f;
  if (column < out) {
#pragma unroll 4
    for (int64_t r = row_begin + threadIdx.y; r < row_end; r += kRowThreads) {
      sum += ToFloat(dy[r * out + column]);
    }
  }
  tile[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && column < out) {
    float total = tile[0][threadIdx.x];
    for (int i = 1; i < kRowThreads; ++i) total += tile[i][threadIdx.x];
    if (partial != nullptr) {
      partial[static_cast<int64_t>(blockIdx.y) * out + column] = total;
    } else {
      db[column] += total;
    }
  }
}

__global__ void FinishColumnSumKernel(const float* __restrict__ partial, int64_t chunks,
                                      int64_t out, float* __restrict__ db) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < out;
       j += stride) {
    float total = partial[j];
    for (int64_t c = 1; c < chunks; ++c) total += partial[c * out + j];
    db[j] += total;
  }
}

// db += column sums of dy. Splits the rows into chunks when ctx.workspace can hold the partial
// sums, so that narrow layers still spread over the whole GPU; it runs before the GEMMs, which
// reuse the workspace after it (stream order).
template <typename T>
absl::Status ColumnSum(const KernelContext& ctx, const T* dy, int64_t n, int64_t out, float* db) {
  constexpr int64_t kTargetBlocks = 1024;   // several waves on a 132-SM H100/H200
  constexpr int64_t kMinRowsPerChunk = 64;  // keeps each block's loop worth its launch
  const int64_t column_blocks = (out + kColTile - 1) / kColTile;
  int64_t chunks = 1;
  if (ctx.workspace != nullptr && column_blocks < kTargetBlocks) {
    chunks = (kTargetBlocks + column_blocks - 1) / column_blocks;
    chunks = std::min(chunks, (n + kMinRowsPerChunk - 1) / kMinRowsPerChunk);
    chunks = std::min<int64_t>(chunks, 65535);
    chunks = std::min<int64_t>(chunks, ctx.workspace_bytes / (out * sizeof(float)));
    chunks = std::max<int64_t>(chunks, 1);
  }
  const int64_t rows_per_chunk = (n + chunks - 1) / chunks;
  chunks = (n + rows_per_chunk - 1) / rows_per_chunk;
  float* partial = chunks > 1 ? static_cast<float*>(ctx.workspace) : nullptr;
  const dim3 grid(static_cast<unsigned>(column_blocks), static_cast<unsigned>(chunks));
  const dim3 block(kColTile, kRowThreads);
  ColumnSumKernel<T><<<grid, block, 0, ctx.stream>>>(dy, n, out, rows_per_chunk, partial, db);
  DAPPLE_RETURN_IF_ERROR(internal::LaunchStatus("Linear bias gradient (column sum)"));
  if (chunks > 1) {
    FinishColumnSumKernel<<<internal::GridFor(out), internal::kBlock, 0, ctx.stream>>>(
        partial, chunks, out, db);
    DAPPLE_RETURN_IF_ERROR(internal::LaunchStatus("Linear bias gradient (partial sums)"));
  }
  return absl::OkStatus();
}

// db[j] += staged[j]: the fused bias gradient (written, not accumulated, by the epilogue) into
// the accumulated one.
__global__ void AccumulateKernel(const float* __restrict__ staged, float* __restrict__ db,
                                 int64_t count) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    db[i] += staged[i];
  }
}

// dW += dy^T x (`g`) with db += colsum(dy) in its epilogue (CUBLASLT_EPILOGUE_BGRADB): the
// epilogue writes the sums into the head of ctx.workspace, the rest goes to the GEMM, and
// AccumulateKernel adds them to db. Returns false, having enqueued nothing, where cuBLASLt
// offers no algorithm for it (or there is no workspace to stage the sums in).
absl::StatusOr<bool> TryFusedBiasGradient(const char* op, const KernelContext& ctx, Gemm g,
                                          float* db) {
  Workspace ws = LtWorkspace(ctx.workspace, ctx.workspace_bytes);
  const uint64_t staged_bytes = (g.n * sizeof(float) + 255) / 256 * 256;
  if (ws.base == nullptr || ws.bytes < staged_bytes) return false;
  float* staged = static_cast<float*>(ws.base);
  ws.base = static_cast<char*>(ws.base) + staged_bytes;
  ws.bytes -= staged_bytes;
  g.bias = staged;
  g.bias_type = CUDA_R_32F;
  g.epilogue = CUBLASLT_EPILOGUE_BGRADB;
  DAPPLE_ASSIGN_OR_RETURN(LtPlan* const plan, GetPlan(ctx, g, ws));
  if (!plan->found) return false;
  DAPPLE_RETURN_IF_ERROR(RunPlan(ctx, g, *plan, ws));
  AccumulateKernel<<<internal::GridFor(g.n), internal::kBlock, 0, ctx.stream>>>(staged, db, g.n);
  DAPPLE_RETURN_IF_ERROR(internal::LaunchStatus(op));
  return true;
}

absl::Status CheckArgs(const char* op, const KernelContext& ctx, int64_t n, int64_t in, int64_t out,
                       std::initializer_list<const void*> required) {
  if (n <= 0 || in <= 0 || out <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": n ", n, ", in ", in, ", out ", out, " must all be > 0"));
  }
  for (const void* p : required) {
    if (p == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": a required device pointer is null"));
    }
  }
  if (ctx.cublas == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": KernelContext has no cuBLAS handle"));
  }
  return absl::OkStatus();
}

template <typename T>
constexpr cudaDataType_t kDataType = std::is_same_v<T, float> ? CUDA_R_32F : CUDA_R_16BF;

__global__ void BiasToBf16Kernel(const float* __restrict__ b, bf16* __restrict__ out,
                                 int64_t count) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    out[i] = __float2bfloat16_rn(b[i]);
  }
}

// The forward with the bias in the GEMM's epilogue. cuBLASLt wants the bias in D's type, so for
// bf16 it is rounded to bf16 into the head of ctx.workspace first (the separate path rounds it
// the same way, as the bf16 C of its beta = 1 GEMM) and the rest of the workspace goes to the
// GEMM. Returns false, having enqueued nothing, where cuBLASLt cannot fuse it.
template <typename T>
absl::StatusOr<bool> TryFusedForward(const char* op, const KernelContext& ctx, Gemm g,
                                     const float* b, const bf16* b16) {
  Workspace ws = LtWorkspace(ctx.workspace, ctx.workspace_bytes);
  bf16* staged_bias = nullptr;
  if constexpr (std::is_same_v<T, float>) {
    g.bias = b;
    g.bias_type = CUDA_R_32F;
  } else if (b16 != nullptr) {  // the owner's rounded copy: nothing to stage
    g.bias = b16;
    g.bias_type = CUDA_R_16BF;
  } else {
    const uint64_t staged_bytes = (g.m * sizeof(bf16) + 255) / 256 * 256;
    if (ws.base == nullptr || ws.bytes < staged_bytes) return false;
    staged_bias = static_cast<bf16*>(ws.base);
    ws.base = static_cast<char*>(ws.base) + staged_bytes;
    ws.bytes -= staged_bytes;
    g.bias = staged_bias;
    g.bias_type = CUDA_R_16BF;
  }
  DAPPLE_ASSIGN_OR_RETURN(LtPlan* const plan, GetPlan(ctx, g, ws));
  if (!plan->found) return false;
  if (staged_bias != nullptr) {
    BiasToBf16Kernel<<<internal::GridFor(g.m), internal::kBlock, 0, ctx.stream>>>(b, staged_bias,
                                                                                  g.m);
    DAPPLE_RETURN_IF_ERROR(internal::LaunchStatus(op));
  }
  DAPPLE_RETURN_IF_ERROR(RunPlan(ctx, g, *plan, ws));
  return true;
}

template <typename T>
absl::Status Forward(const char* op, const KernelContext& ctx, const T* x, const T* w,
                     const float* b, T* y, int64_t n, int64_t in, int64_t out,
                     const bf16* b16 = nullptr) {
  DAPPLE_RETURN_IF_ERROR(CheckArgs(op, ctx, n, in, out, {x, w, y}));
  Gemm g{"y = x W^T", CUBLAS_OP_T, CUBLAS_OP_N, out, n, in,  kDataType<T>, kDataType<T>,
         w,           in,          x,           in,  y, out, 0.0f};
  if (b == nullptr) return RunGemm(ctx, g);  // no bias: the LM head
  if (g_paths.lt && g_paths.fused_bias) {
    DAPPLE_ASSIGN_OR_RETURN(const bool fused, TryFusedForward<T>(op, ctx, g, b, b16));
    if (fused) {
      ++g_counts.fused_bias;
      return absl::OkStatus();
    }
  }
  BroadcastBiasKernel<T>
      <<<internal::GridFor(n * out), internal::kBlock, 0, ctx.stream>>>(b, y, n, out);
  DAPPLE_RETURN_IF_ERROR(internal::LaunchStatus(op));
  g.beta = 1.0f;
  DAPPLE_RETURN_IF_ERROR(RunGemm(ctx, g));
  ++g_counts.separate_bias;
  return absl::OkStatus();
}

// dx = dy W.
template <typename T>
absl::Status BackwardInput(const char* op, const KernelContext& ctx, const T* w, const T* dy, T* dx,
                           int64_t n, int64_t in, int64_t out) {
  DAPPLE_RETURN_IF_ERROR(CheckArgs(op, ctx, n, in, out, {w, dy, dx}));
  return RunGemm(ctx, Gemm{"dx = dy W", CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, kDataType<T>,
                           kDataType<T>, w, in, dy, out, dx, in, 0.0f});
}

// dW += dy^T x and, when db is not null, db += colsum(dy): in the GEMM's epilogue where
// cuBLASLt can, else a column-sum kernel before the GEMM.
template <typename T>
absl::Status BackwardWeight(const char* op, const KernelContext& ctx, const T* x, const T* dy,
                            float* dw, float* db, int64_t n, int64_t in, int64_t out) {
  DAPPLE_RETURN_IF_ERROR(CheckArgs(op, ctx, n, in, out, {x, dy, dw}));
  const Gemm g{"dW += dy^T x",
               CUBLAS_OP_N,
               CUBLAS_OP_T,
               in,
               out,
               n,
               kDataType<T>,
               CUDA_R_32F,
               x,
               in,
               dy,
               out,
               dw,
               in,
               1.0f};
  if (db == nullptr) return RunGemm(ctx, g);
  if (g_paths.lt && g_paths.fused_bias_grad) {
    DAPPLE_ASSIGN_OR_RETURN(const bool fused, TryFusedBiasGradient(op, ctx, g, db));
    if (fused) {
      ++g_counts.fused_bias_grad;
      return absl::OkStatus();
    }
  }
  DAPPLE_RETURN_IF_ERROR(ColumnSum(ctx, dy, n, out, db));
  DAPPLE_RETURN_IF_ERROR(RunGemm(ctx, g));
  ++g_counts.separate_bias_grad;
  return absl::OkStatus();
}

template <typename T>
absl::Status Backward(const char* op, const KernelContext& ctx, const T* x, const T* w, const T* dy,
                      float* dw, float* db, T* dx, int64_t n, int64_t in, int64_t out) {
  DAPPLE_RETURN_IF_ERROR(CheckArgs(op, ctx, n, in, out, {x, w, dy, dw, db}));
  DAPPLE_RETURN_IF_ERROR(BackwardWeight(op, ctx, x, dy, dw, db, n, in, out));
  if (dx != nullptr) DAPPLE_RETURN_IF_ERROR(BackwardInput(op, ctx, w, dy, dx, n, in, out));
  return absl::OkStatus();
}

}  // namespace

namespace internal {
void SetGemmPathsForTesting(const GemmPaths& paths) { g_paths = paths; }
GemmPathCounts GetGemmPathCounts() { return g_counts; }
}  // namespace internal

absl::Status LinearForward(const KernelContext& ctx, const float* x, const float* w, const float* b,
                           float* y, int64_t n, int64_t in, int64_t out) {
  return Forward("LinearForward", ctx, x, w, b, y, n, in, out);
}

absl::Status LinearBackward(const KernelContext& ctx, const float* x, const float* w,
                            const float* dy, float* dw, float* db, float* dx, int64_t n, int64_t in,
                            int64_t out) {
  return Backward("LinearBackward", ctx, x, w, dy, dw, db, dx, n, in, out);
}

absl::Status LinearForwardBf16(const KernelContext& ctx, const bf16* x, const bf16* w,
                               const float* b, bf16* y, int64_t n, int64_t in, int64_t out,
                               const bf16* b16) {
  return Forward("LinearForwardBf16", ctx, x, w, b, y, n, in, out, b16);
}

absl::Status LinearBackwardBf16(const KernelContext& ctx, const bf16* x, const bf16* w,
                                const bf16* dy, float* dw, float* db, bf16* dx, int64_t n,
                                int64_t in, int64_t out) {
  return Backward("LinearBackwardBf16", ctx, x, w, dy, dw, db, dx, n, in, out);
}

absl::Status LinearBackwardInput(const KernelContext& ctx, const float* w, const float* dy,
                                 float* dx, int64_t n, int64_t in, int64_t out) {
  return BackwardInput("LinearBackwardInput", ctx, w, dy, dx, n, in, out);
}
absl::Status LinearBackwardWeight(const KernelContext& ctx, const float* x, const float* dy,
                                  float* dw, float* db, int64_t n, int64_t in, int64_t out) {
  return BackwardWeight("LinearBackwardWeight", ctx, x, dy, dw, db, n, in, out);
}
absl::Status LinearBackwardInputBf16(const KernelContext& ctx, const bf16* w, const bf16* dy,
                                     bf16* dx, int64_t n, int64_t in, int64_t out) {
  return BackwardInput("LinearBackwardInputBf16", ctx, w, dy, dx, n, in, out);
}
absl::Status LinearBackwardWeightBf16(const KernelContext& ctx, const bf16* x, const bf16* dy,
                                      float* dw, float* db, int64_t n, int64_t in, int64_t out) {
  return BackwardWeight("LinearBackwardWeightBf16", ctx, x, dy, dw, db, n, in, out);
}

}  // namespace dapple::kernels::cuda
