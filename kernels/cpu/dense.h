// Dense (fully connected) maps on row-major fp32 matrices through OpenBLAS sgemm, in PyTorch's
// nn.Linear layout: the GEMM conventions shared by LinearLayer, LmHeadLayer and the four linear
// maps of TransformerBlockLayer.
//
// Shapes: x [rows, in], W [out, in], b [out], y [rows, out]. Pointers are to contiguous
// row-major storage of those shapes; outputs must not alias inputs. A dimension that does not
// fit a BLAS int aborts (kernels/cpu/check.h). rows == 0 is allowed (outputs untouched but for
// DenseForward's nothing-to-write).
//
// Thread safety: reentrant; concurrent calls must write to different outputs.
#ifndef DAPPLE_KERNELS_CPU_DENSE_H_
#define DAPPLE_KERNELS_CPU_DENSE_H_

#include <cstdint>

namespace dapple::kernels {

// `d` as a BLAS int (aborts when d < 0 or d > INT_MAX).
int BlasDim(int64_t d);

// y = x W^T + b (b may be null: no bias). Overwrites y.
void DenseForward(const float* x, int64_t rows, int64_t in, int64_t out, const float* w,
                  const float* b, float* y);

// dx = dy W when !accumulate, dx += dy W when accumulate (dy [rows, out], dx [rows, in]).
void DenseBackwardInput(const float* dy, int64_t rows, int64_t in, int64_t out, const float* w,
                        bool accumulate, float* dx);

// dW += dy^T x (one sgemm with beta = 1); db += the column sums of dy, summed in double and
// rounded once (db may be null: no bias).
void DenseBackwardWeight(const float* x, const float* dy, int64_t rows, int64_t in, int64_t out,
                         float* dw, float* db);

}  // namespace dapple::kernels

#endif  // DAPPLE_KERNELS_CPU_DENSE_H_
