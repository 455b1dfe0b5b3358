#include "common/schedule/simulator_grid.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace dapple::schedule::internal {
namespace {

constexpr int kMaxGridColumns = 240;

}  // namespace

std::string GridCellLabel(const Op& a) {
  switch (a.kind) {
    case v1::FORWARD:
      return absl::StrCat("F", a.micro_batch);
    case v1::BACKWARD:
    case v1::BACKWARD_INPUT:
      return absl::StrCat("B", a.micro_batch);
    case v1::BACKWARD_WEIGHT:
      return absl::StrCat("W", a.micro_batch);
    case v1::SEND_ACT:
      return absl::StrCat("sa", a.micro_batch);
    case v1::RECV_ACT:
      return absl::StrCat("ra", a.micro_batch);
    case v1::SEND_GRAD:
      return absl::StrCat("sg", a.micro_batch);
    case v1::RECV_GRAD:
      return absl::StrCat("rg", a.micro_batch);
    case v1::ALLREDUCE:
      return "AR";
    case v1::TIED_ALLREDUCE:
      return "TA";
    case v1::GLOBAL_NORM:
      return "GN";
    case v1::OPTIMIZER_STEP:
    case v1::STALE_OPTIMIZER_STEP:
      return "ST";
    case v1::ALLREDUCE_ASYNC:
      return "AA";
    case v1::GLOBAL_NORM_ASYNC:
    case v1::USE_WEIGHTS:
    case v1::RESTORE_WEIGHTS:
    case v1::STASH_WEIGHTS:
    case v1::DROP_WEIGHTS:
      return "W";
    case v1::ACTION_KIND_UNSPECIFIED:
    case v1::ActionKind_INT_MIN_SENTINEL_DO_NOT_USE_:
    case v1::ActionKind_INT_MAX_SENTINEL_DO_NOT_USE_:
      break;
  }
  return "?";
}

double GridQuantum(const std::vector<double>& compute_costs,
                   const std::vector<double>& comm_costs) {
  double q = 0;
  auto consider = [&q](double v) {
    if (v > 0 && (q == 0 || v < q)) q = v;
  };
  for (double v : compute_costs) consider(v);
  if (q == 0) {
    for (double v : comm_costs) consider(v);
  }
  return q;
}

std::string RenderGrid(const std::vector<std::vector<GridSlot>>& slots, double end_time,
                       double quantum, const std::vector<std::string>& row_suffix) {
  const int p = static_cast<int>(slots.size());
  int columns = 0;
  if (quantum > 0 && end_time > 0) {
    // The epsilon absorbs rounding in sums of costs such as 0.1 + 0.2.
    const double exact = end_time / quantum;
    columns = static_cast<int>(std::min<double>(std::ceil(exact - 1e-9), kMaxGridColumns));
    if (exact > kMaxGridColumns) quantum = end_time / kMaxGridColumns;
  }
  size_t width = std::max<size_t>(2, absl::StrCat(columns > 0 ? columns - 1 : 0).size());
  for (const auto& row : slots) {
    for (const GridSlot& slot : row) width = std::max(width, slot.label.size());
  }
  const std::string row_name_last = absl::StrCat("stage ", p - 1);
  const size_t name_width = row_name_last.size();

  auto trim = [](std::string line) {
    while (!line.empty() && line.back() == ' ') line.pop_back();
    return line;
  };
  std::vector<std::string> lines;
  lines.push_back(absl::StrFormat("one column = %g time unit%s", quantum, quantum == 1 ? "" : "s"));
  std::string header = absl::StrFormat("%*s |", static_cast<int>(name_width), "t");
  for (int c = 0; c < columns; ++c) absl::StrAppendFormat(&header, " %-*d", width, c);
  lines.push_back(trim(header));
  for (int s = 0; s < p; ++s) {
    std::string line =
        absl::StrFormat("%*s |", static_cast<int>(name_width), absl::StrCat("stage ", s));
    size_t k = 0;
    for (int c = 0; c < columns; ++c) {
      // A cell shows what ran at the middle of its time slot.
      const double t = (c + 0.5) * quantum;
      while (k < slots[s].size() && slots[s][k].end <= t) ++k;
      const bool busy = k < slots[s].size() && slots[s][k].start <= t;
      absl::StrAppendFormat(&line, " %-*s", width, busy ? slots[s][k].label : ".");
    }
    line = trim(line);
    if (!row_suffix.empty()) absl::StrAppend(&line, "  <- ", row_suffix[s]);
    lines.push_back(line);
  }
  return absl::StrJoin(lines, "\n");
}

}  // namespace dapple::schedule::internal
