#include "coordinator/jobs/worker_id_store.h"

#include <sqlite3.h>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "coordinator/jobs/sqlite_db.h"

namespace dapple::coordinator {
namespace {

constexpr char kWorkerIdCreateTable[] =
    "CREATE TABLE IF NOT EXISTS worker_id_sequence ("
    "  name TEXT PRIMARY KEY,"
    "  next INTEGER NOT NULL)";

// One statement, so the row changes atomically; MAX keeps the sequence from going back even
// if two coordinators were ever pointed at one file (the database lock normally prevents it).
constexpr char kSaveSql[] =
    "INSERT INTO worker_id_sequence (name, next) VALUES ('w', ?1) "
    "ON CONFLICT (name) DO UPDATE SET next = MAX(next, excluded.next)";

constexpr char kLoadSql[] = "SELECT next FROM worker_id_sequence WHERE name = 'w'";

}  // namespace

absl::StatusOr<std::unique_ptr<WorkerIdStore>> WorkerIdStore::Open(const std::string& db_path) {
  DAPPLE_ASSIGN_OR_RETURN(sqlite3 * db,
                          OpenSqliteTables(db_path, kWorkerIdCreateTable, "worker id table"));
  std::unique_ptr<WorkerIdStore> store(new WorkerIdStore(db, db_path));
  return store;
}

WorkerIdStore::~WorkerIdStore() { sqlite3_close(db_); }

absl::StatusOr<int64_t> WorkerIdStore::LoadNext() const {
  absl::MutexLock lock(&mu_);
  SqliteStatement load;
  if (sqlite3_prepare_v2(db_, kLoadSql, -1, &load.stmt, nullptr) != SQLITE_OK) {
    return absl::InternalError(
        absl::StrCat("reading the worker id sequence from '", path_, "': ", sqlite3_errmsg(db_)));
  }
  const int rc = sqlite3_step(load.stmt);
  if (rc == SQLITE_DONE) return int64_t{1};  // nothing saved yet: a new database
  if (rc != SQLITE_ROW) {
    return absl::InternalError(
        absl::StrCat("reading the worker id sequence from '", path_, "': ", sqlite3_errmsg(db_)));
  }
  const int64_t next = sqlite3_column_int64(load.stmt, 0);
  if (next < 1) {
    return absl::DataLossError(
        absl::StrCat("worker id table in '", path_, "' holds next = ", next, ", not >= 1"));
  }
  return next;
}

absl::Status WorkerIdStore::SaveNext(int64_t next) {
  if (next < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("next worker id number ", next, " must be >= 1"));
  }
  absl::MutexLock lock(&mu_);
  auto failed = [&] {
    return absl::InternalError(absl::StrCat("saving the worker id sequence (next w-", next,
                                            ") to '", path_, "': ", sqlite3_errmsg(db_)));
  };
  SqliteStatement save;
  if (sqlite3_prepare_v2(db_, kSaveSql, -1, &save.stmt, nullptr) != SQLITE_OK) return failed();
  sqlite3_bind_int64(save.stmt, 1, next);
  if (sqlite3_step(save.stmt) != SQLITE_DONE) return failed();
  return absl::OkStatus();
}

}  // namespace dapple::coordinator
