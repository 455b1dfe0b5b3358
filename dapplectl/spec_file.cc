#include "dapplectl/spec_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "dapplectl/utf8_text.h"

namespace dapple::ctl {
namespace {

// Sizes are exact byte counts: a rounded "1.0 MiB" over a limit of "1 MiB" reads as no
// violation at all.
std::string Limit() {
  return absl::StrCat("a job spec may be at most ", kMaxSpecBytes, " bytes (", kMaxSpecBytes >> 20,
                      " MiB)");
}

absl::Status TooBig(absl::string_view shown, absl::string_view size) {
  return absl::InvalidArgumentError(absl::StrCat(shown, " is ", size, "; ", Limit()));
}

absl::Status CannotRead(const std::string& path, int error) {
  return absl::NotFoundError(
      absl::StrCat("cannot read job spec ", EscapeInvalidUtf8(path), ": ", std::strerror(error)));
}

}  // namespace

absl::Status CheckSpecText(absl::string_view name, absl::string_view text) {
  const std::string shown = EscapeInvalidUtf8(name);
  if (static_cast<int64_t>(text.size()) > kMaxSpecBytes) {
    return TooBig(shown, absl::StrCat(text.size(), " bytes"));
  }
  if (std::optional<TextFault> fault = FindTextFault(text)) {
    return absl::InvalidArgumentError(
        absl::StrCat(shown, ": not UTF-8 text (", DescribeTextFault(*fault), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadSpecFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return CannotRead(path, errno);
  struct stat st {};
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > kMaxSpecBytes) {
    close(fd);
    return TooBig(EscapeInvalidUtf8(path), absl::StrCat(st.st_size, " bytes"));
  }
  std::string data;
  char buf[1 << 16];
  // One byte past the limit is enough to know a pipe carries too much.
  while (static_cast<int64_t>(data.size()) <= kMaxSpecBytes) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      close(fd);
      return CannotRead(path, e);
    }
    data.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  if (static_cast<int64_t>(data.size()) > kMaxSpecBytes) {
    return TooBig(EscapeInvalidUtf8(path), absl::StrCat("more than ", kMaxSpecBytes, " bytes"));
  }
  if (absl::Status s = CheckSpecText(path, data); !s.ok()) return s;
  return data;
}

}  // namespace dapple::ctl
