#include "coordinator/service/emulation.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/job_spec.h"
#include "common/model_info.h"
#include "common/profile/model_profile.h"
#include "common/status.h"

namespace dapple::coordinator {

bool IsEmulated(const v1::JobSpec& spec) { return spec.parallel().device_type() == "emulated"; }

namespace {

std::string Source(const v1::JobSpec& spec) {
  return absl::StrCat("emulated: ", spec.parallel().emulation().profile(), " x ",
                      absl::StrFormat("%g", spec.parallel().emulation().scale()));
}

}  // namespace

absl::StatusOr<v1::ModelProfile> EmulatedProfileFromFile(const v1::JobSpec& spec,
                                                         const v1::ModelProfile& file) {
  DAPPLE_ASSIGN_OR_RETURN(const std::vector<LayerInfo> layers, InferLayers(spec.model()));
  std::vector<const v1::LayerProfile*> entries;
  for (const v1::LayerProfile& l : file.layers()) {
    if (!l.input()) entries.push_back(&l);
  }
  if (entries.size() != layers.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "parallel.emulation.profile %s has %d layers (Input nodes excluded) but the model has %d "
        "(model.layers): an emulation profile needs exactly one entry per model layer",
        spec.parallel().emulation().profile(), entries.size(), layers.size()));
  }
  const double scale = spec.parallel().emulation().scale();
  v1::ModelProfile out;
  out.set_source(Source(spec));
  out.set_batch_size(file.batch_size());
  out.set_device_kind("emulated");
  for (size_t k = 0; k < layers.size(); ++k) {
    const v1::LayerProfile& e = *entries[k];
    v1::LayerProfile* l = out.add_layers();
    l->set_id(e.id());
    l->set_name(absl::StrFormat("%s (emulated as %s '%s')", layers[k].type, e.id(), e.name()));
    l->set_forward_ms(e.forward_ms() * scale);
    l->set_backward_ms(e.backward_ms() * scale);
    l->set_optimizer_ms(e.optimizer_ms() * scale);
    profile::SetLayerSizes(layers[k], file.batch_size(), l);
  }
  return out;
}

absl::StatusOr<std::optional<v1::ModelProfile>> EmulatedProfileOf(const v1::JobSpec& spec,
                                                                  const SpecText* text) {
  if (!IsEmulated(spec)) return std::optional<v1::ModelProfile>();
  // The file is checked here, after the spec parsed, so its refusals get the spec's location
  // from the submitted text: the user fixes the file or the line that names it.
  auto refuse = [&](absl::string_view message) {
    if (text == nullptr) return absl::InvalidArgumentError(message);
    return JobSpecFieldError(text->yaml, text->source, kEmulationProfileField, message);
  };
  const std::string& path = spec.parallel().emulation().profile();
  absl::StatusOr<v1::ModelProfile> file = profile::ReadProfileFile(path);
  if (!file.ok()) {
    return refuse(absl::StrCat(kEmulationProfileField, ": ", file.status().message()));
  }
  absl::StatusOr<v1::ModelProfile> profile = EmulatedProfileFromFile(spec, *file);
  if (!profile.ok()) {
    // InferLayers' errors are the model's (a validated spec has none), not the profile's.
    if (!absl::StartsWith(profile.status().message(), kEmulationProfileField))
      return profile.status();
    return refuse(profile.status().message());
  }
  return std::optional<v1::ModelProfile>(*std::move(profile));
}

absl::StatusOr<v1::ParallelPlan> MakeJobPlan(const v1::JobSpec& spec, PlanInputs inputs,
                                             const SpecText* text) {
  DAPPLE_ASSIGN_OR_RETURN(std::optional<v1::ModelProfile> emulated, EmulatedProfileOf(spec, text));
  if (!emulated.has_value()) return MakePlan(spec, inputs);
  inputs.profile = *std::move(emulated);
  DAPPLE_ASSIGN_OR_RETURN(v1::ParallelPlan plan, MakePlan(spec, inputs));
  v1::ParallelPlanSummary* summary = plan.mutable_summary();
  summary->set_emulated(true);
  summary->set_profile_source(Source(spec));
  summary->add_notes(
      "emulated devices: each layer's compute is a wait of its profiled time (times x "
      "emulation.scale); activations and gradients of the model's real sizes travel; losses "
      "and accuracies are not real");
  return plan;
}

}  // namespace dapple::coordinator
