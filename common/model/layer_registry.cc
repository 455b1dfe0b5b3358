#include "common/model/layer_registry.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/model/layer_types.h"
#include "common/spec_text.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/reflection.h"

namespace dapple {
namespace {

namespace pb = google::protobuf;

// One type and the backends with a kernel for it in this build.
struct Entry {
  const LayerType* type;
  bool cpu;        // kernels/cpu/layer_factory.cc
  bool cuda;       // kernels/cuda/layer_factory.cc
  bool cuda_bf16;  // kernels/cuda/layer_factory.cc, in bf16 (training.precision bf16)
};

// The table: messages list the types in this order. The kernel columns are the one record of
// which backend runs which type; each factory's test checks its table against them.
const Entry* Table(size_t* count) {
  static const Entry kTypes[] = {
      {&model_types::Flatten(), true, true, true},
      {&model_types::Linear(), true, true, true},
      {&model_types::Relu(), true, true, true},
      {&model_types::Gelu(), true, true, true},
      {&model_types::Dropout(), true, true, true},
      {&model_types::Embedding(), true, true, true},
      {&model_types::LayerNorm(), true, true, true},
      {&model_types::TransformerBlock(), true, true, true},
      {&model_types::LmHead(), true, true, true},
      // The image layers run cuDNN in fp32 only (docs/gpu.md).
      {&model_types::Conv2d(), true, true, false},
      {&model_types::MaxPool2d(), true, true, false},
      {&model_types::AvgPool2d(), true, true, false},
      {&model_types::GlobalAvgPool(), true, true, false},
      {&model_types::BatchNorm2d(), true, true, false},
      {&model_types::ResidualBlock(), true, true, false},
  };
  *count = sizeof(kTypes) / sizeof(kTypes[0]);
  return kTypes;
}

const Entry* FindEntry(absl::string_view name) {
  size_t n = 0;
  const Entry* entries = Table(&n);
  for (size_t i = 0; i < n; ++i) {
    if (entries[i].type->name() == name) return &entries[i];
  }
  return nullptr;
}

std::string FieldText(const pb::Message& m, const pb::FieldDescriptor* f) {
  const pb::Reflection* r = m.GetReflection();
  switch (f->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_INT64:
      return absl::StrCat(r->GetInt64(m, f));
    case pb::FieldDescriptor::CPPTYPE_INT32:
      return absl::StrCat(r->GetInt32(m, f));
    case pb::FieldDescriptor::CPPTYPE_DOUBLE:
      return job_spec_internal::FormatDouble(r->GetDouble(m, f));
    case pb::FieldDescriptor::CPPTYPE_BOOL:
      return r->GetBool(m, f) ? "true" : "false";
    case pb::FieldDescriptor::CPPTYPE_STRING:
      return r->GetString(m, f);
    default:
      return "?";
  }
}

}  // namespace

const LayerType* FindLayerType(absl::string_view name) {
  const Entry* e = FindEntry(name);
  return e == nullptr ? nullptr : e->type;
}

std::vector<std::string> LayerTypeNames() {
  size_t n = 0;
  const Entry* entries = Table(&n);
  std::vector<std::string> names;
  for (size_t i = 0; i < n; ++i) names.emplace_back(entries[i].type->name());
  return names;
}

absl::string_view KernelBackendName(KernelBackend backend) {
  switch (backend) {
    case KernelBackend::kCpu:
      return "CPU";
    case KernelBackend::kCuda:
      return "CUDA";
    case KernelBackend::kCudaBf16:
      return "bf16 CUDA";
  }
  return "?";
}

bool HasKernel(absl::string_view type, KernelBackend backend) {
  const Entry* e = FindEntry(type);
  if (e == nullptr) return false;
  switch (backend) {
    case KernelBackend::kCpu:
      return e->cpu;
    case KernelBackend::kCuda:
      return e->cuda;
    case KernelBackend::kCudaBf16:
      return e->cuda_bf16;
  }
  return false;
}

std::vector<std::string> TypesWithKernel(KernelBackend backend) {
  std::vector<std::string> names;
  for (const std::string& name : LayerTypeNames()) {
    if (HasKernel(name, backend)) names.push_back(name);
  }
  return names;
}

absl::Status NoKernelError(int index, absl::string_view type, KernelBackend backend) {
  const std::vector<std::string> have = TypesWithKernel(backend);
  return absl::InvalidArgumentError(
      absl::StrCat("model.layers[", index, "] (", type, "): no ", KernelBackendName(backend),
                   " kernel in this build; the types with one: ",
                   have.empty() ? std::string("none") : absl::StrJoin(have, ", ")));
}

std::string KnownLayerTypes() { return absl::StrJoin(LayerTypeNames(), ", "); }

const pb::FieldDescriptor* LayerParamsField(absl::string_view type) {
  if (FindLayerType(type) == nullptr) return nullptr;
  const pb::FieldDescriptor* f = v1::LayerSpec::descriptor()->FindFieldByName(std::string(type));
  if (f == nullptr || f->containing_oneof() == nullptr ||
      f->cpp_type() != pb::FieldDescriptor::CPPTYPE_MESSAGE) {
    return nullptr;
  }
  return f;
}

std::vector<std::string> LayerParamKeys(absl::string_view type) {
  std::vector<std::string> keys;
  const pb::FieldDescriptor* f = LayerParamsField(type);
  if (f == nullptr) return keys;
  const pb::Descriptor* d = f->message_type();
  for (int i = 0; i < d->field_count(); ++i) keys.push_back(d->field(i)->name());
  return keys;
}

const pb::Message* LayerParams(const v1::LayerSpec& spec) {
  const pb::FieldDescriptor* f = LayerParamsField(spec.type());
  if (f == nullptr) return nullptr;
  const pb::Reflection* r = spec.GetReflection();
  if (!r->HasField(spec, f)) return nullptr;
  return &r->GetMessage(spec, f);
}

pb::Message* MutableLayerParams(v1::LayerSpec* spec) {
  const pb::FieldDescriptor* f = LayerParamsField(spec->type());
  if (f == nullptr) return nullptr;
  return spec->GetReflection()->MutableMessage(spec, f);
}

std::vector<std::pair<std::string, std::string>> LayerParamValues(const v1::LayerSpec& spec) {
  std::vector<std::pair<std::string, std::string>> out;
  const pb::Message* m = LayerParams(spec);
  if (m == nullptr) return out;
  const pb::Descriptor* d = m->GetDescriptor();
  const pb::Reflection* r = m->GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const pb::FieldDescriptor* f = d->field(i);
    if (f->is_repeated() || !r->HasField(*m, f)) continue;
    out.emplace_back(f->name(), FieldText(*m, f));
  }
  return out;
}

std::string LayerSignature(const v1::LayerSpec& spec) {
  if (spec.type() == "linear") {
    return absl::StrCat("linear:", spec.has_linear() ? spec.linear().out() : 0);
  }
  const auto values = LayerParamValues(spec);
  if (values.empty()) return spec.type();
  std::vector<std::string> parts;
  for (const auto& [key, value] : values) parts.push_back(absl::StrCat(key, "=", value));
  return absl::StrCat(spec.type(), "{", absl::StrJoin(parts, ","), "}");
}

void UpgradeLayerSpec(v1::LayerSpec* spec) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  if (spec->legacy_out() != 0 && spec->type() == "linear" && !spec->has_linear()) {
    spec->mutable_linear()->set_out(spec->legacy_out());
  }
  spec->clear_legacy_out();
#pragma GCC diagnostic pop
}

void UpgradeModelSpec(v1::ModelSpec* model) {
  for (v1::LayerSpec& layer : *model->mutable_layers()) UpgradeLayerSpec(&layer);
}

}  // namespace dapple
