// The next token of a generated text sample, drawn from one position's logits
// (StageRuntime::Generate). Pure functions; thread-safe.
#ifndef DAPPLE_WORKER_RUNTIME_TOKEN_SAMPLER_H_
#define DAPPLE_WORKER_RUNTIME_TOKEN_SAMPLER_H_

#include <cstdint>

namespace dapple::worker {

// The uniform draw in [0, 1) (53 random bits) for the token generated at `position` (0-based
// among the generated tokens) by a job seeded `seed` (training.seed): splitmix64
// (kernels/cpu/init.h) on a key of its own derived from the seed, so the draws are a pure
// function of (seed, position) and independent of the weights' initialisation streams.
double SampleUniform(uint64_t seed, int64_t position);

// The token drawn from `logits` (`vocab` floats, vocab >= 1) at `temperature`:
//   temperature > 0: token k with probability softmax(logits / temperature)_k, by inverse
//     transform sampling: the first k whose cumulative weight exceeds
//     SampleUniform(seed, position) times the total (weights exp((l_k - max l) / temperature),
//     summed in double in token order);
//   temperature 0: the most likely token (the first of equal maxima).
// NaN logits never win; if no logit is a number (a diverged model) the result is token 0.
// Returns a token in [0, vocab).
int64_t SampleToken(const float* logits, int64_t vocab, double temperature, uint64_t seed,
                    int64_t position);

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_RUNTIME_TOKEN_SAMPLER_H_
