// JobManager: the jobs of the coordinator, in memory and in the SQLite JobStore, with the
// job lifecycle (job_lifecycle.h) enforced by ONE function, Transition, and watchers woken on
// every change.
//
//                                      ┌─▶ SUCCEEDED
//   PENDING ──▶ PLANNING ──▶ RUNNING ──┼─▶ FAILED
//     │  │        │  │                 └─▶ CANCELLED
//     │  │        │  └──────────────────▶ FAILED
//     │  │        └─────────────────────▶ CANCELLED
//     │  └──────────────────────────────▶ FAILED
//     └─────────────────────────────────▶ CANCELLED
//   RUNNING ──▶ RESTARTING ──▶ PLANNING (the same job again) | FAILED | CANCELLED
//   (automatic restarts: training.restart, restart_policy.h)
//
// Durability: every Create and Transition is written before it returns; Update (progress and
// metrics) is written at most once per `metrics_persist_interval_ms` per job, and FlushDirty
// writes what is left (the coordinator calls it from its periodic tick and at shutdown). A job's
// write that fails (a full database disk) stays in memory and is tried again; its warning is
// logged once, then as a count at most once a minute per job (repeated_warnings.h), and the
// first write that succeeds again logs "job job-5: changes saved again (after N failures ...)".
// Failed event writes are logged the same way.
//
// Exclusivity: Open first takes the database's DatabaseLock (db_lock.h) and holds it until the
// JobManager is destroyed, so a second coordinator on the same file is refused before it
// recovers (and so fails) anything.
//
// Events: every job's history (event_recorder.h) is recorded here: Create records Submitted
// (and Planned when it comes with a plan), Transition the event of the new state (Scheduled,
// Started, Succeeded, Failed, Cancelled), and RecordEvent what is not a state change. A failed
// event write is logged and never fails the change itself.
//
// Recovery (Open on an existing database): RUNNING jobs stay RUNNING with their plan, worker
// ids and metrics as last written (their workers keep training and re-register with the
// restarted coordinator, which re-attaches or fails them: CoordinatorService, "Coordinator
// restarts"); PLANNING jobs go back to PENDING with the message kRequeuedMessage and a
// CoordinatorRestarted event (no worker received anything of them yet); RESTARTING jobs stay
// RESTARTING (the service waits out their backoff again: restart_policy.h ResumedRestartWait);
// PENDING jobs stay PENDING; terminal jobs keep their state, message and metrics. Ids continue
// the stored sequence.
//
// Thread safety: thread-safe. Internally one mutex; no callbacks run under it except the
// Mutators passed in and the options' JobObserver (job_observer.h), which must not call back
// into the JobManager.
#ifndef DAPPLE_COORDINATOR_JOBS_JOB_MANAGER_H_
#define DAPPLE_COORDINATOR_JOBS_JOB_MANAGER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/jobs/db_lock.h"
#include "coordinator/jobs/event_recorder.h"
#include "coordinator/jobs/job_lifecycle.h"
#include "coordinator/jobs/job_observer.h"
#include "coordinator/jobs/job_store.h"
#include "coordinator/jobs/repeated_warnings.h"
#include "dapple/v1/job.pb.h"

namespace dapple::coordinator {

inline constexpr char kRequeuedMessage[] =
    "coordinator restarted while the job was being planned: queued again";

// Unix time in milliseconds from the wall clock.
int64_t WallClockUnixMs();

struct JobManagerOptions {
  std::string db_path;                                     // SQLite file, created if missing
  std::function<int64_t()> now_unix_ms = WallClockUnixMs;  // all timestamps come from here
  int64_t metrics_persist_interval_ms = 1000;  // Update writes at most this often per job
  // Told about every job loaded, created, transitioned or updated (null: nobody).
  std::shared_ptr<JobObserver> observer;
};

class JobManager {
 public:
  // Changes a job's non-lifecycle fields (plan, metrics, worker ids, step losses).
  using Mutator = std::function<void(v1::Job*)>;

  struct Snapshot {
    v1::Job job;
    int64_t version = 0;  // grows on every change of this job
  };

  // Locks the database, opens the store and recovers (see above). Errors: DatabaseLock's
  // (kFailedPrecondition "database d.db is in use by another dapple-coordinator (pid 123)",
  // kInvalidArgument for an empty path), JobStore::Open's, kDataLoss for a corrupt row, and
  // any write error of the recovery transitions.
  static absl::StatusOr<std::unique_ptr<JobManager>> Open(JobManagerOptions options);

  // Stores a new PENDING job "job-N" (N = 1 + the largest N ever stored) with `spec`, its YAML
  // text, `plan` (the plan made at submission with its prediction; empty: planned when it
  // starts) and created/updated timestamps; returns it once written. kInternal on a write error
  // (then nothing is stored and N is not consumed).
  // `mutate` (optional) sets further fields before the write (e.g. Job.resumed_from); it must
  // not touch id, state, message or timestamps.
  absl::StatusOr<v1::Job> Create(const v1::JobSpec& spec, const std::string& spec_yaml,
                                 const v1::ParallelPlanSummary& plan = {},
                                 const Mutator& mutate = {});

  // kNotFound "no job <id>".
  absl::StatusOr<v1::Job> Get(const std::string& id) const;
  absl::StatusOr<Snapshot> GetSnapshot(const std::string& id) const;

  // All jobs, newest first.
  std::vector<v1::Job> List() const;

  // The id of the oldest PENDING job, if any.
  std::optional<std::string> OldestPending() const;

