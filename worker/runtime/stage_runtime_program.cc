// The stage runtime's view of its program: which actions a step runs (a program's phases laid
// end to end from the assignment's first step), and the weight uses tests record.
#include "absl/strings/str_format.h"
#include "worker/runtime/stage_runtime.h"

namespace dapple::worker {

absl::StatusOr<const google::protobuf::RepeatedPtrField<v1::Action>*> StageRuntime::StepActions(
    int64_t step) const {
  const v1::RankProgram& program = assignment_.program();
  if (program.phases().empty()) return &program.actions();
  int64_t index = step - first_step_;
  if (index >= 0) {
    for (const v1::ProgramPhase& phase : program.phases()) {
      if (index < phase.steps()) {
        return &phase.cycle(static_cast<int>(index % phase.cycle_size())).actions();
      }
      index -= phase.steps();
    }
  }
  int64_t steps = 0;
  for (const v1::ProgramPhase& phase : program.phases()) steps += phase.steps();
  return absl::InvalidArgumentError(
      absl::StrFormat("step %d outside the program's run: steps %d to %d", step + 1,
                      first_step_ + 1, first_step_ + steps));
}

void StageRuntime::RecordWeightUse(int64_t global_mb, v1::ActionKind kind) {
  if (!record_weight_uses_) return;
  WeightUse use;
  use.micro_batch = global_mb;
  use.kind = kind;
  use.version = stash_->in_use();
  use.versions_held = stash_->versions();
  std::vector<float> w(static_cast<size_t>(backend_->WeightFloats()));
  if (backend_->ReadWeights(w.data()).ok()) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the bytes of the weights in use
    const auto* bytes = reinterpret_cast<const unsigned char*>(w.data());
    for (size_t i = 0; i < w.size() * sizeof(float); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
    use.weights_hash = h;
  }
  weight_uses_.push_back(use);
}

}  // namespace dapple::worker
