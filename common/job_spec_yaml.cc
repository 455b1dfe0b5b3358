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
#include "common/model/layer_registry.h"
#include "common/spec_text.h"
#include "google/protobuf/descriptor.h"

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

// ", heads: 4, dropout: 0.1": a layer's parameters that are set, in declaration order.
std::string LayerParamsYaml(const v1::LayerSpec& layer) {
  namespace pb = google::protobuf;
  const pb::Message* params = LayerParams(layer);
  if (params == nullptr) return "";
  const pb::Descriptor* d = params->GetDescriptor();
  const pb::Reflection* r = params->GetReflection();
  std::string out;
  for (int i = 0; i < d->field_count(); ++i) {
    const pb::FieldDescriptor* f = d->field(i);
    if (f->is_repeated() || !r->HasField(*params, f)) continue;
    absl::StrAppend(&out, ", ", f->name(), ": ");
    switch (f->cpp_type()) {
      case pb::FieldDescriptor::CPPTYPE_INT64:
        absl::StrAppend(&out, r->GetInt64(*params, f));
        break;
      case pb::FieldDescriptor::CPPTYPE_DOUBLE:
        absl::StrAppend(&out, YamlDouble(r->GetDouble(*params, f)));
        break;
      case pb::FieldDescriptor::CPPTYPE_BOOL:
        absl::StrAppend(&out, r->GetBool(*params, f) ? "true" : "false");
        break;
      case pb::FieldDescriptor::CPPTYPE_STRING:
        absl::StrAppend(&out, YamlString(r->GetString(*params, f)));
        break;
      default:
        break;  // job.proto's layer parameters are the four types above
    }
  }
  return out;
}

}  // namespace

std::string JobSpecToYaml(const v1::JobSpec& spec) {
  std::string out;
  absl::StrAppend(&out, "name: ", YamlString(spec.name()), "\n");
  if (spec.priority() != 0) absl::StrAppend(&out, "priority: ", spec.priority(), "\n");

  const v1::ModelSpec& model = spec.model();
  absl::StrAppend(&out, "model:\n  input_shape: ", FormatShape(model.input_shape()), "\n");
  if (!model.input_type().empty()) {
    absl::StrAppend(&out, "  input_type: ", YamlString(model.input_type()), "\n");
  }
  if (model.layers().empty()) {
    absl::StrAppend(&out, "  layers: []\n");
  } else {
    absl::StrAppend(&out, "  layers:\n");
    for (const v1::LayerSpec& layer : model.layers()) {
      absl::StrAppend(&out, "    - {type: ", YamlString(layer.type()), LayerParamsYaml(layer),
                      "}\n");
    }
  }
  absl::StrAppend(&out, "  loss: ", YamlString(model.loss()), "\n");

  const v1::DataSpec& data = spec.data();
  absl::StrAppend(&out, "data:\n  dataset: ", YamlString(data.dataset()),
                  "\n  path: ", YamlString(data.path()), "\n");
  // The counts resolved at submit are not spec fields: a spec read back resolves them again.
  if (data.seq_len() != 0) absl::StrAppend(&out, "  seq_len: ", data.seq_len(), "\n");
  if (data.validation_fraction() != 0) {
    absl::StrAppend(&out, "  validation_fraction: ", YamlDouble(data.validation_fraction()), "\n");
  }

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
  if (t.checkpoint_every_minutes() != 0) {
    absl::StrAppend(&out, "  checkpoint_every_minutes: ", YamlDouble(t.checkpoint_every_minutes()),
                    "\n");
  }
  if (t.max_grad_norm() != 0) {
    absl::StrAppend(&out, "  max_grad_norm: ", YamlDouble(t.max_grad_norm()), "\n");
  }
  if (t.max_consecutive_skipped_steps() != 0) {
    absl::StrAppend(&out, "  max_consecutive_skipped_steps: ", t.max_consecutive_skipped_steps(),
                    "\n");
  }
  if (t.eval_every_steps() != 0) {
    absl::StrAppend(&out, "  eval_every_steps: ", t.eval_every_steps(), "\n");
  }
  if (!t.precision().empty()) {
    absl::StrAppend(&out, "  precision: ", YamlString(t.precision()), "\n");
  }
  if (!t.recompute().empty()) {
    absl::StrAppend(&out, "  recompute: ", YamlString(t.recompute()), "\n");
  }
  if (t.has_lr_schedule()) {
    const v1::LrSchedule& l = t.lr_schedule();
    absl::StrAppend(&out, "  lr_schedule: {warmup_steps: ", l.warmup_steps(),
                    ", decay: ", YamlString(l.decay().empty() ? "none" : l.decay()),
                    ", min_lr: ", YamlDouble(l.min_lr()), ", decay_steps: ", l.decay_steps(),
                    "}\n");
  }

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
  if (p.interleave() != 0) absl::StrAppend(&out, "  interleave: ", p.interleave(), "\n");
  if (p.has_pipedream()) {
    absl::StrAppend(&out, "  pipedream: {vertical_sync: ",
                    p.pipedream().vertical_sync() ? "true" : "false", "}\n");
  }
  if (p.has_pipesgd()) {
    absl::StrAppend(
        &out, "  pipesgd: {warmup_steps: ", p.pipesgd().warmup_steps(), ", compression: ",
        YamlString(p.pipesgd().compression().empty() ? "none" : p.pipesgd().compression()), "}\n");
  }
  if (spec.has_sample()) {
    const v1::SampleSpec& sm = spec.sample();
    absl::StrAppend(&out, "sample: {prompt: ", YamlString(sm.prompt()), ", tokens: ", sm.tokens(),
                    ", temperature: ", YamlDouble(sm.temperature()), "}\n");
  }
  return out;
}

}  // namespace dapple
