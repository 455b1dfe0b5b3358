// The rules of ValidateJobSpec (job_spec.h), and MicroBatches. Each rule reports the YAML field
// it is about (Violation), so ParseJobSpec can point at its line.
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/job_spec.h"
#include "common/job_spec_internal.h"
#include "common/model_info.h"
#include "common/spec_text.h"
#include "common/steps.h"

namespace dapple {
namespace job_spec_internal {
namespace {

constexpr size_t kMaxNameLength = 63;

// Activations one step may hold: global_batch * (sum over layers of per-sample output floats).
// 2^30 floats = 4 GiB of fp32, what a worker may need when a schedule keeps a whole step's
// micro-batches in flight (GPipe).
constexpr int64_t kMaxStepActivations = int64_t{1} << 30;

// The zero-bubble schedules run BACKWARD_INPUT / BACKWARD_WEIGHT (worker/runtime/
// stage_backend.h), which a recomputing stage cannot (layer_recompute.h).
constexpr absl::string_view kSplitBackwardSchedules[] = {"zb-h1", "zb-h2"};
constexpr char kEmulatedDeviceType[] = "emulated";
constexpr char kCudaDeviceType[] = "cuda";
// parallel.emulation.scale stretches profiled times so a schedule's timing shows above the
// host's noise; x1000 already turns a 1 ms layer into 1 s. More is a mistake (1e12 would keep
// the workers busy for ever), so it is refused at submit.
constexpr double kMaxEmulationScale = 1000;

// Planners that choose the pipeline depth themselves with stages auto (at most
// parallel.devices stages); balanced and uniform make one stage per device.
constexpr absl::string_view kDepthChoosingPlanners[] = {"dapple", "pipedream", "pipedream-code",
                                                        "dp"};
// PipeDream's planner as its published code plans (coordinator/planner/pipedream_code_planner.h).
constexpr char kPipeDreamCodePlanner[] = "pipedream-code";
constexpr char kDataParallelPlanner[] = "dp";

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

// "1 layer", "6 layers".
std::string Layers(int count) { return absl::StrCat(count, count == 1 ? " layer" : " layers"); }

// The resolved stage count `stages` as the spec gives it: "parallel.stages 2", or "the 2 stages
// of parallel.stages" for a list of ranges.
std::string StagesText(const v1::ParallelSpec& p, int stages) {
  if (p.stage_ranges_size() > 0) {
    return absl::StrFormat("the %s of parallel.stages", Count(stages, "stage", "stages"));
  }
  return absl::StrFormat("parallel.stages %d", stages);
}

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
      return At(field, absl::StrFormat("%s %s goes past the last layer %d of the model (%s): end "
                                       "it at layer %d at most",
                                       field, RangeText(r), num_layers - 1, Layers(num_layers),
                                       num_layers - 1));
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
                                "emulated, got parallel.device_type %s: set device_type: "
                                "emulated or remove the emulation section",
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

Check CheckPipeSgd(const v1::ParallelSpec& p, int stages) {
  if (p.schedule() != kPipeSgdSchedule) {
    if (p.has_pipesgd()) {
      return At("parallel.pipesgd",
                absl::StrFormat("parallel.pipesgd applies only to parallel.schedule pipesgd, got "
                                "parallel.schedule %s: set schedule: pipesgd or remove the "
                                "pipesgd section",
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
                              "data parallelism: devices must be >= 2: set devices to 2 or more "
                              "(or use schedule dapple on one device)",
                              p.devices()));
  }
  return std::nullopt;
}

// schedule pipedream (docs/job_spec.md): asynchronous 1F1B with weight stashing; a stage may
// have replicas (1F1B-RR: whole micro-batches round-robin, CheckPipeDreamReplicas).
constexpr char kPipeDreamSchedule[] = "pipedream";

Check CheckPipeDream(const v1::ParallelSpec& p) {
  if (p.planner() == kPipeDreamCodePlanner && p.schedule() != kPipeDreamSchedule) {
    return At("parallel.planner",
              absl::StrFormat("parallel.planner pipedream-code with parallel.schedule %s: "
                              "PipeDream's planner gives stages any replica count, which only "
                              "its 1F1B-RR runs (whole micro-batches round-robin); the "
                              "synchronous schedules split each micro-batch evenly over a "
                              "stage's replicas: set schedule: pipedream, or use planner dapple",
                              p.schedule()));
  }
  if (p.schedule() != kPipeDreamSchedule) {
    if (p.has_pipedream()) {
      return At("parallel.pipedream",
                absl::StrFormat("parallel.pipedream applies only to parallel.schedule pipedream, "
                                "got parallel.schedule %s: set schedule: pipedream or remove the "
                                "pipedream section",
                                p.schedule()));
    }
    return std::nullopt;
  }
  // PipeDream's code has no fixed depth and gives any replica count, which only 1F1B-RR (whole
  // micro-batches round-robin) runs as planned: the synchronous schedules split a micro-batch
  // evenly over a stage's replicas, which such a count need not allow.
  if (p.planner() == kPipeDreamCodePlanner && p.stages() != 0) {
    return At("parallel.stages",
              absl::StrFormat("parallel.stages %d with parallel.planner pipedream-code: "
                              "PipeDream's planner chooses the pipeline depth itself: set "
                              "stages: auto (or planner pipedream for a fixed depth)",
                              p.stages()));
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
                            p.devices(), StagesText(p, stages), replicas,
                            spec.training().global_batch(), spec.training().micro_batch(),
                            Count(micro_batches, "micro-batch", "micro-batches"),
                            static_cast<int64_t>(stages) * micro_batches, micro_batches,
                            micro_batches == 1 ? "replica" : "replicas"));
}

// The first batch-norm layer of the model that normalises each channel over at most one value
// when `rows` rows are computed together (model_info.h BatchNormOverOneValue): its index and
// output [C, H, W]; nullopt when none does (or the model does not infer: its own check says why).
std::optional<std::pair<int, std::vector<int64_t>>> BatchNormOverOneValue(const v1::JobSpec& spec,
                                                                          int64_t rows) {
  absl::StatusOr<std::vector<LayerInfo>> layers = InferLayers(spec.model());
  if (!layers.ok()) return std::nullopt;
  const LayerInfo* layer = dapple::BatchNormOverOneValue(*layers, rows);
  if (layer == nullptr) return std::nullopt;
  return std::make_pair(layer->index, layer->output_shape);
}

// Every other schedule splits each micro-batch among a stage's D replicas (split-concat), so
// each gets a sample only when D <= training.micro_batch: the planner's own rule
// (coordinator/planner/plan_simulator.cc), checked here where D is fixed at submit so that the
// refusal names the fields.
Check CheckSplitReplicas(const v1::JobSpec& spec, int stages, int replicas) {
  const v1::ParallelSpec& p = spec.parallel();
  const int64_t micro_batch = spec.training().micro_batch();
  if (p.schedule() == kPipeDreamSchedule) return std::nullopt;
  if (replicas <= micro_batch) {
    // Each replica normalises its own micro_batch / D rows (CheckBatchNormValues: the whole
    // micro-batch).
    const int64_t rows = micro_batch / replicas;
    const auto one = replicas > 1 ? BatchNormOverOneValue(spec, rows) : std::nullopt;
    if (!one.has_value()) return std::nullopt;
    const auto& [index, out] = *one;
    return At(
        "parallel.devices",
        absl::StrFormat("parallel.devices %d with %s gives %d replicas per stage, each "
                        "computing %d row%s of every micro-batch (training.micro_batch %d), "
                        "so model.layers[%d] (%s) normalises each channel over %d x %d x %d "
                        "= 1 value on a replica and its output is its bias whatever the "
                        "input: set devices to at most %d (%d replica%s per stage) or use a "
                        "larger micro_batch",
                        p.devices(), StagesText(p, stages), replicas, rows, rows == 1 ? "" : "s",
                        micro_batch, index, spec.model().layers(index).type(), rows, out[1], out[2],
                        static_cast<int64_t>(stages) * (micro_batch / 2), micro_batch / 2,
                        micro_batch / 2 == 1 ? "" : "s"));
  }
  return At("parallel.devices",
            absl::StrFormat("parallel.devices %d with %s gives %d replicas per stage, but a "
                            "stage's replicas split each micro-batch of training.micro_batch %d "
                            "samples among them: each replica needs at least one: set devices to "
                            "at most %d (%d replica%s per stage) or use a larger micro_batch",
                            p.devices(), StagesText(p, stages), replicas, micro_batch,
                            static_cast<int64_t>(stages) * micro_batch, micro_batch,
                            micro_batch == 1 ? "" : "s"));
}

// parallel.devices for the resolved stage count `stages` (0 = auto) and the planner; the
// checks before it in CheckParallel have passed.
Check CheckDevices(const v1::JobSpec& spec, int stages) {
  const v1::ParallelSpec& p = spec.parallel();
  const int num_layers = spec.model().layers_size();
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
      return At(
          "parallel.devices",
          absl::StrFormat("parallel.devices %d with parallel.stages auto and "
                          "parallel.planner %s would make %d stages (one per device), more "
                          "than the %s of the model: each stage needs at least one layer: "
                          "set devices to at most %d, or planner dapple (which replicates "
                          "stages)",
                          p.devices(), p.planner(), p.devices(), Layers(num_layers), num_layers));
    }
    return std::nullopt;
  }
  // A fixed stage count: every stage gets devices / stages replicas (D), so devices must be a
  // multiple of the stages (dapple and pipedream with a fixed P replicate as they choose, up to
  // the same devices).
  if (p.devices() < stages) {
    return At("parallel.devices",
              absl::StrFormat("parallel.devices %d is fewer than %s: each stage needs its own "
                              "device: set devices to %d (or a multiple of it)",
                              p.devices(), StagesText(p, stages), stages));
  }
  if (p.devices() % stages != 0) {
    const int lower = p.devices() / stages * stages;
    return At("parallel.devices",
              absl::StrFormat("parallel.devices %d is not a multiple of %s: each stage gets "
                              "devices / stages replicas: set devices to %d or %d",
                              p.devices(), StagesText(p, stages), lower, lower + stages));
  }
  if (!Contains(kDepthChoosingPlanners, p.planner())) {
    if (Check pipedream = CheckPipeDreamReplicas(spec, stages, p.devices() / stages)) {
      return pipedream;
    }
    return CheckSplitReplicas(spec, stages, p.devices() / stages);
  }
  return std::nullopt;
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
                              "[first_layer, last_layer] ranges, got %s: give the ranges (e.g. "
                              "stages: [[0, 2], [3, 5]]) or another planner",
                              p.stages() == 0 ? std::string("auto") : absl::StrCat(p.stages())));
  }
  if (explicit_ranges && !manual) {
    return At("parallel.planner",
              absl::StrFormat("parallel.stages is an explicit list of ranges, which only "
                              "parallel.planner manual takes, got parallel.planner %s: set "
                              "planner: manual, or stages to a count or auto",
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
                              "needs at least one layer: set stages to at most %d",
                              stages, Layers(num_layers), num_layers));
  }
  if (explicit_ranges) {
    if (Check c = CheckStageRanges(p, num_layers)) return c;
  }
  if (Check c = CheckPipeSgd(p, stages)) return c;
  if (Check c = CheckPipeDream(p)) return c;
  if (Check c = CheckDevices(spec, stages)) return c;
  return CheckInterleaved(spec, stages);
}

