#include "worker/checkpoint/stage_checkpointer.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/schedule/ranks.h"
#include "common/status.h"
#include "worker/checkpoint/checkpoint_loader.h"
#include "worker/checkpoint/shard_writer.h"

namespace dapple::worker {

StageCheckpointer::StageCheckpointer(const v1::StageAssignment& assignment,
                                     const std::atomic<int64_t>* requested_step,
                                     AsyncShardWriter::Sink sink, ShardMemoryCache* cache)
    : assignment_(assignment), requested_step_(requested_step), cache_(cache) {
  if (assignment.stage() >= 0 && assignment.stage() < assignment.plan().stages_size()) {
    first_layer_ = assignment.plan().stages(assignment.stage()).first_layer();
    last_layer_ = assignment.plan().stages(assignment.stage()).last_layer();
    ranges_ = schedule::StageChunks(assignment.plan(), assignment.stage());
  }
  if (sink != nullptr) {
    writer_ = std::make_unique<AsyncShardWriter>(assignment.checkpoint_dir(), assignment.job_id(),
                                                 Where(), std::move(sink), cache);
  }
}

StageCheckpointer::~StageCheckpointer() = default;  // the writer waits for its save

void StageCheckpointer::Finish() {
  if (writer_ != nullptr) writer_->Finish();
}

ShardLocation StageCheckpointer::Where() const {
  ShardLocation where;
  where.stage = assignment_.stage();
  where.replica = assignment_.replica();
  where.first_layer = first_layer_;
  where.last_layer = last_layer_;
  return where;
}

absl::Status StageCheckpointer::Resume(StageBackend& backend) {
  const std::string& manifest = assignment_.resume_manifest();
  if (manifest.empty()) return absl::OkStatus();
  auto prefixed = [&](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat("resume from '", manifest, "': ", s.message()));
  };
  // An interleaved rank loads all its chunks' layers at once (ImportState sends each tensor to
  // the chunk that holds its layer).
  absl::StatusOr<LoadedCheckpoint> loaded =
      ranges_.empty()
          ? LoadCheckpointForLayers(manifest, assignment_.spec(), first_layer_, last_layer_, cache_)
          : LoadCheckpointForRanges(manifest, assignment_.spec(), ranges_, cache_);
  if (!loaded.ok()) return prefixed(loaded.status());
  if (loaded->manifest.step() != assignment_.first_step()) {
    return prefixed(absl::FailedPreconditionError(
        absl::StrCat("the checkpoint was taken after step ", loaded->manifest.step(),
                     " but the assignment starts after step ", assignment_.first_step())));
  }
  if (absl::Status s = backend.ImportState(loaded->state); !s.ok()) return prefixed(s);
  resume_sources_.shards_from_memory = loaded->shards_from_memory;
  resume_sources_.shards_from_disk = loaded->shards_from_disk;
  DAPPLE_LOG_INFO(
      "{}: stage {} resumed layers [{}, {}]{} from {} (after step {}): {} shard(s) from this "
      "worker's memory, {} from disk",
      assignment_.job_id(), assignment_.stage(), first_layer_, last_layer_,
      ranges_.size() > 1 ? absl::StrCat(" and ", ranges_.size() - 1, " more chunk(s)") : "",
      manifest, loaded->manifest.step(), loaded->shards_from_memory, loaded->shards_from_disk);
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
  last_save_ = SaveTiming();
  last_save_.step = step;
  // The snapshot: a copy of the live tensors, the one part of a save the loop must wait for.
  const absl::Time start = absl::Now();
  absl::StatusOr<StageState> state = backend.ExportState();
  last_save_.snapshot_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (!state.ok()) {
    out.error = absl::StrCat("stage ", assignment_.stage(), ": ", state.status().message());
    return out;
  }
  if (writer_ != nullptr) {
    last_save_.wait_seconds = writer_->Submit(step, *std::move(state));
    return std::nullopt;
  }
  out =
      SaveShard(assignment_.checkpoint_dir(), assignment_.job_id(), step, Where(), *state, cache_);
  last_save_.write_seconds = out.write_seconds;
  return out;
}

}  // namespace dapple::worker
