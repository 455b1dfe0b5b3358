// LogStore: the lines the ranks of jobs logged (v1::JobLogLine, `dapplectl logs`), shipped by
// the workers with their progress reports and kept in the coordinator's SQLite database, so
// that they outlive the workers and a coordinator restart.
//
// Bound: the newest kLinesPerRank lines of each rank (job, stage, replica); older ones are
// deleted as new ones arrive.
//
// Schema: the store owns one table, created when missing:
//   job_logs(seq INTEGER PRIMARY KEY,          -- the order lines arrived: JobLogLine.seq
//            job_id TEXT, stage INTEGER, replica INTEGER, worker_id TEXT,
//            unix_ms INTEGER, level TEXT, text TEXT)
// on its own connection to the file (WAL mode, as trace_store.h).
//
// Thread safety: thread-safe (one internal mutex).
#ifndef DAPPLE_COORDINATOR_JOBS_LOG_STORE_H_
#define DAPPLE_COORDINATOR_JOBS_LOG_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "dapple/v1/job.pb.h"

struct sqlite3;

namespace dapple::coordinator {

class LogStore {
 public:
  static constexpr int kLinesPerRank = 2000;

  // Opens (creating if needed) the database at `db_path` and the job_logs table.
  // kFailedPrecondition "cannot open log table in '<path>': <sqlite message>".
  static absl::StatusOr<std::unique_ptr<LogStore>> Open(const std::string& db_path);

  ~LogStore();
  LogStore(const LogStore&) = delete;
  LogStore& operator=(const LogStore&) = delete;

  // Appends `lines` (their unix_ms, level and text) of rank (stage, replica) of `job_id` run by
  // `worker_id`, then keeps that rank's newest kLinesPerRank lines, in one transaction. Nothing
  // happens for no lines. kInvalidArgument for an empty job id; kInternal with SQLite's message
  // (nothing changes then).
  absl::Status Append(const std::string& job_id, int stage, int replica,
                      const std::string& worker_id, const std::vector<v1::JobLogLine>& lines);

  struct Query {
    std::optional<std::pair<int, int>> rank;  // (stage, replica); none: every rank
    int64_t after_seq = 0;                    // only lines with a larger seq
    int tail = 0;                             // > 0: only the newest `tail` of those
  };
  // The kept lines of `job_id` that match, by seq, with every JobLogLine field set.
  // kInternal for a read error.
  absl::StatusOr<std::vector<v1::JobLogLine>> Get(const std::string& job_id,
                                                  const Query& query) const;

 private:
  LogStore(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}

  mutable absl::Mutex mu_;
  sqlite3* const db_;
  const std::string path_;
};

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_JOBS_LOG_STORE_H_
