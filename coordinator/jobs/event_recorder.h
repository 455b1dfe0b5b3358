// EventRecorder: the history of every job (v1::JobEventRecord, `dapplectl describe`), kept in
// the coordinator's SQLite database so that it outlives the workers and a coordinator restart.
// Kubernetes events are the model: each entry has a type (Normal / Warning), a CamelCase
// reason and a message; a repeat of an event with the same reason and message as a kept entry
// of the job is coalesced into it (count + 1, last time updated) instead of adding a row. A
// reason whose repeats differ only in their numbers (ReplacesByReason: CheckpointSaved, "after
// step N ...", and CheckpointFailed) is one row per job: a repeat counts into it and replaces its
// message, the newest.
//
// Who records: JobManager, where the lifecycle changes happen (Create: Submitted; Transition:
// Scheduled, Started, Succeeded / Failed / Cancelled), and the coordinator service through
// JobManager::RecordEvent for what is not a state change (Measured, Planned, CheckpointSaved,
// CheckpointFailed, WorkerLost, SkippedStep, Straggler, Replanned, Resumed; Preempted is reserved
// for preemption, not built yet). The messages of the structured events come from the functions
// below, never from string building at the call site.
//
// Bound: at most kMaxEventsPerJob entries per job (after coalescing). Adding one more drops the
// entries last seen longest ago, except the job's first entry (Submitted), which is always kept.
//
// Schema: the recorder owns one table, created when missing:
//   job_events(id INTEGER PRIMARY KEY,   -- insertion order
//              job_id TEXT, type TEXT, reason TEXT, message TEXT, count INTEGER,
//              first_unix_ms INTEGER, last_unix_ms INTEGER)
// on its own connection to the file (WAL mode, as trace_store.h).
//
// Thread safety: thread-safe (one internal mutex).
#ifndef DAPPLE_COORDINATOR_JOBS_EVENT_RECORDER_H_
#define DAPPLE_COORDINATOR_JOBS_EVENT_RECORDER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "dapple/v1/job.pb.h"

struct sqlite3;

namespace dapple::coordinator {

// What happened to a job. The reason names ("Submitted", ...) are part of the user interface.
enum class JobEventReason {
  kSubmitted,        // stored as PENDING
  kMeasured,         // its model's layers were timed by a worker (or the measurement failed)
  kPlanned,          // a plan: stages x replicas, predicted step time
  kScheduled,        // admitted: enough free workers, PENDING -> PLANNING
  kStarted,          // RUNNING on its workers
  kCheckpointSaved,  // a checkpoint was published
  // A checkpoint could not be published (a rank could not write its shard, the manifest or the
  // rename failed: a full or failing checkpoint disk; Warning): the job keeps running without it.
  kCheckpointFailed,
  kWorkerLost,          // a worker of the job died, stopped heartbeating or shut down (Warning)
  kRestarting,          // RUNNING -> RESTARTING by the restart policy (Warning)
  kReplanned,           // planned again on the live workers after a restart: the new shape
  kResumed,             // running again after a restart, from a checkpoint or from scratch
  kSkippedStep,         // a step's update was skipped (non-finite values; Warning)
  kPreempted,           // RUNNING -> PENDING by the scheduler (reclaim, priority; Warning)
  kStraggler,           // a rank is much slower than its stage's peers (Warning)
  kStragglerRecovered,  // a straggler computes like its peers again
  kSucceeded,
  kFailed,     // Warning
  kCancelled,  // Warning
  // The coordinator restarted while the job was RUNNING: it waits for the job's workers to
  // re-register (Warning).
  kCoordinatorRestarted,
  kReattached,  // every rank of the job is back after a coordinator restart: running again
};

// "Submitted", "Measured", ..., "CheckpointSaved", "WorkerLost", ...
absl::string_view JobEventReasonName(JobEventReason reason);
// "Warning" for CheckpointFailed, WorkerLost, Restarting, SkippedStep, Preempted, Straggler,
// Failed, Cancelled, CoordinatorRestarted; "Normal" otherwise.
absl::string_view JobEventType(JobEventReason reason);

// The event a job's move to `to` records, with its message: PENDING -> kPreempted,
// PLANNING -> kScheduled,
// RUNNING -> kStarted, RESTARTING -> kRestarting, SUCCEEDED / FAILED / CANCELLED -> kSucceeded /
// kFailed / kCancelled (false for other states). `job` is the job after the move, `message` its
// state message.
bool TransitionEvent(const v1::Job& job, const std::string& message, JobEventReason* reason,
                     std::string* event_message);

// Messages of the structured events.
// "2 stages x 1 replica by the dapple planner (schedule dapple, M=8), predicted 12.3 ms/step
// (profile: estimated from FLOPs at 50 GFLOP/s)" (the prediction and the profile's source only
// when the plan has them; "M=8, recompute on stages 0, 1" when stages recompute).
std::string PlannedMessage(const v1::ParallelPlanSummary& plan);
// "stage 0 on w-1 (cpu), stage 1 on w-2 (cpu)"; a stage with replicas "stage 0 replica 1 ...".
std::string StartedMessage(const v1::ParallelPlanSummary& plan);

// Whether repeats of `reason` go into one row per job whatever their message (above).
bool ReplacesByReason(JobEventReason reason);

class EventRecorder {
 public:
  static constexpr int kMaxEventsPerJob = 100;

  // Opens (creating if needed) the database at `db_path` and the job_events table.
  // kFailedPrecondition "cannot open event table in '<path>': <sqlite message>".
  static absl::StatusOr<std::unique_ptr<EventRecorder>> Open(const std::string& db_path);

  ~EventRecorder();
  EventRecorder(const EventRecorder&) = delete;
  EventRecorder& operator=(const EventRecorder&) = delete;

  // Records one occurrence at `now_unix_ms`: coalesced into the job's entry with the same
  // reason and message, else added (then the bound above applies), in one transaction.
  // kInvalidArgument for an empty job id; kInternal with SQLite's message (nothing changes).
  absl::Status Record(const std::string& job_id, JobEventReason reason, const std::string& message,
                      int64_t now_unix_ms);

  // The job's kept entries ordered by last occurrence, then insertion (newest last); none
  // for a job without events. kInternal for a read error.
  absl::StatusOr<std::vector<v1::JobEventRecord>> List(const std::string& job_id) const;

 private:
  EventRecorder(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}

  mutable absl::Mutex mu_;
  sqlite3* const db_;
  const std::string path_;
};

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_JOBS_EVENT_RECORDER_H_
