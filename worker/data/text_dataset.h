// Byte-level text (data.dataset text; docs/job_spec.md, "Text data"): one UTF-8 text file whose
// bytes are the tokens (vocabulary 256), split into a training and a validation split and cut
// into next-byte-prediction samples by common/text_data.h, the arithmetic the coordinator also
// uses when it resolves data.train_samples at submit:
//   - the training split is the first floor(N * (1 - data.validation_fraction)) of the file's N
//     bytes, the validation split the rest;
//   - sample i of a split is the split's bytes [i*T, i*T + T] (T = data.seq_len): inputs the
//     first T bytes (as token ids), targets the T bytes after each of them; a split of B bytes
//     has floor((B - 1) / T) samples.
// The file is mapped once (common/text_data.h TextFile) and shared by both splits; Gather copies
// straight from the mapping (no allocation per sample).
#ifndef DAPPLE_WORKER_DATA_TEXT_DATASET_H_
#define DAPPLE_WORKER_DATA_TEXT_DATASET_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/text_data.h"
#include "dapple/v1/job.pb.h"
#include "worker/data/dataset.h"

namespace dapple::worker {

class TextDataset final : public Dataset {
 public:
  // Both splits of data.path: train, and eval = the validation split; file_bytes = the file's
  // size. Errors are TextFile::Open's (kNotFound for a missing file; kInvalidArgument for a
  // directory, an unreadable, empty, too large or non-text file) and CheckedTextLayout's
  // (kInvalidArgument when a split holds no sample), each one line naming data.path.
  static absl::StatusOr<Datasets> Load(const v1::DataSpec& data);

  // The samples of `split` (of `file`, which it shares) with T = `seq_len`. Requires a split
  // inside the file with split.samples samples of seq_len (LayoutText's).
  TextDataset(std::shared_ptr<const TextFile> file, const TextSplit& split, int64_t seq_len);

  int64_t size() const override { return split_.samples; }
  const std::vector<int64_t>& sample_shape() const override { return shape_; }
  int64_t targets_per_sample() const override { return seq_len_; }
  int64_t num_classes() const override { return kTextVocab; }
  bool token_inputs() const override { return true; }
  // inputs[b, k] = byte k of sample indices[b] as a float (0..255); targets[b, k] = the byte
  // after it.
  void Gather(const int64_t* indices, int64_t count, float* inputs,
              int32_t* targets) const override;

 private:
  std::shared_ptr<const TextFile> file_;
  TextSplit split_;
  int64_t seq_len_;
  std::vector<int64_t> shape_;
};

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_DATA_TEXT_DATASET_H_
