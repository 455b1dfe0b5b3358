#include "coordinator/jobs/log_store.h"

#include <sqlite3.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status.h"
#include "coordinator/jobs/sqlite_db.h"

namespace dapple::coordinator {
namespace {

constexpr char kLogCreateTable[] =
    "CREATE TABLE IF NOT EXISTS job_logs ("
    "  seq INTEGER PRIMARY KEY,"
    "  job_id TEXT NOT NULL,"
    "  stage INTEGER NOT NULL,"
    "  replica INTEGER NOT NULL,"
    "  worker_id TEXT NOT NULL,"
    "  unix_ms INTEGER NOT NULL,"
    "  level TEXT NOT NULL,"
    "  text TEXT NOT NULL);"
    "CREATE INDEX IF NOT EXISTS job_logs_by_rank ON job_logs (job_id, stage, replica, seq)";

constexpr char kLogInsertSql[] =
    "INSERT INTO job_logs (job_id, stage, replica, worker_id, unix_ms, level, text) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
// Everything of the rank at or below its (kLinesPerRank + 1)-th newest line.
constexpr char kLogPruneSql[] =
    "DELETE FROM job_logs WHERE job_id = ?1 AND stage = ?2 AND replica = ?3 AND seq <= "
    "(SELECT seq FROM job_logs WHERE job_id = ?1 AND stage = ?2 AND replica = ?3 "
    "ORDER BY seq DESC LIMIT 1 OFFSET ?4)";
// Newest first (so that LIMIT is the tail); reversed after reading.
constexpr char kGetSql[] =
    "SELECT seq, stage, replica, worker_id, unix_ms, level, text FROM job_logs "
    "WHERE job_id = ?1 AND seq > ?2 AND (?3 = 0 OR (stage = ?4 AND replica = ?5)) "
    "ORDER BY seq DESC LIMIT ?6";

}  // namespace

absl::StatusOr<std::unique_ptr<LogStore>> LogStore::Open(const std::string& db_path) {
  DAPPLE_ASSIGN_OR_RETURN(sqlite3 * db, OpenSqliteTables(db_path, kLogCreateTable, "log table"));
  std::unique_ptr<LogStore> store(new LogStore(db, db_path));
  return store;
}

LogStore::~LogStore() { sqlite3_close(db_); }

absl::Status LogStore::Append(const std::string& job_id, int stage, int replica,
                              const std::string& worker_id,
                              const std::vector<v1::JobLogLine>& lines) {
  if (job_id.empty()) return absl::InvalidArgumentError("log lines without a job id");
  if (lines.empty()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  auto failed = [&](absl::string_view what) {
    const std::string why = sqlite3_errmsg(db_);
    (void)ExecSql(db_, "ROLLBACK");
    return absl::InternalError(absl::StrCat("writing log lines of job ", job_id, " stage ", stage,
                                            " to '", path_, "' (", what, "): ", why));
  };
  if (absl::Status s = ExecSql(db_, "BEGIN IMMEDIATE"); !s.ok()) {
    return absl::InternalError(
        absl::StrCat("writing log lines of job ", job_id, " to '", path_, "': ", s.message()));
  }
  {
    SqliteStatement insert;
    if (sqlite3_prepare_v2(db_, kLogInsertSql, -1, &insert.stmt, nullptr) != SQLITE_OK) {
      return failed("prepare");
    }
    for (const v1::JobLogLine& line : lines) {
      sqlite3_reset(insert.stmt);
      BindText(insert.stmt, 1, job_id);
      sqlite3_bind_int(insert.stmt, 2, stage);
      sqlite3_bind_int(insert.stmt, 3, replica);
      BindText(insert.stmt, 4, worker_id);
      sqlite3_bind_int64(insert.stmt, 5, line.unix_ms());
      BindText(insert.stmt, 6, line.level());
      BindText(insert.stmt, 7, line.text());
      if (sqlite3_step(insert.stmt) != SQLITE_DONE) return failed("insert");
    }
  }
  {
    SqliteStatement prune;
    if (sqlite3_prepare_v2(db_, kLogPruneSql, -1, &prune.stmt, nullptr) != SQLITE_OK) {
      return failed("prepare");
    }
    BindText(prune.stmt, 1, job_id);
    sqlite3_bind_int(prune.stmt, 2, stage);
    sqlite3_bind_int(prune.stmt, 3, replica);
    sqlite3_bind_int(prune.stmt, 4, kLinesPerRank);
    if (sqlite3_step(prune.stmt) != SQLITE_DONE) return failed("prune");
  }
  if (ExecSql(db_, "COMMIT").ok()) return absl::OkStatus();
  return failed("commit");
}

absl::StatusOr<std::vector<v1::JobLogLine>> LogStore::Get(const std::string& job_id,
                                                          const Query& query) const {
  absl::MutexLock lock(&mu_);
  SqliteStatement get;
  if (sqlite3_prepare_v2(db_, kGetSql, -1, &get.stmt, nullptr) != SQLITE_OK) {
    return absl::InternalError(
        absl::StrCat("reading log lines from '", path_, "': ", sqlite3_errmsg(db_)));
  }
  BindText(get.stmt, 1, job_id);
  sqlite3_bind_int64(get.stmt, 2, query.after_seq);
  sqlite3_bind_int(get.stmt, 3, query.rank.has_value() ? 1 : 0);
  sqlite3_bind_int(get.stmt, 4, query.rank.has_value() ? query.rank->first : 0);
  sqlite3_bind_int(get.stmt, 5, query.rank.has_value() ? query.rank->second : 0);
  sqlite3_bind_int64(get.stmt, 6, query.tail > 0 ? query.tail : -1);  // -1: no limit
  std::vector<v1::JobLogLine> lines;
  auto text = [&](int column) { return ColumnText(get.stmt, column); };
  int rc;
  while ((rc = sqlite3_step(get.stmt)) == SQLITE_ROW) {
    v1::JobLogLine& line = lines.emplace_back();
    line.set_seq(sqlite3_column_int64(get.stmt, 0));
    line.set_stage(sqlite3_column_int(get.stmt, 1));
    line.set_replica(sqlite3_column_int(get.stmt, 2));
    line.set_worker_id(text(3));
    line.set_unix_ms(sqlite3_column_int64(get.stmt, 4));
    line.set_level(text(5));
    line.set_text(text(6));
  }
  if (rc != SQLITE_DONE) {
    return absl::InternalError(
        absl::StrCat("reading log lines from '", path_, "': ", sqlite3_errmsg(db_)));
  }
  std::reverse(lines.begin(), lines.end());
  return lines;
}

}  // namespace dapple::coordinator
