// The model, data and sample sections of a job spec (job_spec_parser.h). A layer's keys besides
// `type` are the fields of its type's parameter message in job.proto (common/model
// layer_registry.h), read by their proto types, so a new layer type needs no parser change.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/eval_metrics.h"
#include "common/job_spec.h"
#include "common/job_spec_internal.h"
#include "common/job_spec_parser.h"
#include "common/model/layer_registry.h"
#include "google/protobuf/descriptor.h"

namespace dapple::job_spec_internal {
namespace {

namespace pb = google::protobuf;

constexpr char kDefaultDataPath[] = "/usr/share/datasets/fashion-mnist";
constexpr double kDefaultValidationFraction = 0.05;
constexpr int kDefaultSampleTokens = 200;
constexpr double kDefaultSampleTemperature = 0.8;
constexpr char kDefaultSamplePrompt[] = "\n";

constexpr absl::string_view kModelKeys[] = {"input_shape", "input_type", "layers", "loss"};
constexpr absl::string_view kDataKeys[] = {"dataset", "path", "seq_len", "validation_fraction"};
constexpr absl::string_view kSampleKeys[] = {"prompt", "tokens", "temperature"};

// The layer types that take `key` ("linear", or "embedding, lm_head"), for "applies only to".
std::string TypesTaking(const std::string& key) {
  std::vector<std::string> types;
  for (const std::string& type : LayerTypeNames()) {
    for (const std::string& k : LayerParamKeys(type)) {
      if (k == key) types.emplace_back(type);
    }
  }
  return absl::StrJoin(types, ", ");
}

}  // namespace

absl::Status Parser::ParseModel(const Field& section, v1::ModelSpec& model) {
  DAPPLE_ASSIGN_OR_RETURN(Fields fields, ReadMap(section.value, MarkOf(section), "model",
                                                 kModelKeys, " with input_shape, layers and loss"));
  // input_shape and input_type may come from the dataset (ResolveModelInput).
  if (const Field* shape = Find(fields, "input_shape")) {
    if (!shape->value.IsSequence()) {
      return Error(MarkOf(*shape),
                   absl::StrFormat("model.input_shape must be a list of integers like "
                                   "[1, 28, 28], got %s",
                                   Describe(shape->value)));
    }
    if (shape->value.size() == 0) {
      return Error(MarkOf(*shape),
                   "model.input_shape is empty: a model's input needs at least one dimension, "
                   "like [1, 28, 28]");
    }
    for (size_t i = 0; i < shape->value.size(); ++i) {
      const Field dim{shape->key, shape->value[i]};
      DAPPLE_ASSIGN_OR_RETURN(int64_t d, Int64(dim, absl::StrFormat("model.input_shape[%d]", i)));
      model.add_input_shape(d);
    }
  }
  if (const Field* f = Find(fields, "input_type")) {
    DAPPLE_ASSIGN_OR_RETURN(*model.mutable_input_type(),
                            Choice(*f, "model.input_type", kInputTypes));
  }

  const Field* layers = Find(fields, "layers");
  if (layers == nullptr) return Missing(MarkOf(section), "model.layers");
  if (!layers->value.IsSequence()) {
    return Error(MarkOf(*layers),
                 absl::StrFormat("model.layers must be a list of layers like - {type: linear, "
                                 "out: 10}, got %s",
                                 Describe(layers->value)));
  }
  if (layers->value.size() > static_cast<size_t>(kMaxModelLayers)) {
    return Error(MarkOf(*layers),
                 absl::StrFormat("model.layers has %d layers; a model may have at most %d",
                                 layers->value.size(), kMaxModelLayers));
  }
  for (size_t i = 0; i < layers->value.size(); ++i) {
    const std::string path = absl::StrFormat("model.layers[%d]", i);
    const Field item{layers->key, layers->value[i]};
    marks_[path] = MarkOf(item);
    DAPPLE_RETURN_IF_ERROR(ParseLayer(item, path, *model.add_layers()));
  }

  model.set_loss(kDefaultLoss);
  if (const Field* loss = Find(fields, "loss")) {
    DAPPLE_ASSIGN_OR_RETURN(*model.mutable_loss(), String(*loss, "model.loss"));
  }
  return absl::OkStatus();
}

absl::Status Parser::ParseLayer(const Field& item, const std::string& path, v1::LayerSpec& layer) {
  if (!item.value.IsMap()) {
    return Error(MarkOf(item), absl::StrFormat("%s must be a map like {type: linear, out: 10}, "
                                               "got %s",
                                               path, Describe(item.value)));
  }
  const YAML::Node type_node = item.value["type"];
  if (!type_node.IsDefined()) {
    // A misspelt 'type' ("{typ: relu}") is the likely cause: name the key written.
    for (auto it = item.value.begin(); it != item.value.end(); ++it) {
      if (!it->first.IsScalar()) continue;
      const std::string& key = it->first.Scalar();
      if (key.size() > 2 && EditDistance(key, "type") <= 2) {
        return Error(it->first.Mark(),
                     absl::StrFormat("unknown field '%s' in %s; did you mean 'type'? (every layer "
                                     "names its type, like {type: linear, out: 10})",
                                     key, path));
      }
    }
    return Missing(MarkOf(item), path + ".type");
  }
  DAPPLE_ASSIGN_OR_RETURN(*layer.mutable_type(),
                          String(Field{YAML::Node(), type_node}, path + ".type"));
  const LayerType* type = FindLayerType(layer.type());
  if (type == nullptr) {
    return Error(type_node.Mark(), absl::StrFormat("%s: unknown layer type '%s'; known: %s", path,
                                                   layer.type(), KnownLayerTypes()));
  }
  // A key no type takes is unknown (listing this type's keys); a key of another type is
  // reported below as not applying to this one.
  std::vector<std::string> own = {"type"};
  for (const std::string& k : LayerParamKeys(layer.type())) own.push_back(k);
  std::vector<std::string> all_keys = {"type"};
  for (const std::string& t : LayerTypeNames()) {
    for (const std::string& k : LayerParamKeys(t)) {
      if (std::find(all_keys.begin(), all_keys.end(), k) == all_keys.end()) all_keys.push_back(k);
    }
  }
  for (auto it = item.value.begin(); it != item.value.end(); ++it) {
    if (!it->first.IsScalar()) continue;  // ReadMap says what is wrong with it
    const std::string& key = it->first.Scalar();
    if (std::find(all_keys.begin(), all_keys.end(), key) != all_keys.end()) continue;
    std::string message = absl::StrFormat("unknown field '%s' in %s (%s); known: %s", key, path,
                                          layer.type(), absl::StrJoin(own, ", "));
    for (const std::string& candidate : own) {
      if (EditDistance(key, candidate) <= 2 && key.size() > 2) {
        absl::StrAppend(&message, "; did you mean '", candidate, "'?");
        break;
      }
    }
    return Error(it->first.Mark(), message);
  }
  std::vector<absl::string_view> known(all_keys.begin(), all_keys.end());
  DAPPLE_ASSIGN_OR_RETURN(Fields fields, ReadMap(item.value, MarkOf(item), path, known,
                                                 absl::StrCat(" like ", type->example())));
  for (const auto& [key, field] : fields) {
    if (key == "type") continue;
    if (std::find(own.begin(), own.end(), key) == own.end()) {
      const std::vector<std::string> params(own.begin() + 1, own.end());
      return Error(
          field.key.Mark(),
          absl::StrFormat(
              "%s.%s applies only to %s layers, not %s%s", path, key, TypesTaking(key),
              layer.type(),
              params.empty() ? "" : absl::StrCat(" (it takes ", absl::StrJoin(params, ", "), ")")));
    }
    DAPPLE_RETURN_IF_ERROR(
        ParseLayerParam(field, absl::StrCat(path, ".", key), *MutableLayerParams(&layer)));
  }
  return absl::OkStatus();
}

absl::Status Parser::ParseLayerParam(const Field& f, const std::string& path, pb::Message& params) {
  const pb::Descriptor* d = params.GetDescriptor();
  const pb::Reflection* r = params.GetReflection();
  const pb::FieldDescriptor* fd = d->FindFieldByName(path.substr(path.rfind('.') + 1));
  switch (fd->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_INT64: {
      DAPPLE_ASSIGN_OR_RETURN(int64_t v, Int64(f, path));
      r->SetInt64(&params, fd, v);
      return absl::OkStatus();
    }
    case pb::FieldDescriptor::CPPTYPE_DOUBLE: {
      DAPPLE_ASSIGN_OR_RETURN(double v, Double(f, path));
      r->SetDouble(&params, fd, v);
      return absl::OkStatus();
    }
    case pb::FieldDescriptor::CPPTYPE_BOOL: {
      DAPPLE_ASSIGN_OR_RETURN(bool v, Bool(f, path));
      r->SetBool(&params, fd, v);
      return absl::OkStatus();
    }
    case pb::FieldDescriptor::CPPTYPE_STRING: {
      DAPPLE_ASSIGN_OR_RETURN(std::string v, String(f, path));
      r->SetString(&params, fd, v);
      return absl::OkStatus();
    }
    default:
      // job.proto's layer parameters are scalars of the four types above.
      return Error(MarkOf(f), absl::StrFormat("%s has a type the parser does not read", path));
  }
}

absl::Status Parser::ParseData(const Field* section, v1::DataSpec& data) {
  Fields fields;
  if (section != nullptr) {
    DAPPLE_ASSIGN_OR_RETURN(fields, ReadMap(section->value, MarkOf(*section), "data", kDataKeys,
                                            " like {dataset: fashion-mnist, path: /data}"));
  }
  data.set_dataset(std::string(kFashionMnist));
  if (const Field* f = Find(fields, "dataset")) {
    DAPPLE_ASSIGN_OR_RETURN(*data.mutable_dataset(), Choice(*f, "data.dataset", kKnownDatasets));
  }
  // Fashion-MNIST has a Debian package and so a place to default to; a text file does not.
  if (data.dataset() == kFashionMnist) data.set_path(kDefaultDataPath);
  if (const Field* f = Find(fields, "path")) {
    DAPPLE_ASSIGN_OR_RETURN(*data.mutable_path(), String(*f, "data.path"));
  }
  if (const Field* f = Find(fields, "seq_len")) {
    DAPPLE_ASSIGN_OR_RETURN(int64_t v, Int64(*f, "data.seq_len"));
    data.set_seq_len(v);
  }
  if (data.dataset() == kTextDataset) data.set_validation_fraction(kDefaultValidationFraction);
  if (const Field* f = Find(fields, "validation_fraction")) {
    DAPPLE_ASSIGN_OR_RETURN(double v, Double(*f, "data.validation_fraction"));
    data.set_validation_fraction(v);
  }
  if (data.dataset() == kFashionMnist) {
    data.set_train_samples(kFashionMnistTrainSamples);
    data.set_eval_samples(kFashionMnistTestSamples);
  }
  return absl::OkStatus();
}

absl::Status Parser::ResolveModelInput(const Field& model_section, v1::JobSpec& spec) {
  v1::ModelSpec& model = *spec.mutable_model();
  const bool text = spec.data().dataset() == kTextDataset;
  if (model.input_type().empty()) model.set_input_type(text ? "tokens" : "float");
  if (model.input_shape().empty()) {
    if (!text) return Missing(MarkOf(model_section), "model.input_shape");
    // A text model's input is data.seq_len tokens; an invalid seq_len is refused at its own
    // key by validation (data.seq_len's rule), not as a missing input_shape.
    if (spec.data().seq_len() > 0) model.add_input_shape(spec.data().seq_len());
  }
  return absl::OkStatus();
}

absl::Status Parser::ParseSample(const Field& section, v1::SampleSpec& sample) {
  Fields fields;
  if (section.value.IsDefined()) {
    DAPPLE_ASSIGN_OR_RETURN(fields, ReadMap(section.value, MarkOf(section), "sample", kSampleKeys,
                                            " like {prompt: \"And God said\", tokens: 200}"));
  }
  sample.set_prompt(kDefaultSamplePrompt);
  if (const Field* f = Find(fields, "prompt")) {
    DAPPLE_ASSIGN_OR_RETURN(*sample.mutable_prompt(), String(*f, "sample.prompt"));
  }
  sample.set_tokens(kDefaultSampleTokens);
  if (const Field* f = Find(fields, "tokens")) {
    DAPPLE_ASSIGN_OR_RETURN(int32_t v, Int32Within(*f, "sample.tokens", 0, kMaxSampleTokens));
    sample.set_tokens(v);
  }
  sample.set_temperature(kDefaultSampleTemperature);
  if (const Field* f = Find(fields, "temperature")) {
    DAPPLE_ASSIGN_OR_RETURN(double v, Double(*f, "sample.temperature"));
    sample.set_temperature(v);
  }
  return absl::OkStatus();
}

}  // namespace dapple::job_spec_internal
