#include "coordinator/jobs/event_recorder.h"

#include <sqlite3.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/schedule/ranks.h"
#include "common/status.h"
#include "coordinator/jobs/sqlite_db.h"

namespace dapple::coordinator {
namespace {

constexpr char kEventCreateTable[] =
    "CREATE TABLE IF NOT EXISTS job_events ("
    "  id INTEGER PRIMARY KEY,"
    "  job_id TEXT NOT NULL,"
    "  type TEXT NOT NULL,"
    "  reason TEXT NOT NULL,"
    "  message TEXT NOT NULL,"
    "  count INTEGER NOT NULL,"
    "  first_unix_ms INTEGER NOT NULL,"
    "  last_unix_ms INTEGER NOT NULL);"
    "CREATE INDEX IF NOT EXISTS job_events_by_job ON job_events (job_id, reason)";

constexpr char kFindSql[] =
    "SELECT id FROM job_events WHERE job_id = ?1 AND reason = ?2 AND message = ?3";
constexpr char kBumpSql[] =
    "UPDATE job_events SET count = count + 1, last_unix_ms = MAX(last_unix_ms, ?2) WHERE id = ?1";
// Reasons whose repeats say the same thing with a new number (ReplacesByReason).
constexpr char kFindReasonSql[] = "SELECT id FROM job_events WHERE job_id = ?1 AND reason = ?2";
constexpr char kReplaceSql[] =
    "UPDATE job_events SET count = count + 1, last_unix_ms = MAX(last_unix_ms, ?2), message = ?3 "
    "WHERE id = ?1";
constexpr char kEventInsertSql[] =
    "INSERT INTO job_events (job_id, type, reason, message, count, first_unix_ms, last_unix_ms) "
    "VALUES (?1, ?2, ?3, ?4, 1, ?5, ?5)";
// Keeps the job's first entry and its newest ?2 - 1 others.
constexpr char kEventPruneSql[] =
    "DELETE FROM job_events WHERE job_id = ?1 "
    "AND id <> (SELECT MIN(id) FROM job_events WHERE job_id = ?1) "
    "AND id NOT IN (SELECT id FROM job_events WHERE job_id = ?1 "
    "AND id <> (SELECT MIN(id) FROM job_events WHERE job_id = ?1) "
    "ORDER BY last_unix_ms DESC, id DESC LIMIT ?2 - 1)";
constexpr char kListSql[] =
    "SELECT type, reason, message, count, first_unix_ms, last_unix_ms FROM job_events "
    "WHERE job_id = ?1 ORDER BY last_unix_ms, id";

}  // namespace

absl::string_view JobEventReasonName(JobEventReason reason) {
  switch (reason) {
    case JobEventReason::kSubmitted:
      return "Submitted";
    case JobEventReason::kMeasured:
      return "Measured";
    case JobEventReason::kPlanned:
      return "Planned";
    case JobEventReason::kScheduled:
      return "Scheduled";
    case JobEventReason::kStarted:
      return "Started";
    case JobEventReason::kCheckpointSaved:
      return "CheckpointSaved";
    case JobEventReason::kCheckpointFailed:
      return "CheckpointFailed";
    case JobEventReason::kWorkerLost:
      return "WorkerLost";
    case JobEventReason::kRestarting:
      return "Restarting";
    case JobEventReason::kReplanned:
      return "Replanned";
    case JobEventReason::kResumed:
      return "Resumed";
    case JobEventReason::kSkippedStep:
      return "SkippedStep";
    case JobEventReason::kPreempted:
      return "Preempted";
    case JobEventReason::kStraggler:
      return "Straggler";
    case JobEventReason::kStragglerRecovered:
      return "StragglerRecovered";
    case JobEventReason::kSucceeded:
      return "Succeeded";
    case JobEventReason::kFailed:
      return "Failed";
    case JobEventReason::kCancelled:
      return "Cancelled";
    case JobEventReason::kCoordinatorRestarted:
      return "CoordinatorRestarted";
    case JobEventReason::kReattached:
      return "Reattached";
  }
  return "Unknown";
}

absl::string_view JobEventType(JobEventReason reason) {
  switch (reason) {
    case JobEventReason::kCheckpointFailed:
    case JobEventReason::kWorkerLost:
    case JobEventReason::kRestarting:
    case JobEventReason::kSkippedStep:
    case JobEventReason::kPreempted:
    case JobEventReason::kStraggler:
    case JobEventReason::kFailed:
    case JobEventReason::kCancelled:
    case JobEventReason::kCoordinatorRestarted:
      return "Warning";
    default:
      return "Normal";
  }
}

bool TransitionEvent(const v1::Job& job, const std::string& message, JobEventReason* reason,
                     std::string* event_message) {
  switch (job.state()) {
    case v1::JOB_STATE_PLANNING:
      *reason = JobEventReason::kScheduled;
      *event_message = "admitted: its workers are free; planning its stages on them";
      return true;
    case v1::JOB_STATE_RUNNING:
      *reason = JobEventReason::kStarted;
      *event_message = absl::StrCat("started: ", StartedMessage(job.plan()));
      if (job.metrics().step() > 0) {
        absl::StrAppend(event_message, "; resuming after step ", job.metrics().step());
      }
      return true;
    case v1::JOB_STATE_SUCCEEDED: {
      *reason = JobEventReason::kSucceeded;
      const v1::JobMetrics& m = job.metrics();
      *event_message = absl::StrFormat("%d/%d steps in %.1f s, last loss %.4f", m.step(),
                                       m.total_steps(), m.elapsed_seconds(), m.loss());
      if (!message.empty()) absl::StrAppend(event_message, ": ", message);
      return true;
    }
    case v1::JOB_STATE_FAILED:
      *reason = JobEventReason::kFailed;
      *event_message = message.empty() ? "failed" : message;
      return true;
    case v1::JOB_STATE_CANCELLED:
      *reason = JobEventReason::kCancelled;
      *event_message = message.empty() ? "cancelled" : message;
      return true;
    case v1::JOB_STATE_PENDING:  // only a preempted job moves back to PENDING
      *reason = JobEventReason::kPreempted;
      *event_message = message.empty() ? "preempted" : message;
      return true;
    case v1::JOB_STATE_RESTARTING:
      *reason = JobEventReason::kRestarting;
      *event_message = message.empty() ? "restarting" : message;
      return true;
    default:
      return false;
  }
}

std::string PlannedMessage(const v1::ParallelPlanSummary& plan) {
  int most_replicas = 1;
  bool uniform = true;
  for (const v1::PlanStageSummary& s : plan.stages()) {
    if (s.replicas() != plan.stages(0).replicas()) uniform = false;
    most_replicas = std::max(most_replicas, s.replicas());
  }
  std::string shape;
  const int stages = plan.stages_size();
  if (uniform) {
    shape = absl::StrCat(stages, stages == 1 ? " stage x " : " stages x ", most_replicas,
                         most_replicas == 1 ? " replica" : " replicas");
  } else {
    std::vector<int> replicas;
    for (const v1::PlanStageSummary& s : plan.stages()) replicas.push_back(s.replicas());
    shape = absl::StrCat(stages, " stages with ", absl::StrJoin(replicas, "/"), " replicas");
  }
  std::vector<int> recomputing;
  for (int s = 0; s < stages; ++s) {
    if (plan.stages(s).recompute()) recomputing.push_back(s);
  }
  std::string recompute;
  if (!recomputing.empty()) {
    recompute = absl::StrCat(", recompute on ", recomputing.size() == 1 ? "stage " : "stages ",
                             absl::StrJoin(recomputing, ", "));
  }
  std::string out = absl::StrCat(shape, " by the ", plan.planner(), " planner (schedule ",
                                 plan.schedule(), ", M=", plan.micro_batches(), recompute, ")");
  if (plan.predicted_step_ms() > 0) {
    absl::StrAppend(&out, absl::StrFormat(", predicted %.1f ms/step", plan.predicted_step_ms()));
  }
  if (!plan.profile_source().empty()) {
    absl::StrAppend(&out, " (profile: ", plan.profile_source(), ")");
  }
  return out;
}

std::string StartedMessage(const v1::ParallelPlanSummary& plan) {
  std::vector<std::string> ranks;
  for (int s = 0; s < plan.stages_size(); ++s) {
    const v1::PlanStageSummary& stage = plan.stages(s);
    for (int r = 0; r < stage.worker_ids_size(); ++r) {
      std::string rank =
          absl::StrCat(schedule::RankName(s, r, stage.replicas()), " on ", stage.worker_ids(r));
      if (r < stage.devices_size()) absl::StrAppend(&rank, " (", stage.devices(r), ")");
      ranks.push_back(std::move(rank));
    }
  }
  return ranks.empty() ? "no ranks" : absl::StrJoin(ranks, ", ");
}

absl::StatusOr<std::unique_ptr<EventRecorder>> EventRecorder::Open(const std::string& db_path) {
  DAPPLE_ASSIGN_OR_RETURN(sqlite3 * db,
                          OpenSqliteTables(db_path, kEventCreateTable, "event table"));
  std::unique_ptr<EventRecorder> recorder(new EventRecorder(db, db_path));
  return recorder;
}

EventRecorder::~EventRecorder() { sqlite3_close(db_); }

bool ReplacesByReason(JobEventReason reason) {
  // A periodic checkpoint's message names its step and folder: as separate rows they filled
  // the job's 100 within minutes and pushed out its lifecycle (Planned, Started, Restarting).
  // So do the failures of a checkpoint disk that stays full: one row, counted, the newest why.
  return reason == JobEventReason::kCheckpointSaved || reason == JobEventReason::kCheckpointFailed;
}

absl::Status EventRecorder::Record(const std::string& job_id, JobEventReason reason,
                                   const std::string& message, int64_t now_unix_ms) {
  if (job_id.empty()) return absl::InvalidArgumentError("event has no job id");
  const absl::string_view name = JobEventReasonName(reason);
  absl::MutexLock lock(&mu_);
  auto failed = [&](absl::string_view what) {
    const std::string why = sqlite3_errmsg(db_);
    (void)ExecSql(db_, "ROLLBACK");
    return absl::InternalError(absl::StrCat("recording event ", name, " of job ", job_id, " in '",
                                            path_, "' (", what, "): ", why));
  };
  if (absl::Status s = ExecSql(db_, "BEGIN IMMEDIATE"); !s.ok()) {
    return absl::InternalError(absl::StrCat("recording event ", name, " of job ", job_id, " in '",
                                            path_, "': ", s.message()));
  }
  int64_t existing = 0;
  const bool replaces = ReplacesByReason(reason);
  {
    SqliteStatement find;
    if (sqlite3_prepare_v2(db_, replaces ? kFindReasonSql : kFindSql, -1, &find.stmt, nullptr) !=
        SQLITE_OK) {
      return failed("prepare");
    }
    BindText(find.stmt, 1, job_id);
    BindText(find.stmt, 2, name);
    if (!replaces) BindText(find.stmt, 3, message);
    const int rc = sqlite3_step(find.stmt);
    if (rc == SQLITE_ROW) {
      existing = sqlite3_column_int64(find.stmt, 0);
    } else if (rc != SQLITE_DONE) {
      return failed("find");
    }
  }
  if (existing > 0) {
    SqliteStatement bump;
    if (sqlite3_prepare_v2(db_, replaces ? kReplaceSql : kBumpSql, -1, &bump.stmt, nullptr) !=
        SQLITE_OK) {
      return failed("prepare");
    }
    sqlite3_bind_int64(bump.stmt, 1, existing);
    sqlite3_bind_int64(bump.stmt, 2, now_unix_ms);
    if (replaces) BindText(bump.stmt, 3, message);
    if (sqlite3_step(bump.stmt) != SQLITE_DONE) return failed("update");
  } else {
    {
      SqliteStatement insert;
      if (sqlite3_prepare_v2(db_, kEventInsertSql, -1, &insert.stmt, nullptr) != SQLITE_OK) {
        return failed("prepare");
      }
      BindText(insert.stmt, 1, job_id);
      BindText(insert.stmt, 2, JobEventType(reason));
      BindText(insert.stmt, 3, name);
      BindText(insert.stmt, 4, message);
      sqlite3_bind_int64(insert.stmt, 5, now_unix_ms);
      if (sqlite3_step(insert.stmt) != SQLITE_DONE) return failed("insert");
    }
    SqliteStatement prune;
    if (sqlite3_prepare_v2(db_, kEventPruneSql, -1, &prune.stmt, nullptr) != SQLITE_OK) {
      return failed("prepare");
    }
    BindText(prune.stmt, 1, job_id);
    sqlite3_bind_int(prune.stmt, 2, kMaxEventsPerJob);
    if (sqlite3_step(prune.stmt) != SQLITE_DONE) return failed("prune");
  }
  if (ExecSql(db_, "COMMIT").ok()) return absl::OkStatus();
  return failed("commit");
}

absl::StatusOr<std::vector<v1::JobEventRecord>> EventRecorder::List(
    const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  SqliteStatement list;
  if (sqlite3_prepare_v2(db_, kListSql, -1, &list.stmt, nullptr) != SQLITE_OK) {
    return absl::InternalError(
        absl::StrCat("reading events from '", path_, "': ", sqlite3_errmsg(db_)));
  }
  BindText(list.stmt, 1, job_id);
  std::vector<v1::JobEventRecord> events;
  int rc;
  auto text = [&](int column) { return ColumnText(list.stmt, column); };
  while ((rc = sqlite3_step(list.stmt)) == SQLITE_ROW) {
    v1::JobEventRecord& e = events.emplace_back();
    e.set_type(text(0));
    e.set_reason(text(1));
    e.set_message(text(2));
    e.set_count(sqlite3_column_int64(list.stmt, 3));
    e.set_first_unix_ms(sqlite3_column_int64(list.stmt, 4));
    e.set_last_unix_ms(sqlite3_column_int64(list.stmt, 5));
  }
  if (rc != SQLITE_DONE) {
    return absl::InternalError(
        absl::StrCat("reading events from '", path_, "': ", sqlite3_errmsg(db_)));
  }
  return events;
}

}  // namespace dapple::coordinator
