// Checkpoints on disk, shared by the workers (which write shards and read them back) and the
// coordinator (which publishes manifests): names, atomic writes, the manifest reader and the
// rules a resumed job must follow. Layout (proto/dapple/v1/checkpoint.proto,
// docs/operations.md "Checkpoints"):
//
//   <checkpoint root>/<job id>/step-<N>.partial/stage<S>.replica<R>.shard   being written
//   <checkpoint root>/<job id>/step-<N>/{manifest.pb, stage<S>.replica<R>.shard ...}  published
//
// A directory is published by one rename once every shard and the manifest are in it, so a
// directory without ".partial" that holds manifest.pb is always complete.
//
// Thread safety: free functions without shared state.
#ifndef DAPPLE_COMMON_CHECKPOINT_FILES_H_
#define DAPPLE_COMMON_CHECKPOINT_FILES_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dapple/v1/checkpoint.pb.h"
#include "dapple/v1/job.pb.h"

namespace dapple {

inline constexpr char kManifestFile[] = "manifest.pb";
inline constexpr char kPartialSuffix[] = ".partial";
inline constexpr int kCheckpointFormatVersion = 1;

// "step-120" (published) and "step-120.partial" (being written), relative to the job's folder.
std::string CheckpointDirName(int64_t step);
std::string PartialCheckpointDirName(int64_t step);
// "stage1.replica0.shard", relative to the checkpoint directory.
std::string ShardFileName(int stage, int replica);

// Writes `bytes` to `path` through "<path>.tmp": write, fsync, rename, then fsync of the
// folder, so `path` is either absent, its old content or all of `bytes`. kUnavailable naming
// the path and the system's reason.
absl::Status WriteFileAtomically(const std::string& path, const std::string& bytes);

// The whole file. kNotFound "checkpoint file '<path>' does not exist"; kDataLoss naming the
// path for a read error.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

// Fsyncs a folder (after a rename in it). kUnavailable naming it.
absl::Status SyncDirectory(const std::string& dir);

// Reads the manifest of the published checkpoint directory `dir` (a trailing '/' is fine).
// kInvalidArgument "'<dir>' is not a published checkpoint: ..." when `dir` ends in ".partial",
// does not exist or holds no manifest.pb; kDataLoss "checkpoint manifest '<path>' is
// corrupt: ..." when it does not parse or has an unknown format_version.
absl::StatusOr<v1::CheckpointManifest> ReadCheckpointManifest(const std::string& dir);

// OK when a job with model `job` can load weights saved with model `saved`: same input shape,
// layer count, each layer's type and out, and loss. kInvalidArgument naming the first
// difference: "model.layers[3].out differs: checkpoint 64, job 32".
absl::Status CheckSameModel(const v1::ModelSpec& saved, const v1::ModelSpec& job);

// OK when `job` may resume from a checkpoint trained with `saved`: CheckSameModel, and the same
// training.global_batch, training.seed and training.optimizer (type, lr, momentum,
// weight_decay, beta1, beta2, eps), which fix the data order and the updates. micro_batch,
// epochs, max_steps, checkpoint_every_steps and the parallel section may differ.
// kInvalidArgument naming the field and both values: "training.seed differs: checkpoint 3,
// job 4".
absl::Status CheckResumable(const v1::JobSpec& saved, const v1::JobSpec& job);

}  // namespace dapple

#endif  // DAPPLE_COMMON_CHECKPOINT_FILES_H_
