#include "coordinator/jobs/sqlite_db.h"

#include "absl/strings/str_cat.h"

namespace dapple::coordinator {

absl::StatusOr<sqlite3*> OpenSqliteDatabase(const std::string& path) {
  sqlite3* db = nullptr;
  const int rc =
      sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  if (rc != SQLITE_OK) {
    std::string why = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    return absl::FailedPreconditionError(why);
  }
  sqlite3_busy_timeout(db, 5000);
  for (const char* sql : {"PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL"}) {
    if (absl::Status s = ExecSql(db, sql); !s.ok()) {
      sqlite3_close(db);
      return absl::FailedPreconditionError(s.message());
    }
  }
  return db;
}

absl::Status ExecSql(sqlite3* db, const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string why = err != nullptr ? err : sqlite3_errmsg(db);
    sqlite3_free(err);
    return absl::InternalError(why);
  }
  return absl::OkStatus();
}

absl::StatusOr<sqlite3*> OpenSqliteTables(const std::string& path, const char* schema,
                                          absl::string_view what) {
  absl::StatusOr<sqlite3*> db = OpenSqliteDatabase(path);
  absl::Status s = db.ok() ? ExecSql(*db, schema) : db.status();
  if (!s.ok()) {
    if (db.ok()) sqlite3_close(*db);
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open ", what, " in '", path, "': ", s.message()));
  }
  return db;
}

}  // namespace dapple::coordinator
