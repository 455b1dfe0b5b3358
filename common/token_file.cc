#include "common/token_file.h"

#include <errno.h>
#include <string.h>

#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dapple::common {

absl::Status CheckTokenText(absl::string_view token) {
  for (size_t i = 0; i < token.size(); ++i) {
    const auto c = static_cast<unsigned char>(token[i]);
    if (c >= 0x21 && c <= 0x7e) continue;
    return absl::InvalidArgumentError(absl::StrFormat(
        "holds byte 0x%02x at offset %d: a token is one word of printable characters (dpl_...); "
        "is there a second line or a stray character?",
        c, i));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot read token file '", path, "': ", strerror(errno)));
  }
  std::string bytes(kMaxTokenFileBytes + 1, '\0');
  const size_t n = std::fread(bytes.data(), 1, bytes.size(), f);
  const int error = errno;
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot read token file '", path, "': ", strerror(error)));
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
  if (absl::Status s = CheckTokenText(token); !s.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("token file '", path, "' ", s.message()));
  }
  return token;
}

}  // namespace dapple::common
