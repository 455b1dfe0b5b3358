// StageBackend on one CUDA device (kernels/cuda): weights, gradients, optimizer state and every
// activation live in device memory; only images and labels come from the host, and only the
// per-row losses go back. Only in CUDA builds.
//
// Weights start from exactly the CPU backend's initial values (built on the host by
// kernels/cpu/model.h, then copied), so a GPU stage trains like the CPU stage up to fp32
// summation order (cuBLAS GEMMs in pure fp32, no TF32). The runtime computes in fp32; the bf16
// kernels of kernels/cuda are not used here yet.
// Memory: every buffer comes from the device's caching allocator and only grows, so after the
// first step nothing is allocated. Stream: all work on the device's compute stream (Loss
// synchronises it to read the losses; HostParams and Synchronize too).
// Thread safety: one thread (stage_backend.h).
#ifndef DAPPLE_WORKER_RUNTIME_CUDA_CUDA_STAGE_BACKEND_H_
#define DAPPLE_WORKER_RUNTIME_CUDA_CUDA_STAGE_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "dapple/v1/job.pb.h"
#include "worker/device/cuda_device.h"
#include "worker/runtime/stage_backend.h"

namespace dapple::worker {

// Layers [first_layer, last_layer] of `spec.model()` on `device` (not owned; must outlive the
// backend). kInvalidArgument for a bad spec or range (as the CPU backend), kResourceExhausted
// when the weights do not fit.
absl::StatusOr<std::unique_ptr<StageBackend>> MakeCudaStageBackend(const v1::JobSpec& spec,
                                                                   int first_layer, int last_layer,
                                                                   CudaDevice* device);

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_RUNTIME_CUDA_CUDA_STAGE_BACKEND_H_
