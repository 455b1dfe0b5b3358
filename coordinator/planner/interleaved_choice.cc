#include "coordinator/planner/interleaved_choice.h"

#include "absl/strings/str_cat.h"

namespace dapple::coordinator {

std::vector<int> InterleavedDepths(const InterleavedJob& job, int v) {
  auto usable = [&](int p) {
    return p >= 2 && static_cast<int64_t>(p) * v <= job.num_layers && p <= job.micro_batches;
  };
  std::vector<int> out;
  if (job.num_stages > 0) {
    if (usable(job.num_stages)) out.push_back(job.num_stages);
    return out;
  }
  // Every rank on devices / P replicas (InterleavedPlan): depths that divide the devices leave
  // none idle.
  for (int p = 2; p <= job.devices; ++p) {
    const bool replicas_allowed = job.max_replicas <= 0 || job.devices / p <= job.max_replicas;
    if (job.devices % p == 0 && replicas_allowed && usable(p)) out.push_back(p);
  }
  return out;
}

void SetInterleaveLimits(const InterleavedJob& job, ChoiceLimits* limits) {
  limits->interleave.clear();
  limits->interleave_left_out.clear();
  if (!limits->choose_schedule) return;
  // The runtime's limits (common/job_spec_validate_interleaved.cc), in the order submit checks.
  if (job.cuda) {
    limits->interleave_left_out = "not implemented on CUDA yet";
    return;
  }
  if (job.recompute == "all") {
    limits->interleave_left_out =
        "its stages do not recompute: set training.recompute auto or none";
    return;
  }
  if (job.tied_layer >= 0) {
    limits->interleave_left_out = absl::StrCat("tied weights: layer ", job.tied_layer,
                                               " copies a parameter of layer ", job.tied_owner);
    return;
  }
  if (job.planner != "balanced" && job.planner != "dapple") {
    limits->interleave_left_out =
        absl::StrCat("parallel.planner ", job.planner,
                     ": an interleaved plan is cut by balanced or dapple only");
    return;
  }
  for (int v : kAutoInterleave) {
    if (!InterleavedDepths(job, v).empty()) limits->interleave.push_back(v);
  }
  if (!limits->interleave.empty()) return;
  const int v = kAutoInterleave[0];
  limits->interleave_left_out =
      job.num_stages > 0
          ? absl::StrCat("parallel.stages ", job.num_stages, " with ", job.num_layers,
                         " layers and M = ", job.micro_batches, ": it needs at least 2 stages, ", v,
                         " layers per stage and M >= stages")
          : absl::StrCat("no depth of at least 2 stages dividing parallel.devices ", job.devices,
                         " has ", v, " layers per stage (the model has ", job.num_layers,
                         ") and M = ", job.micro_batches, " >= stages");
}

}  // namespace dapple::coordinator
