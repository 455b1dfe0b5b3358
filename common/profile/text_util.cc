#include "common/profile/text_util.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

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

absl::StatusOr<std::string> ReadTextFile(const std::string& path) {
  struct stat info;
  if (::stat(path.c_str(), &info) != 0) return FileError(errno, path);
  if (S_ISDIR(info.st_mode)) return FileError(EISDIR, path);
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (file == nullptr) return FileError(errno, path);
  std::string text;
  char buffer[1 << 16];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file.get())) > 0) text.append(buffer, n);
  if (std::ferror(file.get())) return FileError(errno != 0 ? errno : EIO, path);
  return text;
}

}  // namespace dapple::profile
