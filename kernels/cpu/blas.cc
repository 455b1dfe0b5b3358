#include "kernels/cpu/blas.h"

#include <algorithm>

// Declared here rather than through cblas.h: Debian's cblas.h alternative may point at the
// reference (netlib) header, which lacks the OpenBLAS extensions; the symbol is in libopenblas.
extern "C" void openblas_set_num_threads(int num_threads);

namespace dapple::kernels {

void SetComputeThreads(int n) { openblas_set_num_threads(std::max(n, 1)); }

}  // namespace dapple::kernels
