// The CPU kernel of each layer type of common/model (the table in layer_factory.cc; adding a
// type: docs/layers.md).
//
// Thread safety: pure functions.
#ifndef DAPPLE_KERNELS_CPU_LAYER_FACTORY_H_
#define DAPPLE_KERNELS_CPU_LAYER_FACTORY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model/layer_type.h"
#include "dapple/v1/job.pb.h"
#include "kernels/cpu/layer.h"

namespace dapple::kernels {

// Builds the CPU layer described by `info` (from InferLayers on the model that holds `spec`)
// with its initial parameters, a pure function of (seed, info.index, which tensor, element):
// bitwise the same in every process, whatever range of layers it builds. A tied copy starts as
// the tensor it copies. Parameter names and shapes are info.params'. kInternal for a type with
// no CPU kernel (the table and common/model's diverged).
absl::StatusOr<std::unique_ptr<Layer>> MakeCpuLayer(const LayerInfo& info,
                                                    const v1::LayerSpec& spec, uint64_t seed);

// The types MakeCpuLayer builds, in its table's order (checked against common/model's record of
// which types have a CPU kernel, layer_registry.h HasKernel, by layer_factory_test.cc).
std::vector<std::string> CpuKernelTypes();

}  // namespace dapple::kernels

#endif  // DAPPLE_KERNELS_CPU_LAYER_FACTORY_H_
