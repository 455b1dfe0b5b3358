// The layer interface of kernels/cuda: the GPU twin of kernels/cpu/layer.h, on device buffers.
// One class per layer type; the table in layer_factory.h builds them from common/model's types,
// so a stage backend (worker/runtime/cuda) drives every type through this interface alone.
//
// As on the CPU, layers keep nothing per micro-batch themselves: the caller keeps each
// micro-batch's input x, output y and DeviceCache from Forward and hands them back to the
// backward (several micro-batches in flight: 1F1B), and the backward comes in two parts
// (Zero Bubble's B and W, Qi et al., ICLR 2024): BackwardInput computes dL/dx and keeps in the
// cache what BackwardWeight needs; BackwardWeight ADDS dL/dparam into each DeviceParam::grad.
// Dropout masks come from the Forward's ForwardContext (kernels/cpu/dropout_mask.h: the CPU's
// function), so a GPU layer drops exactly what its CPU twin drops.
//
// Memory: the caller owns every buffer. Buffers(rows) says what a micro-batch of `rows` samples
// needs: per micro-batch the `saved` buffers (Forward -> backward; in fp32 exactly what
// common/model's LayerInfo::saved_bytes counts) and the `grads` buffers (BackwardInput ->
// BackwardWeight), and per call `scratch` (contents undefined between calls, so one scratch
// buffer serves every layer and micro-batch of a stream).
//
// Tensors are row-major with the samples first: x [rows, input_shape...], y [rows,
// output_shape...] of LayerInfo's shapes, elements of the layer's Dtype (fp32 or bf16), except
// an embedding's x: token ids as exact fp32 values, whatever the Dtype. Parameters stay fp32
// (master weights: the optimizer updates them, gradients accumulate in fp32); a bf16 layer
// multiplies with DeviceParam::value_bf16, the owner's bf16 copy of the value (kernels/cuda/
// optimizer.h CastToBf16 after every update).
//
// Every call only enqueues work on ctx.stream (kernels/cuda/context.h); errors are returned at
// once (kInvalidArgument for bad arguments, kInternal for a failed launch or cuBLAS call).
// Thread safety: one thread per layer object.
#ifndef DAPPLE_KERNELS_CUDA_LAYER_H_
#define DAPPLE_KERNELS_CUDA_LAYER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/model/layer_type.h"
#include "kernels/cpu/layer.h"
#include "kernels/cuda/context.h"

namespace dapple::kernels::cuda {

// The element type of a layer's activations and gradients.
enum class Dtype { kFp32, kBf16 };
size_t DtypeBytes(Dtype dtype);
const char* DtypeName(Dtype dtype);  // "fp32", "bf16"

// One parameter as a layer computes with it (device memory, owned by the caller).
struct DeviceParam {
  float* value = nullptr;      // fp32 master value
  float* grad = nullptr;       // fp32 gradient, accumulated into
  bf16* value_bf16 = nullptr;  // bf16 copy of value: required by bf16 layers, else unused
  int64_t count = 0;           // elements
};

// Bytes a micro-batch of `rows` samples needs (see the header comment).
struct LayerBuffers {
  std::vector<size_t> saved;
  std::vector<size_t> grads;
  size_t scratch = 0;
};

// One micro-batch's state of one layer, owned by the caller: `saved` and `grads` point at
// buffers of at least Buffers(rows)'s sizes (reused across micro-batches of at most `rows`).
struct DeviceCache {
  ForwardContext ctx;  // of the Forward that filled it
  std::vector<void*> saved;
  std::vector<void*> grads;
};

// Device memory a single call may use as it likes.
struct Scratch {
  void* data = nullptr;
  size_t bytes = 0;
};

class DeviceLayer {
 public:
  virtual ~DeviceLayer() = default;

  // The type name as in the job spec ("transformer_block").
  virtual std::string Type() const = 0;
  const LayerInfo& info() const { return info_; }
  Dtype dtype() const { return dtype_; }

