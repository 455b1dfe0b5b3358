// ParseJobSpec and JobSpecFieldError (job_spec.h): the YAML document -> JobSpec, filling
// defaults, with every error at the line and column of the field it is about.
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <exception>
#include <limits>
#include <map>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/job_spec.h"
#include "common/job_spec_internal.h"
#include "common/spec_text.h"
#include "common/status.h"

namespace dapple {
namespace job_spec_internal {
namespace {

constexpr char kDefaultDataPath[] = "/usr/share/datasets/fashion-mnist";
constexpr char kDefaultSchedule[] = "dapple";
constexpr char kDefaultPlanner[] = "balanced";
constexpr double kDefaultBeta1 = 0.9;
constexpr double kDefaultBeta2 = 0.999;
constexpr double kDefaultEps = 1e-8;
// parallel.pipesgd.warmup_steps when not given (schedule pipesgd).
constexpr int kDefaultPipeSgdWarmup = 2;

constexpr absl::string_view kRootKeys[] = {"name", "model", "data", "training", "parallel"};
constexpr absl::string_view kModelKeys[] = {"input_shape", "layers", "loss"};
constexpr absl::string_view kLayerKeys[] = {"type", "out"};
constexpr absl::string_view kLayersWithoutOut[] = {"flatten", "relu", "gelu"};
constexpr absl::string_view kDataKeys[] = {"dataset", "path"};
constexpr absl::string_view kTrainingKeys[] = {
    "global_batch", "micro_batch",           "epochs", "optimizer", "seed",
    "max_steps",    "checkpoint_every_steps"};
constexpr absl::string_view kOptimizerKeys[] = {"type",  "lr",    "momentum", "weight_decay",
                                                "beta1", "beta2", "eps"};
constexpr absl::string_view kParallelKeys[] = {"schedule",    "planner",   "stages",  "devices",
                                               "device_type", "emulation", "pipesgd", "pipedream"};
constexpr absl::string_view kPipeDreamKeys[] = {"vertical_sync"};
constexpr absl::string_view kEmulationKeys[] = {"profile", "scale"};
constexpr absl::string_view kPipeSgdKeys[] = {"warmup_steps", "compression"};

// One key: value pair of a YAML map.
struct Field {
  YAML::Node key;
  YAML::Node value;
};

// Plain (unquoted, untagged) scalars are the only ones read as numbers.
bool IsPlain(const YAML::Node& node) { return node.Tag() == "?"; }

// Decimal integer syntax (what SimpleAtoi reads), whatever its size.
bool IsIntegerText(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  if (!text.empty() && (text[0] == '-' || text[0] == '+')) text.remove_prefix(1);
  if (text.empty()) return false;
  for (char c : text) {
    if (!absl::ascii_isdigit(c)) return false;
  }
  return true;
}

std::string Describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return "an empty value";
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Scalar:
      return IsPlain(node) ? absl::StrCat("'", node.Scalar(), "'")
                           : absl::StrCat("the string '", node.Scalar(), "'");
    case YAML::NodeType::Undefined:
      return "nothing";
  }
  return "something else";
}

class Parser {
 public:
  explicit Parser(std::string source) : source_(std::move(source)) {}

  absl::Status Parse(const YAML::Node& root, v1::JobSpec& spec);

  // "<source>:line:col: message" at the line of `field` (or its closest recorded parent).
  absl::Status ErrorAtField(const std::string& field, const std::string& message) const {
    std::string path = field;
    while (!path.empty()) {
      auto it = marks_.find(path);
      if (it != marks_.end()) return Error(it->second, message);
      const size_t cut = path.find_last_of(".[");
      path = cut == std::string::npos ? "" : path.substr(0, cut);
    }
    return Error(YAML::Mark::null_mark(), message);
  }

 private:
  using Fields = std::map<std::string, Field>;

