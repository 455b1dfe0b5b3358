// The language-model head (common/model/lm_head.cc): logits = x W^T over the last dimension, no
// bias; with `tied: true` W is the embedding's token table (Press & Wolf, EACL 2017).
#ifndef DAPPLE_KERNELS_CPU_LM_HEAD_H_
#define DAPPLE_KERNELS_CPU_LM_HEAD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu/layer.h"

namespace dapple::kernels {

// Parameter: weight [vocab, C], "layer<index>.weight". Untied, its own. Tied, a copy of
// `tied_to` ("layer<e>.token_embedding"): it starts bitwise equal to that table
// (InitTokenEmbedding), and when BuildLayers finds the embedding on the same stage,
// ShareTiedParam makes the head compute with, and add its gradient into, the embedding's Param
// (one tensor, both gradients; Params() then returns that Param). Otherwise the runtime sums the
// copy's gradient with the owner's every step.
//
// Shapes: x [N, ..., C] -> y [N, ..., vocab], each of the numel / C rows mapped. BackwardInput:
// dx = dy W; BackwardWeight: dW += dy^T x (OpenBLAS, dense.h). A mismatched x or dy aborts
// (kernels/cpu/check.h); dx must not alias x, y or dy. One thread per layer object.
class LmHeadLayer : public Layer {
 public:
  // Values and grads start at zero; call InitParams. `tied_to` empty: untied. Requires width,
  // vocab > 0.
  LmHeadLayer(int layer_index, int64_t width, int64_t vocab, std::string tied_to);

  // Untied: U(-a, a), a = Gpt2InitBound() (std 0.02), from the stream (seed, layer_index,
  // kWeight). Tied: InitTokenEmbedding(seed, tied_layer), the embedding layer's index.
  void InitParams(uint64_t seed, int tied_layer);

  std::string Type() const override { return "lm_head"; }
  void Forward(const Tensor& x, Tensor* y, LayerCache* cache, const ForwardContext& ctx) override;
  void BackwardInput(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx,
                     LayerCache* cache) override;
  void BackwardWeight(const Tensor& x, const Tensor& y, const Tensor& dy,
                      LayerCache* cache) override;
  // {weight}: the shared owner once ShareTiedParam succeeded.
  std::vector<Param*> Params() override { return {weight_}; }
  // Succeeds when this head is tied and `copy_name` is its weight's name; `owner` must have the
  // weight's shape (else abort). Releases the own copy's storage.
  bool ShareTiedParam(const std::string& copy_name, Param* owner) override;

  Param& weight() { return *weight_; }

 private:
  // Rows of x (aborts unless x is [N, ..., C] and dy, when given, is [N, ..., vocab]).
  int64_t Rows(const Tensor& x, const Tensor* dy) const;

  int layer_index_;
  int64_t width_, vocab_;
  Param own_;
  Param* weight_;  // &own_, or the embedding's table once shared
};

}  // namespace dapple::kernels

#endif  // DAPPLE_KERNELS_CPU_LM_HEAD_H_
