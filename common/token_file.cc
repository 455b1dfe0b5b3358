#include "common/token_file.h"

#include <errno.h>
#include <string.h>

#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace dapple::common {

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot read token file '", path, "': ", strerror(errno)));
  }
  std::string bytes(kMaxTokenFileBytes + 1, '\0');
  const size_t n = std::fread(bytes.data(), 1, bytes.size(), f);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) {
    return absl::FailedPreconditionError(absl::StrCat("cannot read token file '", path, "'"));
  }
  if (n > kMaxTokenFileBytes) {
    return absl::FailedPreconditionError(absl::StrCat("token file '", path, "' holds more than ",
                                                      kMaxTokenFileBytes,
                                                      " bytes: it is not a token file"));
  }
  bytes.resize(n);
  const std::string token(absl::StripAsciiWhitespace(bytes));
  if (token.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("token file '", path, "' is empty"));
  }
  return token;
}

}  // namespace dapple::common
