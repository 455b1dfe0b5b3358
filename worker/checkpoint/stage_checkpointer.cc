#include "worker/checkpoint/stage_checkpointer.h"

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "worker/checkpoint/checkpoint_loader.h"
#include "worker/checkpoint/shard_writer.h"

namespace dapple::worker {

StageCheckpointer::StageCheckpointer(const v1::StageAssignment& assignment,
                                     const std::atomic<int64_t>* requested_step)
    : assignment_(assignment), requested_step_(requested_step) {
  if (assignment.stage() >= 0 && assignment.stage() < assignment.plan().stages_size()) {
    first_layer_ = assignment.plan().stages(assignment.stage()).first_layer();
    last_layer_ = assignment.plan().stages(assignment.stage()).last_layer();
  }
}

absl::Status StageCheckpointer::Resume(StageBackend& backend) {
  const std::string& manifest = assignment_.resume_manifest();
  if (manifest.empty()) return absl::OkStatus();
  auto prefixed = [&](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat("resume from '", manifest, "': ", s.message()));
  };
  absl::StatusOr<LoadedCheckpoint> loaded =
      LoadCheckpointForLayers(manifest, assignment_.spec(), first_layer_, last_layer_);
  if (!loaded.ok()) return prefixed(loaded.status());
  if (loaded->manifest.step() != assignment_.first_step()) {
    return prefixed(absl::FailedPreconditionError(
        absl::StrCat("the checkpoint was taken after step ", loaded->manifest.step(),
                     " but the assignment starts after step ", assignment_.first_step())));
  }
  if (absl::Status s = backend.ImportState(loaded->state); !s.ok()) return prefixed(s);
  DAPPLE_LOG_INFO("{}: stage {} resumed layers [{}, {}] from {} (after step {})",
                  assignment_.job_id(), assignment_.stage(), first_layer_, last_layer_, manifest,
                  loaded->manifest.step());
  return absl::OkStatus();
}

std::optional<CheckpointReport> StageCheckpointer::AfterStep(int64_t step, StageBackend& backend) {
  const int64_t every = assignment_.spec().training().checkpoint_every_steps();
  const int64_t requested = requested_step_ == nullptr ? 0 : requested_step_->load();
  const bool periodic = every > 0 && step % every == 0;
  const bool on_demand = requested == step;
  if (!periodic && !on_demand) {
    if (requested > 0 && requested < step && requested != handled_) {
      handled_ = requested;
      CheckpointReport missed;
      missed.step = requested;
      missed.error = absl::StrCat("stage ", assignment_.stage(), " is already past step ",
                                  requested, " (at step ", step, ")");
      return missed;
    }
    return std::nullopt;
  }
  if (on_demand) handled_ = step;
  CheckpointReport out;
  out.step = step;
  absl::StatusOr<StageState> state = backend.ExportState();
  if (!state.ok()) {
    out.error = absl::StrCat("stage ", assignment_.stage(), ": ", state.status().message());
    return out;
  }
  ShardLocation where;
  where.stage = assignment_.stage();
  where.replica = assignment_.replica();
  where.first_layer = first_layer_;
  where.last_layer = last_layer_;
  absl::StatusOr<WrittenShard> written =
      WriteShard(assignment_.checkpoint_dir(), assignment_.job_id(), step, where, *state);
  if (!written.ok()) {
    out.error = absl::StrCat("stage ", assignment_.stage(), ": ", written.status().message());
    DAPPLE_LOG_WARN("{}: checkpoint after step {}: {}", assignment_.job_id(), step, out.error);
    return out;
  }
  out.file = written->file;
  out.bytes = written->bytes;
  return out;
}

}  // namespace dapple::worker
