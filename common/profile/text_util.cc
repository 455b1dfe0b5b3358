#include "common/profile/text_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/profile/format_bytes.h"

namespace dapple::profile {
namespace {

constexpr size_t kMaxQuoted = 60;

size_t CountDigits(absl::string_view text, size_t pos) {
  size_t n = 0;
  while (pos + n < text.size() && absl::ascii_isdigit(static_cast<unsigned char>(text[pos + n]))) {
    ++n;
  }
  return n;
}

absl::Status FileError(int error, const std::string& path) {
  const std::string message = absl::StrCat(path, ": ", std::strerror(error));
  switch (error) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    case EISDIR:
      return absl::InvalidArgumentError(message);
    default:
      return absl::UnavailableError(message);
  }
}

struct ScopedFd {
  explicit ScopedFd(int f) : fd(f) {}
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  ~ScopedFd() {
    if (fd >= 0) ::close(fd);
  }
  const int fd;
};

absl::Status NotRegular(const std::string& path) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
}

absl::Status TooLarge(const std::string& path, int64_t size, int64_t max_bytes) {
  return absl::ResourceExhaustedError(absl::StrCat(path, ": ", size, " bytes is more than the ",
                                                   FormatBytes(max_bytes), " limit (", max_bytes,
                                                   " bytes)"));
}

}  // namespace

size_t DecimalPrefixLength(absl::string_view text) {
  size_t pos = 0;
  if (pos < text.size() && (text[pos] == '+' || text[pos] == '-')) ++pos;
  const size_t whole = CountDigits(text, pos);
  pos += whole;
  size_t fraction = 0;
  if (pos < text.size() && text[pos] == '.') {
    fraction = CountDigits(text, pos + 1);
    // "5." is a number; "." alone is not.
    if (whole > 0 || fraction > 0) pos += 1 + fraction;
  }
  if (whole == 0 && fraction == 0) return 0;
  if (pos < text.size() && (text[pos] == 'e' || text[pos] == 'E')) {
    size_t exp = pos + 1;
    if (exp < text.size() && (text[exp] == '+' || text[exp] == '-')) ++exp;
    const size_t exp_digits = CountDigits(text, exp);
    // "2e" followed by a unit ("2eB") keeps the number "2".
    if (exp_digits > 0) pos = exp + exp_digits;
  }
  return pos;
}

std::optional<double> ParseDecimal(absl::string_view text) {
  if (text.empty() || DecimalPrefixLength(text) != text.size()) return std::nullopt;
  // strtod needs a terminated string; ERANGE overflow gives +-HUGE_VAL (infinity), which the
  // callers reject as not finite.
  const std::string copy(text);
  return std::strtod(copy.c_str(), nullptr);
}

std::string Quote(absl::string_view text) {
  std::string out = "'";
  const size_t n = std::min(text.size(), kMaxQuoted);
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f) {
      absl::StrAppend(&out, absl::StrFormat("\\x%02x", c));
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  if (text.size() > kMaxQuoted) out += "...";
  out += "'";
  return out;
}

std::string ShortestDouble(double value) {
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

absl::StatusOr<std::string> ReadTextFile(const std::string& path, int64_t max_bytes) {
  struct stat info;
  if (::stat(path.c_str(), &info) != 0) return FileError(errno, path);
  if (S_ISDIR(info.st_mode)) return FileError(EISDIR, path);
  if (!S_ISREG(info.st_mode)) return NotRegular(path);
  if (info.st_size > max_bytes) return TooLarge(path, info.st_size, max_bytes);
  // O_NONBLOCK: should `path` become a FIFO after the stat, open must not wait for a writer;
  // the fstat below then refuses it. Regular files ignore the flag.
  const ScopedFd file{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)};
  if (file.fd < 0) return FileError(errno, path);
  const int fd = file.fd;
  if (::fstat(fd, &info) != 0) return FileError(errno, path);
  if (!S_ISREG(info.st_mode)) return NotRegular(path);
  if (info.st_size > max_bytes) return TooLarge(path, info.st_size, max_bytes);
  std::string text;
  text.reserve(static_cast<size_t>(info.st_size));
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return FileError(errno, path);
    if (n == 0) break;
    // The file grew past the cap since the fstat: stop at the cap rather than read it all.
    if (static_cast<int64_t>(text.size()) + n > max_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(path, ": grew past the ",
                                                       FormatBytes(max_bytes), " limit (",
                                                       max_bytes, " bytes) while being read"));
    }
    text.append(buffer, static_cast<size_t>(n));
  }
  return text;
}

}  // namespace dapple::profile
