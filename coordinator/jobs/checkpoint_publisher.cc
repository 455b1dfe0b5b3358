#include "coordinator/jobs/checkpoint_publisher.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/checkpoint_files.h"
#include "common/logging.h"
#include "common/lr_schedule.h"
#include "common/steps.h"

namespace dapple::coordinator {
namespace {

namespace fs = std::filesystem;

void RemoveQuietly(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) DAPPLE_LOG_WARN("cannot remove checkpoint folder {}: {}", path, ec.message());
}

// The CheckpointInfo of the published checkpoint in folder `path`, from its manifest.
v1::CheckpointInfo InfoOf(const std::string& path, const v1::CheckpointManifest& manifest) {
  v1::CheckpointInfo info;
  info.set_step(manifest.step());
  info.set_path(path);
  info.set_created_unix_ms(manifest.created_unix_ms());
  for (const v1::CheckpointShardEntry& e : manifest.shards()) {
    info.set_bytes(info.bytes() + e.bytes());
  }
  info.set_reason(manifest.reason());
  return info;
}

}  // namespace

std::string DefaultCheckpointRoot(const std::string& db_path) {
  const size_t slash = db_path.rfind('/');
  if (slash == std::string::npos) return "checkpoints";
  return absl::StrCat(db_path.substr(0, slash + 1), "checkpoints");
}

std::string CheckpointPublisher::JobDir(const std::string& job_id) const {
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? std::string() : it->second.dir;
}

void CheckpointPublisher::OnJobStarted(const std::string& job_id, const std::string& job_dir,
                                       const v1::JobSpec& spec, const v1::ParallelPlanSummary& plan,
                                       int64_t first_step) {
  JobState job;
  job.dir = job_dir;
  job.spec = spec;
  job.plan = plan;
  // One shard per stage: its replicas hold identical weights, so replica 0 alone writes it.
  job.ranks = plan.stages_size();
  job.max_step = first_step;
  jobs_.insert_or_assign(job_id, std::move(job));
}

void CheckpointPublisher::OnJobEnded(const std::string& job_id) { jobs_.erase(job_id); }

int64_t CheckpointPublisher::OnStep(const std::string& job_id, int64_t step, double step_seconds,
                                    int64_t now_unix_ms) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return 0;
  JobState& job = it->second;
  job.max_step = std::max(job.max_step, step);
  if (step_seconds > 0) {
    job.recent_step_seconds.push_back(step_seconds);
    if (job.recent_step_seconds.size() > kWindow) {
      job.recent_step_seconds.erase(job.recent_step_seconds.begin());
    }
  }
  if (!job.clock_started) {
    job.clock_started = true;
    job.clock_unix_ms = now_unix_ms;
  }
  const double minutes = job.spec.training().checkpoint_every_minutes();
  const int64_t last_step = TotalSteps(job.spec);
  if (minutes <= 0 || job.requested > 0 || job.max_step >= last_step ||
      static_cast<double>(now_unix_ms - job.clock_unix_ms) < minutes * 60000.0) {
    return 0;
  }
  job.requested = StepAhead(job, last_step);
  job.requested_reason = "timed";
  // The clock restarts at the request too, so a request that is abandoned (a rank already
  // past it) is retried T minutes later, not at every report.
  job.clock_unix_ms = now_unix_ms;
  DAPPLE_LOG_INFO("job {}: checkpoint after step {} requested ({} minutes passed)", job_id,
                  job.requested, minutes);
  return job.requested;
}

int64_t CheckpointPublisher::StepAhead(const JobState& job, int64_t last_step) {
  double mean = 0;
  for (double s : job.recent_step_seconds) mean += s;
  if (!job.recent_step_seconds.empty()) mean /= job.recent_step_seconds.size();
  int64_t ahead = kMinStepsAhead;
  if (mean > 0)
    ahead = std::max<int64_t>(ahead, static_cast<int64_t>(std::ceil(kLeadSeconds / mean)));
  return std::min(job.max_step + ahead, last_step);
}

absl::StatusOr<int64_t> CheckpointPublisher::RequestOnDemand(const std::string& job_id,
                                                             int64_t last_step) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job_id, " is not running"));
  }
  JobState& job = it->second;
  if (job.requested > 0) return job.requested;
  if (job.max_step >= last_step) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job_id,
                                                      " already reached its last step ", last_step,
                                                      ": nothing left to checkpoint"));
  }
  job.requested = StepAhead(job, last_step);
  job.requested_reason = "on demand";
  return job.requested;
}

int64_t CheckpointPublisher::RequestedStep(const std::string& job_id) const {
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? 0 : it->second.requested;
}

