// Ranks of a hybrid plan: stage s runs on replicas(s) workers; rank (s, r) has the global index
// RankIndex = sum of replicas of the stages before s, plus r. With one replica per stage the
// index is the stage (what transports and older plans use). Pure functions; thread-safe.
//
// DAPPLE's split-concat (DAPPLE paper, section 4): every micro-batch of R rows is split across a
// stage's D replicas into contiguous row ranges (the first R % D replicas get one row more);
// between stages with different D, each receiver gathers the rows it owns from the senders
// whose ranges overlap them (RowOverlap).
#ifndef DAPPLE_COMMON_SCHEDULE_RANKS_H_
#define DAPPLE_COMMON_SCHEDULE_RANKS_H_

#include <cstdint>
#include <vector>

#include "dapple/v1/job.pb.h"

namespace dapple::schedule {

// Replicas of stage `stage` of `plan` (at least 1: a summary without replicas means one).
int StageReplicas(const v1::ParallelPlanSummary& plan, int stage);
// The global index of rank (stage, replica).
int RankIndex(const v1::ParallelPlanSummary& plan, int stage, int replica);
// Total ranks (sum of replicas over stages).
int NumRanks(const v1::ParallelPlanSummary& plan);

// Half-open row range [begin, end) of a micro-batch of `rows` rows that replica `replica` of
// `replicas` owns under split-concat.
struct RowRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};
RowRange SplitRows(int64_t rows, int replicas, int replica);
// The intersection of two ranges (size() <= 0 when they do not overlap).
RowRange RowOverlap(RowRange a, RowRange b);

}  // namespace dapple::schedule

#endif  // DAPPLE_COMMON_SCHEDULE_RANKS_H_
