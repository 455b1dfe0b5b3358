// Job specs: YAML text <-> v1::JobSpec, and the validation every submit goes through.
#ifndef DAPPLE_COMMON_JOB_SPEC_H_
#define DAPPLE_COMMON_JOB_SPEC_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "dapple/v1/job.pb.h"

namespace dapple {

// The largest job spec text accepted, in bytes: a spec is a page of YAML; the limit stops a wrong
// file (a data set, a checkpoint) before it is parsed. The coordinator enforces it itself
// (ParseJobSpec), whatever client sent the text; dapplectl checks it before sending.
inline constexpr int64_t kMaxJobSpecBytes = int64_t{1} << 20;
// The most layers a model may have: far beyond published models (GPT-3 has 96 blocks, ResNet-152
// about 500 layers) and small enough that the planners' tables over layer ranges stay small.
inline constexpr int kMaxModelLayers = 4096;

// Parses the YAML job spec of design.md into a JobSpec, filling defaults, then validates it
// (ValidateJobSpec). `source` names the text in messages (a file name, or "<spec>").
// Errors (all kInvalidArgument, one line each):
//   syntax:  "job.yaml:4:7: YAML syntax error: <what>" (line and column 1-based)
//   unknown or misplaced keys, wrong value types: "job.yaml:3:1: unknown field 'trainig' in
//   the job spec; known: name, model, data, training, parallel"
//   size:    "job.yaml is 1048585 bytes; a job spec may be at most 1048576 bytes (1 MiB)"
//            (checked before parsing), "job.yaml:5:5: model.layers has 4097 layers; a model
//            may have at most 4096"
//   any rule of ValidateJobSpec.
absl::StatusOr<v1::JobSpec> ParseJobSpec(absl::string_view yaml, absl::string_view source);

// Checks every field; the message names the field, its value and the rule, e.g.
// "training.global_batch 256 is not divisible by training.micro_batch 48".
// Returns kInvalidArgument on the first violation, OkStatus otherwise.
absl::Status ValidateJobSpec(const v1::JobSpec& spec);

// A refusal of `field` (a YAML path like "parallel.emulation.profile") of the job spec `yaml`
// found after ParseJobSpec accepted it (the coordinator's checks that read files, e.g. the
// emulation profile): kInvalidArgument "<source>:line:col: <message>" at the position of the
// field's value (or of its closest parent present in the text), like ParseJobSpec's; just
// "<source>: <message>" when neither is in the text (or the text does not parse).
absl::Status JobSpecFieldError(absl::string_view yaml, absl::string_view source,
                               absl::string_view field, absl::string_view message);

// ValidateJobSpec for a spec parsed from `yaml` (ParseJobSpec) and completed afterwards, such as
// the coordinator's resolved data counts (data.train_samples): a violation is located in the
// text like ParseJobSpec's, "job.yaml:14:17: training.global_batch 4096 must be <= 1678, ..."
// (JobSpecFieldError). kInvalidArgument, one line; OkStatus for a valid spec.
absl::Status ValidateJobSpecAt(const v1::JobSpec& spec, absl::string_view yaml,
                               absl::string_view source);

// M = global_batch / micro_batch (D = 1). Requires a validated spec.
int64_t MicroBatches(const v1::JobSpec& spec);

// training.precision: whether the job computes in bf16 mixed precision ("bf16"; "" and "fp32"
// are fp32). The one reading of the field: validation, the kernel check, the CUDA backend and
// the MFU's peak all ask it.
bool UsesBf16(const v1::TrainingSpec& training);

// training.recompute (activation recomputation, worker/runtime/layer_recompute.h): "none" (or
// empty, the default), "all" (every stage recomputes) or "auto" (the planner turns it on for the
// stages that do not fit the device memory limit without it: coordinator/planner/recompute.h).
// The one reading of the field; a value validation refuses reads as kNone.
enum class RecomputeMode { kNone, kAll, kAuto };
RecomputeMode Recompute(const v1::TrainingSpec& training);

// The spec back as YAML (for `dapplectl get -o yaml` and logs).
std::string JobSpecToYaml(const v1::JobSpec& spec);

}  // namespace dapple

#endif  // DAPPLE_COMMON_JOB_SPEC_H_
