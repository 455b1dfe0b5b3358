// Loads a published checkpoint for ANY pipeline layout (docs/operations.md, "Checkpoints"):
// given its manifest and this rank's layer range, reads exactly the shards whose layer ranges
// (manifest entries) overlap it and keeps exactly the tensors of those layers, so a checkpoint
// saved with P = 2 loads into P = 1 or P = 3 stages (resharding by global layer index). The
// result goes to StageBackend::ImportState, which checks every name and shape.
//
// Thread safety: free function without shared state.
#ifndef DAPPLE_WORKER_CHECKPOINT_CHECKPOINT_LOADER_H_
#define DAPPLE_WORKER_CHECKPOINT_CHECKPOINT_LOADER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dapple/v1/checkpoint.pb.h"
#include "dapple/v1/job.pb.h"
#include "worker/checkpoint/shard_memory_cache.h"
#include "worker/runtime/stage_state.h"

namespace dapple::worker {

struct LoadedCheckpoint {
  v1::CheckpointManifest manifest;
  StageState state;  // the tensors of layers [first_layer, last_layer] and their tied owners'
  int shards_from_memory = 0;  // shards read from the ShardMemoryCache
  int shards_from_disk = 0;    // shards read from their files
};

// Reads `manifest_path` (a manifest.pb; shard files are relative to its folder), checks that
// the checkpoint's model is `job_spec`'s (common/checkpoint_files.h CheckSameModel) and loads
// the tensors (parameters, buffers, optimizer state) of layers [first_layer, last_layer] from
// the replica-0 shards that hold them,
// plus, for a tied copy in the range whose owner's layer is outside it (an lm_head tied to the
// embedding on another stage), the owner's tensors (parameter and optimizer state, by the
// owner's name) from the shard that holds the owner: checkpoints hold a tied weight once.
// With a `cache` (may be null), a shard it holds for the manifest's job and step and the entry's
// stage, replica, layer range and size (ShardMemoryCache::Find, which also checks the checksum)
// is taken from memory instead of its file: the same bytes, decoded and checked the same way.
// Errors, each naming the file:
//   kNotFound   "checkpoint manifest '<path>' does not exist", "checkpoint shard '<path>' is
//               missing (listed in the manifest)"
//   kDataLoss   a manifest or shard that does not parse, a shard whose size differs from the
//               manifest's entry ("checkpoint shard '<path>' has 100 bytes, the manifest says
//               4000: truncated or corrupt"), a shard of another step / stage / layer range, a
//               tensor whose bytes do not match its shape, shards disagreeing on the update
//               count, a layer of the range (or a tied owner's layer) that no shard holds
//   kInvalidArgument  a model that differs (naming the difference), a range outside the model
absl::StatusOr<LoadedCheckpoint> LoadCheckpointForLayers(const std::string& manifest_path,
                                                         const v1::JobSpec& job_spec,
                                                         int first_layer, int last_layer,
                                                         const ShardMemoryCache* cache = nullptr);

// The same for several layer ranges at once (an interleaved rank's chunks, PlanStageSummary
// .chunks), each shard read once: the tensors of every layer in any of `ranges`. A manifest
// entry with chunks (CheckpointShardEntry.chunks: a shard saved by an interleaved rank) holds
// the layers of all its chunks; without, those of [first_layer, last_layer]. So interleaved
// and plain checkpoints load into either layout. kInvalidArgument also for no range.
absl::StatusOr<LoadedCheckpoint> LoadCheckpointForRanges(const std::string& manifest_path,
                                                         const v1::JobSpec& job_spec,
                                                         const std::vector<v1::StageRange>& ranges,
                                                         const ShardMemoryCache* cache = nullptr);

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_CHECKPOINT_CHECKPOINT_LOADER_H_
