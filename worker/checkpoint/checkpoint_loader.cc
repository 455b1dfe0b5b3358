#include "worker/checkpoint/checkpoint_loader.h"

#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/checkpoint_files.h"
#include "common/model_info.h"
#include "common/schedule/job_lowering.h"
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

// The owners of the tied copies in [first, last] whose own layer lies outside it: the stage
// imports their tensors into its copies (checkpoints hold a tied weight once, at its owner).
std::vector<schedule::TiedWeight> OwnersOutside(const std::vector<LayerInfo>& layers, int first,
                                                int last) {
  std::vector<schedule::TiedWeight> out;
  for (const schedule::TiedWeight& w : schedule::TiedWeights(layers)) {
    if (InRange(w.copy_layer, first, last) && !InRange(w.owner_layer, first, last)) {
      out.push_back(w);
    }
  }
  return out;
}

// `name` is the owner's parameter or one of its optimizer state tensors ("<owner>.<state>").
bool IsTensorOf(const std::string& name, const std::string& owner) {
  return name == owner ||
         (absl::StartsWith(name, owner) && name.size() > owner.size() && name[owner.size()] == '.');
}

}  // namespace

absl::StatusOr<LoadedCheckpoint> LoadCheckpointForLayers(const std::string& manifest_path,
                                                         const v1::JobSpec& job_spec,
                                                         int first_layer, int last_layer,
                                                         const ShardMemoryCache* cache) {
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
  DAPPLE_ASSIGN_OR_RETURN(const std::vector<LayerInfo> infos, InferLayers(job_spec.model()));
  const std::vector<schedule::TiedWeight> owners = OwnersOutside(infos, first_layer, last_layer);
  // The tensors this stage takes: those of its layers, and those of the owners of its tied
  // copies (whichever shard holds them).
  auto wanted = [&](const std::string& name) {
    if (InRange(LayerOfTensor(name), first_layer, last_layer)) return true;
    for (const schedule::TiedWeight& w : owners) {
      if (IsTensorOf(name, w.owner)) return true;
    }
    return false;
  };
  auto holds_owner = [&](const v1::CheckpointShardEntry& e) {
    for (const schedule::TiedWeight& w : owners) {
      if (InRange(w.owner_layer, e.first_layer(), e.last_layer())) return true;
    }
    return false;
  };
  const std::string folder = FolderOf(manifest_path);
  std::vector<bool> covered(last_layer - first_layer + 1, false);
  std::vector<bool> owner_covered(owners.size(), false);
  bool have_steps = false;
  for (const v1::CheckpointShardEntry& e : m.shards()) {
    // Replicas of a stage hold the same weights after the AllReduce: replica 0 speaks for all.
    if (e.replica() != 0) continue;
    if ((e.last_layer() < first_layer || e.first_layer() > last_layer) && !holds_owner(e)) continue;
    const std::string path = absl::StrCat(folder, "/", e.file());
    std::shared_ptr<const std::string> cached;
    if (cache != nullptr) {
      CachedShardKey key;
      key.origin = CheckpointOrigin(FolderOf(folder));
      key.job_id = m.job_id();
      key.step = m.step();
      key.stage = e.stage();
      key.replica = e.replica();
      key.first_layer = e.first_layer();
      key.last_layer = e.last_layer();
      cached = cache->Find(key, e.bytes());
    }
    absl::StatusOr<std::string> file;
    const std::string* bytes = cached.get();
    if (bytes != nullptr) {
      ++out.shards_from_memory;
    } else {
      ++out.shards_from_disk;
      file = ReadWholeFile(path);
      if (!file.ok()) {
        if (file.status().code() == absl::StatusCode::kNotFound) {
          return absl::NotFoundError(
              absl::StrCat("checkpoint shard '", path, "' is missing (listed in the manifest)"));
        }
        return file.status();
      }
      bytes = &*file;
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
    for (size_t i = 0; i < owners.size(); ++i) {
      if (InRange(owners[i].owner_layer, e.first_layer(), e.last_layer())) owner_covered[i] = true;
    }
    for (const v1::TensorData& t : shard.params()) {
      if (!wanted(t.name())) continue;
      DAPPLE_ASSIGN_OR_RETURN(NamedTensor n, FromTensorData(t, path));
      out.state.params.push_back(std::move(n));
    }
    for (const v1::TensorData& t : shard.optimizer_state()) {
      if (!wanted(t.name())) continue;
      DAPPLE_ASSIGN_OR_RETURN(NamedTensor n, FromTensorData(t, path));
      out.state.optimizer_state.push_back(std::move(n));
    }
    // Buffers travel with their layer like parameters (a buffer is never tied).
    for (const v1::TensorData& t : shard.buffers()) {
      if (!InRange(LayerOfTensor(t.name()), first_layer, last_layer)) continue;
      DAPPLE_ASSIGN_OR_RETURN(NamedTensor n, FromTensorData(t, path));
      out.state.buffers.push_back(std::move(n));
    }
  }
  for (size_t i = 0; i < covered.size(); ++i) {
    if (!covered[i]) {
      return absl::DataLossError(absl::StrCat("checkpoint manifest '", manifest_path,
                                              "' lists no shard holding layer ", first_layer + i));
    }
  }
  for (size_t i = 0; i < owners.size(); ++i) {
    if (!owner_covered[i]) {
      return absl::DataLossError(absl::StrCat("checkpoint manifest '", manifest_path,
                                              "' lists no shard holding layer ",
                                              owners[i].owner_layer, " (", owners[i].owner,
                                              ", which ", owners[i].copy, " is tied to)"));
    }
  }
  return out;
}

}  // namespace dapple::worker
