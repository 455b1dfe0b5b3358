#include "coordinator/jobs/job_store.h"

#include <sqlite3.h>

#include <utility>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/model/layer_registry.h"
#include "common/status.h"
#include "coordinator/jobs/job_lifecycle.h"
#include "coordinator/jobs/sqlite_db.h"

namespace dapple::coordinator {
namespace {

constexpr int kSchemaVersion = 1;
constexpr char kIdPrefix[] = "job-";

constexpr char kCreateSchema[] =
    "CREATE TABLE IF NOT EXISTS jobs ("
    "  seq INTEGER PRIMARY KEY,"
    "  id TEXT NOT NULL UNIQUE,"
    "  name TEXT NOT NULL,"
    "  state TEXT NOT NULL,"
    "  message TEXT NOT NULL,"
    "  created_unix_ms INTEGER NOT NULL,"
    "  updated_unix_ms INTEGER NOT NULL,"
    "  job BLOB NOT NULL)";

constexpr char kJobPutSql[] =
    "INSERT OR REPLACE INTO jobs (seq, id, name, state, message, created_unix_ms, "
    "updated_unix_ms, job) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";

}  // namespace

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(const std::string& path) {
  absl::StatusOr<sqlite3*> db = OpenSqliteDatabase(path);
  if (!db.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open job database '", path, "': ", db.status().message()));
  }
  std::unique_ptr<JobStore> store(new JobStore(*db, path));
  absl::Status init = store->Init();
  if (!init.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open job database '", path, "': ", init.message()));
  }
  return store;
}

JobStore::~JobStore() {
  sqlite3_finalize(put_stmt_);
  sqlite3_close(db_);
}

absl::Status JobStore::Exec(const char* sql) { return ExecSql(db_, sql); }

absl::Status JobStore::Init() {
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db_, "PRAGMA user_version", -1, &stmt, nullptr) != SQLITE_OK) {
    return absl::InternalError(sqlite3_errmsg(db_));
  }
  int version = 0;
  if (sqlite3_step(stmt) == SQLITE_ROW) version = sqlite3_column_int(stmt, 0);
  sqlite3_finalize(stmt);
  if (version > kSchemaVersion) {
    return absl::InternalError(absl::StrCat("schema version ", version,
                                            " is newer than this coordinator's ", kSchemaVersion));
  }
  DAPPLE_RETURN_IF_ERROR(Exec(kCreateSchema));
  DAPPLE_RETURN_IF_ERROR(Exec(absl::StrCat("PRAGMA user_version=", kSchemaVersion).c_str()));
  if (sqlite3_prepare_v2(db_, kJobPutSql, -1, &put_stmt_, nullptr) != SQLITE_OK) {
    return absl::InternalError(sqlite3_errmsg(db_));
  }
  return absl::OkStatus();
}

int64_t JobStore::SequenceOf(const std::string& id) {
  absl::string_view rest(id);
  if (!absl::ConsumePrefix(&rest, kIdPrefix)) return -1;
  // Digits only: SimpleAtoi would also take "+1", "01" or " 1 " (so "job-1 " found job-1).
  if (rest.empty() || rest[0] == '0' || !absl::c_all_of(rest, absl::ascii_isdigit)) return -1;
  int64_t seq = 0;
  if (!absl::SimpleAtoi(rest, &seq) || seq < 1) return -1;
  return seq;
}

absl::StatusOr<std::vector<v1::Job>> JobStore::LoadAll() {
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db_, "SELECT seq, id, job FROM jobs ORDER BY seq", -1, &stmt, nullptr) !=
      SQLITE_OK) {
    return absl::InternalError(
        absl::StrCat("reading jobs from '", path_, "': ", sqlite3_errmsg(db_)));
  }
  std::vector<v1::Job> jobs;
  int rc;
  while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    const int64_t seq = sqlite3_column_int64(stmt, 0);
    const auto* id = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 1));
    const void* blob = sqlite3_column_blob(stmt, 2);
    const int size = sqlite3_column_bytes(stmt, 2);
    v1::Job job;
    if (!job.ParseFromArray(blob, size) || id == nullptr || job.id() != id ||
        SequenceOf(job.id()) != seq) {
      sqlite3_finalize(stmt);
      return absl::DataLossError(absl::StrCat("job database '", path_, "': row seq ", seq, " (id '",
                                              id != nullptr ? id : "", "') holds no valid job"));
    }
    // Jobs stored before typed layer parameters kept linear's width elsewhere.
    UpgradeModelSpec(job.mutable_spec()->mutable_model());
    jobs.push_back(std::move(job));
  }
  sqlite3_finalize(stmt);
  if (rc != SQLITE_DONE) {
    return absl::InternalError(
        absl::StrCat("reading jobs from '", path_, "': ", sqlite3_errmsg(db_)));
  }
  return jobs;
}

absl::Status JobStore::Put(const v1::Job& job) {
  const int64_t seq = SequenceOf(job.id());
  if (seq < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("job id '", job.id(), "' is not of the form job-<N>, N >= 1"));
  }
  const std::string blob = job.SerializeAsString();
  const std::string state = JobStateName(job.state());
  sqlite3_reset(put_stmt_);
  sqlite3_clear_bindings(put_stmt_);
  sqlite3_bind_int64(put_stmt_, 1, seq);
  sqlite3_bind_text(put_stmt_, 2, job.id().data(), static_cast<int>(job.id().size()),
                    SQLITE_STATIC);
  sqlite3_bind_text(put_stmt_, 3, job.name().data(), static_cast<int>(job.name().size()),
                    SQLITE_STATIC);
  sqlite3_bind_text(put_stmt_, 4, state.data(), static_cast<int>(state.size()), SQLITE_STATIC);
  sqlite3_bind_text(put_stmt_, 5, job.message().data(), static_cast<int>(job.message().size()),
                    SQLITE_STATIC);
  sqlite3_bind_int64(put_stmt_, 6, job.created_unix_ms());
  sqlite3_bind_int64(put_stmt_, 7, job.updated_unix_ms());
  sqlite3_bind_blob(put_stmt_, 8, blob.data(), static_cast<int>(blob.size()), SQLITE_STATIC);
  const int rc = sqlite3_step(put_stmt_);
  sqlite3_reset(put_stmt_);
  if (rc != SQLITE_DONE) {
    return absl::InternalError(
        absl::StrCat("writing job ", job.id(), " to '", path_, "': ", sqlite3_errmsg(db_)));
  }
  return absl::OkStatus();
}

}  // namespace dapple::coordinator
