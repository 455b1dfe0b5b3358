// The simulator's grid (simulator.h, "Grid format"): one row per stage, one column per time
// quantum, each cell what the rank ran at the middle of its column. Internal to simulator.cc,
// split out of it by concern; pure functions, thread-safe.
#ifndef DAPPLE_COMMON_SCHEDULE_SIMULATOR_GRID_H_
#define DAPPLE_COMMON_SCHEDULE_SIMULATOR_GRID_H_

#include <string>
#include <vector>

#include "common/schedule/op.h"

namespace dapple::schedule::internal {

// One stretch of time a rank spent on an action (waiting is not a slot).
struct GridSlot {
  double start;
  double end;
  std::string label;
};

// The cell text of `a`: F<m>, B<m> (BACKWARD or BACKWARD_INPUT), W<m> (BACKWARD_WEIGHT), sa<m>,
// ra<m>, sg<m>, rg<m>, AR, TA, GN, ST; "?" for an unnamed kind.
std::string GridCellLabel(const Op& a);

// The column width: the smallest positive of `compute_costs`, so unit-ish costs get one column
// per unit; the smallest positive of `comm_costs` only when nothing computes for a positive
// time; 0 when nothing costs time.
double GridQuantum(const std::vector<double>& compute_costs, const std::vector<double>& comm_costs);

// The grid text of simulator.h for `slots` (per stage, in time order) up to `end_time`, with
// columns of `quantum` (widened so there are at most 240); a non-empty `row_suffix` (one per
// stage) ends each stage line with "  <- <suffix>".
std::string RenderGrid(const std::vector<std::vector<GridSlot>>& slots, double end_time,
                       double quantum, const std::vector<std::string>& row_suffix);

}  // namespace dapple::schedule::internal

#endif  // DAPPLE_COMMON_SCHEDULE_SIMULATOR_GRID_H_