  // The ids of all PENDING jobs, oldest first.
  std::vector<std::string> PendingIds() const;

  // PENDING jobs of `tenant` ("" : the operator's), counted without copying any.
  int PendingOfTenant(const std::string& tenant) const;

  // Sets the message and pending_reason (scheduling_policy.h PendingReasonName; "" for none)
  // of a PENDING or RESTARTING job (why it waits): the one place both change. Nothing happens
  // when it already has both; otherwise the version grows, watchers wake, and the write follows
  // Update's throttle (at most once per metrics_persist_interval_ms, the rest by FlushDirty).
  // kNotFound; kFailedPrecondition "job job-3 is RUNNING, not PENDING or RESTARTING".
  absl::Status SetPendingMessage(const std::string& id, const std::string& message,
                                 const std::string& reason = "");

  // THE way a job's state changes. Validates `from -> to` against the lifecycle, applies
  // `mutate` (optional; it must not touch id, state, message or timestamps), sets state,
  // message (kept as given; empty clears it), clears pending_reason, sets updated_unix_ms,
  // persists, logs one line and wakes watchers. Returns the job after the change. Errors: kNotFound
  // "no job job-9"; kFailedPrecondition "job job-3 already SUCCEEDED" from a terminal state, "job
  // job-3 is PENDING: cannot go to RUNNING" for another missing edge; kInternal on a write error
  // (then nothing changes).
  absl::StatusOr<v1::Job> Transition(const std::string& id, v1::JobState to,
                                     const std::string& message, const Mutator& mutate = {});

  // Applies `mutate` to a RUNNING job (progress, metrics), sets updated_unix_ms and wakes
  // watchers; writes it when the job's last write is at least metrics_persist_interval_ms old,
  // otherwise marks it dirty for FlushDirty. kNotFound; kFailedPrecondition "job job-3 is
  // CANCELLED, not RUNNING". A failed write is logged and retried by the next flush.
  absl::Status Update(const std::string& id, const Mutator& mutate);

  // Records an event of job `id` that is not a state change (Measured, Planned, CheckpointSaved,
  // WorkerLost, SkippedStep, Straggler, ...) at now_unix_ms and tells the observer
  // (JobObserver::OnJobEvent), even when the write fails. kNotFound "no job <id>"; a failed
  // write is logged (events never fail their caller's work) and returned.
  absl::Status RecordEvent(const std::string& id, JobEventReason reason,
                           const std::string& message);

  // The kept events of job `id`, newest last (EventRecorder::List). kNotFound "no job <id>";
  // kInternal for a read error.
  absl::StatusOr<std::vector<v1::JobEventRecord>> Events(const std::string& id) const;

  // Writes dirty jobs whose last write is at least the interval old (all dirty jobs when
  // `force`). Returns the first write error (the rest are still attempted).
  absl::Status FlushDirty(bool force);
  // Writes job `id` now when it has changes not written yet (Update's throttle or a failed
  // write): OK means the database holds the job as it is in memory. kNotFound; the write's error.
  absl::Status FlushJob(const std::string& id);

  // Blocks until job `id` has a version other than `version` (true), `deadline` passes or
  // Shutdown was called (false). An unknown id counts as changed.
  bool AwaitChange(const std::string& id, int64_t version, absl::Time deadline) const;

  // Wakes every AwaitChange; later ones return false at once. Other calls keep working.
  void Shutdown();
  bool IsShutdown() const;

 private:
  struct Entry {
    v1::Job job;
    int64_t version = 0;
    bool dirty = false;
    int64_t last_write_unix_ms = 0;
  };

  JobManager(JobManagerOptions options, std::unique_ptr<DatabaseLock> lock,
             std::unique_ptr<JobStore> store, std::unique_ptr<EventRecorder> events)
      : options_(std::move(options)),
        lock_(std::move(lock)),
        store_(std::move(store)),
        events_(std::move(events)) {}

  Entry* FindLocked(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const Entry* FindLocked(const std::string& id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the entry; a success after failed writes of the job logs that it is saved again.
  absl::Status WriteLocked(Entry& entry, int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // WriteLocked for writes nobody waits on (Update's, FlushDirty's): a failure is logged
  // through write_warnings_ (the first, then a count at most once a minute).
  absl::Status WriteLogged(Entry& entry, int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records an event (logging a failed write); under mu_ so that a job's events keep the order
  // of its changes.
  absl::Status RecordLocked(const std::string& id, JobEventReason reason,
                            const std::string& message, int64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks a changed entry dirty, writes it if the throttle allows and wakes watchers.
  void ChangedLocked(Entry& entry, int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const JobManagerOptions options_;
  mutable absl::Mutex mu_;
  mutable absl::CondVar changed_;
  // Declared before store_ so that it is released only after the database is closed.
  const std::unique_ptr<DatabaseLock> lock_;
  std::unique_ptr<JobStore> store_ ABSL_GUARDED_BY(mu_);
  const std::unique_ptr<EventRecorder> events_;  // thread-safe on its own
  // Failed writes of jobs and events, per job: a full database disk fails every progress
  // report's write, and a line each flooded the log.
  RepeatedWarnings write_warnings_;                     // thread-safe on its own
  std::map<int64_t, Entry> jobs_ ABSL_GUARDED_BY(mu_);  // by sequence number N of "job-N"
  int64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t next_version_ ABSL_GUARDED_BY(mu_) = 1;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_JOBS_JOB_MANAGER_H_