  absl::Status Error(const YAML::Mark& mark, const std::string& message) const {
    if (mark.is_null()) {
      return absl::InvalidArgumentError(OneLine(absl::StrCat(source_, ": ", message)));
    }
    return absl::InvalidArgumentError(
        OneLine(absl::StrFormat("%s:%d:%d: %s", source_, mark.line + 1, mark.column + 1, message)));
  }

  // Where a value is: a null value has no position of its own, so use its key's.
  static YAML::Mark MarkOf(const Field& f) {
    return f.value.IsNull() || f.value.Mark().is_null() ? f.key.Mark() : f.value.Mark();
  }

  static std::string Join(const std::string& parent, const std::string& key) {
    return parent.empty() ? key : absl::StrCat(parent, ".", key);
  }

  absl::StatusOr<Fields> ReadMap(const YAML::Node& node, const YAML::Mark& where,
                                 const std::string& path, Names known, const std::string& example) {
    const std::string name = path.empty() ? "the job spec" : path;
    // A section whose fields are all commented out is empty, not wrong; required fields in it
    // are still reported as missing.
    if (node.IsNull() && !path.empty()) return Fields();
    if (!node.IsMap()) {
      return Error(where,
                   absl::StrFormat("%s must be a map%s, got %s", name, example, Describe(node)));
    }
    Fields fields;
    for (auto it = node.begin(); it != node.end(); ++it) {
      const YAML::Node& key = it->first;
      if (!key.IsScalar()) {
        return Error(key.Mark(), absl::StrFormat("the keys of %s must be plain names, got %s", name,
                                                 Describe(key)));
      }
      const std::string& text = key.Scalar();
      if (!Contains(known, text)) {
        std::string message = absl::StrFormat("unknown field '%s' in %s; known: %s", text, name,
                                              absl::StrJoin(known, ", "));
        for (absl::string_view candidate : known) {
          if (EditDistance(text, candidate) <= 2 && text.size() > 2) {
            absl::StrAppend(&message, "; did you mean '", candidate, "'?");
            break;
          }
        }
        return Error(key.Mark(), message);
      }
      if (fields.count(text) > 0) {
        return Error(key.Mark(), absl::StrFormat("duplicate field '%s' in %s (first at line %d)",
                                                 text, name, fields[text].key.Mark().line + 1));
      }
      fields[text] = Field{key, it->second};
      marks_[Join(path, text)] = MarkOf(fields[text]);
    }
    return fields;
  }

  static const Field* Find(const Fields& fields, const std::string& key) {
    auto it = fields.find(key);
    return it == fields.end() ? nullptr : &it->second;
  }

  absl::Status Missing(const YAML::Mark& parent_mark, const std::string& path) const {
    return Error(parent_mark, absl::StrFormat("missing required field '%s'", path));
  }

  absl::StatusOr<std::string> String(const Field& f, const std::string& path) const {
    if (!f.value.IsScalar()) {
      return Error(MarkOf(f),
                   absl::StrFormat("%s must be a string, got %s", path, Describe(f.value)));
    }
    return f.value.Scalar();
  }

