// A caching allocator for one CUDA device (the idea of PyTorch's CUDACachingAllocator, much
// smaller): cudaMalloc'd blocks are kept after Free and handed out again for requests that fit,
// so steady-state training never calls cudaMalloc/cudaFree (which synchronise the device).
//
// Sizes are rounded up to 512 bytes below 1 MiB and to 2 MiB above; a request takes the smallest
// cached block that is at least as large and at most twice as large (no splitting). When
// cudaMalloc fails, the cache is released (cudaFree) and the allocation retried once.
// Stream semantics: a freed block may be reused by the next Allocate at once, so blocks are only
// safe to free when all work that used them is ordered before later users (single compute
// stream), as CudaDevice documents.
// Thread safety: all methods are thread-safe (one mutex).
#ifndef DAPPLE_WORKER_DEVICE_CACHING_ALLOCATOR_H_
#define DAPPLE_WORKER_DEVICE_CACHING_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <map>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace dapple::worker {

struct AllocatorStats {
  int64_t bytes_in_use = 0;        // handed out and not freed (rounded sizes: whole blocks, so a
                                   // reused block up to 2x the request counts at its own size)
  int64_t peak_bytes_in_use = 0;   // since construction or ResetPeak
  int64_t bytes_cached = 0;        // free blocks held by the cache
  int64_t device_allocations = 0;  // cudaMalloc calls so far
};

class CachingAllocator {
 public:
  explicit CachingAllocator(int device) : device_(device) {}
  ~CachingAllocator();  // cudaFree of every block, cached or not
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // Returns device memory of at least `bytes` (> 0), 256-byte aligned. kResourceExhausted naming
  // the device, the request and the stats when the device is out of memory; kInvalidArgument for
  // bytes == 0; kInternal / kUnavailable for other CUDA failures. device_allocations counts the
  // successful cudaMalloc calls.
  absl::StatusOr<void*> Allocate(size_t bytes);
  // `ptr` must come from Allocate of this allocator and not be freed yet (else abort: a
  // programming error). nullptr is ignored.
  void Free(void* ptr);
  // cudaFree of every cached (free) block.
  void EmptyCache();
  AllocatorStats Stats() const;
  void ResetPeak();
  // Rounded size of a request (exposed for tests): a multiple of 512 up to and including 1 MiB,
  // of 2 MiB above; 0 rounds to 512.
  static size_t RoundSize(size_t bytes);

 private:
  absl::Status ReleaseCachedLocked();
  const int device_;
  mutable absl::Mutex mu_;
  std::multimap<size_t, void*> free_ ABSL_GUARDED_BY(mu_);  // size -> block
  std::map<void*, size_t> used_ ABSL_GUARDED_BY(mu_);       // block -> size
  AllocatorStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_DEVICE_CACHING_ALLOCATOR_H_
