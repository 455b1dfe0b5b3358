// Durable storage of jobs in one SQLite file (WAL mode).
//
// Schema (PRAGMA user_version 1):
//   jobs(seq INTEGER PRIMARY KEY,   -- N of the id "job-N"
//        id TEXT UNIQUE, name TEXT, state TEXT ("RUNNING", ...), message TEXT,
//        created_unix_ms INTEGER, updated_unix_ms INTEGER,
//        job BLOB)                  -- the serialized v1::Job: the source of truth
// The plain columns repeat fields of the blob so an operator can query the file with sqlite3.
//
// Thread safety: thread-compatible (JobManager serialises all calls under its mutex).
#ifndef DAPPLE_COORDINATOR_JOBS_JOB_STORE_H_
#define DAPPLE_COORDINATOR_JOBS_JOB_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dapple/v1/job.pb.h"

struct sqlite3;
struct sqlite3_stmt;

namespace dapple::coordinator {

class JobStore {
 public:
  // Opens (creating if needed) the database at `path` and its schema.
  // kFailedPrecondition "cannot open job database '<path>': <sqlite message>" when the file
  // cannot be opened or created, is not a SQLite database, or has a newer schema.
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const std::string& path);

  ~JobStore();
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  // Every stored job, oldest (smallest seq) first. kDataLoss naming the row when a blob does
  // not parse or its id does not match the row.
  absl::StatusOr<std::vector<v1::Job>> LoadAll();

  // Inserts or replaces the row of `job`, whose id must be "job-<seq>" with seq >= 1
  // (kInvalidArgument otherwise). kInternal with SQLite's message when the write fails.
  absl::Status Put(const v1::Job& job);

  // The N of a "job-N" id; -1 if `id` has another form.
  static int64_t SequenceOf(const std::string& id);

 private:
  JobStore(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  absl::Status Init();
  absl::Status Exec(const char* sql);

  sqlite3* db_;
  std::string path_;
  sqlite3_stmt* put_stmt_ = nullptr;
};

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_JOBS_JOB_STORE_H_
