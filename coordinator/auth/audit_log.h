// The audit log of a shared cluster (issue 16, "Isolation"): who did what, in the
// coordinator's database, readable by admins (Admin.ListAudit, `dapplectl admin audit`).
// Recorded: SubmitJob, CancelJob, CheckpointJob (every outcome), every change of the Admin
// service and every refused Admin call. The identity is the verified caller's; the detail is one
// line, never a secret (tokens are named by their id only).
//
// Schema: audit(seq INTEGER PRIMARY KEY AUTOINCREMENT, unix_ms INTEGER, user TEXT, tenant TEXT,
//               role TEXT, action TEXT, target TEXT, result TEXT, detail TEXT)
// Entries are kept; nothing deletes them (an operator may, with sqlite3).
//
// Thread safety: thread-safe (one mutex around its own connection).
#ifndef DAPPLE_COORDINATOR_AUTH_AUDIT_LOG_H_
#define DAPPLE_COORDINATOR_AUTH_AUDIT_LOG_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/auth/identity.h"
#include "dapple/v1/admin.pb.h"

struct sqlite3;

namespace dapple::coordinator::auth {

class AuditLog {
 public:
  // Longest detail kept (longer ones are cut, ending in "...").
  static constexpr size_t kMaxDetailBytes = 300;
  static constexpr int kDefaultLimit = 100;
  static constexpr int kMaxLimit = 10000;

  // Opens (creating the table if needed) the database at `db_path`; kFailedPrecondition naming
  // the file when it cannot.
  static absl::StatusOr<std::unique_ptr<AuditLog>> Open(const std::string& db_path,
                                                        std::function<int64_t()> now_unix_ms);
  ~AuditLog();
  AuditLog(const AuditLog&) = delete;
  AuditLog& operator=(const AuditLog&) = delete;

  // Appends one entry: `who` did `action` ("SubmitJob") on `target` ("job-3") with `result`
  // (its code's name, "OK"), `detail` (made one line: control characters become spaces).
  // kInternal when the write fails (callers log it; the action itself stands).
  absl::Status Record(const Identity& who, absl::string_view action, absl::string_view target,
                      const absl::Status& result, absl::string_view detail = "");

  // The newest `limit` entries with seq > after_seq (limit 0: kDefaultLimit; more than
  // kMaxLimit: kMaxLimit; < 0: kInvalidArgument), of tenant `tenant` only unless it is "",
  // oldest first.
  absl::StatusOr<std::vector<v1::AuditEntry>> List(int64_t after_seq, int limit,
                                                   const std::string& tenant) const;

 private:
  AuditLog(sqlite3* db, std::function<int64_t()> now) : db_(db), now_(std::move(now)) {}

  mutable absl::Mutex mu_;
  sqlite3* const db_;
  const std::function<int64_t()> now_;
};

}  // namespace dapple::coordinator::auth

#endif  // DAPPLE_COORDINATOR_AUTH_AUDIT_LOG_H_
