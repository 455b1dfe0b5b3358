#include "kernels/cuda/attention.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cuda/batched_gemm.h"
#include "kernels/cuda/permute.h"
#include "kernels/cuda/softmax.h"

namespace dapple::kernels::cuda {
namespace {

// Sizes of one head-major block: [n, heads, seq, d] and [n, heads, seq, seq].
struct Dims {
  int64_t batch;  // n * heads
  int64_t t;
  int64_t d;
  int64_t head;   // t * d
  int64_t score;  // t * t
  int64_t part;   // batch * head: one of q, k, v (or o) head-major
  float scale;    // 1 / sqrt(d), as the CPU rounds it
};

absl::StatusOr<Dims> DimsOf(const char* op, const AttentionShape& s) {
  if (s.n <= 0 || s.seq <= 0 || s.width <= 0 || s.heads <= 0 || s.width % s.heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": n ", s.n, ", seq ", s.seq, ", width ",
                                                   s.width, ", heads ", s.heads,
                                                   ": need all > 0 and heads dividing width"));
  }
  Dims d;
  d.batch = s.n * s.heads;
  d.t = s.seq;
  d.d = s.width / s.heads;
  d.head = d.t * d.d;
  d.score = d.t * d.t;
  d.part = d.batch * d.head;
  d.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d.d)));
  return d;
}

HeadLayout Layout(const AttentionShape& s, int64_t parts) {
  return HeadLayout{s.n, s.seq, parts, s.heads, s.width / s.heads};
}

template <typename T>
MatrixBatch<const T> In(const T* p, int64_t ld, int64_t stride) {
  return MatrixBatch<const T>{p, ld, stride};
}
template <typename T>
MatrixBatch<T> Out(T* p, int64_t ld, int64_t stride) {
  return MatrixBatch<T>{p, ld, stride};
}

template <typename T>
absl::Status Forward(const KernelContext& ctx, const AttentionShape& s, const T* qkv, T* qkv_heads,
                     T* probs, T* scratch, T* out) {
  DAPPLE_ASSIGN_OR_RETURN(const Dims d, DimsOf("CausalAttentionForward", s));
  const T* q = qkv_heads;
  const T* k = qkv_heads + d.part;
  const T* v = qkv_heads + 2 * d.part;
  T* o = scratch;  // [n, heads, seq, d]
  DAPPLE_RETURN_IF_ERROR(TokensToHeads(ctx, Layout(s, 3), qkv, qkv_heads));
  // S = scale q k^T, then the causal softmax in place.
  DAPPLE_RETURN_IF_ERROR(BatchedGemm(ctx, false, true, d.t, d.t, d.d, d.scale, In(q, d.d, d.head),
                                     In(k, d.d, d.head), 0.0f, Out(probs, d.t, d.score), d.batch));
  DAPPLE_RETURN_IF_ERROR(CausalSoftmaxForward(ctx, probs, d.batch, d.t));
  // o = P v (P is zero above the diagonal).
  DAPPLE_RETURN_IF_ERROR(BatchedGemm(ctx, false, false, d.t, d.d, d.t, 1.0f,
                                     In<T>(probs, d.t, d.score), In(v, d.d, d.head), 0.0f,
                                     Out(o, d.d, d.head), d.batch));
  return HeadsToTokens(ctx, Layout(s, 1), o, out);
}

template <typename T>
absl::Status Backward(const KernelContext& ctx, const AttentionShape& s, const T* qkv_heads,
                      const T* probs, const T* dout, T* scratch, T* dqkv) {
  DAPPLE_ASSIGN_OR_RETURN(const Dims d, DimsOf("CausalAttentionBackward", s));
  const T* q = qkv_heads;
  const T* k = qkv_heads + d.part;
  const T* v = qkv_heads + 2 * d.part;
  T* go = scratch;                      // dL/do, head-major [n, heads, seq, d]
  T* dscores = go + d.part;             // dL/dP, then dL/dS [n, heads, seq, seq]
  T* dq = dscores + d.batch * d.score;  // dL/dq | dL/dk | dL/dv head-major
  T* dk = dq + d.part;
  T* dv = dk + d.part;
  DAPPLE_RETURN_IF_ERROR(TokensToHeads(ctx, Layout(s, 1), dout, go));
  // dP = do v^T; dv = P^T do.
  DAPPLE_RETURN_IF_ERROR(BatchedGemm(ctx, false, true, d.t, d.t, d.d, 1.0f, In<T>(go, d.d, d.head),
                                     In(v, d.d, d.head), 0.0f, Out(dscores, d.t, d.score),
                                     d.batch));
  DAPPLE_RETURN_IF_ERROR(BatchedGemm(ctx, true, false, d.t, d.d, d.t, 1.0f, In(probs, d.t, d.score),
                                     In<T>(go, d.d, d.head), 0.0f, Out(dv, d.d, d.head), d.batch));
  // dS = P (dP - rowsum(P dP)), zero above the diagonal.
  DAPPLE_RETURN_IF_ERROR(CausalSoftmaxBackward(ctx, probs, dscores, dscores, d.batch, d.t));
  // S = scale q k^T: dq = scale dS k; dk = scale dS^T q.
  DAPPLE_RETURN_IF_ERROR(BatchedGemm(ctx, false, false, d.t, d.d, d.t, d.scale,
                                     In<T>(dscores, d.t, d.score), In(k, d.d, d.head), 0.0f,
                                     Out(dq, d.d, d.head), d.batch));
  DAPPLE_RETURN_IF_ERROR(BatchedGemm(ctx, true, false, d.t, d.d, d.t, d.scale,
                                     In<T>(dscores, d.t, d.score), In(q, d.d, d.head), 0.0f,
                                     Out(dk, d.d, d.head), d.batch));
  return HeadsToTokens(ctx, Layout(s, 3), dq, dqkv);
}

}  // namespace

int64_t AttentionForwardScratchElements(const AttentionShape& s) {
  return s.n * s.seq * s.width;  // o, head-major
}

int64_t AttentionBackwardScratchElements(const AttentionShape& s) {
  // do, dP / dS, dq | dk | dv.
  return 4 * s.n * s.seq * s.width + s.n * s.heads * s.seq * s.seq;
}

absl::Status CausalAttentionForward(const KernelContext& ctx, const AttentionShape& shape,
                                    const float* qkv, float* qkv_heads, float* probs,
                                    float* scratch, float* out) {
  return Forward(ctx, shape, qkv, qkv_heads, probs, scratch, out);
}
absl::Status CausalAttentionForward(const KernelContext& ctx, const AttentionShape& shape,
                                    const bf16* qkv, bf16* qkv_heads, bf16* probs, bf16* scratch,
                                    bf16* out) {
  return Forward(ctx, shape, qkv, qkv_heads, probs, scratch, out);
}
absl::Status CausalAttentionBackward(const KernelContext& ctx, const AttentionShape& shape,
                                     const float* qkv_heads, const float* probs, const float* dout,
                                     float* scratch, float* dqkv) {
  return Backward(ctx, shape, qkv_heads, probs, dout, scratch, dqkv);
}
absl::Status CausalAttentionBackward(const KernelContext& ctx, const AttentionShape& shape,
                                     const bf16* qkv_heads, const bf16* probs, const bf16* dout,
                                     bf16* scratch, bf16* dqkv) {
  return Backward(ctx, shape, qkv_heads, probs, dout, scratch, dqkv);
}

}  // namespace dapple::kernels::cuda
