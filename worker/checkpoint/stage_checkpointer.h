// A rank's checkpoint duties during a job (docs/operations.md, "Checkpoints"), kept out of the
// daemon's loop:
//   - before the first step, load StageAssignment.resume_manifest (any layout) into the stage;
//     The shards come from the worker's in-memory copy (shard_memory_cache.h) when it holds
//     them (the same worker resuming the same layer range), else from the files;
//   - after each step N (1-based), save this rank's shard when spec.training
//     .checkpoint_every_steps divides N, or when the coordinator asked for a checkpoint after
//     step N (on demand or timed: ProgressAck.checkpoint_step, surfaced by the progress reporter
//     into an atomic); a rank that learns of a request for a step it already passed reports
//     that as an error instead (once per request);
//   - an interleaved rank (PlanStageSummary.chunks: v layer ranges) saves one shard holding all
//     its chunks' tensors (ShardLocation's range is chunk 0's; the coordinator's manifest entry
//     lists the chunks, CheckpointShardEntry.chunks) and resumes the layers of all its chunks
//     (LoadCheckpointForRanges), from a checkpoint of any layout, interleaved or not.
// Saving copies the stage's tensors (StageBackend::ExportState: the snapshot, the only part the
// loop waits for) and then, with a sink, hands the snapshot to an AsyncShardWriter whose thread
// encodes, writes and reports it (asynchronous); without a sink AfterStep encodes and writes it
// itself and returns the report (synchronous: dapple-worker --sync-checkpoints, tests).
// The daemon sends each CheckpointReport (returned or sunk) as a PROGRESS_CHECKPOINT report.
//
// Thread safety: one thread (the job's); `requested_step` may be written by another; the sink
// is called on the writer's thread (async_shard_writer.h).
#ifndef DAPPLE_WORKER_CHECKPOINT_STAGE_CHECKPOINTER_H_
#define DAPPLE_WORKER_CHECKPOINT_STAGE_CHECKPOINTER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "dapple/v1/plan.pb.h"
#include "worker/checkpoint/async_shard_writer.h"
#include "worker/checkpoint/shard_memory_cache.h"
#include "worker/runtime/stage_backend.h"

namespace dapple::worker {

// What the loop spent on the newest save (AfterStep): the stall of that checkpoint step.
struct SaveTiming {
  int64_t step = 0;             // the checkpoint's step; 0: none saved yet
  double snapshot_seconds = 0;  // ExportState: the copy of the stage's tensors
  double wait_seconds = 0;      // waiting for the previous save still in flight (async)
  double write_seconds = 0;     // encoding and writing in the loop (synchronous only)
  double stall_seconds() const { return snapshot_seconds + wait_seconds + write_seconds; }
};

// Where Resume took the checkpoint's shards from.
struct ResumeSources {
  int shards_from_memory = 0;
  int shards_from_disk = 0;
};

class StageCheckpointer {
 public:
  // `assignment` and `requested_step` (the newest ack's checkpoint_step, 0: none; may be
  // null) must outlive the checkpointer. With a `sink`, saves are asynchronous and their reports
  // go to it; without one AfterStep saves synchronously. `cache` (may be null: none) is the
  // in-memory copy saves store into and Resume reads from; it must outlive the checkpointer.
  StageCheckpointer(const v1::StageAssignment& assignment,
                    const std::atomic<int64_t>* requested_step,
                    AsyncShardWriter::Sink sink = nullptr, ShardMemoryCache* cache = nullptr);

  // Loads the assignment's resume_manifest (when set) for this stage's layers and imports it
  // into `backend`. The checkpoint's step must be the assignment's first_step. Errors from
  // worker/checkpoint/checkpoint_loader.h and StageBackend::ImportState, prefixed
  // "resume from '<manifest>': "; kFailedPrecondition for a step mismatch. Logs which source
  // the shards came from (resume_sources()).
  absl::Status Resume(StageBackend& backend);
  const ResumeSources& resume_sources() const { return resume_sources_; }

  // Called after step `step` (1-based: steps completed) finished on this rank. Returns the
  // report to send now, if any: a written shard (synchronous), an export or write error, or
  // "stage 1 is already past step 12 (at step 14)" for a request this rank missed. An
  // asynchronous save's report goes to the sink later.
  std::optional<CheckpointReport> AfterStep(int64_t step, StageBackend& backend);

  // The newest save's timing (last_save().step == step after AfterStep saved step `step`).
  const SaveTiming& last_save() const { return last_save_; }

  // Waits for the asynchronous save in flight, if any (its report was sunk). The destructor
  // does too.
  void Finish();
  ~StageCheckpointer();

 private:
  const v1::StageAssignment& assignment_;
  const std::atomic<int64_t>* requested_step_;
  int first_layer_ = 0;
  int last_layer_ = 0;
  // The rank's layer ranges (schedule::StageChunks: v of them under interleaved 1F1B, one
  // otherwise); empty when the stage is not in the plan.
  std::vector<v1::StageRange> ranges_;
  // The newest on-demand step this rank saved or reported as missed: acks go on carrying the
  // request until the coordinator publishes it, and a step already saved must not then be
  // reported as missed (that would abandon the checkpoint this rank just wrote).
  int64_t handled_ = 0;
  ShardLocation Where() const;

  ShardMemoryCache* cache_;
  std::unique_ptr<AsyncShardWriter> writer_;  // null: synchronous
  SaveTiming last_save_;
  ResumeSources resume_sources_;
};

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_CHECKPOINT_STAGE_CHECKPOINTER_H_
