// Writes one rank's shard of a checkpoint (docs/operations.md, "Checkpoints"):
//   <checkpoint_dir>/step-<N>.partial/stage<S>.replica<R>.shard
// a serialized v1::CheckpointShard (the stage's parameters and buffers with GLOBAL layer
// indices, its optimizer state, the step and the update count), through a temporary file, fsync
// and rename, so the shard's name exists only with all its bytes. The coordinator publishes the
// directory (manifest.pb, then renames it to step-<N>) once every rank's shard is in.
//
// TEST-ONLY fault hook: when the environment variable DAPPLE_FAULT_EXIT_DURING_CHECKPOINT is
// set to a step N, writing the shard of step N writes half of the shard's bytes to its
// temporary file and then ends the process with _exit(1), as a worker killed mid-save would
// (tests/integration/checkpoint_test.py). Never set it outside tests.
//
// Thread safety: free functions; concurrent writers must use different (stage, replica).
#ifndef DAPPLE_WORKER_CHECKPOINT_SHARD_WRITER_H_
#define DAPPLE_WORKER_CHECKPOINT_SHARD_WRITER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "worker/runtime/stage_state.h"

namespace dapple::worker {

inline constexpr char kFaultExitDuringCheckpointEnv[] = "DAPPLE_FAULT_EXIT_DURING_CHECKPOINT";

struct ShardLocation {
  int stage = 0;
  int replica = 0;
  int first_layer = 0;  // the stage's layer range, global indices
  int last_layer = 0;
};

struct WrittenShard {
  std::string file;   // relative to the checkpoint directory: "stage1.replica0.shard"
  std::string path;   // where it is now (inside step-<N>.partial/)
  int64_t bytes = 0;  // its size
};

// Writes `state` as the shard of `where` of checkpoint `step` (steps completed, >= 1) of job
// `job_id`, creating <checkpoint_dir>/step-<step>.partial/ when needed. kInvalidArgument for an
// empty checkpoint_dir or step < 1; kUnavailable naming the path when the file system refuses.
// The same as EncodeShard then WriteEncodedShard.
absl::StatusOr<WrittenShard> WriteShard(const std::string& checkpoint_dir,
                                        const std::string& job_id, int64_t step,
                                        const ShardLocation& where, const StageState& state);

// The shard's bytes: a serialized v1::CheckpointShard of `state` (the encoding, no I/O).
std::string EncodeShard(const std::string& job_id, int64_t step, const ShardLocation& where,
                        const StageState& state);

// WriteShard's file half: writes `bytes` (EncodeShard's) as the shard of `where` of checkpoint
// `step`. Same errors as WriteShard.
absl::StatusOr<WrittenShard> WriteEncodedShard(const std::string& checkpoint_dir, int64_t step,
                                               const ShardLocation& where,
                                               const std::string& bytes);

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_CHECKPOINT_SHARD_WRITER_H_
