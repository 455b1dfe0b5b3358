#include "worker/data/dataset.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/text_data.h"
#include "worker/data/fashion_mnist.h"
#include "worker/data/text_dataset.h"

namespace dapple::worker {

int64_t Dataset::sample_elements() const {
  int64_t n = 1;
  for (int64_t d : sample_shape()) n *= d;
  return n;
}

absl::StatusOr<Datasets> LoadDatasets(const v1::DataSpec& data) {
  if (data.dataset() == kTextDataset) return TextDataset::Load(data);
  if (data.dataset() != "fashion-mnist") {
    return absl::InvalidArgumentError(
        absl::StrFormat("data.dataset '%s' is unknown to this worker", data.dataset()));
  }
  // The loader names its files; the prefix says which field of the spec they come from.
  auto named = [](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat("data.path: ", s.message()));
  };
  absl::StatusOr<FashionMnist> train = LoadFashionMnist(data.path(), Split::kTrain);
  if (!train.ok()) return named(train.status());
  absl::StatusOr<FashionMnist> test = LoadFashionMnist(data.path(), Split::kTest);
  if (!test.ok()) return named(test.status());
  Datasets out;
  out.train = std::make_shared<const FashionMnist>(*std::move(train));
  out.eval = std::make_shared<const FashionMnist>(*std::move(test));
  return out;
}

absl::Status CheckSubmittedData(const Datasets& loaded, const v1::DataSpec& data,
                                absl::string_view here) {
  if (data.file_bytes() == 0 || data.file_bytes() == loaded.file_bytes) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrFormat("data.path %s has %d bytes on %s but %d bytes where the job was submitted "
                      "(data.file_bytes): every worker and the coordinator need the same file",
                      data.path(), loaded.file_bytes, here, data.file_bytes()));
}

}  // namespace dapple::worker