  // The layer's parameters in LayerInfo::params order (a shared tied parameter is the owner's
  // buffers). kInternal when their number or element counts differ from the declaration, or a
  // bf16 layer gets no bf16 copy.
  absl::Status BindParams(std::vector<DeviceParam> params);

  // What a micro-batch of `rows` samples needs. kUnavailable when it depends on the GPU (the
  // embedding's sort) and none is usable.
  virtual absl::StatusOr<LayerBuffers> Buffers(int64_t rows) const = 0;

  // x -> y for `rows` samples; keeps ctx and what the backward needs in `cache`.
  virtual absl::Status Forward(const KernelContext& ctx, const void* x, void* y, int64_t rows,
                               DeviceCache* cache, const ForwardContext& fctx, Scratch scratch) = 0;
  // Given the x, y and cache of a Forward and dL/dy: writes dL/dx into dx unless it is null and
  // keeps in `cache` what BackwardWeight needs. Changes no parameter gradient. dx must not
  // alias x, y or dy.
  virtual absl::Status BackwardInput(const KernelContext& ctx, const void* x, const void* y,
                                     const void* dy, void* dx, int64_t rows, DeviceCache* cache,
                                     Scratch scratch) = 0;
  // ADDS dL/dparam into every DeviceParam::grad; after the BackwardInput of the same
  // micro-batch with the same x, y, dy and cache, perhaps after other micro-batches' calls.
  // The default (no parameters) does nothing.
  virtual absl::Status BackwardWeight(const KernelContext& ctx, const void* x, const void* y,
                                      const void* dy, int64_t rows, DeviceCache* cache,
                                      Scratch scratch);

  // Non-trainable state (LayerInfo::buffers: batch norm's running statistics), fp32 device
  // buffers owned by the caller, in declaration order; only ApplyStepStatistics (and the
  // caller's checkpoint restore) writes them. kInternal when their number differs from the
  // declaration or one is null. Layers without buffers need no call.
  absl::Status BindBuffers(std::vector<float*> buffers);

  // Step statistics, as kernels/cpu/layer.h's Layer (the same layout and values: batch norm's
  // per-channel sum and sum of squares of its input in double, then the element count), so the
  // runtime sums them over replicas, CPU and GPU stages alike. Training Forwards accumulate them
  // on the device (the layer keeps that small accumulator itself); ReadStepStatistics
  // synchronises ctx.stream and copies them to `host` (StepStatisticsSize() doubles);
  // ApplyStepStatistics updates the buffers from the replicas' sum `summed` (host) with
  // kernels/cpu/batchnorm2d.h's UpdateRunningStatistics, synchronously, and clears the
  // accumulation. Size 0 (the default): none, and the calls do nothing.
  virtual int64_t StepStatisticsSize() const { return 0; }
  virtual absl::Status ReadStepStatistics(const KernelContext& ctx, double* host);
  virtual absl::Status ApplyStepStatistics(const KernelContext& ctx, const double* summed);

 protected:
  DeviceLayer(const LayerInfo& info, Dtype dtype) : info_(info), dtype_(dtype) {}
  const DeviceParam& param(int i) const { return params_[static_cast<size_t>(i)]; }
  float* buffer(int i) const { return buffers_[static_cast<size_t>(i)]; }
  // True when BindParams and (for a layer with buffers) BindBuffers have succeeded.
  bool bound() const {
    return params_.size() == info_.params.size() && buffers_.size() == info_.buffers.size();
  }
  // "layer3 (transformer_block)": how messages name this layer.
  std::string Name() const;

 private:
  LayerInfo info_;
  Dtype dtype_;
  std::vector<DeviceParam> params_;
  std::vector<float*> buffers_;
};

}  // namespace dapple::kernels::cuda

#endif  // DAPPLE_KERNELS_CUDA_LAYER_H_
