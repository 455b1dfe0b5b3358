#include "kernels/cpu/blas.h"

#include <algorithm>
#include <atomic>

// Declared here rather than through cblas.h: Debian's cblas.h alternative may point at the
// reference (netlib) header, which lacks the OpenBLAS extensions; the symbol is in libopenblas.
extern "C" void openblas_set_num_threads(int num_threads);

namespace dapple::kernels {

namespace {

std::atomic<int> compute_threads{1};

}  // namespace

void SetComputeThreads(int n) {
  compute_threads.store(std::max(n, 1), std::memory_order_relaxed);
  openblas_set_num_threads(std::max(n, 1));
}

int ComputeThreads() { return compute_threads.load(std::memory_order_relaxed); }

}  // namespace dapple::kernels
