// The table of layer types (common/model/layer_type.h) and what is derived from a LayerSpec
// through it: finding a type, its parameter message, the spec's canonical text.
//
// Adding a type (docs/layers.md): its parameter message in job.proto (LayerSpec.params, field
// named like the type), one file common/model/<type>.cc defining its LayerType and listed in
// layer_types.h and kLayerTypes (layer_registry.cc), and its kernels (kernels/cpu/layer_factory.cc,
// kernels/cuda).
//
// Thread safety: pure functions over immutable tables.
#ifndef DAPPLE_COMMON_MODEL_LAYER_REGISTRY_H_
#define DAPPLE_COMMON_MODEL_LAYER_REGISTRY_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/model/layer_type.h"
#include "dapple/v1/job.pb.h"
#include "google/protobuf/message.h"

namespace dapple {

// The type named `name`, or null.
const LayerType* FindLayerType(absl::string_view name);

// Every type's name, in the table's order.
std::vector<std::string> LayerTypeNames();

// The same joined for messages: "flatten, linear, relu, ...".
std::string KnownLayerTypes();

// The backends dapple has kernels for. Which layer types have a kernel on which backend is
// recorded ONCE, in the table of layer_registry.cc, so that the coordinator (which links no
// kernels) refuses a job its workers could not build; the factories holding the kernels
// (kernels/cpu/layer_factory.cc, kernels/cuda/layer_factory.cc) are checked against it by
// their tests. Every backend builds the CPU layers (the CUDA backend initialises from them, the
// emulated one keeps their weights), so every job needs the CPU kernels of its types.
// kCudaBf16: the CUDA kernel computing in bf16 (training.precision bf16); every type that has
// one has a CUDA kernel too.
enum class KernelBackend { kCpu, kCuda, kCudaBf16 };

// "CPU", "CUDA", "bf16 CUDA".
absl::string_view KernelBackendName(KernelBackend backend);

// Whether `type` has a kernel on `backend` in this build (false for an unknown type).
bool HasKernel(absl::string_view type, KernelBackend backend);

// The types with a kernel on `backend`, in the table's order.
std::vector<std::string> TypesWithKernel(KernelBackend backend);

// kInvalidArgument "model.layers[3] (conv2d): no CPU kernel in this build; the types with one:
// flatten, linear, ...": the one message for a layer whose type `backend` cannot run.
absl::Status NoKernelError(int index, absl::string_view type, KernelBackend backend);

// The descriptor of the field of LayerSpec.params that holds `type`'s parameters, or null for a
// type without parameters (flatten, relu, gelu) or an unknown type.
const google::protobuf::FieldDescriptor* LayerParamsField(absl::string_view type);

// The keys a layer of `type` takes in YAML besides `type`: the field names of its parameter
// message, in declaration order (empty for a type without parameters).
std::vector<std::string> LayerParamKeys(absl::string_view type);

// `spec`'s parameter message (its params field for the type), or null when the type has none
// or the spec sets another type's message. `Mutable...` creates it when missing.
const google::protobuf::Message* LayerParams(const v1::LayerSpec& spec);
google::protobuf::Message* MutableLayerParams(v1::LayerSpec* spec);

// The spec's parameters as "key: value" pairs in declaration order, only those set
// ("heads: 4, dropout: 0.1"); empty when none. Doubles print as the shortest text that reads
// back to the same value. Used by YAML output, fingerprints and checkpoint comparisons.
std::vector<std::pair<std::string, std::string>> LayerParamValues(const v1::LayerSpec& spec);

// A layer's identity for profile fingerprints and checkpoint checks: "linear:1024" for
// linear (the format of profiles cached before typed parameters), else "type" or
// "type{key=value,...}" over LayerParamValues.
std::string LayerSignature(const v1::LayerSpec& spec);

// Specs stored before typed parameters kept linear's width in LayerSpec.legacy_out: moves it
// into linear.out (a no-op for current specs). Readers of stored jobs call it once.
void UpgradeLayerSpec(v1::LayerSpec* spec);
void UpgradeModelSpec(v1::ModelSpec* model);

}  // namespace dapple

#endif  // DAPPLE_COMMON_MODEL_LAYER_REGISTRY_H_
