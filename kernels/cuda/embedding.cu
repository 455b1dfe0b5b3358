#include <math_constants.h>

#include <algorithm>
#include <cmath>
#include <cub/device/device_radix_sort.cuh>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/dropout.h"
#include "kernels/cuda/embedding.h"

namespace dapple::kernels::cuda {
namespace {

using internal::FromFloat;
using internal::ToFloat;

constexpr int kElementsPerThread = 8;

// kernels/cpu/embedding.cc's TokenAt test, written so that NaN fails too.
__device__ __forceinline__ bool ValidId(float id, int64_t vocab) {
  return id >= 0.0f && id < static_cast<float>(vocab) && id == floorf(id);
}

// grid.y walks the samples (one dropout key per thread and sample), grid.x a sample's
// seq * dim elements.
template <typename T>
__global__ void ForwardKernel(EmbeddingShape s, const float* __restrict__ tokens,
                              const float* __restrict__ table, const float* __restrict__ positions,
                              DropoutMask mask, bool active, T* __restrict__ y) {
  const int64_t per_sample = s.seq * s.dim;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = blockIdx.y; r < s.rows; r += gridDim.y) {
    const uint64_t key = active ? mask.RowKey(r) : 0;
    for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < per_sample;
         e += stride) {
      const int64_t t = e / s.dim;
      const int64_t c = e % s.dim;
      const float id = tokens[r * s.seq + t];
      float v = CUDART_NAN_F;
      if (ValidId(id, s.vocab)) {
        v = __fadd_rn(table[static_cast<int64_t>(id) * s.dim + c], positions[e]);
        if (active) {
          v = DropoutKeep(key, static_cast<uint64_t>(e), mask.threshold) ? __fmul_rn(v, mask.scale)
                                                                         : 0.0f;
        }
      }
      y[r * per_sample + e] = FromFloat<T>(v);
    }
  }
}

// Sort keys (the token id; `vocab` for an invalid one, sorted last and skipped) and values
// (the flat position, ascending: the stable sort keeps that order within a token).
__global__ void KeysKernel(const float* __restrict__ tokens, int64_t count, int64_t vocab,
                           uint32_t* __restrict__ keys, uint32_t* __restrict__ positions) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < count;
       p += stride) {
    const float id = tokens[p];
    keys[p] = ValidId(id, vocab) ? static_cast<uint32_t>(id) : static_cast<uint32_t>(vocab);
    positions[p] = static_cast<uint32_t>(p);
  }
}

// One thread per (run of equal sorted keys, column): the run's first index finds it. The
// adds go in increasing position order, one rounding each, onto the existing gradient.
template <typename S>
__global__ void TokenGradKernel(const uint32_t* __restrict__ keys,
                                const uint32_t* __restrict__ positions, int64_t count, int64_t dim,
                                int64_t vocab, const S* __restrict__ src,
                                float* __restrict__ dtable) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= dim) return;
  for (int64_t i = blockIdx.y; i < count; i += gridDim.y) {
    const uint32_t key = keys[i];
    if (key >= vocab || (i > 0 && keys[i - 1] == key)) continue;
    float* out = dtable + static_cast<int64_t>(key) * dim + c;
    float g = *out;
    for (int64_t j = i; j < count && keys[j] == key; ++j) {
      g = __fadd_rn(g, ToFloat(src[static_cast<int64_t>(positions[j]) * dim + c]));
    }
    *out = g;
  }
}

// One thread per (position, column): the samples in order.
template <typename S>
__global__ void PositionGradKernel(const S* __restrict__ src, int64_t rows, int64_t per_sample,
                                   float* __restrict__ dpositions) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < per_sample;
       e += stride) {
    float g = dpositions[e];
    for (int64_t r = 0; r < rows; ++r) g = __fadd_rn(g, ToFloat(src[r * per_sample + e]));
    dpositions[e] = g;
  }
}

absl::Status CheckShape(const char* op, const EmbeddingShape& s) {
  if (s.rows <= 0 || s.seq <= 0 || s.dim <= 0 || s.vocab <= 0 || s.vocab >= (int64_t{1} << 31) ||
      s.rows * s.seq >= (int64_t{1} << 31)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": rows ", s.rows, ", seq ", s.seq, ", dim ",
                                                   s.dim, ", vocab ", s.vocab,
                                                   ": need all > 0, vocab and rows * seq < 2^31"));
  }
  return absl::OkStatus();
}

