// Fashion-MNIST (Xiao et al., 2017) from the gzip'd big-endian IDX files of Debian's
// dataset-fashion-mnist (/usr/share/datasets/fashion-mnist): 28x28 grey images in 10 classes,
// 60000 for training and 10000 for testing, one Dataset (dataset.h) per split.
#ifndef DAPPLE_WORKER_DATA_FASHION_MNIST_H_
#define DAPPLE_WORKER_DATA_FASHION_MNIST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/dataset.h"

namespace dapple::worker {

enum class Split { kTrain, kTest };

// Normalisation applied by Gather: (pixel / 255 - kMean) / kStd (train-set statistics).
inline constexpr float kFashionMnistMean = 0.2860f;
inline constexpr float kFashionMnistStd = 0.3530f;

// One split in memory: inputs [1, 28, 28] floats (normalised pixels), one target (the class,
// 0..9) per sample.
class FashionMnist final : public Dataset {
 public:
  static constexpr int64_t kRows = 28;
  static constexpr int64_t kCols = 28;
  static constexpr int64_t kClasses = 10;

  // `pixels`: [labels.size(), 28 * 28] raw 0..255; `labels` in [0, 10) (LoadFashionMnist checks
  // both; tests build small sets directly).
  FashionMnist(std::vector<uint8_t> pixels, std::vector<int32_t> labels);

  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  const std::vector<int64_t>& sample_shape() const override { return shape_; }
  int64_t targets_per_sample() const override { return 1; }
  int64_t num_classes() const override { return kClasses; }
  bool token_inputs() const override { return false; }
  // Inputs are the normalised pixels (kFashionMnistMean, kFashionMnistStd), targets the labels.
  void Gather(const int64_t* indices, int64_t count, float* inputs,
              int32_t* targets) const override;

  const std::vector<uint8_t>& pixels() const { return pixels_; }
  const std::vector<int32_t>& labels() const { return labels_; }

 private:
  std::vector<int64_t> shape_ = {1, kRows, kCols};
  std::vector<uint8_t> pixels_;
  std::vector<int32_t> labels_;
};

// Reads {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz from `dir`.
// kNotFound naming the missing file and the Debian package that provides it;
// kDataLoss for a corrupt file (bad gzip, magic number, dimensions or label range), naming it.
absl::StatusOr<FashionMnist> LoadFashionMnist(const std::string& dir, Split split);

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_DATA_FASHION_MNIST_H_
