#include "dapplectl/flag_values.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "dapplectl/utf8_text.h"

namespace dapple::ctl {
namespace {

// Plain decimal notation only: strtod alone would also take "inf", "nan" and hex, and skip
// leading spaces.
bool IsDecimalNumber(absl::string_view s) {
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  size_t digits = 0;
  while (i < s.size() && absl::ascii_isdigit(s[i])) ++i, ++digits;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && absl::ascii_isdigit(s[i])) ++i, ++digits;
  }
  if (digits == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    size_t exponent_digits = 0;
    while (i < s.size() && absl::ascii_isdigit(s[i])) ++i, ++exponent_digits;
    if (exponent_digits == 0) return false;
  }
  return i == s.size();
}

bool IsHostChar(char c) { return absl::ascii_isalnum(c) || c == '-' || c == '.' || c == '_'; }

}  // namespace

absl::StatusOr<int64_t> ParsePositiveCount(absl::string_view flag, absl::string_view text,
                                           int64_t max) {
  int64_t value = 0;
  bool digits = !text.empty() && text.size() <= 19;
  for (const char c : text) digits = digits && absl::ascii_isdigit(c);
  if (!digits || !absl::SimpleAtoi(text, &value) || value < 1 || value > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " must be a whole number from 1 to ", max, ", got ", QuoteValue(text)));
  }
  return value;
}

std::string QuoteValue(absl::string_view value) {
  // ASCII first: those bytes never belong to a multi-byte sequence, so escaping them leaves
  // the UTF-8 structure for EscapeInvalidUtf8, and a '\' of the value stays distinct from
  // the escapes it adds.
  std::string ascii;
  for (const char c : value) {
    const auto b = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      ascii += '\\';
      ascii += c;
    } else if (b < 0x20 || b == 0x7F) {
      absl::StrAppendFormat(&ascii, "\\x%02X", b);
    } else {
      ascii += c;
    }
  }
  return absl::StrCat("\"", EscapeInvalidUtf8(ascii), "\"");
}

absl::StatusOr<absl::Duration> ParsePositiveSeconds(absl::string_view flag,
                                                    absl::string_view text) {
  const auto refuse = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " must be a positive number of seconds, got ", QuoteValue(text)));
  };
  if (!IsDecimalNumber(text)) return refuse();
  // The syntax is checked, so strtod (C locale: dapplectl never calls setlocale) only
  // converts; overflow gives HUGE_VAL (refused below as too large), underflow 0.
  const double seconds = std::strtod(std::string(text).c_str(), nullptr);
  if (!(seconds > 0)) return refuse();
  if (seconds > kMaxFlagSeconds) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " must be at most ", kMaxFlagSeconds,
                                                   " seconds (one day), got ", QuoteValue(text)));
  }
  return absl::Seconds(seconds);
}

absl::Status CheckCoordinatorAddress(absl::string_view source, absl::string_view address) {
  const auto refuse = [&](absl::string_view reason) {
    return absl::InvalidArgumentError(absl::StrCat(source,
                                                   " must be HOST:PORT (e.g. 127.0.0.1:7600), got ",
                                                   QuoteValue(address), " (", reason, ")"));
  };
  if (address.empty()) return refuse("empty");
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos) return refuse("no port");
  const absl::string_view host = address.substr(0, colon);
  const absl::string_view port = address.substr(colon + 1);
  if (host.empty()) return refuse("no host");
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') return refuse("an IPv6 address needs its ']'");
    for (const char c : host.substr(1, host.size() - 2)) {
      if (!absl::ascii_isxdigit(c) && c != ':' && c != '.') {
        return refuse(absl::StrCat("character ", QuoteValue(absl::string_view(&c, 1)),
                                   " in the IPv6 address"));
      }
    }
  } else {
    for (size_t i = 0; i < host.size(); ++i) {
      if (host[i] != ':' && !IsHostChar(host[i])) {
        return refuse(absl::StrCat("character ", QuoteValue(host.substr(i, 1)), " in the host"));
      }
    }
    if (absl::StrContains(host, ':')) {
      return refuse("an IPv6 address goes in brackets: [::1]:7600");
    }
  }
  if (port.empty()) return refuse("no port");
  if (port.size() > 5 ||
      !std::all_of(port.begin(), port.end(), [](char c) { return absl::ascii_isdigit(c); })) {
    return refuse("the port is not a number");
  }
  int value = 0;
  for (const char c : port) value = value * 10 + (c - '0');
  if (value < 1 || value > 65535)
    return refuse(absl::StrCat("port ", value, " is not in 1..65535"));
  return absl::OkStatus();
}

absl::Status CheckJobId(absl::string_view job_id) {
  if (job_id.empty()) {
    return absl::InvalidArgumentError(
        "a job id must not be empty (e.g. job-3; see dapplectl list)");
  }
  return absl::OkStatus();
}

absl::Status CheckSpecFileName(absl::string_view path) {
  if (path.empty()) return absl::InvalidArgumentError("a job spec file name must not be empty");
  return absl::OkStatus();
}

}  // namespace dapple::ctl
