#include "common/job_spec.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <exception>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/model_info.h"
#include "common/status.h"

namespace dapple {
namespace {

constexpr size_t kMaxNameLength = 63;
constexpr absl::string_view kFashionMnist = "fashion-mnist";
constexpr int64_t kFashionMnistTrainSamples = 60000;
constexpr int64_t kFashionMnistClasses = 10;
constexpr char kDefaultLoss[] = "softmax_cross_entropy";
constexpr char kDefaultDataPath[] = "/usr/share/datasets/fashion-mnist";
constexpr char kDefaultSchedule[] = "dapple";
constexpr char kDefaultPlanner[] = "balanced";
constexpr char kManualPlanner[] = "manual";
constexpr double kDefaultBeta1 = 0.9;
constexpr double kDefaultBeta2 = 0.999;
constexpr double kDefaultEps = 1e-8;

// Upper bounds of the integer fields, so that every product the system derives from them fits its
// type: total steps = epochs * floor(60000 / global_batch) <= 6e9 fits int64 and epochs fits
// JobMetrics' int32; samples seen = steps * global_batch < 2^63; stage and device counts fit
// int32 and any schedule's slot table (M * stages).
constexpr int64_t kMaxEpochs = 100000;
constexpr int64_t kMaxSteps = 1000000000;
constexpr int64_t kMaxGlobalBatch = int64_t{1} << 20;
constexpr int64_t kMaxStages = 4096;
constexpr int64_t kMaxDevices = 4096;
// Activations one step may hold: global_batch * (sum over layers of per-sample output floats).
// 2^30 floats = 4 GiB of fp32, what a worker may need when a schedule keeps a whole step's
// micro-batches in flight (GPipe).
constexpr int64_t kMaxStepActivations = int64_t{1} << 30;
// Deeper YAML is refused before yaml-cpp, which recurses once per level, reads it. A job spec
// needs 4 levels.
constexpr int kMaxYamlDepth = 64;

using Names = absl::Span<const absl::string_view>;

constexpr absl::string_view kKnownDatasets[] = {kFashionMnist};
constexpr absl::string_view kAvailableSchedules[] = {"gpipe", "dapple", "pipedream", "pipesgd"};
constexpr char kDefaultDeviceType[] = "any";
constexpr absl::string_view kDeviceTypes[] = {"any", "cpu", "cuda", "emulated"};
constexpr char kEmulatedDeviceType[] = "emulated";
// parallel.emulation.scale stretches profiled times so a schedule's timing shows above the
// host's noise; x1000 already turns a 1 ms layer into 1 s. More is a mistake (1e12 would keep
// the workers busy for ever), so it is refused at submit.
constexpr double kMaxEmulationScale = 1000;

constexpr absl::string_view kAvailablePlanners[] = {"balanced", "uniform",   "manual",
                                                    "dapple",   "pipedream", "dp"};
// Planners that choose the pipeline depth themselves with stages auto (at most
// parallel.devices stages); balanced and uniform make one stage per device.
constexpr absl::string_view kDepthChoosingPlanners[] = {"dapple", "pipedream", "dp"};
constexpr char kDataParallelPlanner[] = "dp";
constexpr absl::string_view kKnownOptimizers[] = {"sgd", "adamw"};

bool Contains(Names list, absl::string_view value) {
  for (absl::string_view item : list) {
    if (item == value) return true;
  }
  return false;
}

// Shortest text that reads back to the same double (so messages say 0.05, not 0.050000000000000003,
// and JobSpecToYaml round-trips exactly).
std::string FormatDouble(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  if (ec != std::errc()) return absl::StrFormat("%.17g", value);
  return std::string(buffer, end);
}

std::string FormatShape(const google::protobuf::RepeatedField<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}
std::string FormatShape(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// "1 stage", "2 stages": counts in messages take the singular for 1.
std::string Count(int64_t count, absl::string_view one, absl::string_view many) {
  return absl::StrCat(count, " ", count == 1 ? one : many);
}

// The UTF-8 character at text[pos]: its code point and byte length, or {-1, 1} for a byte that
// does not start a well-formed sequence (stray continuation, overlong form, surrogate, > U+10FFFF,
// truncated).
struct Utf8Char {
  int32_t code_point;
  size_t length;
};
Utf8Char DecodeUtf8(absl::string_view text, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(pos);
  if (lead < 0x80) return {lead, 1};
  size_t length = 0;
  int32_t cp = 0;
  int32_t min = 0;
  if ((lead & 0xe0) == 0xc0) {
    length = 2, cp = lead & 0x1f, min = 0x80;
  } else if ((lead & 0xf0) == 0xe0) {
    length = 3, cp = lead & 0x0f, min = 0x800;
  } else if ((lead & 0xf8) == 0xf0) {
    length = 4, cp = lead & 0x07, min = 0x10000;
  } else {
    return {-1, 1};
  }
  if (pos + length > text.size()) return {-1, 1};
  for (size_t i = 1; i < length; ++i) {
    if ((byte(pos + i) & 0xc0) != 0x80) return {-1, 1};
    cp = (cp << 6) | (byte(pos + i) & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return {-1, 1};
  return {cp, length};
}

// Messages are one line of valid UTF-8 even when they quote user text: control characters (C0,
// DEL, C1) and Unicode line separators become \xNN / \uNNNN, bytes that are not UTF-8 \xNN.
std::string OneLine(absl::string_view message) {
  std::string out;
  out.reserve(message.size());
  for (size_t i = 0; i < message.size();) {
    const Utf8Char c = DecodeUtf8(message, i);
    if (c.code_point < 0 || c.code_point < 0x20 || c.code_point == 0x7f) {
      absl::StrAppend(&out, absl::StrFormat("\\x%02x", static_cast<unsigned char>(message[i])));
    } else if ((c.code_point >= 0x80 && c.code_point <= 0x9f) || c.code_point == 0x2028 ||
               c.code_point == 0x2029) {
      absl::StrAppend(&out, absl::StrFormat("\\u%04x", c.code_point));
    } else {
      out.append(message.data() + i, c.length);
    }
    i += c.length;
  }
  return out;
}

size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// ---------------------------------------------------------------------------------------------
// Validation. Each rule reports the YAML field it is about, so ParseJobSpec can point at its line.

struct Violation {
  std::string field;  // YAML path, e.g. "training.micro_batch" or "parallel.stages[1]"
  std::string message;
};
using Check = std::optional<Violation>;

Violation At(std::string field, std::string message) {
  return Violation{std::move(field), std::move(message)};
}

// Positions and lengths count characters, not bytes: a name with 'ü' in it reports the 'ü' and
// where it is as a reader counts. A byte that is not UTF-8 counts as one character.
Check CheckName(const v1::JobSpec& spec) {
  const std::string& name = spec.name();
  if (name.empty()) return At("name", "name must not be empty");
  size_t characters = 0;
  std::optional<std::pair<std::string, size_t>> bad;  // the first bad character and its position
  for (size_t i = 0; i < name.size(); ++characters) {
    const Utf8Char u = DecodeUtf8(name, i);
    const char c = name[i];
    const bool ok = u.length == 1 && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                                      c == '-' || c == '_' || c == '.');
    if (!ok && !bad) bad.emplace(name.substr(i, u.length), characters);
    i += u.length;
  }
  if (bad) {
    return At("name", absl::StrFormat("name '%s' has the character '%s' at position %d; use only "
                                      "lowercase letters, digits, '-', '_' and '.'",
                                      name, bad->first, bad->second));
  }
  if (characters > kMaxNameLength) {
    return At("name", absl::StrFormat("name '%s' has %d characters; at most %d are allowed", name,
                                      characters, kMaxNameLength));
  }
  return std::nullopt;
}

Check CheckData(const v1::JobSpec& spec) {
  const v1::DataSpec& data = spec.data();
  if (!Contains(kKnownDatasets, data.dataset())) {
    return At("data.dataset", absl::StrFormat("data.dataset '%s' is unknown; known datasets: %s",
                                              data.dataset(), absl::StrJoin(kKnownDatasets, ", ")));
  }
  if (data.path().empty()) {
    return At("data.path", "data.path must not be empty: it names the folder with the dataset");
  }
  return std::nullopt;
}

// The YAML field an InferLayers message is about: its leading "model.layers[3]" or similar.
std::string FieldOfModelMessage(const std::string& message) {
  size_t end = 0;
  while (end < message.size()) {
    const char c = message[end];
    const bool path_char = absl::ascii_isalnum(c) || c == '_' || c == '.' || c == '[' || c == ']';
    if (!path_char) break;
    ++end;
  }
  std::string field = message.substr(0, end);
  while (!field.empty() && field.back() == '.') field.pop_back();
  return field.rfind("model", 0) == 0 ? field : "model";
}

Check CheckModel(const v1::JobSpec& spec) {
  const v1::ModelSpec& model = spec.model();
  absl::StatusOr<std::vector<LayerInfo>> layers = InferLayers(model);
  if (!layers.ok()) {
    const std::string message(layers.status().message());
    return At(FieldOfModelMessage(message), message);
  }
  if (model.loss() != kDefaultLoss) {
    return At("model.loss", absl::StrFormat("model.loss '%s' is not supported; supported: %s",
                                            model.loss(), kDefaultLoss));
  }
  if (spec.data().dataset() == kFashionMnist) {
    const std::vector<int64_t> shape(model.input_shape().begin(), model.input_shape().end());
    const bool image_shape = shape == std::vector<int64_t>{1, 28, 28} ||
                             shape == std::vector<int64_t>{28, 28} ||
                             shape == std::vector<int64_t>{784};
    if (!image_shape) {
      int64_t elements = 1;
      for (int64_t d : shape) elements *= d;
      return At("model.input_shape",
                absl::StrFormat("model.input_shape %s (%d elements) does not fit fashion-mnist's "
                                "28x28 images (784 elements): use [1, 28, 28], [28, 28] or [784]",
                                FormatShape(shape), elements));
    }
    if (!layers->empty()) {
      const std::vector<int64_t>& out = layers->back().output_shape;
      if (out != std::vector<int64_t>{kFashionMnistClasses}) {
        const std::string what = out.size() == 1 ? Count(out[0], "feature", "features")
                                                 : absl::StrFormat("shape %s", FormatShape(out));
        return At(absl::StrFormat("model.layers[%d]", layers->size() - 1),
                  absl::StrFormat("model output has %s but fashion-mnist has %d classes: the last "
                                  "layer must output [%d]",
                                  what, kFashionMnistClasses, kFashionMnistClasses));
      }
    }
  }
  return std::nullopt;
}

Check CheckAtMost(const std::string& field, int64_t value, int64_t max) {
  if (value > max) {
    return At(field, absl::StrFormat("%s %d is more than the maximum %d", field, value, max));
  }
  return std::nullopt;
}

Check CheckUnitInterval(const std::string& field, double value) {
  if (!(value >= 0 && value < 1)) {
    return At(field, absl::StrFormat("%s %s must be in [0, 1)", field, FormatDouble(value)));
  }
  return std::nullopt;
}

Check CheckOptimizer(const v1::OptimizerSpec& opt) {
  if (!Contains(kKnownOptimizers, opt.type())) {
    return At("training.optimizer.type",
              absl::StrFormat("training.optimizer.type '%s' is unknown; known: %s", opt.type(),
                              absl::StrJoin(kKnownOptimizers, ", ")));
  }
  if (!(opt.lr() > 0 && std::isfinite(opt.lr()))) {
    return At(
        "training.optimizer.lr",
        absl::StrFormat("training.optimizer.lr %s must be > 0 and finite", FormatDouble(opt.lr())));
  }
  if (Check c = CheckUnitInterval("training.optimizer.momentum", opt.momentum())) return c;
  if (!(opt.weight_decay() >= 0 && std::isfinite(opt.weight_decay()))) {
    return At("training.optimizer.weight_decay",
              absl::StrFormat("training.optimizer.weight_decay %s must be >= 0 and finite",
                              FormatDouble(opt.weight_decay())));
  }
  if (Check c = CheckUnitInterval("training.optimizer.beta1", opt.beta1())) return c;
  if (Check c = CheckUnitInterval("training.optimizer.beta2", opt.beta2())) return c;
  // eps only enters AdamW's update; a hand-built sgd spec may leave it 0.
  const bool eps_ok =
      std::isfinite(opt.eps()) && (opt.type() == "adamw" ? opt.eps() > 0 : opt.eps() >= 0);
  if (!eps_ok) {
    return At("training.optimizer.eps",
              absl::StrFormat("training.optimizer.eps %s must be > 0 and finite",
                              FormatDouble(opt.eps())));
  }
  return std::nullopt;
}

Check CheckTraining(const v1::JobSpec& spec) {
  const v1::TrainingSpec& t = spec.training();
  if (t.global_batch() < 1) {
    return At("training.global_batch",
              absl::StrFormat("training.global_batch %d must be >= 1", t.global_batch()));
  }
  if (spec.data().dataset() == kFashionMnist && t.global_batch() > kFashionMnistTrainSamples) {
    return At("training.global_batch",
              absl::StrFormat("training.global_batch %d must be <= %d, the number of training "
                              "samples of fashion-mnist",
                              t.global_batch(), kFashionMnistTrainSamples));
  }
  if (Check c = CheckAtMost("training.global_batch", t.global_batch(), kMaxGlobalBatch)) return c;
  if (t.micro_batch() < 1) {
    return At("training.micro_batch",
              absl::StrFormat("training.micro_batch %d must be >= 1", t.micro_batch()));
  }
  if (t.micro_batch() > t.global_batch()) {
    return At("training.micro_batch",
              absl::StrFormat("training.micro_batch %d must be <= training.global_batch %d",
                              t.micro_batch(), t.global_batch()));
  }
  if (t.global_batch() % t.micro_batch() != 0) {
    return At("training.micro_batch",
              absl::StrFormat("training.global_batch %d is not divisible by training.micro_batch "
                              "%d",
                              t.global_batch(), t.micro_batch()));
  }
  if (t.epochs() < 1) {
    return At("training.epochs", absl::StrFormat("training.epochs %d must be >= 1", t.epochs()));
  }
  if (Check c = CheckAtMost("training.epochs", t.epochs(), kMaxEpochs)) return c;
  if (t.max_steps() < 0) {
    return At("training.max_steps",
              absl::StrFormat("training.max_steps %d must be >= 0 (0 = no limit)", t.max_steps()));
  }
  if (Check c = CheckAtMost("training.max_steps", t.max_steps(), kMaxSteps)) return c;
  if (t.checkpoint_every_steps() < 0) {
    return At("training.checkpoint_every_steps",
              absl::StrFormat("training.checkpoint_every_steps %d must be >= 0 (0 = only on "
                              "demand)",
                              t.checkpoint_every_steps()));
  }
  if (Check c =
          CheckAtMost("training.checkpoint_every_steps", t.checkpoint_every_steps(), kMaxSteps)) {
    return c;
  }
  return CheckOptimizer(t.optimizer());
}

std::string RangeText(const v1::StageRange& r) {
  return absl::StrFormat("[%d, %d]", r.first_layer(), r.last_layer());
}

// "1 layer", "6 layers".
std::string Layers(int count) { return absl::StrCat(count, count == 1 ? " layer" : " layers"); }

// Explicit stages must partition the layers [0, num_layers) in order.
Check CheckStageRanges(const v1::ParallelSpec& p, int num_layers) {
  for (int i = 0; i < p.stage_ranges_size(); ++i) {
    const v1::StageRange& r = p.stage_ranges(i);
    const std::string field = absl::StrFormat("parallel.stages[%d]", i);
    if (r.first_layer() < 0 || r.last_layer() < 0) {
      return At(field, absl::StrFormat("%s %s: layer indices must be >= 0", field, RangeText(r)));
    }
    if (r.first_layer() > r.last_layer()) {
      return At(field, absl::StrFormat("%s %s is empty: first_layer %d > last_layer %d", field,
                                       RangeText(r), r.first_layer(), r.last_layer()));
    }
    if (r.last_layer() >= num_layers) {
      return At(field, absl::StrFormat("%s %s goes past the last layer %d of the model (%s)", field,
                                       RangeText(r), num_layers - 1, Layers(num_layers)));
    }
    const int expected_first = i == 0 ? 0 : p.stage_ranges(i - 1).last_layer() + 1;
    if (r.first_layer() > expected_first) {
      const std::string after = i == 0 ? ""
                                       : absl::StrFormat(" and after parallel.stages[%d] %s", i - 1,
                                                         RangeText(p.stage_ranges(i - 1)));
      return At(field, absl::StrFormat("layer %d is missing: it is in no stage (before %s %s%s); "
                                       "stages must cover every layer exactly once",
                                       expected_first, field, RangeText(r), after));
    }
    if (r.first_layer() < expected_first) {
      const v1::StageRange& prev = p.stage_ranges(i - 1);
      if (r.first_layer() < prev.first_layer()) {
        return At(field, absl::StrFormat("%s %s comes after parallel.stages[%d] %s: stages must be "
                                         "listed in layer order",
                                         field, RangeText(r), i - 1, RangeText(prev)));
      }
      return At(field,
                absl::StrFormat("layer %d is duplicated: it is in both parallel.stages[%d] "
                                "%s and %s %s; stages must cover every layer exactly once",
                                r.first_layer(), i - 1, RangeText(prev), field, RangeText(r)));
    }
  }
  const v1::StageRange& last = p.stage_ranges(p.stage_ranges_size() - 1);
  if (last.last_layer() < num_layers - 1) {
    return At(absl::StrFormat("parallel.stages[%d]", p.stage_ranges_size() - 1),
              absl::StrFormat("layer %d is missing: the last stage parallel.stages[%d] %s ends "
                              "before the model's last layer %d; stages must cover every layer "
                              "exactly once",
                              last.last_layer() + 1, p.stage_ranges_size() - 1, RangeText(last),
                              num_layers - 1));
  }
  return std::nullopt;
}

// device_type emulated (docs/job_spec.md): the profile file is read by the coordinator at
// submit (coordinator/service/emulation.h checks its layers against the model); here only what
// needs no file.
Check CheckEmulation(const v1::ParallelSpec& p) {
  const bool emulated = p.device_type() == kEmulatedDeviceType;
  const v1::EmulationSpec& e = p.emulation();
  if (!emulated) {
    if (p.has_emulation()) {
      return At("parallel.emulation",
                absl::StrFormat("parallel.emulation applies only to parallel.device_type "
                                "emulated, got parallel.device_type %s",
                                p.device_type().empty() ? kDefaultDeviceType : p.device_type()));
    }
    return std::nullopt;
  }
  if (e.profile().empty()) {
    return At("parallel.emulation.profile",
              "parallel.device_type emulated needs parallel.emulation.profile: an absolute path "
              "to a profile file (graph.txt) with one entry per model layer");
  }
  if (e.profile()[0] != '/') {
    return At("parallel.emulation.profile",
              absl::StrFormat("parallel.emulation.profile '%s' must be an absolute path: the "
                              "coordinator reads it at submit, on its own file system",
                              e.profile()));
  }
  if (!std::isfinite(e.scale()) || e.scale() <= 0) {
    return At("parallel.emulation.scale",
              absl::StrFormat("parallel.emulation.scale %g must be a finite number > 0 (it "
                              "multiplies every profiled time; default 1)",
                              e.scale()));
  }
  if (e.scale() > kMaxEmulationScale) {
    return At("parallel.emulation.scale",
              absl::StrFormat("parallel.emulation.scale %g must be in (0, %g]: it multiplies "
                              "every profiled time, and beyond %g a 1 ms layer waits more than "
                              "a second per action, so a step could hold its workers for hours",
                              e.scale(), kMaxEmulationScale, kMaxEmulationScale));
  }
  return std::nullopt;
}

// schedule pipesgd (Pipe-SGD, docs/job_spec.md): data parallelism, one stage replicated on
// every device. `stages` is the resolved stage count (0 = auto).
constexpr char kPipeSgdSchedule[] = "pipesgd";
constexpr int kMaxPipeSgdWarmup = 1000;
constexpr int kDefaultPipeSgdWarmup = 2;
constexpr absl::string_view kPipeSgdCompressions[] = {"none", "fp16", "int8"};

Check CheckPipeSgd(const v1::ParallelSpec& p, int stages) {
  if (p.schedule() != kPipeSgdSchedule) {
    if (p.has_pipesgd()) {
      return At("parallel.pipesgd",
                absl::StrFormat("parallel.pipesgd applies only to parallel.schedule pipesgd, got "
                                "parallel.schedule %s",
                                p.schedule()));
    }
    return std::nullopt;
  }
  const v1::PipeSgdSpec& ps = p.pipesgd();
  if (ps.warmup_steps() < 0 || ps.warmup_steps() > kMaxPipeSgdWarmup) {
    return At("parallel.pipesgd.warmup_steps",
              absl::StrFormat("parallel.pipesgd.warmup_steps %d must be between 0 and %d "
                              "(synchronous steps before the stale updates)",
                              ps.warmup_steps(), kMaxPipeSgdWarmup));
  }
  // Empty: a spec built in code; it means none.
  if (!ps.compression().empty() && !Contains(kPipeSgdCompressions, ps.compression())) {
    return At("parallel.pipesgd.compression",
              absl::StrFormat("parallel.pipesgd.compression '%s' is unknown; known: %s",
                              ps.compression(), absl::StrJoin(kPipeSgdCompressions, ", ")));
  }
  const bool one_stage = stages == 1 || (stages == 0 && p.planner() == kDataParallelPlanner);
  if (!one_stage) {
    return At(
        "parallel.stages",
        absl::StrFormat("parallel.schedule pipesgd is data parallelism over one stage, got "
                        "parallel.stages %s with parallel.planner %s: set stages to 1 (or "
                        "auto with planner dp)",
                        stages == 0 ? std::string("auto") : absl::StrCat(stages), p.planner()));
  }
  if (p.devices() < 2) {
    return At("parallel.devices",
              absl::StrFormat("parallel.devices %d with parallel.schedule pipesgd: pipesgd is "
                              "data parallelism: devices must be >= 2",
                              p.devices()));
  }
  return std::nullopt;
}

// schedule pipedream (docs/job_spec.md): asynchronous 1F1B with weight stashing; a stage may
// have replicas (1F1B-RR: whole micro-batches round-robin, CheckPipeDreamReplicas).
constexpr char kPipeDreamSchedule[] = "pipedream";

Check CheckPipeDream(const v1::ParallelSpec& p) {
  if (p.schedule() != kPipeDreamSchedule) {
    if (p.has_pipedream()) {
      return At("parallel.pipedream",
                absl::StrFormat("parallel.pipedream applies only to parallel.schedule pipedream, "
                                "got parallel.schedule %s",
                                p.schedule()));
    }
    return std::nullopt;
  }
  // Planner dp is one stage on every device: no pipeline for pipedream's asynchronous 1F1B to
  // keep full (pipesgd and dapple are the data-parallel schedules). Planner pipedream replicates
  // stages itself where that pays.
  if (p.planner() == kDataParallelPlanner) {
    return At("parallel.planner",
              "parallel.planner dp with parallel.schedule pipedream: planner dp makes one stage "
              "(no pipeline) and pipedream is asynchronous pipelining; use planner pipedream, "
              "dapple, balanced, uniform or manual (their stages may have replicas), or "
              "schedule pipesgd or dapple for data parallelism");
  }
  return std::nullopt;
}

// 1F1B-RR sends whole micro-batches round-robin to a stage's D replicas (micro-batch g to
// replica g % D), so each replica gets a micro-batch every step only when D <= M. Checked where
// D is fixed at submit: `replicas` = devices / stages of balanced, uniform and manual (dapple and
// pipedream choose D themselves, at most M: the coordinator caps their replicas).
Check CheckPipeDreamReplicas(const v1::JobSpec& spec, int stages, int replicas) {
  const v1::ParallelSpec& p = spec.parallel();
  if (p.schedule() != kPipeDreamSchedule) return std::nullopt;
  const int64_t micro_batches = spec.training().global_batch() / spec.training().micro_batch();
  if (replicas <= micro_batches) return std::nullopt;
  return At("parallel.devices",
            absl::StrFormat("parallel.devices %d with %s gives %d replicas per stage, but "
                            "parallel.schedule pipedream sends whole micro-batches round-robin to "
                            "a stage's replicas and training.global_batch %d / "
                            "training.micro_batch %d = %s per step: each replica "
                            "needs at least one: set devices to at most %d (%d %s per stage) "
                            "or use a smaller micro_batch",
                            p.devices(), Count(stages, "stage", "stages"), replicas,
                            spec.training().global_batch(), spec.training().micro_batch(),
                            Count(micro_batches, "micro-batch", "micro-batches"),
                            static_cast<int64_t>(stages) * micro_batches, micro_batches,
                            micro_batches == 1 ? "replica" : "replicas"));
}

Check CheckParallel(const v1::JobSpec& spec) {
  const v1::ParallelSpec& p = spec.parallel();
  const int num_layers = spec.model().layers_size();
  if (!Contains(kAvailableSchedules, p.schedule())) {
    return At("parallel.schedule",
              absl::StrFormat("parallel.schedule '%s' is unknown; available: %s", p.schedule(),
                              absl::StrJoin(kAvailableSchedules, ", ")));
  }
  // Empty (a spec built in code, or stored before the field existed) means "any".
  if (!p.device_type().empty() && !Contains(kDeviceTypes, p.device_type())) {
    return At("parallel.device_type",
              absl::StrFormat("parallel.device_type '%s' is unknown; known: %s", p.device_type(),
                              absl::StrJoin(kDeviceTypes, ", ")));
  }
  if (Check c = CheckEmulation(p)) return c;
  if (!Contains(kAvailablePlanners, p.planner())) {
    return At("parallel.planner",
              absl::StrFormat("parallel.planner '%s' is unknown; available: %s", p.planner(),
                              absl::StrJoin(kAvailablePlanners, ", ")));
  }
  if (p.stages() < 0) {
    return At("parallel.stages",
              absl::StrFormat("parallel.stages %d must be >= 0 (0 = auto)", p.stages()));
  }
  if (Check c = CheckAtMost("parallel.stages", p.stages(), kMaxStages)) return c;
  const bool manual = p.planner() == kManualPlanner;
  const bool explicit_ranges = p.stage_ranges_size() > 0;
  if (manual && !explicit_ranges) {
    return At("parallel.planner",
              absl::StrFormat("parallel.planner manual needs parallel.stages as a list of "
                              "[first_layer, last_layer] ranges, got %s",
                              p.stages() == 0 ? std::string("auto") : absl::StrCat(p.stages())));
  }
  if (explicit_ranges && !manual) {
    return At("parallel.planner",
              absl::StrFormat("parallel.stages is an explicit list of ranges, which only "
                              "parallel.planner manual takes, got parallel.planner %s",
                              p.planner()));
  }
  if (explicit_ranges && p.stages() != 0 && p.stages() != p.stage_ranges_size()) {
    return At("parallel.stages",
              absl::StrFormat(
                  "parallel.stages %d does not match the %s", p.stages(),
                  Count(p.stage_ranges_size(), "explicit stage range", "explicit stage ranges")));
  }
  const int stages = explicit_ranges ? p.stage_ranges_size() : p.stages();
  if (!explicit_ranges && stages > num_layers) {
    return At("parallel.stages",
              absl::StrFormat("parallel.stages %d is more than the %s of the model: each stage "
                              "needs at least one layer",
                              stages, Layers(num_layers)));
  }
  if (explicit_ranges) {
    if (Check c = CheckStageRanges(p, num_layers)) return c;
  }
  if (Check c = CheckPipeSgd(p, stages)) return c;
  if (Check c = CheckPipeDream(p)) return c;
  if (p.devices() < 1) {
    return At("parallel.devices", absl::StrFormat("parallel.devices %d must be >= 1", p.devices()));
  }
  if (Check c = CheckAtMost("parallel.devices", p.devices(), kMaxDevices)) return c;
  if (p.planner() == kDataParallelPlanner) {
    // dp is one stage replicated on every device.
    if (stages > 1) {
      return At("parallel.stages",
                absl::StrFormat("parallel.stages %d with parallel.planner dp: data parallelism "
                                "is one stage; set stages to auto or 1",
                                stages));
    }
    // One stage replicated on every device (P = 1, D = devices).
    return std::nullopt;
  }
  if (stages == 0) {
    // dapple and pipedream choose at most min(devices, layers) stages themselves.
    if (Contains(kDepthChoosingPlanners, p.planner())) return std::nullopt;
    if (p.devices() > num_layers) {
      return At("parallel.devices",
                absl::StrFormat("parallel.devices %d with parallel.stages auto would make %d "
                                "stages, more than the %s of the model: each stage needs at "
                                "least one layer",
                                p.devices(), p.devices(), Layers(num_layers)));
    }
    return std::nullopt;
  }
  // A fixed stage count: every stage gets devices / stages replicas (D), so devices must be a
  // multiple of the stages (dapple and pipedream with a fixed P replicate as they choose, up to
  // the same devices).
  if (p.devices() < stages) {
    return At("parallel.devices",
              absl::StrFormat("parallel.devices %d is fewer than the %d stages: each stage needs "
                              "its own device: set devices to %d (or a multiple of it)",
                              p.devices(), stages, stages));
  }
  if (p.devices() % stages != 0) {
    const int lower = p.devices() / stages * stages;
    return At("parallel.devices",
              absl::StrFormat("parallel.devices %d is not a multiple of the %d stages: each "
                              "stage gets devices / stages replicas: set devices to %d or %d",
                              p.devices(), stages, lower, lower + stages));
  }
  if (!Contains(kDepthChoosingPlanners, p.planner())) {
    return CheckPipeDreamReplicas(spec, stages, p.devices() / stages);
  }
  return std::nullopt;
}

// Needs a valid model and batch sizes.
Check CheckStepActivations(const v1::JobSpec& spec) {
  absl::StatusOr<std::vector<LayerInfo>> layers = InferLayers(spec.model());
  if (!layers.ok()) return At("model", std::string(layers.status().message()));
  int64_t per_sample = 0;  // <= 4096 layers * 2^24 floats each
  for (const LayerInfo& layer : *layers) per_sample += NumElements(layer.output_shape);
  const int64_t batch = spec.training().global_batch();  // <= 2^20
  if (per_sample > kMaxStepActivations / batch) {
    const double floats = static_cast<double>(per_sample) * static_cast<double>(batch);
    return At("training.global_batch",
              absl::StrFormat("training.global_batch %d times the model's %d activation floats "
                              "per sample is %.0f floats (%.2f GiB of fp32) per step, more than "
                              "the maximum 2^30 (4 GiB): use a smaller global_batch or narrower "
                              "layers",
                              batch, per_sample, floats, floats * sizeof(float) / (1 << 30)));
  }
  return std::nullopt;
}

Check Validate(const v1::JobSpec& spec) {
  if (Check c = CheckName(spec)) return c;
  if (Check c = CheckData(spec)) return c;
  if (Check c = CheckModel(spec)) return c;
  if (Check c = CheckTraining(spec)) return c;
  if (Check c = CheckStepActivations(spec)) return c;
  return CheckParallel(spec);
}

// ---------------------------------------------------------------------------------------------
// Parsing.

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
      layer.mutable_linear()->set_out(value);
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

// ---------------------------------------------------------------------------------------------
// Emitting.

// A string as a YAML scalar that our parser reads back unchanged.
std::string YamlString(const std::string& s) {
  bool plain = !s.empty();
  for (size_t i = 0; i < s.size() && plain; ++i) {
    const char c = s[i];
    const bool word = absl::ascii_isalnum(c) || c == '_' || c == '.' || c == '/';
    plain = word || (i > 0 && (c == '-' || c == '+'));
  }
  const std::string lower = absl::AsciiStrToLower(s);
  if (lower == "null" || lower == "~") plain = false;
  if (plain) return s;
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      out += absl::StrFormat("\\x%02x", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
  return out;
}

std::string YamlDouble(double v) {
  if (std::isnan(v)) return ".nan";
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  return FormatDouble(v);
}

struct Bracket {
  int line = 0;  // 0-based, like yaml-cpp's marks
  int column = 0;
  char symbol = 0;
  bool closed = false;
};

// The innermost '[' or '{' that is open at byte `pos` and never closed before the end of the
// text, skipping quoted strings and comments. A heuristic for error messages only: yaml-cpp
// reports an unclosed bracket where parsing finally fails, often lines later.
std::optional<Bracket> NeverClosedBracket(absl::string_view text, size_t pos) {
  std::vector<Bracket> brackets;
  std::vector<size_t> open;    // indices into brackets
  std::vector<size_t> at_pos;  // `open` as it was at `pos`
  bool seen_pos = false;
  int line = 0, column = 0;
  char quote = 0;
  bool comment = false;
  for (size_t i = 0; i < text.size(); ++i) {
    if (i == pos) {
      at_pos = open;
      seen_pos = true;
    }
    const char c = text[i];
    if (c == '\n') {
      ++line;
      column = 0;
      comment = false;
      continue;
    }
    if (comment) {
    } else if (quote != 0) {
      if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '#' && (i == 0 || text[i - 1] == ' ' || text[i - 1] == '\t')) {
      comment = true;
    } else if (c == '[' || c == '{') {
      open.push_back(brackets.size());
      brackets.push_back(Bracket{line, column, c});
    } else if ((c == ']' || c == '}') && !open.empty()) {
      brackets[open.back()].closed = true;
      open.pop_back();
    }
    ++column;
  }
  if (!seen_pos) at_pos = open;
  for (auto it = at_pos.rbegin(); it != at_pos.rend(); ++it) {
    if (!brackets[*it].closed) return brackets[*it];
  }
  return std::nullopt;
}

struct TooDeep {
  int line = 0;  // 1-based
  int column = 0;
};

// Where `text` first nests collections more than kMaxYamlDepth deep, or nullopt. yaml-cpp
// recurses once per level (and gives up at 2000 with "bad file"), so this runs first, in one pass
// with no recursion. It estimates the depth as block levels (the indentation stack, where each
// compact "- " / "? " / ": " indicator opens a level) plus open flow brackets. A bracket or quote
// counts only where a value starts (after line start, an indicator, ',' or a bracket), so text
// inside plain scalars, quoted strings, comments and block scalars (| and >) is skipped.
std::optional<TooDeep> FindTooDeep(absl::string_view text) {
  std::vector<int> indents;  // columns of the open block levels
  int flow = 0;
  char quote = 0;
  int block_scalar_parent = -1;  // while >= 0: lines indented more are block scalar content
  int line = 0;
  for (size_t start = 0; start <= text.size(); ++line) {
    size_t end = text.find('\n', start);
    if (end == absl::string_view::npos) end = text.size();
    const absl::string_view row = text.substr(start, end - start);
    start = end + 1;
    size_t i = 0;
    bool value_start = true;  // the next character may start a node
    int line_indent = indents.empty() ? 0 : indents.back();
    if (quote == 0 && flow == 0) {
      while (i < row.size() && row[i] == ' ') ++i;
      const bool blank = i == row.size() || row[i] == '#' || row[i] == '\r';
      if (block_scalar_parent >= 0) {
        if (blank || static_cast<int>(i) > block_scalar_parent) continue;
        block_scalar_parent = -1;
      }
      if (blank) continue;
      while (!indents.empty() && indents.back() >= static_cast<int>(i)) indents.pop_back();
      indents.push_back(static_cast<int>(i));
      line_indent = static_cast<int>(i);
      while (i + 1 < row.size() && (row[i] == '-' || row[i] == '?' || row[i] == ':') &&
             (row[i + 1] == ' ' || row[i + 1] == '\t')) {
        i += 2;
        while (i < row.size() && (row[i] == ' ' || row[i] == '\t')) ++i;
        indents.push_back(static_cast<int>(i));
        if (static_cast<int>(indents.size()) > kMaxYamlDepth) {
          return TooDeep{line + 1, static_cast<int>(i) + 1};
        }
      }
      if (static_cast<int>(indents.size()) > kMaxYamlDepth) {
        return TooDeep{line + 1, static_cast<int>(i) + 1};
      }
    }
    for (; i < row.size(); ++i) {
      const char c = row[i];
      if (quote == '"') {
        if (c == '\\') {
          ++i;
        } else if (c == '"') {
          quote = 0;
        }
        continue;
      }
      if (quote == '\'') {
        if (c == '\'' && i + 1 < row.size() && row[i + 1] == '\'') {
          ++i;
        } else if (c == '\'') {
          quote = 0;
        }
        continue;
      }
      if (c == ' ' || c == '\t' || c == '\r') continue;
      if (c == '#' && (i == 0 || row[i - 1] == ' ' || row[i - 1] == '\t')) break;
      // In flow context plain scalars cannot hold brackets, so every bracket counts there.
      const bool starts = value_start;
      value_start = false;
      if ((c == '[' || c == '{') && (starts || flow > 0)) {
        ++flow;
        if (static_cast<int>(indents.size()) + flow > kMaxYamlDepth) {
          return TooDeep{line + 1, static_cast<int>(i) + 1};
        }
        value_start = true;
      } else if ((c == ']' || c == '}') && flow > 0) {
        --flow;
      } else if ((c == '"' || c == '\'') && starts) {
        quote = c;
      } else if (c == ',' && flow > 0) {
        value_start = true;
      } else if ((c == ':' || c == '-' || c == '?') &&
                 (i + 1 == row.size() || row[i + 1] == ' ' || row[i + 1] == '\t')) {
        value_start = true;
      } else if ((c == '|' || c == '>') && starts && flow == 0) {
        block_scalar_parent = line_indent;
        break;
      }
    }
    if (end == text.size()) break;
  }
  return std::nullopt;
}

// Reads the single YAML document of `yaml`; syntax errors become kInvalidArgument with 1-based
// positions.
absl::StatusOr<YAML::Node> LoadDocument(absl::string_view yaml, const std::string& name) {
  if (std::optional<TooDeep> deep = FindTooDeep(yaml)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s:%d:%d: the job spec is nested more than %d levels deep here (it needs 4); refused "
        "before parsing",
        name, deep->line, deep->column, kMaxYamlDepth));
  }
  std::vector<YAML::Node> documents;
  try {
    documents = YAML::LoadAll(std::string(yaml));
  } catch (const YAML::DeepRecursion& e) {
    // Backstop for nesting FindTooDeep underestimates.
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s:%d:%d: the job spec is nested more than %d levels deep here (it needs 4)", name,
        e.mark.line + 1, e.mark.column + 1, e.depth()));
  } catch (const YAML::Exception& e) {
    if (e.mark.is_null()) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: YAML syntax error: %s", name, e.msg));
    }
    // Point at a bracket that is never closed, where the fix goes, rather than where yaml-cpp
    // gave up.
    if (std::optional<Bracket> open = NeverClosedBracket(yaml, e.mark.pos)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s:%d:%d: YAML syntax error: this '%c' is never closed (yaml-cpp stopped at %d:%d: %s)",
          name, open->line + 1, open->column + 1, open->symbol, e.mark.line + 1, e.mark.column + 1,
          e.msg));
    }
    return absl::InvalidArgumentError(absl::StrFormat("%s:%d:%d: YAML syntax error: %s", name,
                                                      e.mark.line + 1, e.mark.column + 1, e.msg));
  }
  if (documents.size() > 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s:%d:%d: the job spec must be one YAML document, found %d (separated by ---)", name,
        documents[1].Mark().line + 1, documents[1].Mark().column + 1, documents.size()));
  }
  return documents.empty() ? YAML::Node() : documents[0];
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

