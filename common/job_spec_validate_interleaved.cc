// The rules of parallel.schedule interleaved and parallel.interleave (docs/job_spec.md), part of
// ValidateJobSpec (job_spec_validate.cc calls CheckInterleaved from CheckParallel).
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/job_spec.h"
#include "common/job_spec_internal.h"
#include "common/model_info.h"

namespace dapple::job_spec_internal {
namespace {

constexpr char kInterleavedSchedule[] = "interleaved";
// The micro_batch values that divide global_batch into M >= min_m micro-batches, nearest first
// (the largest such micro-batch is the smallest such M): "16 (M = 4) or 8 (M = 8)".
std::string MicroBatchesWithAtLeast(int64_t global_batch, int64_t min_m) {
  std::vector<std::string> found;
  for (int64_t m = min_m; m <= global_batch && found.size() < 2; ++m) {
    if (global_batch % m == 0) found.push_back(absl::StrCat(global_batch / m, " (M = ", m, ")"));
  }
  if (found.empty()) return "";
  return found.size() == 1 ? found[0] : absl::StrCat(found[0], " or ", found[1]);
}

}  // namespace

Check CheckInterleaved(const v1::JobSpec& spec, int stages) {
  const v1::ParallelSpec& p = spec.parallel();
  const bool interleaved = p.schedule() == kInterleavedSchedule;
  if (!interleaved) {
    if (p.interleave() == 0) return std::nullopt;
    return At("parallel.interleave",
              absl::StrFormat("parallel.interleave applies only to parallel.schedule interleaved, "
                              "got parallel.schedule %s: set schedule: interleaved or remove "
                              "interleave",
                              p.schedule()));
  }
  const int v = p.interleave();
  if (v == 0) {
    return At("parallel.schedule",
              "parallel.schedule interleaved needs parallel.interleave: v, the model chunks "
              "each stage holds (2..8): add e.g. interleave: 2");
  }
  if (v < kMinInterleave || v > kMaxInterleave) {
    return At("parallel.interleave",
              absl::StrFormat("parallel.interleave %d must be in %d..%d (the model chunks each "
                              "stage holds; 1 chunk is schedule dapple)",
                              v, kMinInterleave, kMaxInterleave));
  }
  if (p.device_type() == "cuda") {
    return At("parallel.device_type",
              "parallel.schedule interleaved with parallel.device_type cuda is not implemented: "
              "use schedule dapple on cuda");
  }
  if (p.stage_ranges_size() > 0 || stages < 2) {
    return At("parallel.stages",
              absl::StrFormat("parallel.schedule interleaved needs parallel.stages as a count of "
                              "at least 2 (P, the pipeline depth; the layers are then cut into "
                              "P * interleave equal virtual stages), got %s: set e.g. stages: 2",
                              p.stage_ranges_size() > 0 ? std::string("a list of ranges")
                              : stages == 0             ? std::string("auto")
                                                        : absl::StrCat(stages)));
  }
  const int num_layers = spec.model().layers_size();
  if (static_cast<int64_t>(stages) * v > num_layers) {
    std::vector<std::string> fixes;
    if (num_layers / stages >= kMinInterleave) {
      fixes.push_back(absl::StrCat("set interleave to at most ", num_layers / stages));
    }
    if (num_layers / v >= 2)
      fixes.push_back(absl::StrCat("set stages to at most ", num_layers / v));
    const std::string fix = fixes.empty() ? std::string(
                                                "use schedule dapple (the model is too "
                                                "shallow to interleave)")
                                          : absl::StrJoin(fixes, ", or ");
    return At("parallel.interleave",
              absl::StrFormat("parallel.interleave %d with parallel.stages %d makes %d virtual "
                              "stages, more than the %d layers of the model: each virtual stage "
                              "needs at least one layer: %s",
                              v, stages, stages * v, num_layers, fix));
  }
  // The generator's order is deadlock-free for every M (schedule/interleaved_test.cc), but
  // only from M = P on does one group of micro-batches fill the pipeline, so that the bubble is
  // 1F1B's divided by v (generators.h); Megatron asks for the same.
  const int64_t m = MicroBatches(spec);
  if (m < stages) {
    const std::string valid = MicroBatchesWithAtLeast(spec.training().global_batch(), stages);
    return At("training.micro_batch",
              absl::StrFormat(
                  "training.micro_batch %d makes M = %d %s (global_batch %d / "
                  "micro_batch %d), fewer than parallel.stages %d: parallel.schedule interleaved "
                  "needs M >= stages (any M from %d on, a multiple of stages or not: from there "
                  "on its bubble is 1F1B's divided by interleave): %s",
                  spec.training().micro_batch(), m, m == 1 ? "micro-batch" : "micro-batches",
                  spec.training().global_batch(), spec.training().micro_batch(), stages, stages,
                  valid.empty() ? absl::StrFormat("use a global_batch of at least %d", stages)
                                : absl::StrCat("set micro_batch to ", valid)));
  }
  if (Recompute(spec.training()) != RecomputeMode::kNone) {
    return At("training.recompute",
              absl::StrFormat("training.recompute %s with parallel.schedule interleaved is not "
                              "supported: set recompute: none (or schedule: dapple)",
                              spec.training().recompute()));
  }
  absl::StatusOr<std::vector<LayerInfo>> layers = InferLayers(spec.model());
  if (!layers.ok()) return At("model", std::string(layers.status().message()));
  for (int i = 0; i < static_cast<int>(layers->size()); ++i) {
    if ((*layers)[i].tied_layer >= 0) {
      return At("parallel.schedule",
                absl::StrFormat("parallel.schedule interleaved with tied weights (layer %d "
                                "copies a parameter of layer %d) is not supported: untie them "
                                "or use schedule dapple",
                                i, (*layers)[i].tied_layer));
    }
  }
  // The planner cuts the layers into P * v virtual stages balanced by compute and gives every
  // rank devices / P replicas (coordinator/planner/interleaved_partition.h InterleavedPlan),
  // which is what balanced does for one chunk; a planner that searches partitions, replicas or
  // depth of its own (or uniform's equal layer counts) would be silently replaced.
  const std::string& planner = p.planner();
  if (!planner.empty() && planner != "balanced" && planner != "dapple") {
    return At("parallel.planner",
              absl::StrFormat("parallel.planner %s with parallel.schedule interleaved is not "
                              "supported: the interleaved plan cuts the layers into %d virtual "
                              "stages balanced by compute with devices / stages replicas per "
                              "stage: set planner: balanced (or dapple)",
                              planner, stages * v));
  }
  return std::nullopt;
}

}  // namespace dapple::job_spec_internal
