#include "kernels/cpu/dense.h"

#include <cblas.h>

#include <climits>
#include <vector>

#include "kernels/cpu/check.h"

namespace dapple::kernels {

int BlasDim(int64_t d) {
  DAPPLE_KERNEL_CHECK(d >= 0 && d <= INT_MAX, "dimension ", d, " does not fit a BLAS int");
  return static_cast<int>(d);
}

void DenseForward(const float* x, int64_t rows, int64_t in, int64_t out, const float* w,
                  const float* b, float* y) {
  if (rows == 0) return;
  float beta = 0.0f;
  if (b != nullptr) {
    // Broadcast the bias into y, then accumulate x W^T on top of it (beta = 1).
    for (int64_t r = 0; r < rows; ++r) {
      float* row = y + r * out;
      for (int64_t j = 0; j < out; ++j) row[j] = b[j];
    }
    beta = 1.0f;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, BlasDim(rows), BlasDim(out), BlasDim(in),
              1.0f, x, BlasDim(in), w, BlasDim(in), beta, y, BlasDim(out));
}

void DenseBackwardInput(const float* dy, int64_t rows, int64_t in, int64_t out, const float* w,
                        bool accumulate, float* dx) {
  if (rows == 0) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, BlasDim(rows), BlasDim(in), BlasDim(out),
              1.0f, dy, BlasDim(out), w, BlasDim(in), accumulate ? 1.0f : 0.0f, dx, BlasDim(in));
}

void DenseBackwardWeight(const float* x, const float* dy, int64_t rows, int64_t in, int64_t out,
                         float* dw, float* db) {
  if (rows == 0) return;
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, BlasDim(out), BlasDim(in), BlasDim(rows),
              1.0f, dy, BlasDim(out), x, BlasDim(in), 1.0f, dw, BlasDim(in));
  if (db == nullptr) return;
  // A bias gradient sums thousands of rows (micro-batch x sequence): double keeps it within
  // rounding of PyTorch's pairwise float sum whatever the row count. thread_local: allocated
  // once per thread, not per call.
  thread_local std::vector<double> sums;
  sums.assign(static_cast<size_t>(out), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = dy + r * out;
    for (int64_t j = 0; j < out; ++j) sums[j] += row[j];
  }
  for (int64_t j = 0; j < out; ++j) db[j] += static_cast<float>(sums[j]);
}

}  // namespace dapple::kernels