// training.precision: known, and bf16 only where every stage runs on a CUDA device. Needs a
// valid parallel.device_type. The coordinator checks at submit that every layer type has a bf16
// CUDA kernel (common/model_info.h CheckKernels).
Check CheckPrecision(const v1::JobSpec& spec) {
  const std::string& precision = spec.training().precision();
  if (!precision.empty() && !Contains(kPrecisions, precision)) {
    return At("training.precision", absl::StrFormat("training.precision '%s' is unknown; known: %s",
                                                    precision, absl::StrJoin(kPrecisions, ", ")));
  }
  const std::string& device_type = spec.parallel().device_type();
  if (UsesBf16(spec.training()) && device_type != kCudaDeviceType) {
    return At("training.precision",
              absl::StrFormat("training.precision bf16 needs every stage on a CUDA GPU, but "
                              "parallel.device_type is %s: set parallel.device_type: cuda (or "
                              "precision: fp32)",
                              device_type.empty() ? kDefaultDeviceType : device_type));
  }
  return std::nullopt;
}

// training.recompute: known, and not with a zero-bubble schedule (layer_recompute.h).
Check CheckRecompute(const v1::JobSpec& spec) {
  const std::string& recompute = spec.training().recompute();
  if (!recompute.empty() && !Contains(kRecomputeModes, recompute)) {
    return At("training.recompute",
              absl::StrFormat("training.recompute '%s' is unknown; known: %s", recompute,
                              absl::StrJoin(kRecomputeModes, ", ")));
  }
  if (Recompute(spec.training()) != RecomputeMode::kNone &&
      Contains(kSplitBackwardSchedules, spec.parallel().schedule())) {
    return At("training.recompute",
              absl::StrFormat("training.recompute %s with parallel.schedule %s is not supported: "
                              "a recomputing stage replays one micro-batch's forward right before "
                              "its backward, and %s splits that backward around other "
                              "micro-batches' work: set recompute: none (or schedule: dapple)",
                              recompute, spec.parallel().schedule(), spec.parallel().schedule()));
  }
  return std::nullopt;
}

