// Fashion-MNIST (Xiao et al., 2017) from the gzip'd big-endian IDX files of Debian's
// dataset-fashion-mnist (/usr/share/datasets/fashion-mnist), and the deterministic sample order.
#ifndef DAPPLE_WORKER_DATA_FASHION_MNIST_H_
#define DAPPLE_WORKER_DATA_FASHION_MNIST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dapple::worker {

enum class Split { kTrain, kTest };

struct Dataset {
  int64_t size = 0;                 // number of samples (60000 train, 10000 test)
  int64_t rows = 28, cols = 28;
  std::vector<uint8_t> pixels;      // [size, rows * cols], raw 0..255
  std::vector<int32_t> labels;      // [size], 0..9
};

// Normalisation applied by GatherBatch: (pixel / 255 - kMean) / kStd (train-set statistics).
inline constexpr float kFashionMnistMean = 0.2860f;
inline constexpr float kFashionMnistStd = 0.3530f;

// Reads {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz from `dir`.
// kNotFound naming the missing file and the Debian package that provides it;
// kDataLoss for a corrupt file (bad gzip, magic number, dimensions or label range), naming it.
absl::StatusOr<Dataset> LoadFashionMnist(const std::string& dir, Split split);

// The sample order of `epoch` (0-based): a permutation of [0, n), a pure function of
// (n, seed, epoch) (Fisher-Yates on splitmix64), identical in every process.
std::vector<int64_t> EpochOrder(int64_t n, uint64_t seed, int64_t epoch);

// Copies samples `indices[0..count)` into `images` ([count, rows*cols], normalised) and/or
// `labels` ([count]); either output may be null.
void GatherBatch(const Dataset& data, const int64_t* indices, int64_t count, float* images,
                 int32_t* labels);

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_DATA_FASHION_MNIST_H_
