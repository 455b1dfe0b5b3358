#include "kernels/cpu/attention.h"

#include <cblas.h>

#include <cmath>
#include <limits>

#include "kernels/cpu/check.h"
#include "kernels/cpu/dense.h"

namespace dapple::kernels {

CausalSelfAttention::CausalSelfAttention(int64_t seq, int64_t width, int64_t heads)
    : seq_(seq), width_(width), heads_(heads), head_dim_(heads > 0 ? width / heads : 0) {
  DAPPLE_KERNEL_CHECK(seq > 0 && width > 0 && heads > 0 && width % heads == 0, "attention seq ",
                      seq, " width ", width, " heads ", heads);
  scale_ = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim_)));
}

void CausalSelfAttention::Forward(const float* qkv, int64_t n, float* probs, float* out) {
  const int t = BlasDim(seq_), d = BlasDim(head_dim_);
  const int ld_qkv = BlasDim(3 * width_), ld_out = BlasDim(width_);
  const int64_t head_probs = seq_ * seq_;
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  for (int64_t s = 0; s < n; ++s) {
    const float* base = qkv + s * seq_ * 3 * width_;
    float* p = probs + s * heads_ * head_probs;
    for (int64_t h = 0; h < heads_; ++h) {
      const float* q = base + h * head_dim_;
      const float* k = base + width_ + h * head_dim_;
      float* scores = p + h * head_probs;
      // S = scale q k^T, then the causal mask (softmax turns -inf into exactly 0).
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, t, t, d, scale_, q, ld_qkv, k, ld_qkv,
                  0.0f, scores, t);
      for (int64_t i = 0; i < seq_; ++i) {
        for (int64_t j = i + 1; j < seq_; ++j) scores[i * seq_ + j] = kMasked;
      }
    }
    // One call for all heads of the sample: the shape [heads T, T] does not depend on N, so
    // one primitive serves every micro-batch size.
    softmax_.Forward(p, heads_ * seq_, seq_);
    for (int64_t h = 0; h < heads_; ++h) {
      const float* v = base + 2 * width_ + h * head_dim_;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, t, d, t, 1.0f, p + h * head_probs, t,
                  v, ld_qkv, 0.0f, out + s * seq_ * width_ + h * head_dim_, ld_out);
    }
  }
}

void CausalSelfAttention::Backward(const float* qkv, const float* probs, const float* dout,
                                   int64_t n, float* dqkv) {
  const int t = BlasDim(seq_), d = BlasDim(head_dim_);
  const int ld_qkv = BlasDim(3 * width_), ld_out = BlasDim(width_);
  const int64_t head_probs = seq_ * seq_;
  dscores_.resize(static_cast<size_t>(heads_ * head_probs));
  for (int64_t s = 0; s < n; ++s) {
    const float* base = qkv + s * seq_ * 3 * width_;
    float* dbase = dqkv + s * seq_ * 3 * width_;
    const float* p = probs + s * heads_ * head_probs;
    const float* ds_out = dout + s * seq_ * width_;
    for (int64_t h = 0; h < heads_; ++h) {
      const float* v = base + 2 * width_ + h * head_dim_;
      const float* go = ds_out + h * head_dim_;
      // dP = dO v^T; dv = P^T dO.
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, t, t, d, 1.0f, go, ld_out, v, ld_qkv,
                  0.0f, dscores_.data() + h * head_probs, t);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, t, d, t, 1.0f, p + h * head_probs, t, go,
                  ld_out, 0.0f, dbase + 2 * width_ + h * head_dim_, ld_qkv);
    }
    // dS = P (dP - rowsum(P dP)): zero above the diagonal, where P is 0.
    softmax_.Backward(p, dscores_.data(), dscores_.data(), heads_ * seq_, seq_);
    for (int64_t h = 0; h < heads_; ++h) {
      const float* q = base + h * head_dim_;
      const float* k = base + width_ + h * head_dim_;
      const float* dsc = dscores_.data() + h * head_probs;
      // S = scale q k^T: dq = scale dS k; dk = scale dS^T q.
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, t, d, t, scale_, dsc, t, k, ld_qkv,
                  0.0f, dbase + h * head_dim_, ld_qkv);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, t, d, t, scale_, dsc, t, q, ld_qkv, 0.0f,
                  dbase + width_ + h * head_dim_, ld_qkv);
    }
  }
}

}  // namespace dapple::kernels
