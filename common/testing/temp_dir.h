// TempDir: a fresh temporary folder for one test, removed with its files when it goes out of
// scope. Test-only.
//
// Thread safety: an object is used by one thread; folders of concurrent objects and processes
// never collide (mkdtemp).
#ifndef DAPPLE_COMMON_TESTING_TEMP_DIR_H_
#define DAPPLE_COMMON_TESTING_TEMP_DIR_H_

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace dapple::testing {

class TempDir {
 public:
  // `prefix` names the folder (/tmp/<prefix>.XXXXXX) so that a left-over one says whose it is.
  explicit TempDir(const std::string& prefix = "dapple_test") {
    std::string pattern = (std::filesystem::temp_directory_path() / (prefix + ".XXXXXX")).string();
    if (mkdtemp(pattern.data()) == nullptr) ADD_FAILURE() << "mkdtemp " << pattern << " failed";
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // The path of `name` in the folder (nothing is created).
  std::string File(const std::string& name) const { return path_ + "/" + name; }
  // Writes `bytes` to the file `name` in the folder and returns its path.
  std::string Write(const std::string& name, const std::string& bytes) const {
    const std::string path = File(name);
    std::ofstream out(path, std::ios::binary);
    out << bytes;
    return path;
  }

 private:
  std::string path_;
};

}  // namespace dapple::testing

#endif  // DAPPLE_COMMON_TESTING_TEMP_DIR_H_
