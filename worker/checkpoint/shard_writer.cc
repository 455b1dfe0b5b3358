#include "worker/checkpoint/shard_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/checkpoint_files.h"
#include "common/logging.h"
#include "dapple/v1/checkpoint.pb.h"
#include "worker/checkpoint/shard_codec.h"

namespace dapple::worker {
namespace {

// The test-only hook of the header: half the bytes into the temporary file, then die.
void MaybeDieMidWrite(int64_t step, const std::string& path, const std::string& bytes) {
  const char* env = std::getenv(kFaultExitDuringCheckpointEnv);
  int64_t fault_step = 0;
  if (env == nullptr || !absl::SimpleAtoi(env, &fault_step) || fault_step != step) return;
  DAPPLE_LOG_WARN("{}={}: dying while writing {}", kFaultExitDuringCheckpointEnv, step, path);
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    const ssize_t ignored = ::write(fd, bytes.data(), bytes.size() / 2);
    (void)ignored;
    ::fsync(fd);
  }
  ::_exit(1);
}

}  // namespace

std::string EncodeShard(const std::string& job_id, int64_t step, const ShardLocation& where,
                        const StageState& state) {
  v1::CheckpointShard shard;
  shard.set_job_id(job_id);
  shard.set_step(step);
  shard.set_stage(where.stage);
  shard.set_replica(where.replica);
  shard.set_first_layer(where.first_layer);
  shard.set_last_layer(where.last_layer);
  for (const NamedTensor& t : state.params) *shard.add_params() = ToTensorData(t);
  for (const NamedTensor& t : state.optimizer_state) *shard.add_optimizer_state() = ToTensorData(t);
  for (const NamedTensor& t : state.buffers) *shard.add_buffers() = ToTensorData(t);
  shard.set_optimizer_steps(state.optimizer_steps);
  return shard.SerializeAsString();
}

absl::StatusOr<WrittenShard> WriteEncodedShard(const std::string& checkpoint_dir, int64_t step,
                                               const ShardLocation& where,
                                               const std::string& bytes) {
  if (checkpoint_dir.empty()) {
    return absl::InvalidArgumentError("no checkpoint directory (StageAssignment.checkpoint_dir)");
  }
  if (step < 1) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint step ", step, " must be >= 1"));
  }
  const std::string dir = absl::StrCat(checkpoint_dir, "/", PartialCheckpointDirName(step));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot create checkpoint folder '", dir, "': ", ec.message()));
  }
  WrittenShard out;
  out.file = ShardFileName(where.stage, where.replica);
  out.path = absl::StrCat(dir, "/", out.file);
  out.bytes = static_cast<int64_t>(bytes.size());
  MaybeDieMidWrite(step, out.path, bytes);
  if (absl::Status s = WriteFileAtomically(out.path, bytes); !s.ok()) return s;
  return out;
}

absl::StatusOr<WrittenShard> WriteShard(const std::string& checkpoint_dir,
                                        const std::string& job_id, int64_t step,
                                        const ShardLocation& where, const StageState& state) {
  // Checked before encoding, so a misconfigured rank does not pay for it.
  if (checkpoint_dir.empty() || step < 1) {
    return WriteEncodedShard(checkpoint_dir, step, where, std::string());
  }
  return WriteEncodedShard(checkpoint_dir, step, where, EncodeShard(job_id, step, where, state));
}

}  // namespace dapple::worker
