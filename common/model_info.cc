#include "common/model_info.h"

#include <algorithm>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/model/layer_registry.h"
#include "common/model/limits.h"
#include "common/status.h"

namespace dapple {
namespace {

constexpr double kBytesPerGiB = 1024.0 * 1024.0 * 1024.0;

absl::Status CheckInputShape(const v1::ModelSpec& model) {
  if (model.input_shape().empty()) {
    return absl::InvalidArgumentError(
        "model.input_shape is empty: give the per-sample shape, e.g. [1, 28, 28]");
  }
  int64_t input_elems = 1;
  for (int i = 0; i < model.input_shape_size(); ++i) {
    const int64_t d = model.input_shape(i);
    if (d <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.input_shape[", i, "] ", d, " must be > 0"));
    }
    if (d > kMaxSampleElements / input_elems) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model.input_shape ", ShapeText({model.input_shape().begin(), model.input_shape().end()}),
          " has more than the maximum 2^24 (", kMaxSampleElements, ") elements per sample"));
    }
    input_elems *= d;
  }
  if (!model.input_type().empty() && model.input_type() != "float" &&
      model.input_type() != "tokens") {
    return absl::InvalidArgumentError(
        absl::StrCat("model.input_type '", model.input_type(), "' must be float or tokens"));
  }
  if (model.layers().empty()) {
    return absl::InvalidArgumentError("model.layers is empty: a model needs at least one layer");
  }
  if (model.layers_size() > kMaxLayers) {
    return absl::InvalidArgumentError(absl::StrCat("model.layers has ", model.layers_size(),
                                                   " layers, more than the maximum ", kMaxLayers));
  }
  return absl::OkStatus();
}

// A spec built by a client (not the YAML parser) may set another type's parameter message.
absl::Status CheckParamsMatchType(const v1::LayerSpec& spec, const std::string& path) {
  if (spec.params_case() == v1::LayerSpec::PARAMS_NOT_SET) return absl::OkStatus();
  const google::protobuf::FieldDescriptor* own = LayerParamsField(spec.type());
  const google::protobuf::FieldDescriptor* set =
      v1::LayerSpec::descriptor()->FindFieldByNumber(static_cast<int>(spec.params_case()));
  if (own != nullptr && set == own) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      path, " (", spec.type(), ") sets parameters of ", set == nullptr ? "?" : set->name(),
      own == nullptr ? absl::StrCat(": ", spec.type(), " takes none")
                     : absl::StrCat(": ", spec.type(), " takes ", own->name())));
}

}  // namespace

bool TokenInput(const v1::ModelSpec& model) { return model.input_type() == "tokens"; }

int64_t TargetsPerSample(const std::vector<LayerInfo>& infos) {
  const std::vector<int64_t>& out = infos.back().output_shape;
  return NumElements(out) / out.back();
}

int64_t InputBytes(const LayerInfo& info) {
  return NumElements(info.input_shape) * static_cast<int64_t>(sizeof(float));
}

int64_t StageActivationBytesPerSample(const std::vector<LayerInfo>& infos, int first, int last) {
  int64_t bytes = InputBytes(infos[first]);
  for (int l = first; l <= last; ++l) bytes += infos[l].output_bytes + infos[l].saved_bytes;
  return bytes;
}

absl::Status CheckKernels(const v1::ModelSpec& model, absl::string_view device_type, bool bf16,
                          int* layer) {
  for (int i = 0; i < model.layers_size(); ++i) {
    const std::string& type = model.layers(i).type();
    for (KernelBackend backend :
         {KernelBackend::kCpu, KernelBackend::kCuda, KernelBackend::kCudaBf16}) {
      if (backend != KernelBackend::kCpu && device_type != "cuda") continue;
      if (backend == KernelBackend::kCudaBf16 && !bf16) continue;
      if (HasKernel(type, backend)) continue;
      if (layer != nullptr) *layer = i;
      return NoKernelError(i, type, backend);
    }
  }
  return absl::OkStatus();
}

const LayerInfo* BatchNormOverOneValue(const std::vector<LayerInfo>& infos, int64_t rows) {
  for (const LayerInfo& layer : infos) {
    const int64_t values = layer.batch_norm_values_per_sample;
    if (values > 0 && rows * values <= 1) return &layer;
  }
  return nullptr;
}

int64_t MinRowsPerReplica(const std::vector<LayerInfo>& infos) {
  return BatchNormOverOneValue(infos, 1) != nullptr ? 2 : 1;
}

int64_t WidestFloatsPerSample(const std::vector<LayerInfo>& infos) {
  int64_t widest = NumElements(infos.front().input_shape);
  for (const LayerInfo& info : infos) widest = std::max(widest, NumElements(info.output_shape));
  return widest;
}

std::string LayerDescription(const LayerInfo& info) {
  if (info.type == "linear" && !info.input_shape.empty() && !info.output_shape.empty()) {
    return absl::StrCat("linear ", info.input_shape[0], " -> ", info.output_shape[0]);
  }
  return absl::StrCat(info.type, " ", ShapeText(info.input_shape), " -> ",
                      ShapeText(info.output_shape));
}

absl::StatusOr<std::vector<LayerInfo>> InferLayers(const v1::ModelSpec& model) {
  DAPPLE_RETURN_IF_ERROR(CheckInputShape(model));
  InferContext ctx;
  ctx.model = &model;
  ctx.input_shape.assign(model.input_shape().begin(), model.input_shape().end());
  ctx.token_input = TokenInput(model);
  ctx.input_from = "model.input_shape";
  std::vector<LayerInfo> infos;
  infos.reserve(model.layers_size());
  ctx.earlier = &infos;
  int64_t total_params = 0;
  for (int i = 0; i < model.layers_size(); ++i) {
    const v1::LayerSpec& spec = model.layers(i);
    ctx.index = i;
    ctx.path = absl::StrCat("model.layers[", i, "]");
    const LayerType* type = FindLayerType(spec.type());
    if (type == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(ctx.path, ": unknown layer type '",
                                                     spec.type(), "'; known: ", KnownLayerTypes()));
    }
    DAPPLE_RETURN_IF_ERROR(CheckParamsMatchType(spec, ctx.path));
    DAPPLE_ASSIGN_OR_RETURN(LayerInfo info, type->Infer(spec, ctx));
    info.index = i;
    info.type = spec.type();
    info.input_shape = ctx.input_shape;
    info.token_input = ctx.token_input;
    const int64_t out_elems = NumElements(info.output_shape);
    if (out_elems > kMaxSampleElements) {
      return absl::InvalidArgumentError(absl::StrCat(
          ctx.path, " (", spec.type(), ") output ", ShapeText(info.output_shape),
          " has more than the maximum 2^24 (", kMaxSampleElements, ") elements per sample"));
    }
    info.output_bytes = out_elems * static_cast<int64_t>(sizeof(float));
    if (total_params + info.param_count > kMaxParams) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s (%s) has %d parameters, bringing the model to %d (%.2f GiB of fp32 weights), more "
          "than the maximum 2^28 (%d, 1 GiB)",
          ctx.path, LayerDescription(info), info.param_count, total_params + info.param_count,
          static_cast<double>(total_params + info.param_count) * sizeof(float) / kBytesPerGiB,
          kMaxParams));
    }
    total_params += info.param_count;
    ctx.input_shape = info.output_shape;
    ctx.token_input = false;
    ctx.input_from = absl::StrCat(ctx.path, " (", spec.type(), ")");
    infos.push_back(std::move(info));
  }
  return infos;
}

}  // namespace dapple
