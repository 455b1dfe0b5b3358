#include "worker/checkpoint/checkpoint_loader.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_files.h"
#include "common/status.h"
#include "worker/checkpoint/shard_codec.h"

namespace dapple::worker {
namespace {

std::string FolderOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

bool InRange(int layer, int first, int last) { return layer >= first && layer <= last; }

}  // namespace

absl::StatusOr<LoadedCheckpoint> LoadCheckpointForLayers(const std::string& manifest_path,
                                                         const v1::JobSpec& job_spec,
                                                         int first_layer, int last_layer) {
  absl::StatusOr<std::string> manifest_bytes = ReadWholeFile(manifest_path);
  if (!manifest_bytes.ok()) {
    if (manifest_bytes.status().code() == absl::StatusCode::kNotFound) {
      return absl::NotFoundError(
          absl::StrCat("checkpoint manifest '", manifest_path, "' does not exist"));
    }
    return manifest_bytes.status();
  }
  LoadedCheckpoint out;
  v1::CheckpointManifest& m = out.manifest;
  if (!m.ParseFromString(*manifest_bytes) || m.format_version() != kCheckpointFormatVersion) {
    return absl::DataLossError(absl::StrCat("checkpoint manifest '", manifest_path,
                                            "' is corrupt or of an unknown format"));
  }
  if (absl::Status s = CheckSameModel(m.spec().model(), job_spec.model()); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint '", manifest_path, "' does not fit the job: ", s.message()));
  }
  const int layers = job_spec.model().layers_size();
  if (first_layer < 0 || last_layer < first_layer || last_layer >= layers) {
    return absl::InvalidArgumentError(absl::StrCat("layers [", first_layer, ", ", last_layer,
                                                   "] outside a model of ", layers, " layers"));
  }
  const std::string folder = FolderOf(manifest_path);
  std::vector<bool> covered(last_layer - first_layer + 1, false);
  bool have_steps = false;
  for (const v1::CheckpointShardEntry& e : m.shards()) {
    // Replicas of a stage hold the same weights after the AllReduce: replica 0 speaks for all.
    if (e.replica() != 0 || e.last_layer() < first_layer || e.first_layer() > last_layer) continue;
    const std::string path = absl::StrCat(folder, "/", e.file());
    absl::StatusOr<std::string> bytes = ReadWholeFile(path);
    if (!bytes.ok()) {
      if (bytes.status().code() == absl::StatusCode::kNotFound) {
        return absl::NotFoundError(
            absl::StrCat("checkpoint shard '", path, "' is missing (listed in the manifest)"));
      }
      return bytes.status();
    }
    if (static_cast<int64_t>(bytes->size()) != e.bytes()) {
      return absl::DataLossError(absl::StrCat("checkpoint shard '", path, "' has ", bytes->size(),
                                              " bytes, the manifest says ", e.bytes(),
                                              ": truncated or corrupt"));
    }
    v1::CheckpointShard shard;
    if (!shard.ParseFromString(*bytes)) {
      return absl::DataLossError(
          absl::StrCat("checkpoint shard '", path, "' is corrupt: it does not parse"));
    }
    if (shard.step() != m.step() || shard.stage() != e.stage() ||
        shard.first_layer() != e.first_layer() || shard.last_layer() != e.last_layer()) {
      return absl::DataLossError(absl::StrCat(
          "checkpoint shard '", path, "' holds step ", shard.step(), " stage ", shard.stage(),
          " layers [", shard.first_layer(), ", ", shard.last_layer(), "], the manifest says step ",
          m.step(), " stage ", e.stage(), " layers [", e.first_layer(), ", ", e.last_layer(), "]"));
    }
    if (have_steps && shard.optimizer_steps() != out.state.optimizer_steps) {
      return absl::DataLossError(
          absl::StrCat("checkpoint shard '", path, "' has ", shard.optimizer_steps(),
                       " optimizer updates, another shard ", out.state.optimizer_steps));
    }
    have_steps = true;
    out.state.optimizer_steps = shard.optimizer_steps();
    for (int l = std::max(first_layer, e.first_layer()); l <= std::min(last_layer, e.last_layer());
         ++l) {
      covered[l - first_layer] = true;
    }
    for (const v1::TensorData& t : shard.params()) {
      if (!InRange(LayerOfTensor(t.name()), first_layer, last_layer)) continue;
      DAPPLE_ASSIGN_OR_RETURN(NamedTensor n, FromTensorData(t, path));
      out.state.params.push_back(std::move(n));
    }
    for (const v1::TensorData& t : shard.optimizer_state()) {
      if (!InRange(LayerOfTensor(t.name()), first_layer, last_layer)) continue;
      DAPPLE_ASSIGN_OR_RETURN(NamedTensor n, FromTensorData(t, path));
      out.state.optimizer_state.push_back(std::move(n));
    }
  }
  for (size_t i = 0; i < covered.size(); ++i) {
    if (!covered[i]) {
      return absl::DataLossError(absl::StrCat("checkpoint manifest '", manifest_path,
                                              "' lists no shard holding layer ", first_layer + i));
    }
  }
  return out;
}

}  // namespace dapple::worker
