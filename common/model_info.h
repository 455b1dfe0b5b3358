// Shape inference and cost estimates of a whole ModelSpec, through the layer registry
// (common/model/layer_registry.h): each layer's type describes it from its spec and its input.
// Pure functions; used by validation, the planner, the checkpoints and the kernels' builders.
#ifndef DAPPLE_COMMON_MODEL_INFO_H_
#define DAPPLE_COMMON_MODEL_INFO_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/model/layer_type.h"
#include "dapple/v1/job.pb.h"

namespace dapple {

// Walks the layers from model.input_shape (and model.input_type: "tokens" feeds token ids to
// layer 0; "" and "float" feed floats). kInvalidArgument naming the layer and the key
// ("model.layers[3]: unknown layer type 'conv9'; known: flatten, linear, ...",
// "model.layers[1] (linear) needs a flat input, got [1, 28, 28] from model.input_shape: add a
// flatten layer before it", "model.layers[2].out 0 must be > 0"), an empty model or input
// shape, an output of more than 2^24 elements per sample, more than 2^28 parameters in all, or
// a spec that sets the parameters of another type.
absl::StatusOr<std::vector<LayerInfo>> InferLayers(const v1::ModelSpec& model);

// True when the model reads token ids (model.input_type "tokens").
bool TokenInput(const v1::ModelSpec& model);

// Targets per sample the loss compares the output with: the output's elements divided by its
// last dimension (1 for [classes], T for [T, vocab]). Requires valid `infos`.
int64_t TargetsPerSample(const std::vector<LayerInfo>& infos);

// The bytes of one sample of `info`'s input as a stage holds it: fp32 (token ids are held as
// exact floats, so an embedding's T ids take 4T bytes).
int64_t InputBytes(const LayerInfo& info);

// What one sample of a micro-batch in flight holds on a stage of layers [first, last] of
// `infos` (valid indices, first <= last) until its backward: the stage input (InputBytes of
// layer `first`) plus every layer's output_bytes and saved_bytes. The runtime accounts a stage's
// activation memory with it (worker/runtime/stage_runtime.h); the planner's memory model
// (coordinator/planner/activation_memory.h) computes the same from a profile of the model.
int64_t StageActivationBytesPerSample(const std::vector<LayerInfo>& infos, int first, int last);

// Whether the workers can build `model`'s layers for a job of parallel.device_type
// `device_type`: every job needs the CPU kernel of each layer's type (every backend builds the
// CPU layers: the CPU backend computes with them, the CUDA one initialises its weights from
// them, the emulated one keeps their weights), a job with device_type cuda the CUDA kernel too
// (layer_registry.h HasKernel), and with `bf16` (training.precision bf16, common/job_spec.h
// UsesBf16) its bf16 CUDA kernel as well. NoKernelError of the first layer without one
// ("model.layers[0] (conv2d): no CPU kernel in this build; the types with one: ..."; "no bf16
// CUDA kernel" for an image layer in a bf16 job), its index in `*layer` when given; OK
// otherwise. The coordinator refuses such a job at submit: a bf16 job never runs a layer in
// fp32 silently.
absl::Status CheckKernels(const v1::ModelSpec& model, absl::string_view device_type, bool bf16,
                          int* layer = nullptr);

// The first layer of `infos` whose batch norms would normalise a channel over at most one value
// where `rows` rows of a micro-batch are computed together (rows x LayerInfo::
// batch_norm_values_per_sample <= 1): its output would be its bias whatever the input, so the
// model could not learn (PyTorch refuses the same: "Expected more than 1 value per channel when
// training"). nullptr when none would. Submit refuses such a micro_batch or replica count; the
// planner gives a stage's replicas at least MinRowsPerReplica rows each.
const LayerInfo* BatchNormOverOneValue(const std::vector<LayerInfo>& infos, int64_t rows);

// The fewest rows of each micro-batch a stage replica may compute under split-concat so that no
// batch norm of the model normalises over one value (BatchNormOverOneValue): 2 when one sees a
// single value per channel per sample ([C, 1, 1]), else 1.
int64_t MinRowsPerReplica(const std::vector<LayerInfo>& infos);

// Floats per sample of the model's widest tensor: its input or a layer's output (what sizes an
// evaluation piece: memory_model.h EvalPieceRows). Requires valid, non-empty `infos`.
int64_t WidestFloatsPerSample(const std::vector<LayerInfo>& infos);

// "linear 784 -> 256", "transformer_block [128, 64]": a layer as messages name it.
std::string LayerDescription(const LayerInfo& info);

}  // namespace dapple

#endif  // DAPPLE_COMMON_MODEL_INFO_H_
