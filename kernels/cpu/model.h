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

// Layers [first_layer, last_layer] (inclusive, 0-based) of `model` (kernels/cpu/layer_factory.h),
// with parameters initialised deterministically from (seed, layer index) only: any split into
// stages gives exactly the weights of the whole model (linear: weight [out, in] and bias [out]
// ~ U(-1/sqrt(in), 1/sqrt(in)), PyTorch's default; the others: their kernel's header). A tied
// copy (lm_head tied to an embedding) whose owner is in the range shares the owner's parameter;
// otherwise it is a copy with the owner's initial values. Returns kInvalidArgument for a spec
// that common/model_info rejects or a range outside the model.
absl::StatusOr<std::vector<std::unique_ptr<Layer>>> BuildLayers(const v1::ModelSpec& model,
                                                                int first_layer, int last_layer,
                                                                uint64_t seed);

// Every Param of `layers`, in layer order, each once (a shared tied parameter at its owner).
std::vector<Param*> CollectParams(const std::vector<std::unique_ptr<Layer>>& layers);

// The index of the first of `layers` with parameters; layers.size() when none has any. A
// backward without the input gradient of layers[0] need not run below it: the layers there
// have nothing to train (Flatten), and the input gradient of this one reaches no parameter.
int FirstLayerWithParams(const std::vector<std::unique_ptr<Layer>>& layers);

// Sets every Param::grad to zero.
void ZeroGrads(const std::vector<Param*>& params);

}  // namespace dapple::kernels

#endif  // DAPPLE_KERNELS_CPU_MODEL_H_
