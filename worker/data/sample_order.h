// The order in which a job visits its training samples: a pure function of (n, seed, epoch), so
// that every process of a job (stage 0 reading inputs, the last stage reading targets, every
// replica taking its shard) agrees on each micro-batch without sending samples or labels around
// (design.md, "Data and evaluation").
#ifndef DAPPLE_WORKER_DATA_SAMPLE_ORDER_H_
#define DAPPLE_WORKER_DATA_SAMPLE_ORDER_H_

#include <cstdint>
#include <vector>

namespace dapple::worker {

// The sample order of `epoch` (0-based): a permutation of [0, n) (empty for n <= 0), a pure
// function of (n, seed, epoch) (Fisher-Yates on splitmix64), identical in every process and on
// every machine. Thread-safe.
std::vector<int64_t> EpochOrder(int64_t n, uint64_t seed, int64_t epoch);

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_DATA_SAMPLE_ORDER_H_
