#include "coordinator/jobs/job_manager.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status.h"

namespace dapple::coordinator {

int64_t WallClockUnixMs() { return absl::ToUnixMillis(absl::Now()); }

absl::StatusOr<std::unique_ptr<JobManager>> JobManager::Open(JobManagerOptions options) {
  // The lock comes before anything is read, let alone recovered: a second coordinator must
  // not fail the first one's running jobs.
  DAPPLE_ASSIGN_OR_RETURN(std::unique_ptr<DatabaseLock> lock,
                          DatabaseLock::Acquire(options.db_path));
  DAPPLE_ASSIGN_OR_RETURN(std::unique_ptr<JobStore> store, JobStore::Open(options.db_path));
  DAPPLE_ASSIGN_OR_RETURN(std::vector<v1::Job> jobs, store->LoadAll());
  DAPPLE_ASSIGN_OR_RETURN(std::unique_ptr<EventRecorder> events,
                          EventRecorder::Open(options.db_path));
  std::unique_ptr<JobManager> manager(
      new JobManager(std::move(options), std::move(lock), std::move(store), std::move(events)));
  int requeued = 0;
  int running = 0;
  {
    absl::MutexLock lock(&manager->mu_);
    const int64_t now = manager->options_.now_unix_ms();
    for (v1::Job& job : jobs) {
      const int64_t seq = JobStore::SequenceOf(job.id());
      Entry& entry = manager->jobs_[seq];
      entry.job = std::move(job);
      entry.version = manager->next_version_++;
      entry.last_write_unix_ms = now;
      manager->next_seq_ = std::max(manager->next_seq_, seq + 1);
      if (entry.job.state() == v1::JOB_STATE_PLANNING) {
        // PLANNING lasts one scheduling pass under the service's lock and hands nothing to a
        // worker before RUNNING, so nothing of the job runs anywhere: it is queued again (no
        // lifecycle edge leads back to PENDING; this is recovery, not a transition).
        entry.job.set_state(v1::JOB_STATE_PENDING);
        entry.job.set_message(kRequeuedMessage);
        entry.job.set_updated_unix_ms(now);
        DAPPLE_RETURN_IF_ERROR(manager->WriteLocked(entry, now));
        (void)manager->RecordLocked(entry.job.id(), JobEventReason::kCoordinatorRestarted,
                                    kRequeuedMessage, now);
        ++requeued;
      }
      if (entry.job.state() == v1::JOB_STATE_RUNNING) ++running;
      if (manager->options_.observer) {
        manager->options_.observer->OnJobState(entry.job, v1::JOB_STATE_UNSPECIFIED);
      }
    }
  }
  DAPPLE_LOG_INFO(
      "job store {}: {} jobs loaded ({} RUNNING, waiting for their workers; {} PLANNING, "
      "queued again)",
      manager->options_.db_path, jobs.size(), running, requeued);
  return manager;
}

namespace {

// The key of a job's writes in write_warnings_.
std::string WriteKey(const std::string& id) { return absl::StrCat(id, " write"); }

}  // namespace

JobManager::Entry* JobManager::FindLocked(const std::string& id) {
  auto it = jobs_.find(JobStore::SequenceOf(id));
  return it == jobs_.end() ? nullptr : &it->second;
}

const JobManager::Entry* JobManager::FindLocked(const std::string& id) const {
  auto it = jobs_.find(JobStore::SequenceOf(id));
  return it == jobs_.end() ? nullptr : &it->second;
}

absl::Status JobManager::WriteLocked(Entry& entry, int64_t now) {
  DAPPLE_RETURN_IF_ERROR(store_->Put(entry.job));
  entry.dirty = false;
  entry.last_write_unix_ms = now;
  if (std::string after = write_warnings_.Succeeded(WriteKey(entry.job.id()), now);
      !after.empty()) {
    DAPPLE_LOG_INFO("job {}: changes saved again ({})", entry.job.id(), after);
  }
  return absl::OkStatus();
}

absl::Status JobManager::WriteLogged(Entry& entry, int64_t now) {
  absl::Status written = WriteLocked(entry, now);
  if (!written.ok()) {
    const std::string line = write_warnings_.Failed(
        WriteKey(entry.job.id()),
        absl::StrCat("job ", entry.job.id(), ": change not saved yet: ", written.message()), now);
    if (!line.empty()) DAPPLE_LOG_WARN("{}", line);
  }
  return written;
}

absl::StatusOr<v1::Job> JobManager::Create(const v1::JobSpec& spec, const std::string& spec_yaml,
                                           const v1::ParallelPlanSummary& plan,
                                           const Mutator& mutate) {
  absl::MutexLock lock(&mu_);
  const int64_t now = options_.now_unix_ms();
  Entry entry;
  entry.job.set_id(absl::StrCat("job-", next_seq_));
  entry.job.set_name(spec.name());
  entry.job.set_state(v1::JOB_STATE_PENDING);
  *entry.job.mutable_spec() = spec;
  entry.job.set_spec_yaml(spec_yaml);
  if (!plan.stages().empty()) *entry.job.mutable_plan() = plan;
  entry.job.set_created_unix_ms(now);
  entry.job.set_updated_unix_ms(now);
  entry.job.mutable_metrics()->set_epochs(static_cast<int32_t>(spec.training().epochs()));
  if (mutate) mutate(&entry.job);
  DAPPLE_RETURN_IF_ERROR(WriteLocked(entry, now));
  entry.version = next_version_++;
  DAPPLE_LOG_INFO("job {} ({}) submitted: PENDING", entry.job.id(), entry.job.name());
  (void)RecordLocked(entry.job.id(), JobEventReason::kSubmitted,
                     absl::StrCat("submitted as PENDING (schedule ", spec.parallel().schedule(),
                                  ", parallel.devices ", spec.parallel().devices(), ")",
                                  entry.job.resumed_from().empty()
                                      ? ""
                                      : absl::StrCat(", resuming from ", entry.job.resumed_from())),
                     now);
  if (!plan.stages().empty()) {
    (void)RecordLocked(entry.job.id(), JobEventReason::kPlanned, PlannedMessage(plan), now);
  }
  v1::Job result = entry.job;
  jobs_.emplace(next_seq_++, std::move(entry));
  if (options_.observer) options_.observer->OnJobState(result, v1::JOB_STATE_UNSPECIFIED);
  changed_.SignalAll();
  return result;
}

absl::StatusOr<v1::Job> JobManager::Get(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  const Entry* entry = FindLocked(id);
  if (entry == nullptr) return absl::NotFoundError(absl::StrCat("no job ", id));
  return entry->job;
}

absl::StatusOr<JobManager::Snapshot> JobManager::GetSnapshot(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  const Entry* entry = FindLocked(id);
  if (entry == nullptr) return absl::NotFoundError(absl::StrCat("no job ", id));
  return Snapshot{entry->job, entry->version};
}

std::vector<v1::Job> JobManager::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<v1::Job> jobs;
  jobs.reserve(jobs_.size());
  for (auto it = jobs_.rbegin(); it != jobs_.rend(); ++it) jobs.push_back(it->second.job);
  return jobs;
}

