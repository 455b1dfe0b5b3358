#include "coordinator/auth/audit_log.h"

#include <sqlite3.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "coordinator/jobs/sqlite_db.h"

namespace dapple::coordinator::auth {
namespace {

constexpr char kAuditSchema[] =
    "CREATE TABLE IF NOT EXISTS audit (seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  unix_ms INTEGER NOT NULL, user TEXT NOT NULL, tenant TEXT NOT NULL, role TEXT NOT NULL,"
    "  action TEXT NOT NULL, target TEXT NOT NULL, result TEXT NOT NULL, detail TEXT NOT NULL)";

// One line of at most `max` bytes: control characters become spaces.
std::string OneLine(absl::string_view text, size_t max) {
  std::string line(text.substr(0, max));
  for (char& c : line) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  }
  if (text.size() > max) line += "...";
  return line;
}

}  // namespace

absl::StatusOr<std::unique_ptr<AuditLog>> AuditLog::Open(const std::string& db_path,
                                                         std::function<int64_t()> now_unix_ms) {
  DAPPLE_ASSIGN_OR_RETURN(sqlite3 * db, OpenSqliteTables(db_path, kAuditSchema, "the audit log"));
  std::unique_ptr<AuditLog> log(new AuditLog(db, std::move(now_unix_ms)));
  return log;
}

AuditLog::~AuditLog() { sqlite3_close(db_); }

absl::Status AuditLog::Record(const Identity& who, absl::string_view action,
                              absl::string_view target, const absl::Status& result,
                              absl::string_view detail) {
  absl::MutexLock lock(&mu_);
  SqliteStatement insert;
  if (sqlite3_prepare_v2(db_,
                         "INSERT INTO audit (unix_ms, user, tenant, role, action, target, result, "
                         "detail) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                         -1, &insert.stmt, nullptr) != SQLITE_OK) {
    return absl::InternalError(sqlite3_errmsg(db_));
  }
  sqlite3_bind_int64(insert.stmt, 1, now_());
  BindText(insert.stmt, 2, OneLine(who.user, 80));
  BindText(insert.stmt, 3, OneLine(who.tenant, 80));
  BindText(insert.stmt, 4, RoleName(who.role));
  BindText(insert.stmt, 5, OneLine(action, 80));
  BindText(insert.stmt, 6, OneLine(target, 120));
  BindText(insert.stmt, 7, result.ok() ? "OK" : absl::StatusCodeToString(result.code()));
  BindText(insert.stmt, 8, OneLine(detail, kMaxDetailBytes));
  if (sqlite3_step(insert.stmt) != SQLITE_DONE) {
    return absl::InternalError(absl::StrCat("writing the audit log: ", sqlite3_errmsg(db_)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::AuditEntry>> AuditLog::List(int64_t after_seq, int limit,
                                                           const std::string& tenant) const {
  if (limit < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("limit must be >= 0 (0: ", kDefaultLimit, "), got ", limit));
  }
  if (limit == 0) limit = kDefaultLimit;
  limit = std::min(limit, kMaxLimit);
  absl::MutexLock lock(&mu_);
  SqliteStatement list;
  if (sqlite3_prepare_v2(db_,
                         "SELECT seq, unix_ms, user, tenant, role, action, target, result, detail "
                         "FROM audit WHERE seq > ?1 AND (?2 = '' OR tenant = ?2) "
                         "ORDER BY seq DESC LIMIT ?3",
                         -1, &list.stmt, nullptr) != SQLITE_OK) {
    return absl::InternalError(sqlite3_errmsg(db_));
  }
  sqlite3_bind_int64(list.stmt, 1, after_seq);
  BindText(list.stmt, 2, tenant);
  sqlite3_bind_int(list.stmt, 3, limit);
  std::vector<v1::AuditEntry> entries;
  while (sqlite3_step(list.stmt) == SQLITE_ROW) {
    v1::AuditEntry& e = entries.emplace_back();
    e.set_seq(sqlite3_column_int64(list.stmt, 0));
    e.set_unix_ms(sqlite3_column_int64(list.stmt, 1));
    e.set_user(ColumnText(list.stmt, 2));
    e.set_tenant(ColumnText(list.stmt, 3));
    e.set_role(ColumnText(list.stmt, 4));
    e.set_action(ColumnText(list.stmt, 5));
    e.set_target(ColumnText(list.stmt, 6));
    e.set_result(ColumnText(list.stmt, 7));
    e.set_detail(ColumnText(list.stmt, 8));
  }
  std::reverse(entries.begin(), entries.end());
  return entries;
}

}  // namespace dapple::coordinator::auth
