#include "coordinator/jobs/trace_store.h"

#include <sqlite3.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "coordinator/jobs/sqlite_db.h"

namespace dapple::coordinator {
namespace {

constexpr char kTraceCreateTable[] =
    "CREATE TABLE IF NOT EXISTS traces ("
    "  job_id TEXT NOT NULL,"
    "  stage INTEGER NOT NULL,"
    "  replica INTEGER NOT NULL,"
    "  step INTEGER NOT NULL,"
    "  recorded_unix_ms INTEGER NOT NULL,"
    "  trace BLOB NOT NULL,"
    "  PRIMARY KEY (job_id, stage, replica, step))";

constexpr char kTracePutSql[] =
    "INSERT OR REPLACE INTO traces (job_id, stage, replica, step, recorded_unix_ms, trace) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6)";

constexpr char kTracePruneSql[] =
    "DELETE FROM traces WHERE job_id = ?1 AND stage = ?2 AND replica = ?3 AND step NOT IN "
    "(SELECT step FROM traces WHERE job_id = ?1 AND stage = ?2 AND replica = ?3 "
    "ORDER BY recorded_unix_ms DESC, step DESC LIMIT ?4)";

constexpr char kGetSql[] =
    "SELECT stage, replica, step, trace FROM traces WHERE job_id = ?1 AND recorded_unix_ms >= ?2 "
    "ORDER BY step, stage, replica";

}  // namespace

absl::StatusOr<std::unique_ptr<TraceStore>> TraceStore::Open(const std::string& db_path) {
  absl::StatusOr<sqlite3*> db = OpenSqliteDatabase(db_path);
  if (!db.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open trace table in '", db_path, "': ", db.status().message()));
  }
  std::unique_ptr<TraceStore> store(new TraceStore(*db, db_path));
  absl::MutexLock lock(&store->mu_);
  if (absl::Status s = store->ExecLocked(kTraceCreateTable); !s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open trace table in '", db_path, "': ", s.message()));
  }
  return store;
}

TraceStore::~TraceStore() { sqlite3_close(db_); }

absl::Status TraceStore::ExecLocked(const char* sql) const { return ExecSql(db_, sql); }

absl::Status TraceStore::Put(const v1::StepTrace& trace, int64_t now_unix_ms) {
  if (trace.job_id().empty()) return absl::InvalidArgumentError("trace has no job_id");
  if (trace.step() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("trace of job ", trace.job_id(), " has step ", trace.step(), ", not >= 1"));
  }
  absl::MutexLock lock(&mu_);
  auto failed = [&](absl::string_view what) {
    const std::string why = sqlite3_errmsg(db_);
    (void)ExecLocked("ROLLBACK");
    return absl::InternalError(absl::StrCat("writing trace of job ", trace.job_id(), " stage ",
                                            trace.stage(), " step ", trace.step(), " to '", path_,
                                            "' (", what, "): ", why));
  };
  if (absl::Status s = ExecLocked("BEGIN IMMEDIATE"); !s.ok()) {
    return absl::InternalError(
        absl::StrCat("writing trace of job ", trace.job_id(), " to '", path_, "': ", s.message()));
  }
  const std::string blob = trace.SerializeAsString();
  const std::string& job = trace.job_id();
  {
    SqliteStatement put;
    if (sqlite3_prepare_v2(db_, kTracePutSql, -1, &put.stmt, nullptr) != SQLITE_OK) {
      return failed("prepare");
    }
    sqlite3_bind_text(put.stmt, 1, job.data(), static_cast<int>(job.size()), SQLITE_STATIC);
    sqlite3_bind_int(put.stmt, 2, trace.stage());
    sqlite3_bind_int(put.stmt, 3, trace.replica());
    sqlite3_bind_int64(put.stmt, 4, trace.step());
    sqlite3_bind_int64(put.stmt, 5, now_unix_ms);
    sqlite3_bind_blob(put.stmt, 6, blob.data(), static_cast<int>(blob.size()), SQLITE_STATIC);
    if (sqlite3_step(put.stmt) != SQLITE_DONE) return failed("insert");
  }
  {
    SqliteStatement prune;
    if (sqlite3_prepare_v2(db_, kTracePruneSql, -1, &prune.stmt, nullptr) != SQLITE_OK) {
      return failed("prepare");
    }
    sqlite3_bind_text(prune.stmt, 1, job.data(), static_cast<int>(job.size()), SQLITE_STATIC);
    sqlite3_bind_int(prune.stmt, 2, trace.stage());
    sqlite3_bind_int(prune.stmt, 3, trace.replica());
    sqlite3_bind_int(prune.stmt, 4, kStepsPerRank);
    if (sqlite3_step(prune.stmt) != SQLITE_DONE) return failed("prune");
  }
  if (ExecLocked("COMMIT").ok()) return absl::OkStatus();
  return failed("commit");
}

absl::StatusOr<v1::JobTrace> TraceStore::Get(const std::string& job_id,
                                             int64_t recorded_since_unix_ms) const {
  absl::MutexLock lock(&mu_);
  v1::JobTrace out;
  out.set_job_id(job_id);
  SqliteStatement get;
  if (sqlite3_prepare_v2(db_, kGetSql, -1, &get.stmt, nullptr) != SQLITE_OK) {
    return absl::InternalError(
        absl::StrCat("reading traces from '", path_, "': ", sqlite3_errmsg(db_)));
  }
  sqlite3_bind_text(get.stmt, 1, job_id.data(), static_cast<int>(job_id.size()), SQLITE_STATIC);
  sqlite3_bind_int64(get.stmt, 2, recorded_since_unix_ms);
  int rc;
  int num_stages = 0;
  while ((rc = sqlite3_step(get.stmt)) == SQLITE_ROW) {
    const int stage = sqlite3_column_int(get.stmt, 0);
    const int replica = sqlite3_column_int(get.stmt, 1);
    const int64_t step = sqlite3_column_int64(get.stmt, 2);
    v1::StepTrace* t = out.add_steps();
    if (!t->ParseFromArray(sqlite3_column_blob(get.stmt, 3), sqlite3_column_bytes(get.stmt, 3)) ||
        t->job_id() != job_id || t->stage() != stage || t->replica() != replica ||
        t->step() != step) {
      return absl::DataLossError(absl::StrCat("trace table in '", path_, "': row of job ", job_id,
                                              " stage ", stage, " replica ", replica, " step ",
                                              step, " holds no valid trace"));
    }
    num_stages = std::max(num_stages, stage + 1);
  }
  if (rc != SQLITE_DONE) {
    return absl::InternalError(
        absl::StrCat("reading traces from '", path_, "': ", sqlite3_errmsg(db_)));
  }
  out.set_num_stages(num_stages);
  return out;
}

}  // namespace dapple::coordinator
