// Builds a contiguous range of a model's layers (one pipeline stage) from the job spec.
#ifndef DAPPLE_KERNELS_CPU_MODEL_H_
#define DAPPLE_KERNELS_CPU_MODEL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "dapple/v1/job.pb.h"
#include "kernels/cpu/layer.h"

namespace dapple::kernels {

// Layers [first_layer, last_layer] (inclusive, 0-based) of `model`, with parameters initialised
// deterministically from (seed, layer index) only: any split into stages gives exactly the
// weights of the whole model. Linear: weight [out, in] and bias [out] ~ U(-1/sqrt(in), 1/sqrt(in))
// (PyTorch's default). Returns kInvalidArgument for a spec that common/model_info rejects or a
// range outside the model.
absl::StatusOr<std::vector<std::unique_ptr<Layer>>> BuildLayers(const v1::ModelSpec& model,
                                                                int first_layer, int last_layer,
                                                                uint64_t seed);

// Every Param of `layers`, in layer order.
std::vector<Param*> CollectParams(const std::vector<std::unique_ptr<Layer>>& layers);

// Sets every Param::grad to zero.
void ZeroGrads(const std::vector<Param*>& params);

}  // namespace dapple::kernels

#endif  // DAPPLE_KERNELS_CPU_MODEL_H_
