// Test helper: fresh SQLite paths under the test temp dir.
#ifndef DAPPLE_COORDINATOR_JOBS_TEST_DB_H_
#define DAPPLE_COORDINATOR_JOBS_TEST_DB_H_

#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {

// Removes the files of every FreshDbPath at process exit.
struct DbFileCleaner {
  std::vector<std::string> paths;
  ~DbFileCleaner() {
    for (const std::string& path : paths) {
      for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path + suffix).c_str());
    }
  }
};

inline DbFileCleaner& DbFiles() {
  static DbFileCleaner cleaner;
  return cleaner;
}

// A path no other test (or test process) uses; any stale file of that name and its WAL
// companions are removed.
inline std::string FreshDbPath() {
  static int counter = 0;
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string path = absl::StrCat(::testing::TempDir(), "/dapple-", info->test_suite_name(), "-",
                                  info->name(), "-", getpid(), "-", counter++, ".db");
  for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path + suffix).c_str());
  DbFiles().paths.push_back(path);
  return path;
}

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_JOBS_TEST_DB_H_
