// A rank's background checkpoint writer (docs/operations.md, "Checkpoints", "Asynchronous
// saving"): the training loop hands it a snapshot of the stage's tensors (StageState, the copy
// StageBackend::ExportState made at the checkpoint boundary) and goes on with the next step; the
// writer's thread encodes the shard, writes and fsyncs it (shard_writer.h), keeps its bytes in the
// worker's in-memory copy (shard_memory_cache.h) and hands the report to `sink`.
//
// One save in flight at most: Submit waits while the previous snapshot is still being written
// (the loop stalls then; Submit returns how long), so checkpoints are never skipped and a rank
// holds at most one snapshot besides its live tensors. The writer only ever reads the snapshot
// it owns, never the runtime's live tensors. A failed write becomes a report with an error (the
// coordinator abandons that checkpoint; the job goes on). Finish and the destructor wait for the
// save in flight: a rank's end (success or failure) waits for its last checkpoint, whose report is
// made before the rank's final one.
//
// Thread safety: Submit and Finish from one thread (the rank's); `sink` is called on the writer's
// thread, one report at a time, and must be thread-safe with respect to the submitting thread
// (ProgressReporter::Report is).
#ifndef DAPPLE_WORKER_CHECKPOINT_ASYNC_SHARD_WRITER_H_
#define DAPPLE_WORKER_CHECKPOINT_ASYNC_SHARD_WRITER_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "worker/checkpoint/shard_memory_cache.h"
#include "worker/checkpoint/shard_writer.h"
#include "worker/runtime/stage_state.h"

namespace dapple::worker {

struct CheckpointReport {
  int64_t step = 0;
  std::string file;  // relative to the checkpoint directory; empty when it failed
  int64_t bytes = 0;
  std::string error;         // why no shard was written
  double write_seconds = 0;  // encoding, writing and fsync (0 for a report without a write)
};

// Encodes and writes `snapshot` as the shard of `where`, stores the bytes in `cache` (may be
// null) on success, and returns the report ("stage 1: <reason>" on failure). What the
// background thread does for each snapshot, and what a synchronous save does in the loop.
CheckpointReport SaveShard(const std::string& checkpoint_dir, const std::string& job_id,
                           int64_t step, const ShardLocation& where, const StageState& snapshot,
                           ShardMemoryCache* cache);

class AsyncShardWriter {
 public:
  using Sink = std::function<void(CheckpointReport)>;

  // `cache` (may be null: no in-memory copy) must outlive the writer. Starts the thread.
  AsyncShardWriter(std::string checkpoint_dir, std::string job_id, ShardLocation where, Sink sink,
                   ShardMemoryCache* cache);
  ~AsyncShardWriter();  // waits for the save in flight, then stops the thread

  // Hands the snapshot of step `step` to the writer. Waits first while a save is in flight;
  // returns the seconds it waited (0 when the writer was idle).
  double Submit(int64_t step, StageState snapshot);

  // Waits until no save is in flight (its report was given to the sink).
  void Finish();

 private:
  void Loop();

  const std::string checkpoint_dir_;
  const std::string job_id_;
  const ShardLocation where_;
  const Sink sink_;
  ShardMemoryCache* const cache_;
  absl::Mutex mu_;
  // The snapshot waiting for or being written; empty when idle.
  std::optional<std::pair<int64_t, StageState>> pending_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_CHECKPOINT_ASYNC_SHARD_WRITER_H_
