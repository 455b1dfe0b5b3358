// ParseJobSpec, JobSpecFieldError and ValidateJobSpecAt (job_spec.h): the YAML document ->
// JobSpec, filling defaults, with every error at the line and column of the field it is about.
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
#include "absl/types/span.h"
#include "common/job_spec.h"
#include "common/job_spec_internal.h"
#include "common/job_spec_parser.h"
#include "common/spec_text.h"
#include "common/status.h"

namespace dapple {
namespace job_spec_internal {
namespace {

constexpr char kDefaultSchedule[] = "dapple";
constexpr char kDefaultPlanner[] = "balanced";
constexpr double kDefaultBeta1 = 0.9;
constexpr double kDefaultBeta2 = 0.999;
constexpr double kDefaultEps = 1e-8;
// parallel.pipesgd.warmup_steps when not given (schedule pipesgd).
constexpr int kDefaultPipeSgdWarmup = 2;

constexpr absl::string_view kRootKeys[] = {"name",     "model",  "data",    "training",
                                           "parallel", "sample", "priority"};
constexpr absl::string_view kTrainingKeys[] = {"global_batch",
                                               "micro_batch",
                                               "epochs",
                                               "optimizer",
                                               "seed",
                                               "max_steps",
                                               "checkpoint_every_steps",
                                               "max_grad_norm",
                                               "lr_schedule",
                                               "eval_every_steps",
                                               "precision",
                                               "recompute",
                                               "max_consecutive_skipped_steps",
                                               "restart",
                                               "checkpoint_every_minutes"};
constexpr absl::string_view kRestartKeys[] = {"max_restarts", "backoff_seconds",
                                              "max_backoff_seconds", "on_rank_error",
                                              "wait_for_workers_seconds"};
constexpr absl::string_view kOptimizerKeys[] = {"type",  "lr",    "momentum", "weight_decay",
                                                "beta1", "beta2", "eps"};
constexpr absl::string_view kLrScheduleKeys[] = {"warmup_steps", "decay", "min_lr", "decay_steps"};
constexpr absl::string_view kParallelKeys[] = {"schedule", "planner",     "stages",
                                               "devices",  "device_type", "emulation",
                                               "pipesgd",  "pipedream",   "interleave"};
constexpr absl::string_view kPipeDreamKeys[] = {"vertical_sync"};
constexpr absl::string_view kEmulationKeys[] = {"profile", "scale"};
constexpr absl::string_view kPipeSgdKeys[] = {"warmup_steps", "compression"};

}  // namespace

std::string Parser::FieldElsewhere(absl::string_view key, absl::string_view path) {
  // A field written in the wrong section is a common slip (recompute or precision under
  // parallel, devices under training); the unknown-field message then says where it goes.
  const std::pair<absl::string_view, absl::Span<const absl::string_view>> sections[] = {
      {"training", kTrainingKeys}, {"parallel", kParallelKeys}};
  for (const auto& [section, keys] : sections) {
    if (section == path) continue;
    if (Contains(keys, key)) return absl::StrCat(section, ".", key);
  }
  return "";
}

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
  if (const Field* f = Find(fields, "priority")) {
    DAPPLE_ASSIGN_OR_RETURN(int32_t priority,
                            Int32Within(*f, "priority", kMinPriority, kMaxPriority));
    spec.set_priority(priority);
  }

  const Field* model = Find(fields, "model");
  if (model == nullptr) return Missing(YAML::Mark::null_mark(), "model");
  DAPPLE_RETURN_IF_ERROR(ParseModel(*model, *spec.mutable_model()));
  DAPPLE_RETURN_IF_ERROR(ParseData(Find(fields, "data"), *spec.mutable_data()));
  DAPPLE_RETURN_IF_ERROR(ResolveModelInput(*model, spec));
  if (const Field* f = Find(fields, "sample")) {
    DAPPLE_RETURN_IF_ERROR(ParseSample(*f, *spec.mutable_sample()));
  } else if (spec.model().input_type() == "tokens") {
    // A language model shows what it learned unless told otherwise.
    DAPPLE_RETURN_IF_ERROR(ParseSample(Field{}, *spec.mutable_sample()));
  }

  const Field* training = Find(fields, "training");
  if (training == nullptr) return Missing(YAML::Mark::null_mark(), "training");
  DAPPLE_RETURN_IF_ERROR(ParseTraining(*training, *spec.mutable_training()));

