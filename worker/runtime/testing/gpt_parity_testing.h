// GPT parity at the StageBackend level, for tests (CPU stages in worker/runtime/gpt_parity_test,
// GPU and mixed stages in worker/runtime/cuda): a small GPT (embedding, transformer blocks,
// layernorm, tied lm_head, live dropout) trained for a few steps through a chain of stage
// backends with M micro-batches, against one CPU backend holding the whole model and the whole
// global batch (the single-device reference). Per-step loss, evaluation loss and every final
// parameter must agree within 1e-5 relative, as design.md's parity harness demands.
//
// The chain is driven here, in one thread, with the runtime's conventions (stage_runtime.cc):
// micro-batch m is slot m and covers samples [m b, (m + 1) b) of the step's global batch (its
// ForwardContext.first_sample), labels are one per token, grad_scale is 1 / (global batch x T),
// activations and gradients go from stage to stage through `copy`, and the gradients of a tied
// copy and its owner on another stage are summed before the update (the tied weights' AllReduce:
// both then hold owner + copy). Token data are synthetic (GptBatch), a pure function of (seed,
// step, sample), because the runtime's text dataset is not what is tested here.
//
// For tests only (links GoogleTest).
#ifndef DAPPLE_WORKER_RUNTIME_TESTING_GPT_PARITY_TESTING_H_
#define DAPPLE_WORKER_RUNTIME_TESTING_GPT_PARITY_TESTING_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dapple/v1/job.pb.h"
#include "worker/runtime/stage_backend.h"

namespace dapple::worker::parity {

struct GptOptions {
  int64_t vocab = 24;
  int64_t seq = 12;
  int64_t width = 16;
  int64_t heads = 2;
  int blocks = 2;
  double dropout = 0.1;  // the embedding's and every block's
  bool tied = true;
  int64_t global_batch = 8;
  uint64_t seed = 5;
};

// embedding, `blocks` transformer_block, layernorm, lm_head; SGD (lr 0.05, momentum 0.9).
// SGD rather than AdamW: the gradient of the attention's key bias is analytically zero
// (softmax ignores a constant added to a row of scores) and numerically rounding noise, whose
// sign AdamW's first updates turn into +-lr, so two correct backends would differ there by
// O(lr); SGD scales the noise by lr.
v1::JobSpec GptSpec(const GptOptions& options);

// `rows` samples of step `step` starting at sample `first_sample` of its global batch: token
// ids [rows, T] as floats and next-token labels [rows, T]. A walk that mostly follows a fixed
// permutation of the vocabulary (learnable) with random jumps, a pure function of (spec's seed,
// step, sample).
struct TokenBatch {
  std::vector<float> tokens;
  std::vector<int32_t> labels;
};
TokenBatch GptBatch(const v1::JobSpec& spec, int64_t step, int64_t first_sample, int64_t rows);

// Copies `bytes` from `src` (in the sending backend's memory) to `dst` (in the receiving
// backend's), complete on return. The harness synchronises the sender first.
using CopyFn = std::function<absl::Status(void* dst, const void* src, size_t bytes)>;

// A chain of stages: stages[s] covers layers [first_layers[s], next stage's first - 1].
struct Pipeline {
  std::vector<std::unique_ptr<StageBackend>> stages;
  std::vector<int> first_layers;
};

struct Run {
  std::vector<double> losses;  // per step: the mean over every target of the global batch
  double eval_loss = 0;        // mean over the evaluation batch, after the last step
  // Final parameters by name (a tied copy under its own name).
  std::vector<std::pair<std::string, std::vector<float>>> params;
};

// Trains `steps` steps with `micro_batches` micro-batches per step, then evaluates one batch
// (step index `steps`, dropout off).
// `split_backward`: the zero-bubble split instead of Backward, every micro-batch's
// BackwardInput, then every BackwardWeight (StageBackend::BackwardInput / BackwardWeight).
absl::StatusOr<Run> TrainPipeline(const v1::JobSpec& spec, Pipeline& pipeline, int steps,
                                  int micro_batches, const CopyFn& copy,
                                  bool split_backward = false);

// The reference: one CPU backend with the whole model, one micro-batch per step.
absl::StatusOr<Run> TrainReference(const v1::JobSpec& spec, int steps);

// gtest EXPECTs: per-step and evaluation loss within 1e-5 relative of the reference, every
// parameter of `got` within 1e-5 relative L2 of the reference's tensor of the same name (a tied
// copy: of its owner's), and every reference parameter present.
void ExpectGptMatchesReference(const v1::JobSpec& spec, const Run& got, const Run& want);

}  // namespace dapple::worker::parity

#endif  // DAPPLE_WORKER_RUNTIME_TESTING_GPT_PARITY_TESTING_H_
