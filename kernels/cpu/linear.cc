#include "kernels/cpu/linear.h"

#include <cblas.h>

#include <climits>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/check.h"
#include "kernels/cpu/init.h"

namespace dapple::kernels {
namespace {

// cblas takes int dimensions.
int BlasDim(int64_t d) {
  DAPPLE_KERNEL_CHECK(d >= 0 && d <= INT_MAX, "dimension ", d, " does not fit a BLAS int");
  return static_cast<int>(d);
}

}  // namespace

LinearLayer::LinearLayer(int layer_index, int64_t in, int64_t out)
    : layer_index_(layer_index), in_(in), out_(out) {
  DAPPLE_KERNEL_CHECK(in > 0 && out > 0, "linear layer ", layer_index, " in ", in, " out ", out);
  weight_.name = absl::StrCat("layer", layer_index, ".weight");
  weight_.value = Tensor::Zeros({out, in});
  weight_.grad = Tensor::Zeros({out, in});
  bias_.name = absl::StrCat("layer", layer_index, ".bias");
  bias_.value = Tensor::Zeros({out});
  bias_.grad = Tensor::Zeros({out});
}

void LinearLayer::InitParams(uint64_t seed) {
  // Correctly rounded sqrt and division: the bound is the same float everywhere.
  const float bound = static_cast<float>(1.0 / std::sqrt(static_cast<double>(in_)));
  FillSymmetricUniform(seed, layer_index_, InitTensor::kWeight, bound, &weight_.value);
  FillSymmetricUniform(seed, layer_index_, InitTensor::kBias, bound, &bias_.value);
}

void LinearLayer::Forward(const Tensor& x, Tensor* y, LayerCache* cache,
                          const ForwardContext& ctx) {
  cache->ctx = ctx;
  DAPPLE_KERNEL_CHECK(x.shape.size() == 2 && x.shape[1] == in_, "layer", layer_index_,
                      " (linear) expects x [N, ", in_, "], got ", ShapeToString(x.shape));
  const int64_t n = x.rows();
  y->Resize({n, out_});
  if (n == 0) return;
  // Broadcast the bias into y, then accumulate x W^T on top of it (beta = 1).
  for (int64_t r = 0; r < n; ++r) {
    float* row = y->data.data() + r * out_;
    for (int64_t j = 0; j < out_; ++j) row[j] = bias_.value.data[j];
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, BlasDim(n), BlasDim(out_), BlasDim(in_),
              1.0f, x.data.data(), BlasDim(in_), weight_.value.data.data(), BlasDim(in_), 1.0f,
              y->data.data(), BlasDim(out_));
}

void LinearLayer::CheckBackwardShapes(const Tensor& x, const Tensor& dy) const {
  DAPPLE_KERNEL_CHECK(x.shape.size() == 2 && x.shape[1] == in_, "layer", layer_index_,
                      " (linear) expects x [N, ", in_, "], got ", ShapeToString(x.shape));
  DAPPLE_KERNEL_CHECK(dy.shape.size() == 2 && dy.shape[0] == x.rows() && dy.shape[1] == out_,
                      "layer", layer_index_, " (linear) expects dy [", x.rows(), ", ", out_,
                      "], got ", ShapeToString(dy.shape));
}

void LinearLayer::BackwardInput(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx,
                                LayerCache* cache) {
  CheckBackwardShapes(x, dy);
  if (dx == nullptr) return;
  const int64_t n = x.rows();
  dx->Resize({n, in_});
  if (n == 0) return;
  // dx[N, in] = dy[N, out] W[out, in].
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, BlasDim(n), BlasDim(in_), BlasDim(out_),
              1.0f, dy.data.data(), BlasDim(out_), weight_.value.data.data(), BlasDim(in_), 0.0f,
              dx->data.data(), BlasDim(in_));
}

void LinearLayer::BackwardWeight(const Tensor& x, const Tensor& y, const Tensor& dy,
                                 LayerCache* cache) {
  CheckBackwardShapes(x, dy);
  const int64_t n = x.rows();
  if (n == 0) return;
  // dW[out, in] += dy^T[out, N] x[N, in].
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, BlasDim(out_), BlasDim(in_), BlasDim(n),
              1.0f, dy.data.data(), BlasDim(out_), x.data.data(), BlasDim(in_), 1.0f,
              weight_.grad.data.data(), BlasDim(in_));
  float* db = bias_.grad.data.data();
  for (int64_t r = 0; r < n; ++r) {
    const float* row = dy.data.data() + r * out_;
    for (int64_t j = 0; j < out_; ++j) db[j] += row[j];
  }
}

}  // namespace dapple::kernels
