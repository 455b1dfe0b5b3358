// What the oneDNN wrappers of kernels/cpu share (onednn_ops.cc, onednn_conv.cc): the engine, the
// thread count, primitives whose buffers are bound per call, and the per-shape primitive cache.
// Internal to kernels/cpu.
//
// Thread safety: CpuEngine() is safe from any thread; Bound and the caches belong to one op
// object, used by one thread at a time.
#ifndef DAPPLE_KERNELS_CPU_ONEDNN_UTIL_H_
#define DAPPLE_KERNELS_CPU_ONEDNN_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "oneapi/dnnl/dnnl.hpp"

namespace dapple::kernels::onednn {

// A layer sees one shape per micro-batch size (and perhaps one more for evaluation); a few
// entries cover that without growing without bound when sizes vary.
inline constexpr size_t kMaxShapes = 4;

// The process's CPU engine (never destroyed: primitives in static objects may outlive any
// destruction order).
dnnl::engine& CpuEngine();

// Sets the calling thread's OpenMP thread count to ComputeThreads() (blas.h): call before
// creating or executing a primitive (a primitive keeps the count it was created with, and
// OpenMP's count is per calling thread).
void UseComputeThreads();

// Plain fp32 descriptors: [n] (a), [rows, cols] (ab), [n, c, h, w] (nchw).
dnnl::memory::desc Flat(int64_t n);
dnnl::memory::desc Matrix(int64_t rows, int64_t cols);
dnnl::memory::desc Nchw(int64_t n, int64_t c, int64_t h, int64_t w);

// A memory object whose buffer is set per call: no allocation by oneDNN.
dnnl::memory Unbound(const dnnl::memory::desc& d);

// A primitive and its arguments, whose buffers are bound before each run.
struct Bound {
  dnnl::primitive primitive;
  std::unordered_map<int, dnnl::memory> args;

  // Binds `p` to argument `arg` (which the primitive must have been built with).
  Bound& Set(int arg, const void* p) {
    args.at(arg).set_data_handle(const_cast<void*>(p));
    return *this;
  }
  // Executes on `stream` with ComputeThreads() threads and waits.
  void Run(dnnl::stream& stream) {
    UseComputeThreads();
    primitive.execute(stream, args);
    stream.wait();
  }
};

// The entry of `entries` for which `matches` holds, made by `make` (evicting the oldest when
// full) when there is none.
template <typename Entry, typename Matches, typename Make>
Entry& Lookup(std::vector<Entry>* entries, Matches matches, Make make) {
  for (Entry& e : *entries) {
    if (matches(e)) return e;
  }
  if (entries->size() == kMaxShapes) entries->erase(entries->begin());
  UseComputeThreads();
  entries->push_back(make());
  return entries->back();
}

}  // namespace dapple::kernels::onednn

#endif  // DAPPLE_KERNELS_CPU_ONEDNN_UTIL_H_
