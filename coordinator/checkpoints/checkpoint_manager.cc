#include "coordinator/checkpoints/checkpoint_manager.h"

#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/checkpoint_files.h"
#include "common/logging.h"
#include "coordinator/auth/access.h"

namespace dapple::coordinator {
namespace {

namespace fs = std::filesystem;

// `path` made absolute against the working directory and normalised by its text alone ("a/../b"
// -> "b", no trailing '/'): no file is read.
fs::path Lexical(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::absolute(fs::path(path), ec);
  if (ec) p = fs::path(path);
  p = p.lexically_normal();
  if (!p.has_filename() && p.has_parent_path() && p != p.root_path()) p = p.parent_path();
  return p;
}

// The components of `path` below `root` ({} when it is not below it).
std::vector<std::string> Below(const fs::path& root, const fs::path& path) {
  const fs::path rel = path.lexically_relative(root);
  std::vector<std::string> parts;
  if (rel.empty()) return parts;
  for (const fs::path& part : rel) {
    if (part == ".." || part == "." || part.empty()) return {};
    parts.push_back(part.string());
  }
  return parts;
}

}  // namespace

CheckpointManager::CheckpointManager(std::string root, int keep)
    : root_(std::move(root)), publisher_(keep) {}

std::string CheckpointManager::JobDir(const v1::Job& job) const {
  return absl::StrCat(auth::TenantCheckpointDir(root_, job.tenant()), "/", job.id());
}

std::string CheckpointManager::LegacyJobDir(const std::string& job_id) const {
  return absl::StrCat(root_, "/", job_id);
}

std::string CheckpointManager::RecoveredJobDir(const v1::Job& job) const {
  if (!job.checkpoints().empty()) {
    return fs::path(job.checkpoints().rbegin()->path()).parent_path().string();
  }
  const std::string dir = JobDir(job);
  const std::string legacy = LegacyJobDir(job.id());
  std::error_code ec;
  if (!fs::exists(dir, ec) && fs::is_directory(legacy, ec)) return legacy;
  return dir;
}

void CheckpointManager::OnJobStarted(const v1::Job& job, const std::string& dir,
                                     const v1::ParallelPlanSummary& plan, int64_t first_step) {
  absl::MutexLock lock(&mu_);
  publisher_.OnJobStarted(job.id(), dir, job.spec(), plan, first_step);
}

void CheckpointManager::OnJobEnded(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  publisher_.OnJobEnded(job_id);
}

std::string CheckpointManager::RunningJobDir(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  return publisher_.JobDir(job_id);
}

int64_t CheckpointManager::OnStep(const std::string& job_id, int64_t step, double step_seconds,
                                  int64_t now_unix_ms) {
  absl::MutexLock lock(&mu_);
  return publisher_.OnStep(job_id, step, step_seconds, now_unix_ms);
}

absl::StatusOr<int64_t> CheckpointManager::RequestOnDemand(const std::string& job_id,
                                                           int64_t last_step) {
  absl::MutexLock lock(&mu_);
  return publisher_.RequestOnDemand(job_id, last_step);
}

int64_t CheckpointManager::RequestedStep(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  return publisher_.RequestedStep(job_id);
}

CheckpointPublisher::Outcome CheckpointManager::OnReport(
    const v1::ProgressReport& report,
    const std::function<std::vector<v1::CheckpointInfo>()>& published,
    const std::function<absl::Status(const CheckpointPublisher::Outcome&)>& record,
    int64_t now_unix_ms) {
  CheckpointPublisher::Collected c;
  {
    absl::MutexLock lock(&mu_);
    c = publisher_.Collect(report, now_unix_ms);
  }
  if (!c.remove_dir.empty()) {
    std::error_code ec;
    fs::remove_all(c.remove_dir, ec);
    if (ec) DAPPLE_LOG_WARN("cannot remove checkpoint folder {}: {}", c.remove_dir, ec.message());
  }
  if (!c.task.has_value()) return c.outcome;
  absl::MutexLock publishing(&publish_mu_);
  CheckpointPublisher::Outcome out = CheckpointPublisher::Publish(*c.task, published());
  // Recorded before the request is cleared: a preemption stops its job once RequestedStep is
  // 0, and must then find the checkpoint in Job.checkpoints.
  const absl::Status recorded = record(out);
  {
    absl::MutexLock lock(&mu_);
    publisher_.Finish(*c.task, out);
  }
  if (out.kind != CheckpointPublisher::Outcome::Kind::kPublished) return out;
  if (recorded.ok()) {
    CheckpointPublisher::DeleteSuperseded(c.task->job_id, out, c.task->keep);
  } else if (!out.superseded.empty() || !out.stale.empty()) {
    // The database still lists the older checkpoints: deleting them now would leave it naming
    // folders that are gone. The next publish that is recorded deletes them.
    DAPPLE_LOG_WARN(
        "job {}: checkpoint after step {} not recorded: its {} older checkpoint(s) stay until a "
        "later one is",
        c.task->job_id, c.task->step, out.superseded.size() + out.stale.size());
  }
  return out;
}

absl::StatusOr<std::string> CheckpointManager::OwnerOfPath(const auth::Identity& caller,
                                                           const std::string& dir,
                                                           const FindJob& find_job) const {
  const absl::Status none = absl::NotFoundError(
      absl::StrCat("--resume-from '", dir, "': no checkpoint of tenant ", caller.tenant, " there"));
  if (caller.tenant.empty()) return none;
  // By the text first: nothing outside the caller's folders is looked at, not even whether it
  // exists.
  const fs::path root = Lexical(root_);
  const fs::path path = Lexical(dir);
  const fs::path tenant_dir = Lexical(auth::TenantCheckpointDir(root_, caller.tenant));
  std::string job_id;
  fs::path job_dir;
  if (std::vector<std::string> parts = Below(tenant_dir, path); parts.size() == 2) {
    job_id = parts[0];
    job_dir = tenant_dir / job_id;
  } else if (parts = Below(root, path); parts.size() == 2 && absl::StartsWith(parts[1], "step-")) {
    // An older version's <root>/<job id>/step-<N>, of a job of the caller's tenant. (Only a
    // checkpoint's name: a tenant may be named like a job id, and <root>/<tenant>/<job id> is
    // that tenant's job folder.)
    job_id = parts[0];
    job_dir = root / job_id;
  } else {
    return none;
  }
  absl::StatusOr<v1::Job> job = find_job(job_id);
  if (!job.ok() || job->tenant() != caller.tenant) return none;
  // Now the file system: a symbolic link must not lead out of the job's folder.
  std::error_code ec;
  const fs::path real = fs::weakly_canonical(path, ec);
  if (ec) return none;
  const fs::path real_job_dir = fs::weakly_canonical(job_dir, ec);
  if (ec || Below(real_job_dir, real).size() != 1 || !fs::is_directory(real, ec) || ec) {
    return none;
  }
  return job_id;
}

absl::StatusOr<CheckpointManager::ResumeSource> CheckpointManager::OpenResume(
    const auth::Identity& caller, const std::string& path, const FindJob& find_job) {
  std::string dir = path;
  while (dir.size() > 1 && absl::EndsWith(dir, "/")) dir.pop_back();
  std::string owner;
  if (caller.role != auth::Role::kAdmin) {
    absl::StatusOr<std::string> job_id = OwnerOfPath(caller, dir, find_job);
    if (!job_id.ok()) return job_id.status();
    owner = *std::move(job_id);
  }
  absl::StatusOr<v1::CheckpointManifest> manifest = ReadCheckpointManifest(dir);
  {
    absl::MutexLock lock(&mu_);
    if (manifest.ok()) {
      resume_steps_.insert_or_assign(dir, manifest->step());
    }
  }
  if (!manifest.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--resume-from (resume_from): ", manifest.status().message()));
  }
  // A manifest copied into the caller's folder from elsewhere names another job: it could
  // point at shards the caller may not read.
  if (!owner.empty() && manifest->job_id() != owner) {
    return absl::NotFoundError(absl::StrCat("--resume-from '", dir, "': no checkpoint of tenant ",
                                            caller.tenant, " there"));
  }
  return ResumeSource{dir, *std::move(manifest)};
}

absl::StatusOr<int64_t> CheckpointManager::ResumeStep(const std::string& dir) const {
  absl::MutexLock lock(&mu_);
  auto it = resume_steps_.find(dir);
  if (it == resume_steps_.end()) {
    return absl::NotFoundError(absl::StrCat("checkpoint '", dir, "' was not read yet"));
  }
  return it->second;
}

void CheckpointManager::PrepareResume(const std::string& dir) {
  {
    absl::MutexLock lock(&mu_);
    if (resume_steps_.contains(dir)) return;
  }
  absl::StatusOr<v1::CheckpointManifest> manifest = ReadCheckpointManifest(dir);
  absl::MutexLock lock(&mu_);
  resume_steps_.insert_or_assign(dir, manifest.ok() ? absl::StatusOr<int64_t>(manifest->step())
                                                    : absl::StatusOr<int64_t>(manifest.status()));
}

absl::StatusOr<CheckpointManager::ResumePoint> CheckpointManager::NewestCheckpoint(
    const v1::Job& job) {
  for (int i = job.checkpoints_size() - 1; i >= 0; --i) {
    const std::string& dir = job.checkpoints(i).path();
    absl::StatusOr<v1::CheckpointManifest> manifest = ReadCheckpointManifest(dir);
    if (manifest.ok()) return ResumePoint{manifest->step(), dir};
    DAPPLE_LOG_WARN("job {}: checkpoint {} cannot be resumed from: {}", job.id(), dir,
                    manifest.status().message());
  }
  if (job.resumed_from().empty()) return ResumePoint{};
  absl::StatusOr<v1::CheckpointManifest> manifest = ReadCheckpointManifest(job.resumed_from());
  if (!manifest.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the checkpoint the job was resumed from, ", job.resumed_from(),
                     ", cannot be read (", manifest.status().message(), ")",
                     job.checkpoints().empty() ? "" : ", nor can any it published since"));
  }
  return ResumePoint{manifest->step(), job.resumed_from()};
}

}  // namespace dapple::coordinator