// Bits that hold every key 0 .. vocab.
int KeyBits(int64_t vocab) {
  int bits = 1;
  while ((int64_t{1} << bits) <= vocab) ++bits;
  return bits;
}

size_t Align(size_t bytes) { return (bytes + 255) / 256 * 256; }

// The scratch regions, in order: keys, sorted keys, positions, sorted positions, the masked dy
// (fp32, with dropout), then cub's temporary storage.
struct ScratchLayout {
  size_t index_bytes = 0;   // one uint32 array of rows * seq
  size_t masked_bytes = 0;  // 0 without dropout
  size_t cub_bytes = 0;
  size_t total() const { return 4 * index_bytes + masked_bytes + cub_bytes; }
};

absl::StatusOr<ScratchLayout> Layout(const EmbeddingShape& s, bool dropout) {
  DAPPLE_RETURN_IF_ERROR(CheckShape("EmbeddingBackwardWeight", s));
  const int64_t count = s.rows * s.seq;
  ScratchLayout l;
  l.index_bytes = Align(count * sizeof(uint32_t));
  l.masked_bytes = dropout ? Align(count * s.dim * sizeof(float)) : 0;
  size_t cub_bytes = 0;
  const cudaError_t err = cub::DeviceRadixSort::SortPairs(
      nullptr, cub_bytes, static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr),
      static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr), count, 0,
      KeyBits(s.vocab));
  DAPPLE_RETURN_IF_ERROR(CudaStatus(err, "cub::DeviceRadixSort::SortPairs (temporary storage)"));
  l.cub_bytes = Align(cub_bytes);
  return l;
}

template <typename T>
absl::Status Forward(const KernelContext& ctx, const EmbeddingShape& s, const float* tokens,
                     const float* table, const float* positions, const DropoutMask* mask, T* y) {
  DAPPLE_RETURN_IF_ERROR(CheckShape("EmbeddingForward", s));
  if (tokens == nullptr || table == nullptr || positions == nullptr || y == nullptr) {
    return absl::InvalidArgumentError("EmbeddingForward: null device pointer");
  }
  const int64_t per_sample = s.seq * s.dim;
  const int64_t per_block = int64_t{internal::kBlock} * kElementsPerThread;
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>((per_sample + per_block - 1) / per_block,
                                                          int64_t{1} << 16)),
                  static_cast<unsigned>(std::min<int64_t>(s.rows, 65535)));
  ForwardKernel<T><<<grid, internal::kBlock, 0, ctx.stream>>>(
      s, tokens, table, positions, mask != nullptr ? *mask : DropoutMask{}, mask != nullptr, y);
  return internal::LaunchStatus("EmbeddingForward");
}

template <typename S>
absl::Status Accumulate(const KernelContext& ctx, const EmbeddingShape& s, const uint32_t* keys,
                        const uint32_t* positions, const S* src, float* dtable, float* dpositions) {
  const int64_t count = s.rows * s.seq;
  const int threads = static_cast<int>(std::min<int64_t>(internal::kBlock, (s.dim + 31) / 32 * 32));
  const dim3 grid(static_cast<unsigned>((s.dim + threads - 1) / threads),
                  static_cast<unsigned>(std::min<int64_t>(count, 65535)));
  TokenGradKernel<S>
      <<<grid, threads, 0, ctx.stream>>>(keys, positions, count, s.dim, s.vocab, src, dtable);
  DAPPLE_RETURN_IF_ERROR(internal::LaunchStatus("EmbeddingBackwardWeight (token table)"));
  const int64_t per_sample = s.seq * s.dim;
  PositionGradKernel<S><<<internal::GridFor(per_sample), internal::kBlock, 0, ctx.stream>>>(
      src, s.rows, per_sample, dpositions);
  return internal::LaunchStatus("EmbeddingBackwardWeight (position table)");
}

