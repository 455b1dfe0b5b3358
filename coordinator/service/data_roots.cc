#include "coordinator/service/data_roots.h"

#include <limits.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/job_spec.h"
#include "common/spec_text.h"
#include "coordinator/service/emulation.h"

namespace dapple::coordinator {
namespace {

namespace fs = std::filesystem;

// "/a/b/../c/" -> "/a/c": no trailing separator, so that prefix tests compare whole components.
std::string Normal(const std::string& path) {
  std::string normal = fs::path(path).lexically_normal().string();
  while (normal.size() > 1 && normal.back() == '/') normal.pop_back();
  return normal;
}

bool Inside(const std::string& path, const std::string& root) {
  if (path.size() < root.size() || path.compare(0, root.size(), root) != 0) return false;
  return path.size() == root.size() || path[root.size()] == '/';
}

bool InsideAny(const std::string& path, const std::vector<std::string>& roots) {
  for (const std::string& root : roots) {
    if (Inside(path, root)) return true;
  }
  return false;
}

// The real path of an existing `path`, "" when it cannot be resolved (missing, unreadable).
std::string RealPath(const std::string& path) {
  std::unique_ptr<char, decltype(&free)> real(realpath(path.c_str(), nullptr), &free);
  return real ? std::string(real.get()) : std::string();
}

}  // namespace

std::vector<std::string> DefaultDataRoots() {
  return {"/usr/share/datasets", "/var/lib/dapple/datasets"};
}

absl::StatusOr<DataRoots> DataRoots::Create(const std::vector<std::string>& roots) {
  DataRoots out;
  for (const std::string& root : roots) {
    if (root.empty() || root.front() != '/') {
      return absl::InvalidArgumentError(
          absl::StrCat("--data-root '", job_spec_internal::OneLine(root),
                       "' must be an absolute path: the folder whose files jobs may read"));
    }
    const std::string normal = Normal(root);
    if (normal == "/") {
      return absl::InvalidArgumentError(
          "--data-root / would let every job read every file the coordinator and the workers "
          "can read (the coordinator's tokens and database, other tenants' checkpoints): name "
          "the folders that hold datasets");
    }
    out.roots_.push_back(normal);
  }
  return out;
}

// Resolved at every check, not once: a root may be mounted, or made a link, after the start.
std::vector<std::string> DataRoots::RealRoots() const {
  std::vector<std::string> real;
  for (const std::string& root : roots_) {
    std::string r = RealPath(root);
    if (!r.empty()) real.push_back(std::move(r));
  }
  return real;
}

bool DataRoots::Contains(const std::string& path) const {
  const std::string normal = Normal(path);
  const std::vector<std::string> real_roots = RealRoots();
  if (InsideAny(normal, roots_) || InsideAny(normal, real_roots)) return true;
  const std::string real = RealPath(normal);
  return !real.empty() && InsideAny(real, real_roots);
}

absl::Status DataRoots::Check(absl::string_view field, const std::string& path) const {
  const std::string shown = job_spec_internal::OneLine(path);
  if (path.empty() || path.front() != '/') {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " '", shown, "' must be an absolute path inside the coordinator's data roots (",
        absl::StrJoin(roots_, ", "), ")"));
  }
  const std::string outside = absl::StrCat(
      field, " ", shown, " is outside the coordinator's data roots (",
      roots_.empty() ? "none configured" : absl::StrJoin(roots_, ", "),
      "): a job may read files under them only; put the file there or ask an admin to add its "
      "folder with --data-root");
  // Lexically first: a path outside is refused before the file system is asked anything, so the
  // answer cannot depend on what exists there.
  const std::string normal = Normal(path);
  const std::vector<std::string> real_roots = RealRoots();
  if (!InsideAny(normal, roots_) && !InsideAny(normal, real_roots)) {
    return absl::InvalidArgumentError(outside);
  }
  // A symbolic link inside a root may point anywhere: its target must be inside a root too.
  // The message does not name the target (another tenant's folder, say).
  const std::string real = RealPath(normal);
  if (!real.empty() && !InsideAny(real, real_roots)) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " ", shown,
        " is inside the coordinator's data roots, but it is (or lies under) a symbolic link to a "
        "file or folder outside them (",
        absl::StrJoin(roots_, ", "),
        "): a job may read files under them only; copy the file there, or ask an admin to add "
        "its real folder with --data-root"));
  }
  return absl::OkStatus();
}

absl::Status CheckOwnFilesOutside(const DataRoots& roots, const std::vector<OwnFile>& files) {
  for (const OwnFile& file : files) {
    std::error_code ec;
    const fs::path absolute = fs::absolute(file.path, ec);
    const std::string path = ec ? file.path : absolute.string();
    if (!roots.Contains(path)) continue;
    std::string root = roots.roots().front();
    for (const std::string& r : roots.roots()) {
      if (Inside(Normal(path), r)) root = r;
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "--data-root ", root, " contains ", file.flag, " ", Normal(path),
        ": jobs could read the coordinator's database, tokens or other tenants' checkpoints as "
        "their data; give --data-root the folders that hold datasets only"));
  }
  return absl::OkStatus();
}

absl::Status CheckJobFiles(const v1::JobSpec& spec, const DataRoots& roots, const SpecText* text) {
  auto check = [&](absl::string_view field, const std::string& path) {
    absl::Status s = roots.Check(field, path);
    if (s.ok() || text == nullptr) return s;
    return JobSpecFieldError(text->yaml, text->source, field, s.message());
  };
  if (absl::Status s = check("data.path", spec.data().path()); !s.ok()) return s;
  if (IsEmulated(spec)) return check(kEmulationProfileField, spec.parallel().emulation().profile());
  return absl::OkStatus();
}

}  // namespace dapple::coordinator