absl::StatusOr<v1::JobSpec> ParseJobSpec(absl::string_view yaml, absl::string_view source) {
  absl::StatusOr<v1::JobSpec> spec =
      ParseAndValidate(yaml, source.empty() ? std::string("<spec>") : std::string(source));
  if (!spec.ok()) return absl::InvalidArgumentError(OneLine(spec.status().message()));
  return spec;
}

absl::Status JobSpecFieldError(absl::string_view yaml, absl::string_view source,
                               absl::string_view field, absl::string_view message) {
  const std::string name = source.empty() ? std::string("<spec>") : std::string(source);
  Parser parser(name);
  try {
    // Parsing again records where each field is; whether the rest of the spec is valid does
    // not matter for where this one is.
    absl::StatusOr<YAML::Node> root = LoadDocument(yaml, name);
    v1::JobSpec ignored;
    if (root.ok()) (void)parser.Parse(*root, ignored);
  } catch (const std::exception&) {
    // As in ParseAndValidate: nothing escapes; the message goes without a position.
  }
  return parser.ErrorAtField(std::string(field), std::string(message));
}

absl::Status ValidateJobSpec(const v1::JobSpec& spec) {
  if (Check violation = Validate(spec)) {
    return absl::InvalidArgumentError(OneLine(violation->message));
  }
  return absl::OkStatus();
}

