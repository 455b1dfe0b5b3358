#include "kernels/cpu/onednn_util.h"

#include <omp.h>

#include "kernels/cpu/blas.h"

namespace dapple::kernels::onednn {

using dnnl::memory;

dnnl::engine& CpuEngine() {
  // Leaked: primitives in other static objects may outlive any destruction order.
  static dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

void UseComputeThreads() { omp_set_num_threads(ComputeThreads()); }

memory::desc Flat(int64_t n) { return {{n}, memory::data_type::f32, memory::format_tag::a}; }

memory::desc Matrix(int64_t rows, int64_t cols) {
  return {{rows, cols}, memory::data_type::f32, memory::format_tag::ab};
}

memory::desc Nchw(int64_t n, int64_t c, int64_t h, int64_t w) {
  return {{n, c, h, w}, memory::data_type::f32, memory::format_tag::nchw};
}

memory Unbound(const memory::desc& d) { return memory(d, CpuEngine(), DNNL_MEMORY_NONE); }

}  // namespace dapple::kernels::onednn
