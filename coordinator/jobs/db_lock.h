// DatabaseLock: one coordinator per job database. An exclusive, non-blocking flock(2) on
// "<db>.lock", held for the lifetime of the object (the coordinator holds it for the process
// lifetime), whether or not the coordinator is doing anything. The lock file holds the
// owner's pid so that a refused second coordinator can name it.
//
// Why a separate file rather than SQLite's own locking: SQLite locks only while a
// transaction is open, so an idle coordinator would hold nothing; EXCLUSIVE locking mode
// would also keep the sqlite3 shell (an operator reading the file) out.
//
// The lock file is never removed: unlinking it would let a third process lock a fresh inode
// while the second still holds the old one. flock locks die with the process, so a crashed
// coordinator leaves no stale lock.
//
// Thread safety: thread-compatible. Two DatabaseLocks on the same path exclude each other
// even within one process.
#ifndef DAPPLE_COORDINATOR_JOBS_DB_LOCK_H_
#define DAPPLE_COORDINATOR_JOBS_DB_LOCK_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace dapple::coordinator {

class DatabaseLock {
 public:
  // Locks "<db_path>.lock" (created if missing) and writes this process's pid into it.
  // Errors: kInvalidArgument "job database path is empty" for "";
  // kFailedPrecondition "database d.db is in use by another dapple-coordinator (pid 123)"
  // when another holder exists ("(pid unknown)" when the file names none);
  // kFailedPrecondition "cannot open job database 'd.db': cannot create lock file 'd.db.lock':
  // <strerror>" when the lock file cannot be opened.
  static absl::StatusOr<std::unique_ptr<DatabaseLock>> Acquire(const std::string& db_path);

  // Releases the lock (closes the file; the file itself stays).
  ~DatabaseLock();
  DatabaseLock(const DatabaseLock&) = delete;
  DatabaseLock& operator=(const DatabaseLock&) = delete;

  const std::string& lock_path() const { return lock_path_; }

 private:
  DatabaseLock(int fd, std::string lock_path) : fd_(fd), lock_path_(std::move(lock_path)) {}

  int fd_;
  std::string lock_path_;
};

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_JOBS_DB_LOCK_H_
