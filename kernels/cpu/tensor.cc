#include "kernels/cpu/tensor.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dapple::kernels {

int64_t Tensor::numel() const {
  if (shape.empty()) return 0;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t Tensor::cols() const {
  if (shape.empty()) return 0;
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

void Tensor::Resize(const std::vector<int64_t>& new_shape) {
  shape = new_shape;
  // std::vector::resize keeps its capacity when shrinking, so a tensor reused across
  // micro-batches allocates only once.
  data.resize(static_cast<size_t>(numel()));
}

void Tensor::ResizeZero(const std::vector<int64_t>& new_shape) {
  Resize(new_shape);
  Fill(0.0f);
}

void Tensor::Fill(float v) { std::fill(data.begin(), data.end(), v); }

Tensor Tensor::Zeros(const std::vector<int64_t>& shape) {
  Tensor t;
  t.ResizeZero(shape);
  return t;
}

std::string ShapeToString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace dapple::kernels