  absl::StatusOr<int64_t> Int(const Field& f, const std::string& path, int64_t min,
                              int64_t max) const {
    int64_t value = 0;
    const bool plain = f.value.IsScalar() && IsPlain(f.value);
    if (plain && IsIntegerText(f.value.Scalar()) && !absl::SimpleAtoi(f.value.Scalar(), &value)) {
      // An integer, but past int64: say so rather than "must be an integer".
      return Error(MarkOf(f), absl::StrFormat("%s must be an integer in [%d, %d], got %s", path,
                                              min, max, f.value.Scalar()));
    }
    if (!plain || !absl::SimpleAtoi(f.value.Scalar(), &value)) {
      return Error(MarkOf(f),
                   absl::StrFormat("%s must be an integer, got %s", path, Describe(f.value)));
    }
    if (value < min || value > max) {
      return Error(MarkOf(f), absl::StrFormat("%s must be an integer in [%d, %d], got %d", path,
                                              min, max, value));
    }
    return value;
  }
  absl::StatusOr<int64_t> Int64(const Field& f, const std::string& path) const {
    return Int(f, path, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
  }
  absl::StatusOr<int32_t> Int32(const Field& f, const std::string& path) const {
    DAPPLE_ASSIGN_OR_RETURN(int64_t value, Int(f, path, std::numeric_limits<int32_t>::min(),
                                               std::numeric_limits<int32_t>::max()));
    return static_cast<int32_t>(value);
  }

  absl::StatusOr<uint64_t> Uint64(const Field& f, const std::string& path) const {
    uint64_t value = 0;
    const bool plain = f.value.IsScalar() && IsPlain(f.value);
    const std::string text = plain ? f.value.Scalar() : "";
    if (IsIntegerText(text) && absl::StripAsciiWhitespace(text)[0] != '-' &&
        !absl::SimpleAtoi(text, &value)) {
      return Error(MarkOf(f), absl::StrFormat("%s must be an integer in [0, %d], got %s", path,
                                              std::numeric_limits<uint64_t>::max(), text));
    }
    if (!plain || !absl::SimpleAtoi(text, &value)) {
      return Error(MarkOf(f), absl::StrFormat("%s must be a non-negative integer, got %s", path,
                                              Describe(f.value)));
    }
    return value;
  }

  absl::StatusOr<double> Double(const Field& f, const std::string& path) const {
    const bool plain = f.value.IsScalar() && IsPlain(f.value);
    const std::string text = plain ? f.value.Scalar() : "";
    // YAML 1.2 spells infinity and NaN .inf and .nan; accept them so that validation, not
    // parsing, says what is wrong with such a value.
    const std::string lower = absl::AsciiStrToLower(text);
    if (lower == ".inf" || lower == "+.inf") return std::numeric_limits<double>::infinity();
    if (lower == "-.inf") return -std::numeric_limits<double>::infinity();
    if (lower == ".nan") return std::numeric_limits<double>::quiet_NaN();
    double value = 0;
    if (!plain || !absl::SimpleAtod(text, &value)) {
      return Error(MarkOf(f),
                   absl::StrFormat("%s must be a number, got %s", path, Describe(f.value)));
    }
    return value;
  }

  // YAML's booleans are the plain scalars true and false; a quoted "true" is a string (and
  // yes/no/on/off are YAML 1.1's, not 1.2's), so both are refused as for a number in quotes.
  absl::StatusOr<bool> Bool(const Field& f, const std::string& path) const {
    const bool plain = f.value.IsScalar() && IsPlain(f.value);
    if (plain && (f.value.Scalar() == "true" || f.value.Scalar() == "false")) {
      return f.value.Scalar() == "true";
    }
    return Error(MarkOf(f),
                 absl::StrFormat("%s must be true or false, got %s", path, Describe(f.value)));
  }

  absl::Status ParseModel(const Field& section, v1::ModelSpec& model);
  absl::Status ParseData(const Field& section, v1::DataSpec& data);
  absl::Status ParseTraining(const Field& section, v1::TrainingSpec& training);
  absl::Status ParseOptimizer(const Field& section, v1::OptimizerSpec& opt);
  absl::Status ParseParallel(const Field* section, v1::ParallelSpec& parallel);
  absl::Status ParseEmulation(const Field& section, v1::EmulationSpec& emulation);
  absl::Status ParsePipeSgd(const Field& section, v1::PipeSgdSpec& pipesgd);
  absl::Status ParsePipeDream(const Field& section, v1::PipeDreamSpec& pipedream);
  absl::Status ParseStages(const Field& f, v1::ParallelSpec& parallel);

  std::string source_;
  std::map<std::string, YAML::Mark> marks_;  // YAML path -> position of its value
};

absl::Status Parser::Parse(const YAML::Node& root, v1::JobSpec& spec) {
  if (!root.IsDefined() || root.IsNull()) {
    return Error(YAML::Mark::null_mark(),
                 "the job spec is empty; expected a map with name, model, data, training and "
                 "parallel");
  }
  DAPPLE_ASSIGN_OR_RETURN(Fields fields,
                          ReadMap(root, root.Mark(), "", kRootKeys,
                                  " of fields (name, model, data, training, parallel)"));
  const Field* name = Find(fields, "name");
  if (name == nullptr) return Missing(YAML::Mark::null_mark(), "name");
  DAPPLE_ASSIGN_OR_RETURN(*spec.mutable_name(), String(*name, "name"));

  const Field* model = Find(fields, "model");
  if (model == nullptr) return Missing(YAML::Mark::null_mark(), "model");
  DAPPLE_RETURN_IF_ERROR(ParseModel(*model, *spec.mutable_model()));

  v1::DataSpec& data = *spec.mutable_data();
  data.set_dataset(std::string(kFashionMnist));
  data.set_path(kDefaultDataPath);
  if (const Field* f = Find(fields, "data")) DAPPLE_RETURN_IF_ERROR(ParseData(*f, data));

  const Field* training = Find(fields, "training");
  if (training == nullptr) return Missing(YAML::Mark::null_mark(), "training");
  DAPPLE_RETURN_IF_ERROR(ParseTraining(*training, *spec.mutable_training()));

  return ParseParallel(Find(fields, "parallel"), *spec.mutable_parallel());
}

absl::Status Parser::ParseModel(const Field& section, v1::ModelSpec& model) {
  DAPPLE_ASSIGN_OR_RETURN(Fields fields, ReadMap(section.value, MarkOf(section), "model",
                                                 kModelKeys, " with input_shape, layers and loss"));
  const Field* shape = Find(fields, "input_shape");
  if (shape == nullptr) return Missing(MarkOf(section), "model.input_shape");
  if (!shape->value.IsSequence()) {
    return Error(MarkOf(*shape),
                 absl::StrFormat("model.input_shape must be a list of integers like [1, 28, 28], "
                                 "got %s",
                                 Describe(shape->value)));
  }
  for (size_t i = 0; i < shape->value.size(); ++i) {
    const Field dim{shape->key, shape->value[i]};
    DAPPLE_ASSIGN_OR_RETURN(int64_t d, Int64(dim, absl::StrFormat("model.input_shape[%d]", i)));
    model.add_input_shape(d);
  }

  const Field* layers = Find(fields, "layers");
  if (layers == nullptr) return Missing(MarkOf(section), "model.layers");
  if (!layers->value.IsSequence()) {
    return Error(MarkOf(*layers),
                 absl::StrFormat("model.layers must be a list of layers like - {type: linear, "
                                 "out: 10}, got %s",
                                 Describe(layers->value)));
  }
  for (size_t i = 0; i < layers->value.size(); ++i) {
    const std::string path = absl::StrFormat("model.layers[%d]", i);
    const Field item{layers->key, layers->value[i]};
    marks_[path] = MarkOf(item);
    DAPPLE_ASSIGN_OR_RETURN(Fields layer_fields, ReadMap(item.value, MarkOf(item), path, kLayerKeys,
                                                         " like {type: linear, out: 10}"));
    v1::LayerSpec& layer = *model.add_layers();
    const Field* type = Find(layer_fields, "type");
    if (type == nullptr) return Missing(MarkOf(item), path + ".type");
    DAPPLE_ASSIGN_OR_RETURN(*layer.mutable_type(), String(*type, path + ".type"));
    const Field* out = Find(layer_fields, "out");
    // An unknown type is reported as such by validation.
    if (out != nullptr && Contains(kLayersWithoutOut, layer.type())) {
      return Error(out->key.Mark(), absl::StrFormat("%s.out applies only to linear layers, not %s",
                                                    path, layer.type()));
    }
    if (out == nullptr && layer.type() == "linear") {
      return Error(MarkOf(item), absl::StrFormat("%s.out is required for linear layers, e.g. "
                                                 "{type: linear, out: 10}",
                                                 path));
    }
    if (out != nullptr) {
      DAPPLE_ASSIGN_OR_RETURN(int64_t value, Int64(*out, path + ".out"));
      layer.set_out(value);
    }
  }

  model.set_loss(kDefaultLoss);
  if (const Field* loss = Find(fields, "loss")) {
    DAPPLE_ASSIGN_OR_RETURN(*model.mutable_loss(), String(*loss, "model.loss"));
  }
  return absl::OkStatus();
}

absl::Status Parser::ParseData(const Field& section, v1::DataSpec& data) {
  DAPPLE_ASSIGN_OR_RETURN(Fields fields, ReadMap(section.value, MarkOf(section), "data", kDataKeys,
                                                 " like {dataset: fashion-mnist, path: /data}"));
  if (const Field* f = Find(fields, "dataset")) {
    DAPPLE_ASSIGN_OR_RETURN(*data.mutable_dataset(), String(*f, "data.dataset"));
  }
  if (const Field* f = Find(fields, "path")) {
    DAPPLE_ASSIGN_OR_RETURN(*data.mutable_path(), String(*f, "data.path"));
  }
  return absl::OkStatus();
}

absl::Status Parser::ParseTraining(const Field& section, v1::TrainingSpec& training) {
  DAPPLE_ASSIGN_OR_RETURN(Fields fields,
                          ReadMap(section.value, MarkOf(section), "training", kTrainingKeys,
                                  " with global_batch, optimizer, ..."));
  const Field* global = Find(fields, "global_batch");
  if (global == nullptr) return Missing(MarkOf(section), "training.global_batch");
  DAPPLE_ASSIGN_OR_RETURN(int64_t global_batch, Int64(*global, "training.global_batch"));
  training.set_global_batch(global_batch);
  training.set_micro_batch(global_batch);
  if (const Field* f = Find(fields, "micro_batch")) {
    DAPPLE_ASSIGN_OR_RETURN(int64_t v, Int64(*f, "training.micro_batch"));
    training.set_micro_batch(v);
  }
  training.set_epochs(1);
  if (const Field* f = Find(fields, "epochs")) {
    DAPPLE_ASSIGN_OR_RETURN(int64_t v, Int64(*f, "training.epochs"));
    training.set_epochs(v);
  }
  if (const Field* f = Find(fields, "seed")) {
    DAPPLE_ASSIGN_OR_RETURN(uint64_t v, Uint64(*f, "training.seed"));
    training.set_seed(v);
  }
  if (const Field* f = Find(fields, "max_steps")) {
    DAPPLE_ASSIGN_OR_RETURN(int64_t v, Int64(*f, "training.max_steps"));
    training.set_max_steps(v);
  }
  if (const Field* f = Find(fields, "checkpoint_every_steps")) {
    DAPPLE_ASSIGN_OR_RETURN(int64_t v, Int64(*f, "training.checkpoint_every_steps"));
    training.set_checkpoint_every_steps(v);
  }
  const Field* opt = Find(fields, "optimizer");
  if (opt == nullptr) return Missing(MarkOf(section), "training.optimizer");
  return ParseOptimizer(*opt, *training.mutable_optimizer());
}

absl::Status Parser::ParseOptimizer(const Field& section, v1::OptimizerSpec& opt) {
  DAPPLE_ASSIGN_OR_RETURN(
      Fields fields, ReadMap(section.value, MarkOf(section), "training.optimizer", kOptimizerKeys,
                             " like {type: sgd, lr: 0.05, momentum: 0.9}"));
  opt.set_type("sgd");
  if (const Field* f = Find(fields, "type")) {
    DAPPLE_ASSIGN_OR_RETURN(*opt.mutable_type(), String(*f, "training.optimizer.type"));
  }
  // Keys another optimizer type takes are refused, not ignored: the user meant them to matter.
  const struct {
    const char* key;
    const char* owner;
  } owned[] = {{"momentum", "sgd"}, {"beta1", "adamw"}, {"beta2", "adamw"}, {"eps", "adamw"}};
  for (const auto& o : owned) {
    const Field* f = Find(fields, o.key);
    if (f != nullptr && opt.type() != o.owner && Contains(kKnownOptimizers, opt.type())) {
      return Error(f->key.Mark(),
                   absl::StrFormat("training.optimizer.%s applies only to %s, not %s", o.key,
                                   o.owner, opt.type()));
    }
  }
  const Field* lr = Find(fields, "lr");
  if (lr == nullptr) return Missing(MarkOf(section), "training.optimizer.lr");
  DAPPLE_ASSIGN_OR_RETURN(double lr_value, Double(*lr, "training.optimizer.lr"));
  opt.set_lr(lr_value);
  struct Optional {
    const char* key;
    double fallback;
    void (v1::OptimizerSpec::*set)(double);
  };
  const Optional optionals[] = {
      {"momentum", 0.0, &v1::OptimizerSpec::set_momentum},
      {"weight_decay", 0.0, &v1::OptimizerSpec::set_weight_decay},
      {"beta1", kDefaultBeta1, &v1::OptimizerSpec::set_beta1},
      {"beta2", kDefaultBeta2, &v1::OptimizerSpec::set_beta2},
      {"eps", kDefaultEps, &v1::OptimizerSpec::set_eps},
  };
  for (const Optional& o : optionals) {
    double value = o.fallback;
    if (const Field* f = Find(fields, o.key)) {
      DAPPLE_ASSIGN_OR_RETURN(value, Double(*f, absl::StrCat("training.optimizer.", o.key)));
    }
    (opt.*o.set)(value);
  }
  return absl::OkStatus();
}

absl::Status Parser::ParseStages(const Field& f, v1::ParallelSpec& parallel) {
  if (f.value.IsScalar() && IsPlain(f.value) && f.value.Scalar() == "auto") {
    parallel.set_stages(0);
    return absl::OkStatus();
  }
  if (!f.value.IsSequence()) {
    if (!f.value.IsScalar() || !IsPlain(f.value)) {
      return Error(MarkOf(f),
                   absl::StrFormat("parallel.stages must be auto, an integer or a list of "
                                   "[first_layer, last_layer] ranges, got %s",
                                   Describe(f.value)));
    }
    if (!IsIntegerText(f.value.Scalar())) {
      return Error(MarkOf(f),
                   absl::StrFormat("parallel.stages must be auto, an integer or a list of "
                                   "[first_layer, last_layer] ranges, got %s",
                                   Describe(f.value)));
    }
    DAPPLE_ASSIGN_OR_RETURN(int32_t value, Int32(f, "parallel.stages"));
    parallel.set_stages(value);
    return absl::OkStatus();
  }
  if (f.value.size() == 0) {
    return Error(MarkOf(f),
                 "parallel.stages is an empty list: give at least one "
                 "[first_layer, last_layer] range, or auto");
  }
  for (size_t i = 0; i < f.value.size(); ++i) {
    const std::string path = absl::StrFormat("parallel.stages[%d]", i);
    const Field item{f.key, f.value[i]};
    marks_[path] = MarkOf(item);
    if (!item.value.IsSequence()) {
      return Error(MarkOf(item),
                   absl::StrFormat("%s must be a [first_layer, last_layer] pair, got %s", path,
                                   Describe(item.value)));
    }
    if (item.value.size() != 2) {
      return Error(MarkOf(item),
                   absl::StrFormat("%s must be a [first_layer, last_layer] pair, got a list of "
                                   "%d value%s",
                                   path, item.value.size(), item.value.size() == 1 ? "" : "s"));
    }
    DAPPLE_ASSIGN_OR_RETURN(int32_t first, Int32(Field{f.key, item.value[0]}, path + "[0]"));
    DAPPLE_ASSIGN_OR_RETURN(int32_t last, Int32(Field{f.key, item.value[1]}, path + "[1]"));
    v1::StageRange& range = *parallel.add_stage_ranges();
    range.set_first_layer(first);
    range.set_last_layer(last);
  }
  parallel.set_stages(parallel.stage_ranges_size());
  return absl::OkStatus();
}

absl::Status Parser::ParseParallel(const Field* section, v1::ParallelSpec& parallel) {
  Fields fields;
  if (section != nullptr) {
    DAPPLE_ASSIGN_OR_RETURN(fields,
                            ReadMap(section->value, MarkOf(*section), "parallel", kParallelKeys,
                                    " like {schedule: dapple, stages: 2, devices: 2}"));
  }
  parallel.set_schedule(kDefaultSchedule);
  if (const Field* f = Find(fields, "schedule")) {
    DAPPLE_ASSIGN_OR_RETURN(*parallel.mutable_schedule(), String(*f, "parallel.schedule"));
  }
  parallel.set_stages(0);
  if (const Field* f = Find(fields, "stages")) DAPPLE_RETURN_IF_ERROR(ParseStages(*f, parallel));
  parallel.set_planner(parallel.stage_ranges_size() > 0 ? kManualPlanner : kDefaultPlanner);
  if (const Field* f = Find(fields, "planner")) {
    DAPPLE_ASSIGN_OR_RETURN(*parallel.mutable_planner(), String(*f, "parallel.planner"));
  }
  // An explicit stage count fixes the devices (one per stage); auto takes them from devices.
  parallel.set_devices(parallel.stages() > 0 ? parallel.stages() : 1);
  if (const Field* f = Find(fields, "devices")) {
    DAPPLE_ASSIGN_OR_RETURN(int32_t v, Int32(*f, "parallel.devices"));
    parallel.set_devices(v);
  }
  parallel.set_device_type(kDefaultDeviceType);
  if (const Field* f = Find(fields, "device_type")) {
    DAPPLE_ASSIGN_OR_RETURN(*parallel.mutable_device_type(), String(*f, "parallel.device_type"));
  }
  if (const Field* f = Find(fields, "emulation")) {
    DAPPLE_RETURN_IF_ERROR(ParseEmulation(*f, *parallel.mutable_emulation()));
  }
  // schedule pipesgd gets its defaults without a section; a section under another schedule is
  // kept so that validation names it.
  if (parallel.schedule() == kPipeSgdSchedule) {
    parallel.mutable_pipesgd()->set_warmup_steps(kDefaultPipeSgdWarmup);
    parallel.mutable_pipesgd()->set_compression("none");
  }
  if (const Field* f = Find(fields, "pipesgd")) {
    DAPPLE_RETURN_IF_ERROR(ParsePipeSgd(*f, *parallel.mutable_pipesgd()));
  }
  if (const Field* f = Find(fields, "pipedream")) {
    DAPPLE_RETURN_IF_ERROR(ParsePipeDream(*f, *parallel.mutable_pipedream()));
  }
  return absl::OkStatus();
}

absl::Status Parser::ParsePipeDream(const Field& section, v1::PipeDreamSpec& pipedream) {
  DAPPLE_ASSIGN_OR_RETURN(
      Fields fields, ReadMap(section.value, MarkOf(section), "parallel.pipedream", kPipeDreamKeys,
                             " like {vertical_sync: false}"));
  if (const Field* f = Find(fields, "vertical_sync")) {
    DAPPLE_ASSIGN_OR_RETURN(const bool v, Bool(*f, "parallel.pipedream.vertical_sync"));
    pipedream.set_vertical_sync(v);
  }
  return absl::OkStatus();
}

absl::Status Parser::ParsePipeSgd(const Field& section, v1::PipeSgdSpec& pipesgd) {
  DAPPLE_ASSIGN_OR_RETURN(Fields fields,
                          ReadMap(section.value, MarkOf(section), "parallel.pipesgd", kPipeSgdKeys,
                                  " like {warmup_steps: 2, compression: none}"));
  pipesgd.set_warmup_steps(kDefaultPipeSgdWarmup);
  if (const Field* f = Find(fields, "warmup_steps")) {
    DAPPLE_ASSIGN_OR_RETURN(const int32_t v, Int32(*f, "parallel.pipesgd.warmup_steps"));
    pipesgd.set_warmup_steps(v);
  }
  pipesgd.set_compression("none");
  if (const Field* f = Find(fields, "compression")) {
    DAPPLE_ASSIGN_OR_RETURN(*pipesgd.mutable_compression(),
                            String(*f, "parallel.pipesgd.compression"));
  }
  return absl::OkStatus();
}

absl::Status Parser::ParseEmulation(const Field& section, v1::EmulationSpec& emulation) {
  DAPPLE_ASSIGN_OR_RETURN(
      Fields fields, ReadMap(section.value, MarkOf(section), "parallel.emulation", kEmulationKeys,
                             " like {profile: /path/to/model-pbs-32.txt, scale: 1}"));
  if (const Field* f = Find(fields, "profile")) {
    DAPPLE_ASSIGN_OR_RETURN(*emulation.mutable_profile(), String(*f, "parallel.emulation.profile"));
  }
  emulation.set_scale(1.0);
  if (const Field* f = Find(fields, "scale")) {
    DAPPLE_ASSIGN_OR_RETURN(const double v, Double(*f, "parallel.emulation.scale"));
    emulation.set_scale(v);
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::JobSpec> ParseAndValidate(absl::string_view yaml, const std::string& name) {
  Parser parser(name);
  v1::JobSpec spec;
  try {
    DAPPLE_ASSIGN_OR_RETURN(YAML::Node root, LoadDocument(yaml, name));
    DAPPLE_RETURN_IF_ERROR(parser.Parse(root, spec));
  } catch (const std::exception& e) {
    // yaml-cpp throws on misuse of nodes; none is expected after a successful load, but nothing
    // may escape this boundary.
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: cannot read the job spec: %s", name, e.what()));
  }
  if (Check violation = Validate(spec)) {
    return parser.ErrorAtField(violation->field, violation->message);
  }
  return spec;
}

}  // namespace
}  // namespace job_spec_internal

absl::StatusOr<v1::JobSpec> ParseJobSpec(absl::string_view yaml, absl::string_view source) {
  absl::StatusOr<v1::JobSpec> spec = job_spec_internal::ParseAndValidate(
      yaml, source.empty() ? std::string("<spec>") : std::string(source));
  if (!spec.ok()) {
    return absl::InvalidArgumentError(job_spec_internal::OneLine(spec.status().message()));
  }
  return spec;
}

absl::Status JobSpecFieldError(absl::string_view yaml, absl::string_view source,
                               absl::string_view field, absl::string_view message) {
  const std::string name = source.empty() ? std::string("<spec>") : std::string(source);
  job_spec_internal::Parser parser(name);
  try {
    // Parsing again records where each field is; whether the rest of the spec is valid does
    // not matter for where this one is.
    absl::StatusOr<YAML::Node> root = job_spec_internal::LoadDocument(yaml, name);
    v1::JobSpec ignored;
    if (root.ok()) (void)parser.Parse(*root, ignored);
  } catch (const std::exception&) {
    // As in ParseAndValidate: nothing escapes; the message goes without a position.
  }
  return parser.ErrorAtField(std::string(field), std::string(message));
}

}  // namespace dapple
