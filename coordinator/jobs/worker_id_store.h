// The sequence of generated worker ids ("w-N", cluster/worker_registry.h), kept in the
// coordinator's SQLite database so that a restarted coordinator (same --db) never hands out an
// id again that stored jobs, logs and metrics already name for another process
// (docs/coordinator.md "Worker lifecycle").
//
// Schema: the store owns one table, created when missing (JobStore and TraceStore do not know
// it):
//   worker_id_sequence(name TEXT PRIMARY KEY,   -- "w": the prefix of the generated ids
//                      next INTEGER NOT NULL)   -- the N of the next "w-N" to generate
// The stored value only grows (SaveNext keeps the larger one).
//
// The store has its own connection to the file (WAL mode; writers wait up to 5 s for each
// other).
//
// Thread safety: thread-safe (one internal mutex).
#ifndef DAPPLE_COORDINATOR_JOBS_WORKER_ID_STORE_H_
#define DAPPLE_COORDINATOR_JOBS_WORKER_ID_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

struct sqlite3;

namespace dapple::coordinator {

class WorkerIdStore {
 public:
  // Opens (creating if needed) the database at `db_path` and the table.
  // kFailedPrecondition "cannot open worker id table in '<path>': <sqlite message>".
  static absl::StatusOr<std::unique_ptr<WorkerIdStore>> Open(const std::string& db_path);

  ~WorkerIdStore();
  WorkerIdStore(const WorkerIdStore&) = delete;
  WorkerIdStore& operator=(const WorkerIdStore&) = delete;

  // The stored N of the next generated id; 1 when none was ever saved. kInternal with
  // SQLite's message for a read error; kDataLoss when the stored value is < 1.
  absl::StatusOr<int64_t> LoadNext() const;

  // Stores `next` (>= 1, else kInvalidArgument) unless a larger value is stored already; durable
  // when it returns OK (one committed statement). kInternal naming the file and SQLite's message
  // when the write fails (nothing changes then).
  absl::Status SaveNext(int64_t next);

 private:
  WorkerIdStore(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}

  mutable absl::Mutex mu_;
  sqlite3* const db_;
  const std::string path_;
};

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_JOBS_WORKER_ID_STORE_H_
