// The BLAS (OpenBLAS) settings of this process.
#ifndef DAPPLE_KERNELS_CPU_BLAS_H_
#define DAPPLE_KERNELS_CPU_BLAS_H_

namespace dapple::kernels {

// Sets how many threads OpenBLAS and oneDNN (kernels/cpu/onednn_ops.h) use for every later
// call in this process (n >= 1; smaller values are treated as 1). dapple runs exactly ONE compute
// thread per process: the machines it is developed on give about one core, and spinning BLAS
// threads of co-located pipeline stages slow each other down (2-thread BLAS measured no faster than
// 1 here). Nothing calls this automatically: each process's main() calls SetComputeThreads(1) once,
// before any kernel runs. Thread safety: call before compute starts, not concurrently with BLAS
// calls.
void SetComputeThreads(int n);

// The count last set by SetComputeThreads; 1 before any call (oneDNN's ops read it; OpenBLAS
// keeps its own default, every core, until SetComputeThreads). Thread safety: any thread.
int ComputeThreads();

}  // namespace dapple::kernels

#endif  // DAPPLE_KERNELS_CPU_BLAS_H_
