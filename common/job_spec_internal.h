// Declarations shared by the files that implement common/job_spec.h: job_spec_load.cc (YAML
// text -> document), job_spec_parse.cc (document -> JobSpec), job_spec_validate*.cc (the rules)
// and job_spec_yaml.cc (JobSpec -> YAML). An internal header of common/: nothing outside those
// files includes it.
#ifndef DAPPLE_COMMON_JOB_SPEC_INTERNAL_H_
#define DAPPLE_COMMON_JOB_SPEC_INTERNAL_H_

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/text_data.h"
#include "dapple/v1/job.pb.h"

namespace dapple::job_spec_internal {

// Values that both the parser (as defaults) and the validation rules use.
inline constexpr absl::string_view kFashionMnist = "fashion-mnist";
inline constexpr int64_t kFashionMnistTrainSamples = 60000;
inline constexpr int64_t kFashionMnistTestSamples = 10000;
// kTextDataset and kTextVocab: common/text_data.h.
inline constexpr char kDefaultLoss[] = "softmax_cross_entropy";
inline constexpr char kManualPlanner[] = "manual";
// training.restart defaults (docs/job_spec.md, "Restarts"). No restart unless asked: a job
// without checkpoints would start again from step 0, and a failing job's message is what
// today's users and alerts expect; 1 s is about the time the failed run's ranks take to stop
// (their heartbeats bring the abort); 60 s of no usable worker is long enough for a
// replacement worker to start, short enough that nobody waits on a job that cannot run.
inline constexpr int32_t kDefaultMaxRestarts = 0;
inline constexpr double kDefaultRestartBackoffSeconds = 1;
inline constexpr double kDefaultRestartMaxBackoffSeconds = 30;
inline constexpr double kDefaultRestartWaitForWorkersSeconds = 60;
inline constexpr int32_t kMaxRestarts = 100;
// Bounds of integer fields, which the parser names for a value beyond its type (Int32Within)
// and the rules check (job_spec_validate*.cc).
inline constexpr int64_t kMaxStages = 4096;
inline constexpr int64_t kMaxDevices = 4096;
inline constexpr int32_t kMinPriority = -1000;  // JobSpec.priority's range (docs/scheduling.md)
inline constexpr int32_t kMaxPriority = 1000;
// parallel.interleave: v = 1 is 1F1B (schedule dapple); past 8 chunks a stage's chunks get too
// thin to pay for the v-fold point-to-point traffic (Megatron reports v = 2..4 in practice).
inline constexpr int kMinInterleave = 2;
inline constexpr int kMaxInterleave = 8;
inline constexpr int kMaxPipeSgdWarmup = 1000;
inline constexpr double kMaxRestartSeconds = 86400;
inline constexpr char kDefaultDeviceType[] = "any";
inline constexpr absl::string_view kKnownOptimizers[] = {"sgd", "adamw"};
// The values of the fields that take one of a list: the rules refuse others, and the parser
// names them for an empty string (JobSpecParser::Choice).
inline constexpr absl::string_view kLrDecays[] = {"none", "cosine"};
// auto: the planner chooses among the synchronous schedules (and recomputation) for the fastest
// plan that fits (coordinator/planner/schedule_choice.h); the plan names what the workers run.
inline constexpr absl::string_view kAvailableSchedules[] = {
    "gpipe", "dapple", "pipedream", "pipesgd", "zb-h1", "zb-h2", "interleaved", "auto"};
inline constexpr absl::string_view kAvailablePlanners[] = {
    "balanced", "uniform", "manual", "dapple", "pipedream", "pipedream-code", "dp"};
inline constexpr absl::string_view kDeviceTypes[] = {"any", "cpu", "cuda", "emulated"};
// The device types a tenant's quota counts (admin.proto DeviceQuota): a job's
// parallel.device_type other than "any" (charged to cuda or cpu: scheduling_manager.h).
inline constexpr absl::string_view kQuotaDeviceTypes[] = {"cpu", "cuda", "emulated"};
inline constexpr absl::string_view kPrecisions[] = {"fp32", "bf16"};
inline constexpr absl::string_view kRecomputeModes[] = {"none", "all", "auto"};
inline constexpr absl::string_view kPipeSgdCompressions[] = {"none", "fp16", "int8"};
inline constexpr absl::string_view kInputTypes[] = {"float", "tokens"};
inline constexpr absl::string_view kKnownDatasets[] = {kFashionMnist, kTextDataset};
// schedule pipesgd (Pipe-SGD, docs/job_spec.md): CheckPipeSgd in job_spec_validate.cc.
inline constexpr char kPipeSgdSchedule[] = "pipesgd";

// Validation. Each rule reports the YAML field it is about, so ParseJobSpec can point at its line.
struct Violation {
  std::string field;  // YAML path, e.g. "training.micro_batch" or "parallel.stages[1]"
  std::string message;
};
using Check = std::optional<Violation>;

// A violation of `field`.
Violation At(std::string field, std::string message);

// `field` `value` when it exceeds `max`: "FIELD VALUE is more than the maximum MAX".
Check CheckAtMost(const std::string& field, int64_t value, int64_t max);

// job_spec_validate_training.cc: the training section.
Check CheckTraining(const v1::JobSpec& spec);

// job_spec_validate_model.cc: the data, model and sample sections.
Check CheckData(const v1::JobSpec& spec);
Check CheckModel(const v1::JobSpec& spec);
Check CheckSample(const v1::JobSpec& spec);

// job_spec_validate_interleaved.cc: parallel.schedule interleaved and parallel.interleave, for a
// spec whose other parallel fields are valid; `stages` is the fixed stage count (0 = auto).
Check CheckInterleaved(const v1::JobSpec& spec, int stages);

// Every rule of ValidateJobSpec, in its order: the first violation, or nullopt for a valid
// spec. The message is not yet made one line (OneLine).
Check Validate(const v1::JobSpec& spec);

// Reads the single YAML document of `yaml`; syntax errors become kInvalidArgument with 1-based
// positions, "<name>:line:col: ..." (`name` names the text). Text nested deeper than the job
// spec could need is refused before yaml-cpp reads it. An empty text gives a null node.
// yaml-cpp's exceptions do not escape; callers still guard against anything else.
absl::StatusOr<YAML::Node> LoadDocument(absl::string_view yaml, const std::string& name);

}  // namespace dapple::job_spec_internal

#endif  // DAPPLE_COMMON_JOB_SPEC_INTERNAL_H_
