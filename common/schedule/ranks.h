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
#include <string>
#include <vector>

#include "dapple/v1/job.pb.h"

namespace dapple::schedule {

// Replicas of stage `stage` of `plan` (at least 1: a summary without replicas means one).
int StageReplicas(const v1::ParallelPlanSummary& plan, int stage);
// The global index of rank (stage, replica).
int RankIndex(const v1::ParallelPlanSummary& plan, int stage, int replica);
// Total ranks (sum of replicas over stages).
int NumRanks(const v1::ParallelPlanSummary& plan);
// The layer ranges pipeline rank `stage` of `plan` holds, in chunk order: its
// PlanStageSummary.chunks under schedule interleaved (chunk c = virtual stage c * P + stage),
// else the one range [first_layer, last_layer]. The one place that reads both forms.
std::vector<v1::StageRange> StageChunks(const v1::ParallelPlanSummary& plan, int stage);
// The pipeline ranks whose ranks exchange activations and gradients with rank `stage`'s:
// stage - 1 and stage + 1 where they exist, and with virtual stages (StageChunks of more than one
// range, P > 1) (stage - 1) mod P and (stage + 1) mod P; distinct, ascending, never `stage`.
std::vector<int> NeighbourStages(const v1::ParallelPlanSummary& plan, int stage);
// How messages name rank (stage, replica) of a stage with `replicas` replicas: "stage 1" for a
// stage of one replica (the messages of plain pipelines), "stage 1 replica 0" otherwise.
std::string RankName(int stage, int replica, int replicas);

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

// The rows of every micro-batch of `micro_batch` rows that replica `replica` of a stage with
// `replicas` replicas computes: its split-concat share (SplitRows), or the whole micro-batch
// under 1F1B-RR (`whole_micro_batches`: parallel.schedule pipedream, where replicas take whole
// micro-batches in turn).
RowRange ReplicaRows(int64_t micro_batch, int replicas, int replica, bool whole_micro_batches);

// The row groups of one step's global batch as the forward calls of a stage with `replicas`
// replicas see them, as ranges of the global batch in micro-batch then replica order:
// micro-batch m's rows m micro_batch + ReplicaRows(...) of each replica (each micro-batch once
// under 1F1B-RR). A layer whose output depends on the rows it is given together (batch
// normalisation's statistics) computes on exactly these groups in the pipeline, so the
// single-process reference (worker/runtime/reference_trainer.h) uses them too. Requires
// micro_batch dividing global_batch.
std::vector<RowRange> StepRowGroups(int64_t global_batch, int64_t micro_batch, int replicas,
                                    bool whole_micro_batches);

}  // namespace dapple::schedule

#endif  // DAPPLE_COMMON_SCHEDULE_RANKS_H_