template <typename T>
absl::Status BackwardWeight(const KernelContext& ctx, const EmbeddingShape& s, const float* tokens,
                            const T* dy, const DropoutMask* mask, void* scratch,
                            size_t scratch_bytes, float* dtable, float* dpositions) {
  DAPPLE_ASSIGN_OR_RETURN(const ScratchLayout l, Layout(s, mask != nullptr));
  if (tokens == nullptr || dy == nullptr || dtable == nullptr || dpositions == nullptr ||
      scratch == nullptr) {
    return absl::InvalidArgumentError("EmbeddingBackwardWeight: null device pointer");
  }
  if (scratch_bytes < l.total()) {
    return absl::InvalidArgumentError(absl::StrCat("EmbeddingBackwardWeight: scratch of ",
                                                   scratch_bytes, " bytes, needs ", l.total()));
  }
  const int64_t count = s.rows * s.seq;
  char* base = static_cast<char*>(scratch);
  uint32_t* keys = reinterpret_cast<uint32_t*>(base);
  uint32_t* sorted_keys = reinterpret_cast<uint32_t*>(base + l.index_bytes);
  uint32_t* positions = reinterpret_cast<uint32_t*>(base + 2 * l.index_bytes);
  uint32_t* sorted_positions = reinterpret_cast<uint32_t*>(base + 3 * l.index_bytes);
  float* masked = reinterpret_cast<float*>(base + 4 * l.index_bytes);
  void* cub_storage = base + 4 * l.index_bytes + l.masked_bytes;

  KeysKernel<<<internal::GridFor(count), internal::kBlock, 0, ctx.stream>>>(tokens, count, s.vocab,
                                                                            keys, positions);
  DAPPLE_RETURN_IF_ERROR(internal::LaunchStatus("EmbeddingBackwardWeight (keys)"));
  size_t cub_bytes = l.cub_bytes;
  DAPPLE_RETURN_IF_ERROR(CudaStatus(
      cub::DeviceRadixSort::SortPairs(cub_storage, cub_bytes, keys, sorted_keys, positions,
                                      sorted_positions, count, 0, KeyBits(s.vocab), ctx.stream),
      "EmbeddingBackwardWeight: cub::DeviceRadixSort::SortPairs"));
  if (mask == nullptr) {
    return Accumulate(ctx, s, sorted_keys, sorted_positions, dy, dtable, dpositions);
  }
  // The masked gradient in fp32, as the CPU forms it before adding.
  DAPPLE_RETURN_IF_ERROR(Dropout(ctx, mask, s.rows, s.seq * s.dim, dy, nullptr, masked));
  return Accumulate(ctx, s, sorted_keys, sorted_positions, static_cast<const float*>(masked),
                    dtable, dpositions);
}

}  // namespace

absl::StatusOr<size_t> EmbeddingBackwardScratchBytes(const EmbeddingShape& shape, bool dropout) {
  DAPPLE_ASSIGN_OR_RETURN(const ScratchLayout l, Layout(shape, dropout));
  return l.total();
}

absl::Status EmbeddingForward(const KernelContext& ctx, const EmbeddingShape& shape,
                              const float* tokens, const float* table, const float* positions,
                              const DropoutMask* mask, float* y) {
  return Forward(ctx, shape, tokens, table, positions, mask, y);
}
absl::Status EmbeddingForward(const KernelContext& ctx, const EmbeddingShape& shape,
                              const float* tokens, const float* table, const float* positions,
                              const DropoutMask* mask, bf16* y) {
  return Forward(ctx, shape, tokens, table, positions, mask, y);
}

absl::Status EmbeddingBackwardWeight(const KernelContext& ctx, const EmbeddingShape& shape,
                                     const float* tokens, const float* dy, const DropoutMask* mask,
                                     void* scratch, size_t scratch_bytes, float* dtable,
                                     float* dpositions) {
  return BackwardWeight(ctx, shape, tokens, dy, mask, scratch, scratch_bytes, dtable, dpositions);
}
absl::Status EmbeddingBackwardWeight(const KernelContext& ctx, const EmbeddingShape& shape,
                                     const float* tokens, const bf16* dy, const DropoutMask* mask,
                                     void* scratch, size_t scratch_bytes, float* dtable,
                                     float* dpositions) {
  return BackwardWeight(ctx, shape, tokens, dy, mask, scratch, scratch_bytes, dtable, dpositions);
}

}  // namespace dapple::kernels::cuda
