// Conversion between a stage's StageState (worker/runtime/stage_state.h) and the shard proto
// (CheckpointShard, proto/dapple/v1/checkpoint.proto): TensorData holds little-endian IEEE-754
// fp32 bytes, which is the host layout on every machine dapple builds for (x86-64, aarch64).
#ifndef DAPPLE_WORKER_CHECKPOINT_SHARD_CODEC_H_
#define DAPPLE_WORKER_CHECKPOINT_SHARD_CODEC_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dapple/v1/checkpoint.pb.h"
#include "worker/runtime/stage_state.h"

namespace dapple::worker {

v1::TensorData ToTensorData(const NamedTensor& t);

// kDataLoss "<source>: tensor layer3.weight has 100 bytes, shape [64, 784] needs 200704" for
// data that does not match its shape (or a negative dimension).
absl::StatusOr<NamedTensor> FromTensorData(const v1::TensorData& t, const std::string& source);

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_CHECKPOINT_SHARD_CODEC_H_
