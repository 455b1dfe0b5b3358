#include "worker/device/caching_allocator.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "absl/strings/str_format.h"
#include "worker/device/cuda_error.h"

namespace dapple::worker {
namespace {

constexpr size_t kSmallRound = 512;
constexpr size_t kSmallLimit = size_t{1} << 20;  // 1 MiB
constexpr size_t kLargeRound = size_t{2} << 20;  // 2 MiB

// cudaMalloc and cudaFree act on the calling thread's current device; the allocator may be used
// from any thread, so it selects its device around each driver call and restores the caller's.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) {
      (void)cudaGetLastError();
      previous_ = -1;
    }
    if (previous_ != device) {
      if (cudaSetDevice(device) != cudaSuccess) (void)cudaGetLastError();
    }
    device_ = device;
  }
  ~DeviceGuard() {
    if (previous_ >= 0 && previous_ != device_) {
      if (cudaSetDevice(previous_) != cudaSuccess) (void)cudaGetLastError();
    }
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  int device_ = -1;
};

}  // namespace

size_t CachingAllocator::RoundSize(size_t bytes) {
  if (bytes == 0) return kSmallRound;
  // Exactly 1 MiB is a multiple of 512 and stays 1 MiB.
  const size_t unit = bytes <= kSmallLimit ? kSmallRound : kLargeRound;
  if (bytes > std::numeric_limits<size_t>::max() - unit) return std::numeric_limits<size_t>::max();
  return (bytes + unit - 1) / unit * unit;
}

CachingAllocator::~CachingAllocator() {
  absl::MutexLock lock(&mu_);
  DeviceGuard guard(device_);
  // Errors are ignored: at process exit the runtime may already be unloading
  // (cudaErrorCudartUnloading), and there is nobody left to tell.
  for (auto& [size, ptr] : free_) {
    if (cudaFree(ptr) != cudaSuccess) (void)cudaGetLastError();
  }
  for (auto& [ptr, size] : used_) {
    if (cudaFree(ptr) != cudaSuccess) (void)cudaGetLastError();
  }
}

absl::StatusOr<void*> CachingAllocator::Allocate(size_t bytes) {
  if (bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("cuda:%d: allocation of 0 bytes (the allocator needs bytes > 0)", device_));
  }
  const size_t size = RoundSize(bytes);
  absl::MutexLock lock(&mu_);
  // Best fit: the smallest cached block that is large enough, unless it would waste more than
  // half of itself (then a fresh block is cheaper than pinning a big one for a small tensor).
  auto it = free_.lower_bound(size);
  if (it != free_.end() && it->first / 2 <= size) {
    void* ptr = it->second;
    const size_t block = it->first;
    free_.erase(it);
    used_.emplace(ptr, block);
    stats_.bytes_cached -= static_cast<int64_t>(block);
    stats_.bytes_in_use += static_cast<int64_t>(block);
    stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
    return ptr;
  }

  DeviceGuard guard(device_);
  void* ptr = nullptr;
  cudaError_t err = cudaMalloc(&ptr, size);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    // The cache may hold enough memory in blocks of the wrong sizes: give it back and retry once.
    if (absl::Status s = ReleaseCachedLocked(); !s.ok()) return s;
    ptr = nullptr;
    err = cudaMalloc(&ptr, size);
  }
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return absl::ResourceExhaustedError(
        absl::StrFormat("cuda:%d: out of memory allocating %s (in use %s, cached %s)", device_,
                        FormatBytes(size), FormatBytes(static_cast<uint64_t>(stats_.bytes_in_use)),
                        FormatBytes(static_cast<uint64_t>(stats_.bytes_cached))));
  }
  if (err != cudaSuccess) {
    return CudaError(device_, err, absl::StrFormat("cudaMalloc(%d bytes)", size));
  }
  ++stats_.device_allocations;
  used_.emplace(ptr, size);
  stats_.bytes_in_use += static_cast<int64_t>(size);
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  return ptr;
}

void CachingAllocator::Free(void* ptr) {
  if (ptr == nullptr) return;
  absl::MutexLock lock(&mu_);
  auto it = used_.find(ptr);
  if (it == used_.end()) {
    std::fprintf(stderr,
                 "CachingAllocator(cuda:%d): Free(%p) of a pointer it did not allocate or that "
                 "was freed already\n",
                 device_, ptr);
    std::abort();
  }
  const size_t block = it->second;
  used_.erase(it);
  free_.emplace(block, ptr);
  stats_.bytes_in_use -= static_cast<int64_t>(block);
  stats_.bytes_cached += static_cast<int64_t>(block);
}

void CachingAllocator::EmptyCache() {
  absl::MutexLock lock(&mu_);
  DeviceGuard guard(device_);
  (void)ReleaseCachedLocked();
}

absl::Status CachingAllocator::ReleaseCachedLocked() {
  absl::Status first;
  for (auto& [size, ptr] : free_) {
    // cudaFree waits for the device, so blocks freed by the caller's stream order are idle.
    const cudaError_t err = cudaFree(ptr);
    if (err != cudaSuccess && first.ok()) first = CudaError(device_, err, "cudaFree");
    stats_.bytes_cached -= static_cast<int64_t>(size);
  }
  free_.clear();
  return first;
}

AllocatorStats CachingAllocator::Stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void CachingAllocator::ResetPeak() {
  absl::MutexLock lock(&mu_);
  stats_.peak_bytes_in_use = stats_.bytes_in_use;
}

}  // namespace dapple::worker
