#include "worker/checkpoint/shard_codec.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/tensor.h"

namespace dapple::worker {

static_assert(sizeof(float) == 4, "checkpoints store IEEE-754 fp32");

v1::TensorData ToTensorData(const NamedTensor& t) {
  v1::TensorData out;
  out.set_name(t.name);
  for (int64_t d : t.shape) out.add_shape(d);
  out.set_data(reinterpret_cast<const char*>(t.data.data()), t.data.size() * sizeof(float));
  return out;
}

absl::StatusOr<NamedTensor> FromTensorData(const v1::TensorData& t, const std::string& source) {
  NamedTensor out;
  out.name = t.name();
  out.shape.assign(t.shape().begin(), t.shape().end());
  int64_t n = 1;
  for (int64_t d : out.shape) {
    if (d < 0 || (d > 0 && n > (int64_t{1} << 40) / d)) {
      return absl::DataLossError(absl::StrCat(source, ": tensor ", t.name(), " has shape ",
                                              kernels::ShapeToString(out.shape)));
    }
    n *= d;
  }
  if (static_cast<int64_t>(t.data().size()) != n * static_cast<int64_t>(sizeof(float))) {
    return absl::DataLossError(absl::StrCat(source, ": tensor ", t.name(), " has ", t.data().size(),
                                            " bytes, shape ", kernels::ShapeToString(out.shape),
                                            " needs ", n * sizeof(float)));
  }
  out.data.resize(n);
  std::memcpy(out.data.data(), t.data().data(), t.data().size());
  return out;
}

}  // namespace dapple::worker