  return ParseParallel(Find(fields, "parallel"), *spec.mutable_parallel());
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
  if (const Field* f = Find(fields, "checkpoint_every_minutes")) {
    DAPPLE_ASSIGN_OR_RETURN(double v, Double(*f, "training.checkpoint_every_minutes"));
    training.set_checkpoint_every_minutes(v);
  }
  if (const Field* f = Find(fields, "max_grad_norm")) {
    DAPPLE_ASSIGN_OR_RETURN(double v, Double(*f, "training.max_grad_norm"));
    training.set_max_grad_norm(v);
  }
  if (const Field* f = Find(fields, "max_consecutive_skipped_steps")) {
    DAPPLE_ASSIGN_OR_RETURN(int64_t v, Int64(*f, "training.max_consecutive_skipped_steps"));
    training.set_max_consecutive_skipped_steps(v);
  }
  if (const Field* f = Find(fields, "eval_every_steps")) {
    DAPPLE_ASSIGN_OR_RETURN(int64_t v, Int64(*f, "training.eval_every_steps"));
    training.set_eval_every_steps(v);
  }
  if (const Field* f = Find(fields, "precision")) {
    DAPPLE_ASSIGN_OR_RETURN(*training.mutable_precision(),
                            Choice(*f, "training.precision", kPrecisions));
  }
  if (const Field* f = Find(fields, "recompute")) {
    DAPPLE_ASSIGN_OR_RETURN(*training.mutable_recompute(),
                            Choice(*f, "training.recompute", kRecomputeModes));
  }
  if (const Field* f = Find(fields, "lr_schedule")) {
    DAPPLE_RETURN_IF_ERROR(ParseLrSchedule(*f, *training.mutable_lr_schedule()));
  }
  if (const Field* f = Find(fields, "restart")) {
    DAPPLE_RETURN_IF_ERROR(ParseRestart(*f, *training.mutable_restart()));
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
    DAPPLE_ASSIGN_OR_RETURN(*opt.mutable_type(),
                            Choice(*f, "training.optimizer.type", kKnownOptimizers));
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

absl::Status Parser::ParseLrSchedule(const Field& section, v1::LrSchedule& schedule) {
  DAPPLE_ASSIGN_OR_RETURN(Fields fields,
                          ReadMap(section.value, MarkOf(section), "training.lr_schedule",
                                  kLrScheduleKeys, " like {warmup_steps: 100, decay: cosine}"));
  if (const Field* f = Find(fields, "warmup_steps")) {
    DAPPLE_ASSIGN_OR_RETURN(int64_t v, Int64(*f, "training.lr_schedule.warmup_steps"));
    schedule.set_warmup_steps(v);
  }
  schedule.set_decay("none");
  if (const Field* f = Find(fields, "decay")) {
    DAPPLE_ASSIGN_OR_RETURN(*schedule.mutable_decay(),
                            Choice(*f, "training.lr_schedule.decay", kLrDecays));
  }
  if (const Field* f = Find(fields, "min_lr")) {
    DAPPLE_ASSIGN_OR_RETURN(double v, Double(*f, "training.lr_schedule.min_lr"));
    schedule.set_min_lr(v);
  }
  if (const Field* f = Find(fields, "decay_steps")) {
    DAPPLE_ASSIGN_OR_RETURN(int64_t v, Int64(*f, "training.lr_schedule.decay_steps"));
    schedule.set_decay_steps(v);
  }
  return absl::OkStatus();
}

absl::Status Parser::ParseRestart(const Field& section, v1::RestartSpec& restart) {
  restart.set_max_restarts(kDefaultMaxRestarts);
  restart.set_backoff_seconds(kDefaultRestartBackoffSeconds);
  restart.set_max_backoff_seconds(kDefaultRestartMaxBackoffSeconds);
  restart.set_on_rank_error(true);
  restart.set_wait_for_workers_seconds(kDefaultRestartWaitForWorkersSeconds);
  DAPPLE_ASSIGN_OR_RETURN(Fields fields,
                          ReadMap(section.value, MarkOf(section), "training.restart", kRestartKeys,
                                  " like {max_restarts: 3, backoff_seconds: 1}"));
  if (const Field* f = Find(fields, "max_restarts")) {
    DAPPLE_ASSIGN_OR_RETURN(int32_t v,
                            Int32Within(*f, "training.restart.max_restarts", 0, kMaxRestarts));
    restart.set_max_restarts(v);
  }
  if (const Field* f = Find(fields, "backoff_seconds")) {
    DAPPLE_ASSIGN_OR_RETURN(double v, Double(*f, "training.restart.backoff_seconds"));
    restart.set_backoff_seconds(v);
  }
  if (const Field* f = Find(fields, "max_backoff_seconds")) {
    DAPPLE_ASSIGN_OR_RETURN(double v, Double(*f, "training.restart.max_backoff_seconds"));
    restart.set_max_backoff_seconds(v);
  }
  if (const Field* f = Find(fields, "on_rank_error")) {
    DAPPLE_ASSIGN_OR_RETURN(bool v, Bool(*f, "training.restart.on_rank_error"));
    restart.set_on_rank_error(v);
  }
  if (const Field* f = Find(fields, "wait_for_workers_seconds")) {
    DAPPLE_ASSIGN_OR_RETURN(double v, Double(*f, "training.restart.wait_for_workers_seconds"));
    restart.set_wait_for_workers_seconds(v);
  }
  // A setting that would silently do nothing is refused: the user meant restarts to happen.
  if (restart.max_restarts() == 0) {
    for (absl::string_view key : kRestartKeys) {
      if (key == "max_restarts") continue;
      if (const Field* f = Find(fields, std::string(key))) {
        return Error(MarkOf(*f),
                     absl::StrCat("training.restart.", key,
                                  " has no effect while training.restart.max_restarts is 0 (no "
                                  "restarts, the default): set max_restarts to at least 1, or "
                                  "remove ",
                                  key));
      }
    }
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
    DAPPLE_ASSIGN_OR_RETURN(int32_t value, Int32Within(f, "parallel.stages", 0, kMaxStages));
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
    DAPPLE_ASSIGN_OR_RETURN(*parallel.mutable_schedule(),
                            Choice(*f, "parallel.schedule", kAvailableSchedules));
  }
  parallel.set_stages(0);
  if (const Field* f = Find(fields, "stages")) DAPPLE_RETURN_IF_ERROR(ParseStages(*f, parallel));
  parallel.set_planner(parallel.stage_ranges_size() > 0 ? kManualPlanner : kDefaultPlanner);
  if (const Field* f = Find(fields, "planner")) {
    DAPPLE_ASSIGN_OR_RETURN(*parallel.mutable_planner(),
                            Choice(*f, "parallel.planner", kAvailablePlanners));
  }
  // An explicit stage count fixes the devices (one per stage); auto takes them from devices.
  parallel.set_devices(parallel.stages() > 0 ? parallel.stages() : 1);
  if (const Field* f = Find(fields, "devices")) {
    DAPPLE_ASSIGN_OR_RETURN(int32_t v, Int32Within(*f, "parallel.devices", 1, kMaxDevices));
    parallel.set_devices(v);
  }
  parallel.set_device_type(kDefaultDeviceType);
  if (const Field* f = Find(fields, "device_type")) {
    DAPPLE_ASSIGN_OR_RETURN(*parallel.mutable_device_type(),
                            Choice(*f, "parallel.device_type", kDeviceTypes));
  }
  if (const Field* f = Find(fields, "emulation")) {
    DAPPLE_RETURN_IF_ERROR(ParseEmulation(*f, *parallel.mutable_emulation()));
  }
  // Kept under any schedule, so that validation names it where it does not apply.
  if (const Field* f = Find(fields, "interleave")) {
    DAPPLE_ASSIGN_OR_RETURN(int32_t v,
                            Int32Within(*f, "parallel.interleave", kMinInterleave, kMaxInterleave));
    parallel.set_interleave(v);
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
    DAPPLE_ASSIGN_OR_RETURN(const int32_t v,
                            Int32Within(*f, "parallel.pipesgd.warmup_steps", 0, kMaxPipeSgdWarmup));
    pipesgd.set_warmup_steps(v);
  }
  pipesgd.set_compression("none");
  if (const Field* f = Find(fields, "compression")) {
    DAPPLE_ASSIGN_OR_RETURN(*pipesgd.mutable_compression(),
                            Choice(*f, "parallel.pipesgd.compression", kPipeSgdCompressions));
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

}  // namespace job_spec_internal

absl::StatusOr<v1::JobSpec> ParseJobSpec(absl::string_view yaml, absl::string_view source) {
  const std::string name = source.empty() ? std::string("<spec>") : std::string(source);
  // Before the parser sees it: yaml-cpp's tree of a large text costs many times its size.
  if (static_cast<int64_t>(yaml.size()) > kMaxJobSpecBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " is ", yaml.size(), " bytes; a job spec may be at most ",
                     kMaxJobSpecBytes, " bytes (", kMaxJobSpecBytes >> 20, " MiB)"));
  }
  absl::StatusOr<v1::JobSpec> spec = job_spec_internal::ParseAndValidate(yaml, name);
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

absl::Status ValidateJobSpecAt(const v1::JobSpec& spec, absl::string_view yaml,
                               absl::string_view source) {
  job_spec_internal::Check violation = job_spec_internal::Validate(spec);
  if (!violation) return absl::OkStatus();
  const absl::Status located =
      JobSpecFieldError(yaml, source, violation->field, violation->message);
  return absl::InvalidArgumentError(job_spec_internal::OneLine(located.message()));
}

}  // namespace dapple
