// JobSpecToYaml (job_spec.h): a JobSpec back as YAML that ParseJobSpec reads back unchanged.
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/job_spec.h"
#include "common/job_spec_internal.h"
#include "common/spec_text.h"

namespace dapple {
namespace {

using job_spec_internal::FormatDouble;
using job_spec_internal::FormatShape;
using job_spec_internal::kDefaultDeviceType;
using job_spec_internal::RangeText;

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

}  // namespace

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
      if (layer.out() != 0) absl::StrAppend(&out, ", out: ", layer.out());
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