CheckpointPublisher::Outcome CheckpointPublisher::Abandoned(const std::string& job_id, int64_t step,
                                                            const std::string& why) {
  Outcome out;
  out.kind = Outcome::Kind::kAbandoned;
  out.message =
      absl::StrCat("checkpoint after step ", step, " of job ", job_id, " abandoned: ", why);
  DAPPLE_LOG_WARN("{}", out.message);
  return out;
}

CheckpointPublisher::Collected CheckpointPublisher::Abandon(const std::string& job_id,
                                                            JobState& job, int64_t step,
                                                            const std::string& why) {
  Collected c;
  c.outcome = Abandoned(job_id, step, why);
  job.shards.erase(step);
  job.finished.insert(step);
  if (job.requested == step) job.requested = 0;
  c.remove_dir = absl::StrCat(job.dir, "/", PartialCheckpointDirName(step));
  return c;
}

CheckpointPublisher::Collected CheckpointPublisher::Collect(const v1::ProgressReport& report,
                                                            int64_t now_unix_ms) {
  Collected c;
  auto it = jobs_.find(report.job_id());
  if (it == jobs_.end()) return c;
  JobState& job = it->second;
  const int64_t step = report.step();
  if (step < 1 || job.finished.contains(step)) return c;
  const std::string rank = absl::StrCat("stage ", report.stage(), " replica ", report.replica());
  if (report.checkpoint_file().empty()) {
    return Abandon(
        report.job_id(), job, step,
        absl::StrCat(rank, ": ", report.message().empty() ? "no shard written" : report.message()));
  }
  // The file name is the rank's own; anything else (a path) is not trusted.
  if (report.checkpoint_file() != ShardFileName(report.stage(), report.replica())) {
    return Abandon(
        report.job_id(), job, step,
        absl::StrCat(rank, " reported shard '", report.checkpoint_file(), "', expected '",
                     ShardFileName(report.stage(), report.replica()), "'"));
  }
  if (report.replica() != 0) {
    return Abandon(report.job_id(), job, step,
                   absl::StrCat(rank, " reported a shard: only replica 0 of a stage writes one"));
  }
  auto& shards = job.shards[step];
  shards[{report.stage(), report.replica()}] =
      Shard{report.checkpoint_file(), report.checkpoint_bytes()};
  if (static_cast<int>(shards.size()) < job.ranks) {
    c.outcome.kind = Outcome::Kind::kWaiting;
    return c;
  }
  // Every shard is in: the files are the publisher's task from here (outside any lock). The
  // step counts as finished now, so a report delivered twice cannot publish it twice.
  PublishTask task;
  task.job_id = report.job_id();
  task.dir = job.dir;
  task.step = step;
  task.keep = keep_;
  v1::CheckpointManifest& m = task.manifest;
  m.set_format_version(kCheckpointFormatVersion);
  m.set_job_id(report.job_id());
  m.set_step(step);
  m.set_epoch(EpochOfStep(job.spec, step));
  *m.mutable_spec() = job.spec;
  *m.mutable_plan() = job.plan;
  m.set_seed(job.spec.training().seed());
  m.set_samples_seen(step * job.spec.training().global_batch());
  m.set_created_unix_ms(now_unix_ms);
  m.set_reason(job.requested == step ? job.requested_reason : "periodic");
  // The schedule's rate of the next update: `step` updates were applied (one per step).
  m.set_learning_rate(LearningRate(job.spec.training(), step, TotalSteps(job.spec)));
  for (const auto& [key, shard] : shards) {
    const auto [stage, replica] = key;
    if (stage < 0 || stage >= job.plan.stages_size()) {
      return Abandon(task.job_id, job, step, absl::StrCat("stage ", stage, " is not in the plan"));
    }
    v1::CheckpointShardEntry* e = m.add_shards();
    e->set_stage(stage);
    e->set_replica(replica);
    e->set_first_layer(job.plan.stages(stage).first_layer());
    e->set_last_layer(job.plan.stages(stage).last_layer());
    // An interleaved rank's shard holds all its chunks: the loader reads them from here.
    *e->mutable_chunks() = job.plan.stages(stage).chunks();
    e->set_file(shard.file);
    e->set_bytes(shard.bytes);
  }
  job.shards.erase(step);
  job.finished.insert(step);
  c.task = std::move(task);
  return c;
}

