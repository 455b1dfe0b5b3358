// GPT-2's input layer (common/model/embedding.cc): token embedding plus learned position
// embedding, then dropout.
#ifndef DAPPLE_KERNELS_CPU_EMBEDDING_H_
#define DAPPLE_KERNELS_CPU_EMBEDDING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu/layer.h"

namespace dapple::kernels {

// Fills `table` (already sized [vocab, dim]) with the initial token embedding of the embedding
// layer `embedding_layer` of a model initialised with `seed`: U(-a, a), a = Gpt2InitBound(),
// from the stream (seed, embedding_layer, kTokenEmbedding) of kernels/cpu/init.h. A tied
// lm_head's copy starts from this same call, so it is bitwise the embedding's table.
void InitTokenEmbedding(uint64_t seed, int embedding_layer, Tensor* table);

// Parameters, in common/model's order: token_embedding [vocab, dim] and position_embedding
// [positions, dim], named "layer<index>.token_embedding" / ".position_embedding".
//
// Shapes: x [N, T] holds token ids as exact float values, y [N, T, dim]:
//   y[n, t] = dropout(token_embedding[x[n, t]] + position_embedding[t])
// with ApplyDropout (dropout.h) at site 0 of this layer, element index t * dim + c. An id that
// is not an integer in [0, vocab) is a caller bug (the data reader validates tokens) and aborts
// (kernels/cpu/check.h) before anything is read or written out of bounds; so does a mismatched x
// or dy. Nothing is saved (the mask is recomputed from cache->ctx).
//
// Backward: token ids have no gradient, so BackwardInput only checks shapes (and sets *dx, when
// given, to zeros of x's shape); BackwardWeight scatter-adds the dropout-masked dy into the rows
// of both tables that the forward read (rows in order, so the sum order is fixed).
// One thread per layer object.
class EmbeddingLayer : public Layer {
 public:
  // Its dropout site (dropout_mask.h).
  static constexpr uint32_t kDropoutSite = 0;

  // Values and grads start at zero; call InitParams for the model's initial values. Requires
  // vocab, dim > 0, 0 < seq <= positions, dropout in [0, 1).
  EmbeddingLayer(int layer_index, int64_t vocab, int64_t dim, int64_t positions, int64_t seq,
                 double dropout);

  // Both tables U(-a, a), a = Gpt2InitBound() (std 0.02, GPT-2's), from the streams (seed,
  // layer_index, kTokenEmbedding / kPositionEmbedding).
  void InitParams(uint64_t seed);

  std::string Type() const override { return "embedding"; }
  void Forward(const Tensor& x, Tensor* y, LayerCache* cache, const ForwardContext& ctx) override;
  void BackwardInput(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx,
                     LayerCache* cache) override;
  void BackwardWeight(const Tensor& x, const Tensor& y, const Tensor& dy,
                      LayerCache* cache) override;
  // {token_embedding, position_embedding}.
  std::vector<Param*> Params() override { return {&token_, &position_}; }

  Param& token_embedding() { return token_; }
  Param& position_embedding() { return position_; }

 private:
  void CheckInput(const Tensor& x) const;
  void CheckGrad(const Tensor& x, const Tensor& dy) const;
  // Token id at flat position i of x (checked).
  int64_t TokenAt(const Tensor& x, int64_t i) const;

  int layer_index_;
  int64_t vocab_, dim_, positions_, seq_;
  double dropout_;
  Param token_;
  Param position_;
  std::vector<float> masked_;  // one sample's dropout-masked dy (BackwardWeight's scratch)
};

}  // namespace dapple::kernels

#endif  // DAPPLE_KERNELS_CPU_EMBEDDING_H_
