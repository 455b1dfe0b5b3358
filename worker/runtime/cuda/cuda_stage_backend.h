// StageBackend on one CUDA device (kernels/cuda): weights, gradients, optimizer state and every
// activation live in device memory; only the inputs (images, token ids) and labels come from the
// host, and only the per-target losses go back. Only in CUDA builds.
//
// Generic over layer types: each layer of the stage runs the CUDA kernel of its type from
// kernels/cuda/layer_factory.h (linear, relu, gelu, flatten, dropout, embedding, layernorm,
// transformer_block, lm_head), bound to the stage's device parameters, with per-slot caches for
// its backward (kernels/cuda/layer.h). The parameters are device copies of the CPU layers built
// by kernels/cpu/model.h (the same list, order and names: HostParams mirrors them on the host),
// so initial weights are the CPU backend's bitwise and a GPU stage trains like the CPU stage up
// to fp32 summation order (cuBLAS GEMMs in pure fp32, no TF32; dropout drops the same elements:
// kernels/cpu/dropout_mask.h). A tied lm_head whose embedding is on the same stage computes with
// the embedding's device table (one buffer, both gradients into it); on another stage it keeps
// its own copy (Param::tied_to), like the CPU backend.
// Precision (training.precision, docs/gpu.md "Mixed precision"): fp32, or bf16 mixed precision:
// the layers compute in bf16 (GEMMs and attention products with fp32 accumulation; layernorm
// statistics, softmax and the loss in fp32) from bf16 copies of the fp32 master weights,
// refreshed after every write of the weights (update, checkpoint import, weight stashing);
// gradients, optimizer state, gradient norms and reductions stay fp32. The stage boundary is
// fp32 in both (inputs are rounded to bf16 here, outputs and input gradients cast back), so
// transports and the runtime see one format. A layer type without a bf16 kernel (the image
// layers) fails the build with kInvalidArgument; the coordinator refuses such jobs at submit.
// Backward: whole (Backward), or split into its input- and weight-gradient parts
// (BackwardInput / BackwardWeight: Zero Bubble's B and W for schedules zb-h1 / zb-h2), with the
// layers' own split kernels; the split keeps each layer's input gradient per slot until W.
// Compute time: CUDA events around each training Forward and Backward, B and W
// (TakeComputeSeconds). Memory: every buffer comes from the device's caching allocator and only
// grows, so after the first step nothing is allocated. Stream: all work on the device's compute
// stream (Loss synchronises it to read the losses; HostParams and Synchronize too). Thread safety:
// one thread (stage_backend.h).
#ifndef DAPPLE_WORKER_RUNTIME_CUDA_CUDA_STAGE_BACKEND_H_
#define DAPPLE_WORKER_RUNTIME_CUDA_CUDA_STAGE_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "dapple/v1/job.pb.h"
#include "worker/device/cuda_device.h"
#include "worker/runtime/stage_backend.h"

namespace dapple::worker {

// Layers [first_layer, last_layer] of `spec.model()` on `device` (not owned; must outlive the
// backend). `recompute` (the plan's PlanStageSummary.recompute): activation recomputation as on
// the CPU (layer_recompute.h): a slot keeps only its input and output, and Backward runs the
// slot's forward again (same ForwardContext, so dropout drops the same elements and batch norm
// does not count the micro-batch twice) into one replay set of layer outputs and caches; a
// recomputing backend answers BackwardInput / BackwardWeight with
// SplitBackwardWithRecomputeError() (submission refuses the pair). kInvalidArgument for a bad
// spec or range (as the CPU backend), kResourceExhausted when the weights do not fit.
absl::StatusOr<std::unique_ptr<StageBackend>> MakeCudaStageBackend(const v1::JobSpec& spec,
                                                                   int first_layer, int last_layer,
                                                                   CudaDevice* device,
                                                                   bool recompute = false);

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_RUNTIME_CUDA_CUDA_STAGE_BACKEND_H_