CheckpointPublisher::Outcome CheckpointPublisher::Publish(
    const PublishTask& task, const std::vector<v1::CheckpointInfo>& published) {
  const std::string& job_dir = task.dir;
  const int64_t step = task.step;
  const std::string partial = absl::StrCat(job_dir, "/", PartialCheckpointDirName(step));
  const std::string final_dir = absl::StrCat(job_dir, "/", CheckpointDirName(step));
  auto abandon = [&](const std::string& why) {
    RemoveQuietly(partial);
    return Abandoned(task.job_id, step, why);
  };
  std::error_code partial_ec;
  if (!fs::exists(partial, partial_ec) && !partial_ec) {
    // The ranks' reports replayed after a coordinator restart, of a checkpoint published before
    // it whose record the database could not write: published it is, so it is recorded now.
    absl::StatusOr<v1::CheckpointManifest> manifest = ReadCheckpointManifest(final_dir);
    if (manifest.ok() && manifest->job_id() == task.job_id && manifest->step() == step) {
      Outcome out;
      out.kind = Outcome::Kind::kPublished;
      out.info = InfoOf(final_dir, *manifest);
      Retain(task, published, out);
      DAPPLE_LOG_INFO("job {}: checkpoint after step {} was published at {} before: listed again",
                      task.job_id, step, final_dir);
      return out;
    }
  }
  int64_t total_bytes = 0;
  for (const v1::CheckpointShardEntry& e : task.manifest.shards()) {
    // The shard must be there with the size the rank reported, or the manifest would lie.
    const std::string path = absl::StrCat(partial, "/", e.file());
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    if (ec || static_cast<int64_t>(size) != e.bytes()) {
      return abandon(ec ? absl::StrCat("shard '", path, "': ", ec.message())
                        : absl::StrCat("shard '", path, "' has ", size,
                                       " bytes, its rank reported ", e.bytes()));
    }
    total_bytes += e.bytes();
  }
  if (absl::Status s = WriteFileAtomically(absl::StrCat(partial, "/", kManifestFile),
                                           task.manifest.SerializeAsString());
      !s.ok()) {
    return abandon(std::string(s.message()));
  }
  // A step-<N> folder already there was left by an earlier run of the job (restarted from an
  // older checkpoint, or whose publish the database never recorded): this one replaces it, so it
  // is moved aside first (rename does not replace a non-empty folder) and put back on failure.
  const std::string aside = absl::StrCat(final_dir, ".replaced");
  std::error_code exists_ec;
  const bool replacing = fs::exists(final_dir, exists_ec);
  if (replacing) {
    RemoveQuietly(aside);
    if (std::rename(final_dir.c_str(), aside.c_str()) != 0) {
      return abandon(
          absl::StrCat("cannot move the earlier '", final_dir, "' aside: ", std::strerror(errno)));
    }
  }
  if (std::rename(partial.c_str(), final_dir.c_str()) != 0) {
    const std::string why =
        absl::StrCat("cannot rename '", partial, "' to '", final_dir, "': ", std::strerror(errno));
    if (replacing) (void)std::rename(aside.c_str(), final_dir.c_str());
    return abandon(why);
  }
  if (replacing) {
    DAPPLE_LOG_INFO("job {}: checkpoint {} replaces the folder an earlier run left there",
                    task.job_id, final_dir);
    RemoveQuietly(aside);
  }
  if (absl::Status s = SyncDirectory(job_dir); !s.ok()) DAPPLE_LOG_WARN("{}", s.message());

  Outcome out;
  out.kind = Outcome::Kind::kPublished;
  out.info.set_step(step);
  out.info.set_path(final_dir);
  out.info.set_created_unix_ms(task.manifest.created_unix_ms());
  out.info.set_bytes(total_bytes);
  out.info.set_reason(task.manifest.reason());
  Retain(task, published, out);
  DAPPLE_LOG_INFO("job {}: checkpoint after step {} published at {} ({} bytes, {})", task.job_id,
                  step, final_dir, total_bytes, task.manifest.reason());
  return out;
}