// Needs a valid model and batch sizes. Batch normalisation in training normalises each channel
// over a micro-batch's N x H x W values (docs/layers.md); over one value its output is the bias
// whatever the input: the layer passes nothing on and the model cannot learn (a user's
// 28x28-kernel conv then batchnorm2d at micro_batch 1 trained to 10.9%). PyTorch refuses the same
// ("Expected more than 1 value per channel when training"). A stage's replicas each normalise
// their own share of the micro-batch: CheckSplitReplicas checks that.
Check CheckBatchNormValues(const v1::JobSpec& spec) {
  if (absl::StatusOr<std::vector<LayerInfo>> layers = InferLayers(spec.model()); !layers.ok()) {
    return At("model", std::string(layers.status().message()));
  }
  const int64_t micro = spec.training().micro_batch();
  const auto one = BatchNormOverOneValue(spec, micro);
  if (!one.has_value()) return std::nullopt;
  const auto& [index, out] = *one;
  return At("training.micro_batch",
            absl::StrFormat("model.layers[%d] (%s) normalises each channel over training."
                            "micro_batch %d x %d x %d = 1 value, so its output is its bias "
                            "whatever the input: use a micro_batch of at least 2 (or a larger "
                            "image at that layer)",
                            index, spec.model().layers(index).type(), micro, out[1], out[2]));
}

