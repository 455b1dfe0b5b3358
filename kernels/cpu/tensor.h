// A dense fp32 tensor on the host: row-major, dimension 0 is the batch.
// Value type; not thread-safe for concurrent mutation.
#ifndef DAPPLE_KERNELS_CPU_TENSOR_H_
#define DAPPLE_KERNELS_CPU_TENSOR_H_

#include <cstdint>
#include <string>
#include <vector>

namespace dapple::kernels {

struct Tensor {
  std::vector<int64_t> shape;  // e.g. [N, 784]; empty means no tensor
  std::vector<float> data;     // size == numel()

  int64_t numel() const;
  // shape[0]; 0 for an empty tensor.
  int64_t rows() const { return shape.empty() ? 0 : shape[0]; }
  // Product of shape[1..]: the features per sample.
  int64_t cols() const;
  int64_t bytes() const { return static_cast<int64_t>(data.size() * sizeof(float)); }
  // Resizes to `new_shape` (contents unspecified, storage reused when large enough).
  void Resize(const std::vector<int64_t>& new_shape);
  // Resizes to `new_shape` and fills with zeros.
  void ResizeZero(const std::vector<int64_t>& new_shape);
  void Fill(float v);

  static Tensor Zeros(const std::vector<int64_t>& shape);
};

// "[256, 784]".
std::string ShapeToString(const std::vector<int64_t>& shape);

}  // namespace dapple::kernels

#endif  // DAPPLE_KERNELS_CPU_TENSOR_H_
