#include "coordinator/jobs/db_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace dapple::coordinator {

absl::StatusOr<std::unique_ptr<DatabaseLock>> DatabaseLock::Acquire(const std::string& db_path) {
  if (db_path.empty()) return absl::InvalidArgumentError("job database path is empty");
  std::string lock_path = absl::StrCat(db_path, ".lock");
  const int fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::FailedPreconditionError(absl::StrCat("cannot open job database '", db_path,
                                                      "': cannot create lock file '", lock_path,
                                                      "': ", strerror(errno)));
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    std::string owner = "unknown";
    if (err == EWOULDBLOCK) {
      char buf[32] = {};
      const ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
      int64_t pid = 0;
      if (n > 0 && absl::SimpleAtoi(absl::StripAsciiWhitespace(absl::string_view(buf, n)), &pid) &&
          pid > 0) {
        owner = absl::StrCat(pid);
      }
    }
    close(fd);
    if (err != EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrCat("cannot open job database '", db_path,
                                                        "': cannot lock '", lock_path,
                                                        "': ", strerror(err)));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "database ", db_path, " is in use by another dapple-coordinator (pid ", owner, ")"));
  }
  // Only the holder writes, so a reader sees either an old pid or ours, never a torn mix of
  // a longer old one and ours (the truncate comes first).
  const std::string pid = absl::StrCat(getpid(), "\n");
  if (ftruncate(fd, 0) != 0 || pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    // The lock holds regardless; only the pid in refusals is lost.
  }
  return std::unique_ptr<DatabaseLock>(new DatabaseLock(fd, std::move(lock_path)));
}

DatabaseLock::~DatabaseLock() { close(fd_); }

}  // namespace dapple::coordinator