std::optional<std::string> JobManager::OldestPending() const {
  absl::MutexLock lock(&mu_);
  for (const auto& [seq, entry] : jobs_) {
    if (entry.job.state() == v1::JOB_STATE_PENDING) return entry.job.id();
  }
  return std::nullopt;
}

std::vector<std::string> JobManager::PendingIds() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> ids;
  for (const auto& [seq, entry] : jobs_) {
    if (entry.job.state() == v1::JOB_STATE_PENDING) ids.push_back(entry.job.id());
  }
  return ids;
}

int JobManager::PendingOfTenant(const std::string& tenant) const {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const auto& [seq, entry] : jobs_) {
    if (entry.job.state() == v1::JOB_STATE_PENDING && entry.job.tenant() == tenant) ++n;
  }
  return n;
}

absl::Status JobManager::SetPendingMessage(const std::string& id, const std::string& message,
                                           const std::string& reason) {
  absl::MutexLock lock(&mu_);
  Entry* entry = FindLocked(id);
  if (entry == nullptr) return absl::NotFoundError(absl::StrCat("no job ", id));
  if (entry->job.state() != v1::JOB_STATE_PENDING &&
      entry->job.state() != v1::JOB_STATE_RESTARTING) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", id, " is ", JobStateName(entry->job.state()), ", not PENDING or RESTARTING"));
  }
  if (entry->job.message() == message && entry->job.pending_reason() == reason) {
    return absl::OkStatus();
  }
  const int64_t now = options_.now_unix_ms();
  entry->job.set_message(message);
  entry->job.set_pending_reason(reason);
  entry->job.set_updated_unix_ms(now);
  ChangedLocked(*entry, now);
  return absl::OkStatus();
}

void JobManager::ChangedLocked(Entry& entry, int64_t now) {
  entry.version = next_version_++;
  entry.dirty = true;
  if (now - entry.last_write_unix_ms >= options_.metrics_persist_interval_ms) {
    (void)WriteLogged(entry, now);
  }
  changed_.SignalAll();
}