void CheckpointPublisher::Retain(const PublishTask& task,
                                 const std::vector<v1::CheckpointInfo>& published, Outcome& out) {
  const int64_t step = out.info.step();
  std::set<std::string> listed;
  for (const v1::CheckpointInfo& info : published) {
    std::error_code ec;
    if (info.path() == out.info.path()) continue;  // replaced by this one
    if (!fs::exists(info.path(), ec) && !ec) {
      // Listed, yet gone (deleted by a version that deleted before the database had recorded
      // the list): listing it would offer a resume point that is not there.
      DAPPLE_LOG_WARN("job {}: checkpoint {} is no longer on disk: not listed any more",
                      task.job_id, info.path());
      continue;
    }
    listed.insert(info.path());
    out.checkpoints.push_back(info);
  }
  out.checkpoints.push_back(out.info);
  // Published folders the job's list does not name: a publish the database could not record
  // (its list kept naming the older ones, so nothing was deleted for it). Older than this step:
  // listed again, so retention counts them; newer: left by an earlier run of the job that this
  // run restarted before (from an older checkpoint), superseded by this run's.
  std::error_code ec;
  for (fs::directory_iterator it(task.dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    int64_t n = 0;
    if (absl::StartsWith(name, "step-") && absl::EndsWith(name, kPartialSuffix) &&
        absl::SimpleAtoi(
            absl::string_view(name).substr(5, name.size() - 5 - strlen(kPartialSuffix)), &n) &&
        n >= 1 && n < step && name == PartialCheckpointDirName(n)) {
      // An abandoned checkpoint's folder that a rank still writing made again after the
      // abandon removed it (a fresh SRE found an empty step-200.partial minutes later): every
      // rank reported this later step, so none writes there any more.
      DAPPLE_LOG_INFO("job {}: removing {}/{}, left by an abandoned checkpoint", task.job_id,
                      task.dir, name);
      RemoveQuietly(absl::StrCat(task.dir, "/", name));
      continue;
    }
    if (!absl::StartsWith(name, "step-") || !absl::SimpleAtoi(name.substr(5), &n) || n < 1 ||
        name != CheckpointDirName(n) || n == step) {
      continue;
    }
    const std::string path = absl::StrCat(task.dir, "/", name);
    if (listed.contains(path)) continue;
    absl::StatusOr<v1::CheckpointManifest> manifest = ReadCheckpointManifest(path);
    // A folder that is not this job's published checkpoint is not ours to list or delete.
    if (!manifest.ok() || manifest->job_id() != task.job_id || manifest->step() != n) continue;
    v1::CheckpointInfo info = InfoOf(path, *manifest);
    if (n < step) {
      DAPPLE_LOG_INFO("job {}: checkpoint {} was published but never recorded: listed again",
                      task.job_id, path);
      out.checkpoints.push_back(std::move(info));
    } else {
      out.stale.push_back(std::move(info));
    }
  }
  std::stable_sort(
      out.checkpoints.begin(), out.checkpoints.end(),
      [](const v1::CheckpointInfo& a, const v1::CheckpointInfo& b) { return a.step() < b.step(); });
  const size_t keep = static_cast<size_t>(std::max(task.keep, 0));
  if (task.keep > 0 && out.checkpoints.size() > keep) {
    const auto first_kept = out.checkpoints.end() - static_cast<std::ptrdiff_t>(keep);
    out.superseded.assign(out.checkpoints.begin(), first_kept);
    out.checkpoints.erase(out.checkpoints.begin(), first_kept);
  }
}

void CheckpointPublisher::DeleteSuperseded(const std::string& job_id, const Outcome& outcome,
                                           int keep) {
  for (const v1::CheckpointInfo& info : outcome.superseded) {
    DAPPLE_LOG_INFO("job {}: deleting checkpoint {} (keeping the newest {})", job_id, info.path(),
                    keep);
    RemoveQuietly(info.path());
  }
  for (const v1::CheckpointInfo& info : outcome.stale) {
    DAPPLE_LOG_INFO(
        "job {}: deleting checkpoint {} (an earlier run's, after step {}: superseded by step {})",
        job_id, info.path(), info.step(), outcome.info.step());
    RemoveQuietly(info.path());
  }
}

void CheckpointPublisher::Finish(const PublishTask& task, const Outcome& outcome) {
  auto it = jobs_.find(task.job_id);
  if (it == jobs_.end()) return;  // ended meanwhile
  JobState& job = it->second;
  if (job.requested == task.step) job.requested = 0;
  if (outcome.kind == Outcome::Kind::kPublished) {
    job.clock_started = true;
    job.clock_unix_ms = task.manifest.created_unix_ms();
  }
}

CheckpointPublisher::Outcome CheckpointPublisher::OnReport(
    const v1::ProgressReport& report, const std::vector<v1::CheckpointInfo>& published,
    int64_t now_unix_ms) {
  Collected c = Collect(report, now_unix_ms);
  if (!c.remove_dir.empty()) RemoveQuietly(c.remove_dir);
  if (!c.task.has_value()) return c.outcome;
  Outcome out = Publish(*c.task, published);
  Finish(*c.task, out);
  if (out.kind == Outcome::Kind::kPublished) DeleteSuperseded(c.task->job_id, out, keep_);
  return out;
}

}  // namespace dapple::coordinator
