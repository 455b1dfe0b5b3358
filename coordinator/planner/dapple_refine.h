// Part of DAPPLE's planner search (dapple_planner.h; docs/planner.md, "DAPPLE planner", step 3):
// local search on the analytical model (DAPPLE section 5.2, plan_estimator.h) from a scored
// layout. Pure; thread-safe while `budget`'s settings do not change. Internal to the planner.
#ifndef DAPPLE_COORDINATOR_PLANNER_DAPPLE_REFINE_H_
#define DAPPLE_COORDINATOR_PLANNER_DAPPLE_REFINE_H_

#include <vector>

#include "coordinator/planner/dapple_layout.h"
#include "coordinator/planner/stage_budget.h"

namespace dapple::coordinator::dapple_search {

// The layouts one step away from `current`, on the stages that matter (all of them for P <= 32,
// else the neighbourhoods of the pivot stage and of the stage with the most work per replica):
//   - a boundary after a stage moved by +-1, 2, 4, ... layers, up to L / 4 (same devices);
//   - a stage's replicas doubled or halved (within the usable devices);
//   - when num_stages is free: a stage split in two at half its work, either each half with
//     half the replicas or the new half on as many unused devices; two neighbours merged with
//     the sum or the larger of their replica counts;
//   - the same stages and replicas under each other placement policy.
// Replica counts stay within budget.replica_counts(); devices are placed by the layout's policy
// (PlaceLayout). `budget` supplies the work prefix sums and device limits; its settings do not
// matter.
std::vector<Layout> RefinementMoves(const LayoutScorer& scorer, const StageBudget& budget,
                                    const Scored& current);

// Best-improvement hill climbing from `start` on the analytical model, at most `iterations`
// rounds: each round takes the move of RefinementMoves with the smallest estimated step ms (a
// move with the same replicas keeps the micro-batch size, others choose it again by
// LayoutScorer::Score and must fit memory) and stops unless it is faster by a relative 1e-9;
// the winner is scored again. Returns the last scored layout (`start` when nothing improves).
Scored Refine(const LayoutScorer& scorer, const StageBudget& budget, int iterations, Scored start);

}  // namespace dapple::coordinator::dapple_search

#endif  // DAPPLE_COORDINATOR_PLANNER_DAPPLE_REFINE_H_
