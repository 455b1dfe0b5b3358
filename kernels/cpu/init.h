// Deterministic parameter initialisation.
//
// Every value is a pure function of (seed, layer index, which tensor, element index): a
// counter-based generator (splitmix64, Steele, Lea & Flood, "Fast splittable pseudorandom number
// generators", OOPSLA 2014) keyed by the first three and indexed by the fourth. So every process,
// whatever range of layers it builds and in whatever order, produces bitwise the same weights, and
// no generator state is shared between layers. Integer arithmetic up to the final single float
// multiply, so the result does not depend on compiler flags (no FMA contraction is possible).
//
// Thread safety: pure functions.
#ifndef DAPPLE_KERNELS_CPU_INIT_H_
#define DAPPLE_KERNELS_CPU_INIT_H_

#include <cstdint>

#include "kernels/cpu/splitmix64.h"  // SplitMix64Mix, SplitMix64At
#include "kernels/cpu/tensor.h"

namespace dapple::kernels {

// Which tensor of a layer a stream belongs to. Values are part of the weight format: never
// renumber them (checkpoints and cross-process parity rely on them).
enum class InitTensor : uint32_t {
  kWeight = 0,
  kBias = 1,
  kTokenEmbedding = 2,       // embedding: token_embedding (and a tied lm_head's copy of it)
  kPositionEmbedding = 3,    // embedding: position_embedding
  kAttnQkvWeight = 4,        // transformer_block: attn.qkv.weight
  kAttnProjWeight = 5,       // transformer_block: attn.proj.weight
  kMlpFcWeight = 6,          // transformer_block: mlp.fc.weight
  kMlpProjWeight = 7,        // transformer_block: mlp.proj.weight
  kConv1Weight = 8,          // residual_block: conv1.weight
  kConv2Weight = 9,          // residual_block: conv2.weight
  kShortcutConvWeight = 10,  // residual_block: shortcut.conv.weight
};

// The bound a of GPT-2's initialisation of its weight matrices and embeddings, normal with
// standard deviation 0.02 (Radford et al. 2019), drawn here as U(-a, a) of the same standard
// deviation: a = 0.02 * sqrt(3), computed in double and rounded to float (the same float
// everywhere).
float Gpt2InitBound();

// The bound of PyTorch's default initialisation of nn.Conv2d and nn.Linear weights and biases:
// kaiming_uniform_(a = sqrt(5)) gives U(-b, b) with b = gain sqrt(3 / fan_in), gain =
// sqrt(2 / (1 + a^2)), so b = 1 / sqrt(fan_in) (fan_in: input features, or C k^2 for a
// convolution); the bias uses the same bound. Computed in double and rounded once (the same float
// everywhere). Requires fan_in > 0.
float FanInInitBound(int64_t fan_in);

// The stream key for tensor `which` of layer `layer_index` (0-based, in ModelSpec.layers) of a
// model initialised with `seed`.
uint64_t InitStreamKey(uint64_t seed, int layer_index, InitTensor which);

// The top 24 bits of `bits` as a float in [0, 1): k * 2^-24, k in [0, 2^24).
float UnitFloat24(uint64_t bits);

// Fills every element of `t` (already sized) with U(-bound, bound): element i gets
// bound * (2 * UnitFloat24(SplitMix64At(key, i)) - 1), where 2u - 1 is exact in float, so the
// only rounding is the multiply by `bound`. Values lie in [-bound, bound).
void FillSymmetricUniform(uint64_t seed, int layer_index, InitTensor which, float bound, Tensor* t);

}  // namespace dapple::kernels

#endif  // DAPPLE_KERNELS_CPU_INIT_H_
