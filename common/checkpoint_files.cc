#include "common/checkpoint_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/model/layer_registry.h"

namespace dapple {
namespace {

std::string Errno() { return std::strerror(errno); }

std::string Parent(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string Shape(const google::protobuf::RepeatedField<int64_t>& s) {
  return absl::StrCat("[", absl::StrJoin(s, ", "), "]");
}

// Short ("%g") unless that would print two different doubles alike.
std::string Num(double v, double other) {
  if (absl::StrFormat("%g", v) != absl::StrFormat("%g", other)) return absl::StrFormat("%g", v);
  return absl::StrFormat("%.17g", v);
}

absl::Status Differs(const std::string& field, const std::string& saved, const std::string& job) {
  return absl::InvalidArgumentError(
      absl::StrCat(field, " differs: checkpoint ", saved, ", job ", job));
}

}  // namespace

std::string CheckpointDirName(int64_t step) { return absl::StrCat("step-", step); }

std::string PartialCheckpointDirName(int64_t step) {
  return absl::StrCat(CheckpointDirName(step), kPartialSuffix);
}

std::string ShardFileName(int stage, int replica) {
  return absl::StrCat("stage", stage, ".replica", replica, ".shard");
}

absl::Status SyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0)
    return absl::UnavailableError(absl::StrCat("cannot open folder '", dir, "': ", Errno()));
  const int rc = ::fsync(fd);
  const std::string why = Errno();
  ::close(fd);
  if (rc != 0) return absl::UnavailableError(absl::StrCat("cannot sync folder '", dir, "': ", why));
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot create '", tmp, "': ", Errno()));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const std::string why = Errno();
      ::close(fd);
      ::unlink(tmp.c_str());
      return absl::UnavailableError(absl::StrCat("cannot write '", tmp, "': ", why));
    }
    done += static_cast<size_t>(n);
  }
  // Without the fsync a crash after the rename could leave a published name with no data.
  if (::fsync(fd) != 0) {
    const std::string why = Errno();
    ::close(fd);
    ::unlink(tmp.c_str());
    return absl::UnavailableError(absl::StrCat("cannot sync '", tmp, "': ", why));
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = Errno();
    ::unlink(tmp.c_str());
    return absl::UnavailableError(absl::StrCat("cannot rename '", tmp, "' to '", path, "': ", why));
  }
  return SyncDirectory(Parent(path));
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("checkpoint file '", path, "' does not exist"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::DataLossError(absl::StrCat("cannot read '", path, "': ", Errno()));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("cannot read '", path, "'"));
  return ss.str();
}

absl::StatusOr<v1::CheckpointManifest> ReadCheckpointManifest(const std::string& dir_in) {
  std::string dir = dir_in;
  while (dir.size() > 1 && absl::EndsWith(dir, "/")) dir.pop_back();
  auto refuse = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", dir_in, "' is not a published checkpoint: ", why));
  };
  if (dir.empty()) return refuse("empty path");
  if (absl::EndsWith(dir, kPartialSuffix)) {
    return refuse("a .partial directory is still being written or was abandoned");
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return refuse(Errno());
  if (!S_ISDIR(st.st_mode)) return refuse("not a directory");
  const std::string path = absl::StrCat(dir, "/", kManifestFile);
  if (::stat(path.c_str(), &st) != 0) return refuse(absl::StrCat("no ", kManifestFile, " in it"));
  absl::StatusOr<std::string> bytes = ReadWholeFile(path);
  if (!bytes.ok()) return bytes.status();
  v1::CheckpointManifest manifest;
  if (!manifest.ParseFromString(*bytes)) {
    return absl::DataLossError(
        absl::StrCat("checkpoint manifest '", path, "' is corrupt: it does not parse"));
  }
  if (manifest.format_version() != kCheckpointFormatVersion) {
    return absl::DataLossError(absl::StrCat("checkpoint manifest '", path, "' has format_version ",
                                            manifest.format_version(), ", this build reads ",
                                            kCheckpointFormatVersion));
  }
  return manifest;
}

absl::Status CheckSameModel(const v1::ModelSpec& saved, const v1::ModelSpec& job) {
  if (saved.input_shape().size() != job.input_shape().size() ||
      !std::equal(saved.input_shape().begin(), saved.input_shape().end(),
                  job.input_shape().begin())) {
    return Differs("model.input_shape", Shape(saved.input_shape()), Shape(job.input_shape()));
  }
  if (saved.layers_size() != job.layers_size()) {
    return Differs("model.layers (count)", absl::StrCat(saved.layers_size()),
                   absl::StrCat(job.layers_size()));
  }
  for (int i = 0; i < saved.layers_size(); ++i) {
    const v1::LayerSpec& a = saved.layers(i);
    const v1::LayerSpec& b = job.layers(i);
    if (a.type() != b.type()) {
      return Differs(absl::StrCat("model.layers[", i, "].type"), a.type(), b.type());
    }
    const auto pa = LayerParamValues(a);
    const auto pb = LayerParamValues(b);
    if (pa != pb) {
      // The first key whose value differs (or that only one of them sets).
      for (const std::string& key : LayerParamKeys(a.type())) {
        auto find = [&key](const std::vector<std::pair<std::string, std::string>>& v) {
          for (const auto& kv : v) {
            if (kv.first == key) return kv.second;
          }
          return std::string("(default)");
        };
        if (find(pa) != find(pb)) {
          return Differs(absl::StrCat("model.layers[", i, "].", key), find(pa), find(pb));
        }
      }
    }
  }
  if (saved.loss() != job.loss()) return Differs("model.loss", saved.loss(), job.loss());
  return absl::OkStatus();
}

absl::Status CheckResumable(const v1::JobSpec& saved, const v1::JobSpec& job) {
  if (absl::Status s = CheckSameModel(saved.model(), job.model()); !s.ok()) return s;
  const v1::TrainingSpec& a = saved.training();
  const v1::TrainingSpec& b = job.training();
  if (a.global_batch() != b.global_batch()) {
    return Differs("training.global_batch", absl::StrCat(a.global_batch()),
                   absl::StrCat(b.global_batch()));
  }
  if (a.seed() != b.seed()) {
    return Differs("training.seed", absl::StrCat(a.seed()), absl::StrCat(b.seed()));
  }
  const v1::OptimizerSpec& p = a.optimizer();
  const v1::OptimizerSpec& q = b.optimizer();
  if (p.type() != q.type()) return Differs("training.optimizer.type", p.type(), q.type());
  const struct {
    const char* name;
    double saved, job;
  } numbers[] = {{"lr", p.lr(), q.lr()},
                 {"momentum", p.momentum(), q.momentum()},
                 {"weight_decay", p.weight_decay(), q.weight_decay()},
                 {"beta1", p.beta1(), q.beta1()},
                 {"beta2", p.beta2(), q.beta2()},
                 {"eps", p.eps(), q.eps()}};
  for (const auto& n : numbers) {
    if (n.saved != n.job) {
      return Differs(absl::StrCat("training.optimizer.", n.name), Num(n.saved, n.job),
                     Num(n.job, n.saved));
    }
  }
  return absl::OkStatus();
}

}  // namespace dapple
