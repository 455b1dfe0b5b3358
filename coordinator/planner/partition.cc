#include "coordinator/planner/partition.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace dapple::coordinator {
namespace {

absl::Status CheckCounts(int num_layers, int num_stages) {
  if (num_stages < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the plan has ", num_stages, " stages: it needs at least 1"));
  }
  if (num_layers < num_stages) {
    return absl::InvalidArgumentError(
        absl::StrCat("the model has ", num_layers, " layers but the plan has ", num_stages,
                     " stages: every stage needs at least one layer"));
  }
  return absl::OkStatus();
}

v1::StageRange Range(int first, int last) {
  v1::StageRange r;
  r.set_first_layer(first);
  r.set_last_layer(last);
  return r;
}

}  // namespace

absl::StatusOr<std::vector<v1::StageRange>> PartitionBalanced(
    const std::vector<double>& layer_costs, int num_stages) {
  const int num_layers = static_cast<int>(layer_costs.size());
  if (absl::Status s = CheckCounts(num_layers, num_stages); !s.ok()) return s;
  for (int i = 0; i < num_layers; ++i) {
    if (!std::isfinite(layer_costs[i]) || layer_costs[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer ", i, " has cost ", layer_costs[i], ": costs must be >= 0"));
    }
  }
  const int L = num_layers;
  const int P = num_stages;
  std::vector<double> prefix(L + 1, 0.0);
  for (int i = 0; i < L; ++i) prefix[i + 1] = prefix[i] + layer_costs[i];
  auto cost = [&](int first, int last) { return prefix[last + 1] - prefix[first]; };

  // best[k][i]: the smallest achievable maximum stage cost when layers i..L-1 form k stages.
  // Only i <= L - k is meaningful (each stage needs a layer).
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(P + 1, std::vector<double>(L + 1, kInf));
  for (int i = 0; i < L; ++i) best[1][i] = cost(i, L - 1);
  for (int k = 2; k <= P; ++k) {
    for (int i = 0; i <= L - k; ++i) {
      double b = kInf;
      for (int e = i; e <= L - k; ++e) b = std::min(b, std::max(cost(i, e), best[k - 1][e + 1]));
      best[k][i] = b;
    }
  }

  // Rebuild with the earliest feasible end for each stage. The comparisons are exact: every
  // value compared is the same prefix-sum difference computed the same way as in the table.
  const double bound = best[P][0];
  std::vector<v1::StageRange> ranges;
  ranges.reserve(P);
  int first = 0;
  for (int s = 0; s < P - 1; ++s) {
    const int k = P - s;
    int end = first;
    while (!(cost(first, end) <= bound && best[k - 1][end + 1] <= bound)) ++end;
    ranges.push_back(Range(first, end));
    first = end + 1;
  }
  ranges.push_back(Range(first, L - 1));
  return ranges;
}

absl::StatusOr<std::vector<v1::StageRange>> PartitionUniform(int num_layers, int num_stages) {
  if (absl::Status s = CheckCounts(num_layers, num_stages); !s.ok()) return s;
  const int base = num_layers / num_stages;
  const int extra = num_layers % num_stages;
  std::vector<v1::StageRange> ranges;
  ranges.reserve(num_stages);
  int first = 0;
  for (int s = 0; s < num_stages; ++s) {
    const int count = base + (s < extra ? 1 : 0);
    ranges.push_back(Range(first, first + count - 1));
    first += count;
  }
  return ranges;
}

absl::Status CheckPartition(const std::vector<v1::StageRange>& ranges, int num_layers) {
  if (ranges.empty()) {
    return absl::InvalidArgumentError(
        "parallel.stages is an empty list of ranges: give one range per stage");
  }
  int next = 0;
  for (size_t s = 0; s < ranges.size(); ++s) {
    const v1::StageRange& r = ranges[s];
    const std::string where =
        absl::StrCat("parallel.stages[", s, "] [", r.first_layer(), ", ", r.last_layer(), "]");
    if (r.first_layer() != next) {
      if (s == 0) {
        return absl::InvalidArgumentError(absl::StrCat(where, " starts at layer ", r.first_layer(),
                                                       ": the first stage must start at layer 0"));
      }
      return absl::InvalidArgumentError(
          absl::StrCat(where, " starts at layer ", r.first_layer(), " but parallel.stages[", s - 1,
                       "] ended at layer ", next - 1, ": ranges must be contiguous"));
    }
    if (r.last_layer() < r.first_layer()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " is empty: its last layer must be >= its first"));
    }
    if (r.last_layer() >= num_layers) {
      return absl::InvalidArgumentError(absl::StrCat(where, " ends past the model's last layer ",
                                                     num_layers - 1, ": end it at layer ",
                                                     num_layers - 1, " at most"));
    }
    next = r.last_layer() + 1;
  }
  if (next != num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("parallel.stages end at layer ", next - 1,
                                                   " but the model has layers 0..", num_layers - 1,
                                                   ": cover every layer"));
  }
  return absl::OkStatus();
}

}  // namespace dapple::coordinator