// Needs a valid model and batch sizes.
Check CheckStepActivations(const v1::JobSpec& spec) {
  absl::StatusOr<std::vector<LayerInfo>> layers = InferLayers(spec.model());
  if (!layers.ok()) return At("model", std::string(layers.status().message()));
  int64_t per_sample = 0;  // <= 4096 layers * 2^24 floats each
  for (const LayerInfo& layer : *layers) {
    per_sample += NumElements(layer.output_shape) + layer.saved_bytes / 4;
  }
  const int64_t batch = spec.training().global_batch();  // <= 2^20
  if (per_sample > kMaxStepActivations / batch) {
    const double floats = static_cast<double>(per_sample) * static_cast<double>(batch);
    return At("training.global_batch",
              absl::StrFormat("training.global_batch %d times the model's %d activation floats "
                              "per sample (outputs and what backward keeps) is %.0f floats (%.2f "
                              "GiB of fp32) per step, more than "
                              "the maximum 2^30 (4 GiB): use a smaller global_batch or narrower "
                              "layers",
                              batch, per_sample, floats, floats * sizeof(float) / (1 << 30)));
  }
  return std::nullopt;
}

}  // namespace

Check CheckAtMost(const std::string& field, int64_t value, int64_t max) {
  if (value > max) {
    return At(field, absl::StrFormat("%s %d is more than the maximum %d", field, value, max));
  }
  return std::nullopt;
}

Check Validate(const v1::JobSpec& spec) {
  if (Check c = CheckName(spec)) return c;
  if (spec.priority() < kMinPriority || spec.priority() > kMaxPriority) {
    return At("priority",
              absl::StrFormat("priority %d must be in [%d, %d] (higher runs first within the "
                              "tenant's queue and may preempt lower ones)",
                              spec.priority(), kMinPriority, kMaxPriority));
  }
  if (Check c = CheckData(spec)) return c;
  if (Check c = CheckModel(spec)) return c;
  if (Check c = CheckTraining(spec)) return c;
  if (Check c = CheckSample(spec)) return c;
  if (Check c = CheckStepActivations(spec)) return c;
  if (Check c = CheckBatchNormValues(spec)) return c;
  if (Check c = CheckParallel(spec)) return c;
  if (Check c = CheckPrecision(spec)) return c;
  return CheckRecompute(spec);
}

}  // namespace job_spec_internal

bool UsesBf16(const v1::TrainingSpec& training) { return training.precision() == "bf16"; }

RecomputeMode Recompute(const v1::TrainingSpec& training) {
  if (training.recompute() == "all") return RecomputeMode::kAll;
  if (training.recompute() == "auto") return RecomputeMode::kAuto;
  return RecomputeMode::kNone;
}

absl::Status ValidateJobSpec(const v1::JobSpec& spec) {
  if (job_spec_internal::Check violation = job_spec_internal::Validate(spec)) {
    return absl::InvalidArgumentError(job_spec_internal::OneLine(violation->message));
  }
  return absl::OkStatus();
}

int64_t MicroBatches(const v1::JobSpec& spec) {
  const int64_t micro = spec.training().micro_batch();
  return micro > 0 ? spec.training().global_batch() / micro : 0;
}

}  // namespace dapple
