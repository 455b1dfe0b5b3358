// The datasets a job trains on, behind one interface (design.md, "Models, data and losses"): the
// runtime asks a Dataset for the inputs and targets of the samples a micro-batch holds and knows
// nothing of the format. Implementations: Fashion-MNIST images (fashion_mnist.h) and byte-level
// text (text_dataset.h). Every worker reads the data itself; the order in which a job visits the
// samples is EpochOrder (sample_order.h).
#ifndef DAPPLE_WORKER_DATA_DATASET_H_
#define DAPPLE_WORKER_DATA_DATASET_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "dapple/v1/job.pb.h"

namespace dapple::worker {

// One split of a dataset (training, test or validation): `size()` samples, each an input of
// `sample_shape()` and `targets_per_sample()` class indices. Immutable after loading: every
// method is thread-safe.
class Dataset {
 public:
  virtual ~Dataset() = default;

  // Samples in the split.
  virtual int64_t size() const = 0;
  // The input of one sample (fashion-mnist [1, 28, 28]; text [seq_len]).
  virtual const std::vector<int64_t>& sample_shape() const = 0;
  // Elements of one sample's input: the product of sample_shape().
  int64_t sample_elements() const;
  // Class indices per sample: 1 (fashion-mnist's label) or seq_len (text: the next byte after
  // each input position).
  virtual int64_t targets_per_sample() const = 0;
  // Targets lie in [0, num_classes()): 10 for fashion-mnist, 256 for text.
  virtual int64_t num_classes() const = 0;
  // True when inputs are token ids (text: byte values 0..255), false for real-valued inputs.
  virtual bool token_inputs() const = 0;

  // Copies samples indices[0..count) (each in [0, size()); checked by the caller) in that order:
  // `inputs` gets [count, sample_elements()] floats, row-major (token ids as their exact float
  // values), `targets` [count, targets_per_sample()] class indices. Either may be null to skip
  // it. Allocates nothing.
  virtual void Gather(const int64_t* indices, int64_t count, float* inputs,
                      int32_t* targets) const = 0;
};

// A job's data: the split it trains on and the split it evaluates on.
struct Datasets {
  std::shared_ptr<const Dataset> train;
  std::shared_ptr<const Dataset> eval;  // fashion-mnist's test set; text: the validation split
  // Text: the size of the file read (the coordinator's data.file_bytes must match); 0 otherwise.
  int64_t file_bytes = 0;
};

// Loads both splits of `data` (data.dataset fashion-mnist: LoadFashionMnist on data.path; text:
// TextDataset::Load). Errors say data.path and the problem (kNotFound for a missing file,
// kInvalidArgument / kDataLoss for a file that is not the dataset, as the loaders say);
// kInvalidArgument for an unknown data.dataset. Reads files: the caller's thread blocks.
absl::StatusOr<Datasets> LoadDatasets(const v1::DataSpec& data);

// OK when `loaded` is the data the job was submitted with: data.file_bytes (set by the
// coordinator for text) equals loaded.file_bytes, or is 0. Else kFailedPrecondition naming the
// path, `here` (who loaded it, e.g. "worker w-2 (node-a)") and both sizes: "data.path
// /d/kjv.txt has 4298000 bytes on worker w-2 (node-a) but 4298239 bytes where the job was
// submitted (data.file_bytes): every worker and the coordinator need the same file".
absl::Status CheckSubmittedData(const Datasets& loaded, const v1::DataSpec& data,
                                absl::string_view here);

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_DATA_DATASET_H_
