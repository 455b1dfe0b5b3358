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

bool InRanges(int layer, const std::vector<v1::StageRange>& ranges) {
  for (const v1::StageRange& r : ranges) {
    if (InRange(layer, r.first_layer(), r.last_layer())) return true;
  }
  return false;
}

// The layer ranges a manifest entry's shard holds: an interleaved stage's chunks, else its one
// range.
std::vector<v1::StageRange> EntryRanges(const v1::CheckpointShardEntry& e) {
  if (e.chunks_size() > 0) return {e.chunks().begin(), e.chunks().end()};
  v1::StageRange r;
  r.set_first_layer(e.first_layer());
  r.set_last_layer(e.last_layer());
  return {r};
}

// The owners of the tied copies in `ranges` whose own layer lies outside them: the stage
// imports their tensors into its copies (checkpoints hold a tied weight once, at its owner).
std::vector<schedule::TiedWeight> OwnersOutside(const std::vector<LayerInfo>& layers,
                                                const std::vector<v1::StageRange>& ranges) {
  std::vector<schedule::TiedWeight> out;
  for (const schedule::TiedWeight& w : schedule::TiedWeights(layers)) {
    if (InRanges(w.copy_layer, ranges) && !InRanges(w.owner_layer, ranges)) out.push_back(w);
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
  v1::StageRange range;
  range.set_first_layer(first_layer);
  range.set_last_layer(last_layer);
  return LoadCheckpointForRanges(manifest_path, job_spec, {range}, cache);
}

absl::StatusOr<LoadedCheckpoint> LoadCheckpointForRanges(const std::string& manifest_path,
                                                         const v1::JobSpec& job_spec,
                                                         const std::vector<v1::StageRange>& ranges,
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
  if (ranges.empty()) return absl::InvalidArgumentError("no layer range to load");
  for (const v1::StageRange& r : ranges) {
    if (r.first_layer() < 0 || r.last_layer() < r.first_layer() || r.last_layer() >= layers) {
      return absl::InvalidArgumentError(absl::StrCat("layers [", r.first_layer(), ", ",
                                                     r.last_layer(), "] outside a model of ",
                                                     layers, " layers"));
    }
  }
  DAPPLE_ASSIGN_OR_RETURN(const std::vector<LayerInfo> infos, InferLayers(job_spec.model()));
  const std::vector<schedule::TiedWeight> owners = OwnersOutside(infos, ranges);
  // The tensors this stage takes: those of its layers, and those of the owners of its tied
  // copies (whichever shard holds them).
  auto wanted = [&](const std::string& name) {
    if (InRanges(LayerOfTensor(name), ranges)) return true;
    for (const schedule::TiedWeight& w : owners) {
      if (IsTensorOf(name, w.owner)) return true;
    }
    return false;
  };
  const std::string folder = FolderOf(manifest_path);
  // covered[l]: a shard holding layer l was read (only the ranges' layers are checked).
  std::vector<bool> covered(layers, false);
  std::vector<bool> owner_covered(owners.size(), false);
  bool have_steps = false;
  for (const v1::CheckpointShardEntry& e : m.shards()) {
    // Replicas of a stage hold the same weights after the AllReduce: replica 0 speaks for all.
    if (e.replica() != 0) continue;
    const std::vector<v1::StageRange> held = EntryRanges(e);
    bool needed = false;
    for (int l = 0; l < layers && !needed; ++l) needed = InRanges(l, held) && InRanges(l, ranges);
    for (const schedule::TiedWeight& w : owners) {
      needed = needed || InRanges(w.owner_layer, held);
    }
    if (!needed) continue;
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
    for (int l = 0; l < layers; ++l) covered[l] = covered[l] || InRanges(l, held);
    for (size_t i = 0; i < owners.size(); ++i) {
      if (InRanges(owners[i].owner_layer, held)) owner_covered[i] = true;
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
      if (!InRanges(LayerOfTensor(t.name()), ranges)) continue;
      DAPPLE_ASSIGN_OR_RETURN(NamedTensor n, FromTensorData(t, path));
      out.state.buffers.push_back(std::move(n));
    }
  }
  for (int l = 0; l < layers; ++l) {
    if (InRanges(l, ranges) && !covered[l]) {
      return absl::DataLossError(absl::StrCat("checkpoint manifest '", manifest_path,
                                              "' lists no shard holding layer ", l));
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
