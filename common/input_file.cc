#include "common/input_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace dapple {

absl::Status CheckInputFile(absl::string_view flag, const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || access(path.c_str(), R_OK) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " '", path, "' cannot be read: ", std::strerror(errno)));
  }
  if (S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " '", path, "' is a directory; name the file"));
  }
  return absl::OkStatus();
}

}  // namespace dapple
