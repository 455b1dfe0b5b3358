// Jobs on the emulated device (parallel.device_type: emulated; docs/job_spec.md): every
// layer's compute is replaced on the workers by a wait of its time in the job's emulation
// profile, so the coordinator plans on that same profile and hands it to every rank
// (StageAssignment.emulated_profile).
//
// The job's profile is built from the file and the model:
//   - times (forward_ms, backward_ms, optimizer_ms) are the file's, multiplied by
//     emulation.scale, at the file's batch size (profile::ReadProfileFile: "pbs-N" in the file
//     name or an image model's Input node);
//   - sizes (activation_bytes, saved_bytes, parameter_bytes) are the model's real ones (fp32,
//     profile::SetLayerSizes), because real buffers of those sizes travel between the emulated
//     stages and are held in memory: the simulator's transfers and memory model then describe
//     what runs;
//   - names are "<model layer type> (emulated as <file id> '<file name>')" and the source
//     "emulated: <path> x <scale>"; Input nodes are dropped and the layers taken in the file's
//     (topological) order as a chain.
// Functions may read the profile file (size-capped, profile::kMaxProfileFileBytes); thread-safe.
#ifndef DAPPLE_COORDINATOR_SERVICE_EMULATION_H_
#define DAPPLE_COORDINATOR_SERVICE_EMULATION_H_

#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "coordinator/planner/planner.h"
#include "dapple/v1/job.pb.h"
#include "dapple/v1/plan.pb.h"
#include "dapple/v1/profile.pb.h"

namespace dapple::coordinator {

// The spec field that names an emulated job's profile, as errors about it name it.
inline constexpr char kEmulationProfileField[] = "parallel.emulation.profile";

// The text a job spec was submitted as (SubmitJobRequest.spec_yaml, source_name), so that a
// refusal of its emulation profile points at the parallel.emulation.profile line like the
// spec's other refusals (JobSpecFieldError). Views: the text must outlive the call.
struct SpecText {
  absl::string_view yaml;
  absl::string_view source;
};

// True for parallel.device_type emulated.
bool IsEmulated(const v1::JobSpec& spec);

// The job's emulated profile (see above) from `file`, the profile read from
// spec.parallel().emulation().profile(). Pure. kInvalidArgument when the file's layers (Input
// nodes excluded) are not one per model layer: "parallel.emulation.profile /p/x.txt has 5
// layers (Input nodes excluded) but the model has 6 (model.layers): an emulation profile needs
// exactly one entry per model layer"; InferLayers' errors for the model.
absl::StatusOr<v1::ModelProfile> EmulatedProfileFromFile(const v1::JobSpec& spec,
                                                         const v1::ModelProfile& file);

// Reads and converts the emulation profile of `spec`; std::nullopt for a job that is not
// emulated. Errors name parallel.emulation.profile (kInvalidArgument, whatever the reader's
// code: the user's file is the input to fix): a missing or unreadable file
// ("parallel.emulation.profile: /p/x.txt: No such file or directory", "...: Is a directory"),
// an unknown batch size, a parse error, EmulatedProfileFromFile's errors. With `text` (the
// spec's submitted YAML) they start with its location of that field, as ParseJobSpec's do:
// "job.yaml:24:23: parallel.emulation.profile: /p/x.txt: No such file or directory".
absl::StatusOr<std::optional<v1::ModelProfile>> EmulatedProfileOf(const v1::JobSpec& spec,
                                                                  const SpecText* text = nullptr);

// MakePlan(spec, inputs) for every job; for an emulated one, planned on EmulatedProfileOf
// (whatever inputs.profile holds; its errors located in `text` when given) and marked:
// summary.emulated = true, profile_source "emulated: <path> x <scale>", a note saying that
// compute is emulated.
absl::StatusOr<v1::ParallelPlan> MakeJobPlan(const v1::JobSpec& spec, PlanInputs inputs,
                                             const SpecText* text = nullptr);

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_SERVICE_EMULATION_H_
