// The coordinator's SQLite database file, shared by its stores (job_store.h, trace_store.h),
// each on a connection of its own.
//
// Thread safety: the functions are thread-safe; a connection is used by one thread at a time
// (its store's mutex).
#ifndef DAPPLE_COORDINATOR_JOBS_SQLITE_DB_H_
#define DAPPLE_COORDINATOR_JOBS_SQLITE_DB_H_

#include <sqlite3.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dapple::coordinator {

// Opens (creating it when missing) the database file `path` read-write, with a 5 s busy timeout
// (another connection briefly holding the write lock delays, not fails, a writer), WAL and
// synchronous=NORMAL (durable across process crashes in WAL mode; only an OS crash can lose the
// last commits). The caller owns the connection and closes it with sqlite3_close.
// kFailedPrecondition with SQLite's reason alone (callers say which database), e.g. "unable to
// open database file".
absl::StatusOr<sqlite3*> OpenSqliteDatabase(const std::string& path);

// Runs `sql` (one or more statements without results). kInternal with SQLite's message.
absl::Status ExecSql(sqlite3* db, const char* sql);

// OpenSqliteDatabase, then `schema` (its CREATE TABLE IF NOT EXISTS statements): a store's
// connection with its tables. kFailedPrecondition "cannot open <what> in '<path>': <SQLite's
// reason>" (e.g. what = "worker id table"), the connection closed.
absl::StatusOr<sqlite3*> OpenSqliteTables(const std::string& path, const char* schema,
                                          absl::string_view what);

// A prepared statement finalized when it goes out of scope (prepare into `stmt`; sqlite3_finalize
// of a null statement is a no-op).
struct SqliteStatement {
  sqlite3_stmt* stmt = nullptr;
  ~SqliteStatement() { sqlite3_finalize(stmt); }
};

// Binds `text` to parameter `index` (1-based) of `stmt`; SQLite copies it (SQLITE_TRANSIENT).
inline void BindText(sqlite3_stmt* stmt, int index, absl::string_view text) {
  sqlite3_bind_text(stmt, index, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
}

// Column `column` (0-based) of the current row of `stmt` as text: "" for NULL, every byte of the
// value otherwise (sqlite3_column_bytes, so an embedded NUL does not cut it short).
inline std::string ColumnText(sqlite3_stmt* stmt, int column) {
  const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt, column));
  return p == nullptr ? std::string()
                      : std::string(p, static_cast<size_t>(sqlite3_column_bytes(stmt, column)));
}

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_JOBS_SQLITE_DB_H_
