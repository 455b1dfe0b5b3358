// GPT-2's input layer on the GPU, the CUDA twin of kernels/cpu/embedding.h: token embedding
// plus learned position embedding, then dropout (site 0 of the layer, element t * dim + c of a
// sample: kernels/cpu/dropout_mask.h, the CPU's mask).
//
// Shapes: tokens [rows, seq] fp32 holding token ids as exact float values (as the runtime
// feeds them; ids < 2^24), table [vocab, dim] and positions [>= seq, dim] fp32 (the master
// weights: a bf16 forward reads them in fp32 and rounds its output once), y and dy
// [rows, seq, dim] of the element type, dtable and dpositions fp32.
//
// Forward: y[s, t] = dropout(table[tokens[s, t]] + positions[t]), the add and the scale each
// rounded once, so an fp32 y is bitwise the CPU's. A token id that is not an integer in
// [0, vocab) (a bug of the data reader, which validates tokens; the CPU aborts on it) writes a
// NaN row, which the loss reports, and nothing is read out of bounds.
//
// Backward (the tables' gradients; token ids have none): a deterministic scatter-add, never
// atomics: the positions are sorted by token id with a stable radix sort (cub), and each
// (token, column) gradient adds its dropout-masked dy rows in increasing position order onto
// the existing value, one fp32 add at a time, and each (position, column) gradient its rows in
// sample order: exactly the CPU's sequence of fp32 operations, so the gradients are bitwise the
// CPU's (fp32, or the CPU's on the bf16 dy's values) and the same on every run. Invalid ids add
// nothing to the token table.
//
// rows, seq, dim, vocab > 0 (else kInvalidArgument). Stream-ordered (context.h).
#ifndef DAPPLE_KERNELS_CUDA_EMBEDDING_H_
#define DAPPLE_KERNELS_CUDA_EMBEDDING_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cpu/dropout_mask.h"
#include "kernels/cuda/context.h"

namespace dapple::kernels::cuda {

struct EmbeddingShape {
  int64_t rows = 0;  // samples
  int64_t seq = 0;
  int64_t dim = 0;
  int64_t vocab = 0;
};

// `mask` null: no dropout (evaluation, or p = 0).
absl::Status EmbeddingForward(const KernelContext& ctx, const EmbeddingShape& shape,
                              const float* tokens, const float* table, const float* positions,
                              const DropoutMask* mask, float* y);
absl::Status EmbeddingForward(const KernelContext& ctx, const EmbeddingShape& shape,
                              const float* tokens, const float* table, const float* positions,
                              const DropoutMask* mask, bf16* y);

// Device scratch the backward needs (bytes), for `dropout` true when it will get a mask. Asks
// cub for its sort's temporary storage, so it needs a usable GPU (kUnavailable otherwise).
absl::StatusOr<size_t> EmbeddingBackwardScratchBytes(const EmbeddingShape& shape, bool dropout);

// dtable += the scatter of dropout(dy) by token; dpositions += its sum over samples. `scratch`
// holds at least EmbeddingBackwardScratchBytes(shape, mask != nullptr) bytes.
absl::Status EmbeddingBackwardWeight(const KernelContext& ctx, const EmbeddingShape& shape,
                                     const float* tokens, const float* dy, const DropoutMask* mask,
                                     void* scratch, size_t scratch_bytes, float* dtable,
                                     float* dpositions);
absl::Status EmbeddingBackwardWeight(const KernelContext& ctx, const EmbeddingShape& shape,
                                     const float* tokens, const bf16* dy, const DropoutMask* mask,
                                     void* scratch, size_t scratch_bytes, float* dtable,
                                     float* dpositions);

}  // namespace dapple::kernels::cuda

#endif  // DAPPLE_KERNELS_CUDA_EMBEDDING_H_
