// Contiguous partitions of a model's L layers into P pipeline stages. Pure functions; thread-safe.
// A partition is a list of P inclusive layer ranges, stage order, covering 0..L-1 exactly once,
// each non-empty.
#ifndef DAPPLE_COORDINATOR_PLANNER_PARTITION_H_
#define DAPPLE_COORDINATOR_PLANNER_PARTITION_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dapple/v1/job.pb.h"

namespace dapple::coordinator {

// Splits layers with costs `layer_costs` (L entries, each >= 0) into `num_stages` contiguous
// non-empty stages minimising the largest stage cost (the sum of its layers' costs): the
// classic linear-partition problem, solved exactly by dynamic programming over suffixes,
// O(P * L^2) time, O(P * L) memory. Among optimal partitions it returns the one whose stage
// boundaries are lexicographically smallest (each stage ends as early as an optimal
// completion allows), so the result is deterministic.
// kInvalidArgument when num_stages < 1, when a cost is negative or not finite, or when
// L < num_stages ("the model has 3 layers but the plan has 4 stages: every stage needs at
// least one layer").
absl::StatusOr<std::vector<v1::StageRange>> PartitionBalanced(
    const std::vector<double>& layer_costs, int num_stages);

// Equal layer counts: each stage gets floor(L / P) layers and the first L mod P stages one
// more. Same errors as PartitionBalanced for num_stages and L < P.
absl::StatusOr<std::vector<v1::StageRange>> PartitionUniform(int num_layers, int num_stages);

// Checks that `ranges` is a partition of layers 0..num_layers-1 (see above).
// kInvalidArgument naming the first offending range, e.g. "parallel.stages[1] starts at
// layer 4 but parallel.stages[0] ended at layer 2: ranges must be contiguous".
absl::Status CheckPartition(const std::vector<v1::StageRange>& ranges, int num_layers);

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_PLANNER_PARTITION_H_
