#include "kernels/cpu/embedding.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/check.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cpu/init.h"

namespace dapple::kernels {

void InitTokenEmbedding(uint64_t seed, int embedding_layer, Tensor* table) {
  FillSymmetricUniform(seed, embedding_layer, InitTensor::kTokenEmbedding, Gpt2InitBound(), table);
}

EmbeddingLayer::EmbeddingLayer(int layer_index, int64_t vocab, int64_t dim, int64_t positions,
                               int64_t seq, double dropout)
    : layer_index_(layer_index),
      vocab_(vocab),
      dim_(dim),
      positions_(positions),
      seq_(seq),
      dropout_(dropout) {
  DAPPLE_KERNEL_CHECK(
      vocab > 0 && dim > 0 && seq > 0 && seq <= positions && dropout >= 0 && dropout < 1, "layer",
      layer_index, " (embedding) vocab ", vocab, " dim ", dim, " positions ", positions, " seq ",
      seq, " dropout ", dropout);
  token_.name = absl::StrCat("layer", layer_index, ".token_embedding");
  token_.value = Tensor::Zeros({vocab, dim});
  token_.grad = Tensor::Zeros({vocab, dim});
  position_.name = absl::StrCat("layer", layer_index, ".position_embedding");
  position_.value = Tensor::Zeros({positions, dim});
  position_.grad = Tensor::Zeros({positions, dim});
}

void EmbeddingLayer::InitParams(uint64_t seed) {
  InitTokenEmbedding(seed, layer_index_, &token_.value);
  FillSymmetricUniform(seed, layer_index_, InitTensor::kPositionEmbedding, Gpt2InitBound(),
                       &position_.value);
}

void EmbeddingLayer::CheckInput(const Tensor& x) const {
  DAPPLE_KERNEL_CHECK(x.shape.size() == 2 && x.shape[1] == seq_, "layer", layer_index_,
                      " (embedding) expects token ids x [N, ", seq_, "], got ",
                      ShapeToString(x.shape));
}

void EmbeddingLayer::CheckGrad(const Tensor& x, const Tensor& dy) const {
  CheckInput(x);
  DAPPLE_KERNEL_CHECK(
      dy.shape.size() == 3 && dy.shape[0] == x.rows() && dy.shape[1] == seq_ && dy.shape[2] == dim_,
      "layer", layer_index_, " (embedding) expects dy [", x.rows(), ", ", seq_, ", ", dim_,
      "], got ", ShapeToString(dy.shape));
}

int64_t EmbeddingLayer::TokenAt(const Tensor& x, int64_t i) const {
  const float v = x.data[static_cast<size_t>(i)];
  // Written so that NaN fails too.
  DAPPLE_KERNEL_CHECK(v >= 0 && v < static_cast<float>(vocab_) && v == std::floor(v), "layer",
                      layer_index_, " (embedding): token id ", v, " at sample ", i / seq_,
                      " position ", i % seq_, " is not an integer in [0, ", vocab_, ")");
  return static_cast<int64_t>(v);
}

void EmbeddingLayer::Forward(const Tensor& x, Tensor* y, LayerCache* cache,
                             const ForwardContext& ctx) {
  cache->ctx = ctx;
  CheckInput(x);
  const int64_t n = x.rows();
  y->Resize({n, seq_, dim_});
  const float* tok = token_.value.data.data();
  const float* pos = position_.value.data.data();
  for (int64_t i = 0; i < n * seq_; ++i) {
    const float* a = tok + TokenAt(x, i) * dim_;
    const float* b = pos + (i % seq_) * dim_;
    float* out = y->data.data() + i * dim_;
    for (int64_t c = 0; c < dim_; ++c) out[c] = a[c] + b[c];
  }
  ApplyDropout(ctx, layer_index_, kDropoutSite, dropout_, n, seq_ * dim_, y->data.data(),
               y->data.data());
}

void EmbeddingLayer::BackwardInput(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx,
                                   LayerCache* cache) {
  CheckGrad(x, dy);
  if (dx != nullptr) dx->ResizeZero(x.shape);
}

void EmbeddingLayer::BackwardWeight(const Tensor& x, const Tensor& y, const Tensor& dy,
                                    LayerCache* cache) {
  CheckGrad(x, dy);
  const int64_t per_sample = seq_ * dim_;
  masked_.resize(static_cast<size_t>(per_sample));
  float* tok = token_.grad.data.data();
  float* pos = position_.grad.data.data();
  ForwardContext ctx = cache->ctx;
  for (int64_t r = 0; r < x.rows(); ++r) {
    // One sample at a time: row r of the micro-batch is sample ctx.first_sample + r.
    ForwardContext sample_ctx = ctx;
    sample_ctx.first_sample = ctx.first_sample + r;
    ApplyDropout(sample_ctx, layer_index_, kDropoutSite, dropout_, 1, per_sample,
                 dy.data.data() + r * per_sample, masked_.data());
    for (int64_t t = 0; t < seq_; ++t) {
      const float* g = masked_.data() + t * dim_;
      float* a = tok + TokenAt(x, r * seq_ + t) * dim_;
      float* b = pos + t * dim_;
      for (int64_t c = 0; c < dim_; ++c) {
        a[c] += g[c];
        b[c] += g[c];
      }
    }
  }
}

}  // namespace dapple::kernels