int64_t MicroBatches(const v1::JobSpec& spec) {
  const int64_t micro = spec.training().micro_batch();
  return micro > 0 ? spec.training().global_batch() / micro : 0;
}

std::string JobSpecToYaml(const v1::JobSpec& spec) {
  std::string out;
  absl::StrAppend(&out, "name: ", YamlString(spec.name()), "\n");

  const v1::ModelSpec& model = spec.model();
  absl::StrAppend(&out, "model:\n  input_shape: ", FormatShape(model.input_shape()), "\n");
  if (model.layers().empty()) {
    absl::StrAppend(&out, "  layers: []\n");
  } else {
    absl::StrAppend(&out, "  layers:\n");
    for (const v1::LayerSpec& layer : model.layers()) {
      absl::StrAppend(&out, "    - {type: ", YamlString(layer.type()));
      if (layer.has_linear() && layer.linear().out() != 0) {
        absl::StrAppend(&out, ", out: ", layer.linear().out());
      }
      absl::StrAppend(&out, "}\n");
    }
  }
  absl::StrAppend(&out, "  loss: ", YamlString(model.loss()), "\n");

  absl::StrAppend(&out, "data:\n  dataset: ", YamlString(spec.data().dataset()),
                  "\n  path: ", YamlString(spec.data().path()), "\n");

  const v1::TrainingSpec& t = spec.training();
  const v1::OptimizerSpec& opt = t.optimizer();
  absl::StrAppend(&out, "training:\n  global_batch: ", t.global_batch(),
                  "\n  micro_batch: ", t.micro_batch(), "\n  epochs: ", t.epochs(), "\n");
  // Only the fields of its type: ParseJobSpec refuses the others.
  absl::StrAppend(&out, "  optimizer: {type: ", YamlString(opt.type()),
                  ", lr: ", YamlDouble(opt.lr()));
  if (opt.type() != "adamw") absl::StrAppend(&out, ", momentum: ", YamlDouble(opt.momentum()));
  absl::StrAppend(&out, ", weight_decay: ", YamlDouble(opt.weight_decay()));
  if (opt.type() != "sgd") {
    absl::StrAppend(&out, ", beta1: ", YamlDouble(opt.beta1()),
                    ", beta2: ", YamlDouble(opt.beta2()), ", eps: ", YamlDouble(opt.eps()));
  }
  absl::StrAppend(&out, "}\n");
  absl::StrAppend(&out, "  seed: ", t.seed(), "\n  max_steps: ", t.max_steps(), "\n");
  absl::StrAppend(&out, "  checkpoint_every_steps: ", t.checkpoint_every_steps(), "\n");

  const v1::ParallelSpec& p = spec.parallel();
  absl::StrAppend(&out, "parallel:\n  schedule: ", YamlString(p.schedule()),
                  "\n  planner: ", YamlString(p.planner()), "\n  stages: ");
  if (p.stage_ranges_size() > 0) {
    std::vector<std::string> ranges;
    for (const v1::StageRange& r : p.stage_ranges()) ranges.push_back(RangeText(r));
    absl::StrAppend(&out, "[", absl::StrJoin(ranges, ", "), "]\n");
  } else if (p.stages() == 0) {
    absl::StrAppend(&out, "auto\n");
  } else {
    absl::StrAppend(&out, p.stages(), "\n");
  }
  absl::StrAppend(&out, "  devices: ", p.devices(), "\n");
  absl::StrAppend(&out, "  device_type: ",
                  YamlString(p.device_type().empty() ? kDefaultDeviceType : p.device_type()), "\n");
  if (p.has_emulation()) {
    absl::StrAppend(&out, "  emulation: {profile: ", YamlString(p.emulation().profile()),
                    ", scale: ", YamlDouble(p.emulation().scale()), "}\n");
  }
  if (p.has_pipedream()) {
    absl::StrAppend(&out, "  pipedream: {vertical_sync: ",
                    p.pipedream().vertical_sync() ? "true" : "false", "}\n");
  }
  if (p.has_pipesgd()) {
    absl::StrAppend(
        &out, "  pipesgd: {warmup_steps: ", p.pipesgd().warmup_steps(), ", compression: ",
        YamlString(p.pipesgd().compression().empty() ? "none" : p.pipesgd().compression()), "}\n");
  }
  return out;
}

}  // namespace dapple
