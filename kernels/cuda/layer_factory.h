// The CUDA kernel of each layer type of common/model: the table in layer_factory.cc, the twin
// of kernels/cpu/layer_factory.h (adding a type: docs/layers.md).
//
// Thread safety: pure functions.
#ifndef DAPPLE_KERNELS_CUDA_LAYER_FACTORY_H_
#define DAPPLE_KERNELS_CUDA_LAYER_FACTORY_H_

#include <memory>

#include "absl/status/statusor.h"
#include "common/model/layer_type.h"
#include "dapple/v1/job.pb.h"
#include "kernels/cuda/layer.h"

namespace dapple::kernels::cuda {

// The device layer described by `info` (from InferLayers on the model that holds `spec`)
// computing in `dtype`, without parameters: the caller binds them (DeviceLayer::BindParams),
// normally device copies of the CPU layer's (kernels/cpu/layer_factory.h MakeCpuLayer), so
// initial weights are the CPU's bitwise. Building touches no GPU. kInvalidArgument for a type
// with no CUDA kernel ("model.layers[3]: type 'x' has no CUDA kernel") or none in `dtype`
// (the image layers are fp32 only).
absl::StatusOr<std::unique_ptr<DeviceLayer>> MakeCudaLayer(const LayerInfo& info,
                                                           const v1::LayerSpec& spec, Dtype dtype);

}  // namespace dapple::kernels::cuda

#endif  // DAPPLE_KERNELS_CUDA_LAYER_FACTORY_H_
