// A rank's checkpoint duties during a job (docs/operations.md, "Checkpoints"), kept out of the
// daemon's loop:
//   - before the first step, load StageAssignment.resume_manifest (any layout) into the stage;
//   - after each step N (1-based), write this rank's shard when spec.training
//     .checkpoint_every_steps divides N, or when the coordinator asked for an on-demand
//     checkpoint after step N (ProgressAck.checkpoint_step, surfaced by the progress reporter
//     into an atomic); a rank that learns of a request for a step it already passed reports
//     that as an error instead (once per request).
// The daemon sends each returned CheckpointReport as a PROGRESS_CHECKPOINT report.
//
// Thread safety: one thread (the job's); `requested_step` may be written by another.
#ifndef DAPPLE_WORKER_CHECKPOINT_STAGE_CHECKPOINTER_H_
#define DAPPLE_WORKER_CHECKPOINT_STAGE_CHECKPOINTER_H_

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "dapple/v1/plan.pb.h"
#include "worker/runtime/stage_backend.h"

namespace dapple::worker {

struct CheckpointReport {
  int64_t step = 0;
  std::string file;  // relative to the checkpoint directory; empty when it failed
  int64_t bytes = 0;
  std::string error;  // why no shard was written
};

class StageCheckpointer {
 public:
  // `assignment` and `requested_step` (the newest ack's checkpoint_step, 0: none; may be
  // null) must outlive the checkpointer.
  StageCheckpointer(const v1::StageAssignment& assignment,
                    const std::atomic<int64_t>* requested_step);

  // Loads the assignment's resume_manifest (when set) for this stage's layers and imports it
  // into `backend`. The checkpoint's step must be the assignment's first_step. Errors from
  // worker/checkpoint/checkpoint_loader.h and StageBackend::ImportState, prefixed
  // "resume from '<manifest>': "; kFailedPrecondition for a step mismatch.
  absl::Status Resume(StageBackend& backend);

  // Called after step `step` (1-based: steps completed) finished on this rank. Returns the
  // report to send, if any: a written shard, a write error, or "stage 1 is already past step
  // 12 (at step 14)" for an on-demand request this rank missed.
  std::optional<CheckpointReport> AfterStep(int64_t step, StageBackend& backend);

 private:
  const v1::StageAssignment& assignment_;
  const std::atomic<int64_t>* requested_step_;
  int first_layer_ = 0;
  int last_layer_ = 0;
  // The newest on-demand step this rank saved or reported as missed: acks go on carrying the
  // request until the coordinator publishes it, and a step already saved must not then be
  // reported as missed (that would abandon the checkpoint this rank just wrote).
  int64_t handled_ = 0;
};

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_CHECKPOINT_STAGE_CHECKPOINTER_H_
