#include "worker/data/text_dataset.h"

#include <utility>

#include "common/status.h"

namespace dapple::worker {

absl::StatusOr<Datasets> TextDataset::Load(const v1::DataSpec& data) {
  DAPPLE_ASSIGN_OR_RETURN(std::shared_ptr<const TextFile> file, TextFile::Open(data.path()));
  DAPPLE_ASSIGN_OR_RETURN(const TextLayout layout, CheckedTextLayout(data, file->size()));
  Datasets out;
  out.train = std::make_shared<TextDataset>(file, layout.train, data.seq_len());
  out.eval = std::make_shared<TextDataset>(file, layout.validation, data.seq_len());
  out.file_bytes = file->size();
  return out;
}

TextDataset::TextDataset(std::shared_ptr<const TextFile> file, const TextSplit& split,
                         int64_t seq_len)
    : file_(std::move(file)), split_(split), seq_len_(seq_len), shape_{seq_len} {}

void TextDataset::Gather(const int64_t* indices, int64_t count, float* inputs,
                         int32_t* targets) const {
  const auto* bytes = reinterpret_cast<const unsigned char*>(file_->bytes().data()) + split_.begin;
  for (int64_t b = 0; b < count; ++b) {
    const unsigned char* sample = bytes + indices[b] * seq_len_;
    if (inputs != nullptr) {
      float* dst = inputs + b * seq_len_;
      for (int64_t k = 0; k < seq_len_; ++k) dst[k] = static_cast<float>(sample[k]);
    }
    if (targets != nullptr) {
      int32_t* dst = targets + b * seq_len_;
      for (int64_t k = 0; k < seq_len_; ++k) dst[k] = sample[k + 1];
    }
  }
}

}  // namespace dapple::worker