absl::StatusOr<v1::Job> JobManager::Transition(const std::string& id, v1::JobState to,
                                               const std::string& message, const Mutator& mutate) {
  absl::MutexLock lock(&mu_);
  Entry* entry = FindLocked(id);
  if (entry == nullptr) return absl::NotFoundError(absl::StrCat("no job ", id));
  const v1::JobState from = entry->job.state();
  if (IsTerminal(from)) {
    return absl::FailedPreconditionError(absl::StrCat("job ", id, " already ", JobStateName(from)));
  }
  if (!IsAllowedTransition(from, to)) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", id, " is ", JobStateName(from), ": cannot go to ", JobStateName(to)));
  }
  const int64_t now = options_.now_unix_ms();
  // Written from a copy so that a failed write leaves the job exactly as it was.
  Entry next = *entry;
  if (mutate) mutate(&next.job);
  next.job.set_state(to);
  next.job.set_message(message);
  // A reason is the scheduler's, for a queued job; the next pass sets it again.
  next.job.clear_pending_reason();
  next.job.set_updated_unix_ms(now);
  DAPPLE_RETURN_IF_ERROR(WriteLocked(next, now));
  next.version = next_version_++;
  *entry = std::move(next);
  if (options_.observer) options_.observer->OnJobState(entry->job, from);
  JobEventReason reason;
  std::string event_message;
  if (TransitionEvent(entry->job, message, &reason, &event_message)) {
    (void)RecordLocked(id, reason, event_message, now);
  }
  if (message.empty()) {
    DAPPLE_LOG_INFO("job {} {} -> {}", id, JobStateName(from), JobStateName(to));
  } else {
    DAPPLE_LOG_INFO("job {} {} -> {}: {}", id, JobStateName(from), JobStateName(to), message);
  }
  changed_.SignalAll();
  return entry->job;
}

absl::Status JobManager::Update(const std::string& id, const Mutator& mutate) {
  absl::MutexLock lock(&mu_);
  Entry* entry = FindLocked(id);
  if (entry == nullptr) return absl::NotFoundError(absl::StrCat("no job ", id));
  if (entry->job.state() != v1::JOB_STATE_RUNNING) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", id, " is ", JobStateName(entry->job.state()), ", not RUNNING"));
  }
  const int64_t now = options_.now_unix_ms();
  mutate(&entry->job);
  entry->job.set_updated_unix_ms(now);
  ChangedLocked(*entry, now);
  if (options_.observer) options_.observer->OnJobUpdate(entry->job);
  return absl::OkStatus();
}

absl::Status JobManager::RecordLocked(const std::string& id, JobEventReason reason,
                                      const std::string& message, int64_t now) {
  absl::Status s = events_->Record(id, reason, message, now);
  const std::string key = absl::StrCat(id, " events");
  if (!s.ok()) {
    const std::string line =
        write_warnings_.Failed(key,
                               absl::StrCat("job ", id, ": event ", JobEventReasonName(reason),
                                            " not recorded: ", s.message()),
                               now);
    if (!line.empty()) DAPPLE_LOG_WARN("{}", line);
  } else if (std::string after = write_warnings_.Succeeded(key, now); !after.empty()) {
    DAPPLE_LOG_INFO("job {}: events recorded again ({})", id, after);
  }
  return s;
}

absl::Status JobManager::RecordEvent(const std::string& id, JobEventReason reason,
                                     const std::string& message) {
  absl::MutexLock lock(&mu_);
  const Entry* entry = FindLocked(id);
  if (entry == nullptr) return absl::NotFoundError(absl::StrCat("no job ", id));
  absl::Status s = RecordLocked(id, reason, message, options_.now_unix_ms());
  if (options_.observer) options_.observer->OnJobEvent(entry->job, reason);
  return s;
}

absl::StatusOr<std::vector<v1::JobEventRecord>> JobManager::Events(const std::string& id) const {
  {
    absl::MutexLock lock(&mu_);
    if (FindLocked(id) == nullptr) return absl::NotFoundError(absl::StrCat("no job ", id));
  }
  return events_->List(id);
}

absl::Status JobManager::FlushDirty(bool force) {
  absl::MutexLock lock(&mu_);
  const int64_t now = options_.now_unix_ms();
  absl::Status first;
  for (auto& [seq, entry] : jobs_) {
    if (!entry.dirty) continue;
    if (!force && now - entry.last_write_unix_ms < options_.metrics_persist_interval_ms) continue;
    absl::Status written = WriteLogged(entry, now);
    if (!written.ok() && first.ok()) first = written;
  }
  return first;
}

absl::Status JobManager::FlushJob(const std::string& id) {
  absl::MutexLock lock(&mu_);
  Entry* entry = FindLocked(id);
  if (entry == nullptr) return absl::NotFoundError(absl::StrCat("no job ", id));
  if (!entry->dirty) return absl::OkStatus();
  return WriteLogged(*entry, options_.now_unix_ms());
}

bool JobManager::AwaitChange(const std::string& id, int64_t version, absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  while (!shutdown_) {
    const Entry* entry = FindLocked(id);
    if (entry == nullptr || entry->version != version) return true;
    if (changed_.WaitWithDeadline(&mu_, deadline)) {
      // Timed out; a change may still have landed together with the deadline.
      entry = FindLocked(id);
      return !shutdown_ && (entry == nullptr || entry->version != version);
    }
  }
  return false;
}

void JobManager::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutdown_ = true;
  changed_.SignalAll();
}

bool JobManager::IsShutdown() const {
  absl::MutexLock lock(&mu_);
  return shutdown_;
}

}  // namespace dapple::coordinator
