// The traced steps of jobs (trace.proto StepTrace), kept in the coordinator's SQLite job
// database so that `dapplectl trace` works after a job ended and after a coordinator restart.
// Only the newest kStepsPerRank traced steps of each rank (job, stage, replica) are kept: the
// last recorded (a job resumed after a restart runs earlier steps again).
//
// Schema: the store owns one table, created when missing (the jobs table and its
// user_version belong to JobStore, which does not know this one):
//   traces(job_id TEXT, stage INTEGER, replica INTEGER, step INTEGER,   -- step 1-based
//          recorded_unix_ms INTEGER,
//          trace BLOB,                 -- the serialized v1::StepTrace: the source of truth
//          PRIMARY KEY (job_id, stage, replica, step))
//
// The store has its own connection to the file (WAL mode, so it and JobStore's connection do
// not block each other's readers; writers wait up to 5 s for each other).
//
// Thread safety: thread-safe (one internal mutex).
#ifndef DAPPLE_COORDINATOR_JOBS_TRACE_STORE_H_
#define DAPPLE_COORDINATOR_JOBS_TRACE_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "dapple/v1/trace.pb.h"

struct sqlite3;

namespace dapple::coordinator {

class TraceStore {
 public:
  static constexpr int kStepsPerRank = 8;

  // Opens (creating if needed) the database at `db_path` and the traces table.
  // kFailedPrecondition "cannot open trace table in '<path>': <sqlite message>".
  static absl::StatusOr<std::unique_ptr<TraceStore>> Open(const std::string& db_path);

  ~TraceStore();
  TraceStore(const TraceStore&) = delete;
  TraceStore& operator=(const TraceStore&) = delete;

  // Stores `trace` (replacing a stored trace of the same job, rank and step), then drops that
  // rank's traced steps but the kStepsPerRank last recorded (by now_unix_ms, then step), in one
  // transaction.
  // kInvalidArgument when job_id is empty or step < 1; kInternal with SQLite's message when
  // the write fails (nothing changes then).
  absl::Status Put(const v1::StepTrace& trace, int64_t now_unix_ms);

  // Every kept step of `job_id` recorded at or after `recorded_since_unix_ms` (Put's now_unix_ms;
  // 0: all), ordered by step, then stage, then replica; job_id set and num_stages = 1 + the
  // largest stage returned (0 and no steps when none is: not an error). kDataLoss naming the row
  // when a blob does not parse; kInternal for a read error.
  absl::StatusOr<v1::JobTrace> Get(const std::string& job_id,
                                   int64_t recorded_since_unix_ms = 0) const;

 private:
  TraceStore(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  absl::Status ExecLocked(const char* sql) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  sqlite3* const db_;
  const std::string path_;
};

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_JOBS_TRACE_STORE_H_
