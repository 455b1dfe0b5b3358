#include "dapplectl/log_views.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "absl/algorithm/container.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace dapple::ctl {
namespace {

// Lines this close to the first of a group may join it.
constexpr int64_t kCollapseWindowMs = 2000;

std::string RankOf(const v1::JobLogLine& line) {
  return absl::StrCat(line.stage(), "/", line.replica(), " ", line.worker_id());
}

std::string LevelPrefix(const std::string& level) {
  if (level == "warning" || level == "warn") return "WARNING: ";
  if (level == "error" || level == "critical") return "ERROR: ";
  return "";
}

void AppendLine(std::string* out, const std::string& ranks, const v1::JobLogLine& line) {
  const std::string prefix = absl::StrCat("[", ranks, "] ", LevelPrefix(line.level()));
  for (absl::string_view part : absl::StrSplit(line.text(), '\n')) {
    absl::StrAppend(out, prefix, part, "\n");
  }
}

}  // namespace

absl::StatusOr<std::pair<int, int>> ParseRank(const std::string& text) {
  std::vector<std::string> parts = absl::StrSplit(text, '/');
  int stage = -1;
  int replica = 0;
  // Digits only: SimpleAtoi alone would take " 1" or "+1".
  const auto number = [](const std::string& part, int* value) {
    return !part.empty() && absl::c_all_of(part, absl::ascii_isdigit) &&
           absl::SimpleAtoi(part, value);
  };
  const bool ok = (parts.size() == 1 || parts.size() == 2) && number(parts[0], &stage) &&
                  (parts.size() == 1 || number(parts[1], &replica));
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rank must be STAGE/REPLICA, e.g. 1/0: got '", text, "'"));
  }
  return std::make_pair(stage, replica);
}

std::string RenderLogLines(const google::protobuf::RepeatedPtrField<v1::JobLogLine>& lines,
                           bool collapse) {
  std::string out;
  if (!collapse) {
    for (const v1::JobLogLine& line : lines) AppendLine(&out, RankOf(line), line);
    return out;
  }
  struct Group {
    const v1::JobLogLine* first;
    std::vector<std::string> ranks;
  };
  std::vector<Group> groups;
  // (level, text) -> the open group of that line.
  std::map<std::pair<std::string, std::string>, size_t> open;
  for (const v1::JobLogLine& line : lines) {
    const std::string rank = RankOf(line);
    auto it = open.find({line.level(), line.text()});
    if (it != open.end()) {
      Group& g = groups[it->second];
      const bool in_window = line.unix_ms() - g.first->unix_ms() <= kCollapseWindowMs;
      const bool new_rank = std::find(g.ranks.begin(), g.ranks.end(), rank) == g.ranks.end();
      if (in_window && new_rank) {
        g.ranks.push_back(rank);
        continue;
      }
    }
    open[{line.level(), line.text()}] = groups.size();
    groups.push_back({&line, {rank}});
  }
  for (const Group& g : groups) AppendLine(&out, absl::StrJoin(g.ranks, ", "), *g.first);
  return out;
}

std::string LastLines(const std::string& text, int64_t n) {
  if (n <= 0) return "";
  size_t start = text.size();
  int64_t found = 0;
  // The newline that ends the last line does not start one.
  size_t pos = text.empty() || text.back() != '\n' ? text.size() : text.size() - 1;
  while (pos > 0) {
    const size_t nl = text.rfind('\n', pos - 1);
    if (nl == std::string::npos) {
      start = 0;
      ++found;
      break;
    }
    ++found;
    start = nl + 1;
    if (found == n) break;
    pos = nl;
  }
  if (found < n) start = 0;
  return text.substr(start);
}

}  // namespace dapple::ctl
