// One CUDA device opened by a worker: its compute stream with a cuBLAS handle bound to it, a
// communication stream, a caching allocator and pinned host memory. Only in CUDA builds.
//
// Streams: all kernels of a stage run on the compute stream (kernels/cuda/context.h), so work is
// ordered without events; the communication stream is for NCCL and copies that should overlap
// compute (synchronise with events: RecordEvent / WaitEvent).
// Memory: device memory comes from the caching allocator (caching_allocator.h): freed blocks go
// back to a per-device cache and are reused for later allocations of the compute stream without
// cudaFree, so a training step allocates nothing from the driver after the first.
// Thread safety: one thread uses a CudaDevice (the stage's interpreter thread); Open may be
// called from any thread.
#ifndef DAPPLE_WORKER_DEVICE_CUDA_DEVICE_H_
#define DAPPLE_WORKER_DEVICE_CUDA_DEVICE_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/cuda/context.h"
#include "worker/device/caching_allocator.h"

namespace dapple::worker {

class CudaDevice;

// Device memory from a CudaDevice's allocator; returned to the cache on destruction (and
// reusable by later compute-stream work at once: do not free a buffer that another stream still
// uses without synchronising first). Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  void* data() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }  // as requested (the block may be larger)
  bool empty() const { return ptr_ == nullptr; }
  void Reset();  // gives the memory back now

  // A DeviceBuffer must not outlive the CudaDevice that allocated it.

 private:
  friend class CudaDevice;
  DeviceBuffer(CachingAllocator* allocator, void* ptr, size_t bytes)
      : allocator_(allocator), ptr_(ptr), bytes_(bytes) {}
  CachingAllocator* allocator_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Page-locked host memory (cudaMallocHost), for fast device <-> host copies. Move-only.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(PinnedBuffer&& o) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer();
  // kResourceExhausted when the host cannot pin `bytes`; kUnavailable without a usable driver.
  // bytes == 0 gives an empty buffer (data() == nullptr).
  static absl::StatusOr<PinnedBuffer> Allocate(size_t bytes);
  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// A CUDA event for ordering work across streams (CudaDevice::RecordEvent / WaitEvent) or for a
// host wait on a point in a stream. Created without timing. Move-only; destroying it is safe
// while work that records or waits on it is still pending (the runtime releases it later).
class CudaEvent {
 public:
  CudaEvent() = default;
  CudaEvent(CudaEvent&& o) noexcept;
  CudaEvent& operator=(CudaEvent&& o) noexcept;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  ~CudaEvent();

  cudaEvent_t event() const { return event_; }
  bool empty() const { return event_ == nullptr; }
  // Blocks the calling thread until the work recorded before the event is done; kInternal
  // (naming the device) with the first asynchronous error of that work.
  absl::Status Synchronize() const;

 private:
  friend class CudaDevice;
  CudaEvent(int device, cudaEvent_t event) : device_(device), event_(event) {}
  int device_ = 0;
  cudaEvent_t event_ = nullptr;
};

class CudaDevice {
 public:
  // Selects device `index`, creates both streams (non-blocking), the cuBLAS handle (pure fp32
  // math: CUBLAS_DEFAULT_MATH, no TF32) and a 32 MiB cuBLAS workspace.
  // kUnavailable when there is no such device or no usable driver (message from device.h's
  // probe); kInternal for other CUDA failures.
  static absl::StatusOr<std::unique_ptr<CudaDevice>> Open(int index);
  ~CudaDevice();  // synchronises both streams, then frees everything

  int index() const { return index_; }
  const std::string& name() const { return name_; }  // "NVIDIA H200"
  // Compute stream + cuBLAS handle for kernels/cuda.
  const kernels::cuda::KernelContext& ctx() const { return ctx_; }
  cudaStream_t compute_stream() const { return ctx_.stream; }
  cudaStream_t comm_stream() const { return comm_stream_; }

  // kResourceExhausted ("cuda:0: out of memory allocating 1.0 GiB (in use 3.2 GiB, cached
  // 0.5 GiB)") after the cache was emptied and cudaMalloc still failed. bytes == 0 gives an
  // empty buffer.
  absl::StatusOr<DeviceBuffer> Allocate(size_t bytes);
  CachingAllocator& allocator() { return *allocator_; }

  // Blocks until the compute stream is idle; returns the first asynchronous error (kInternal).
  absl::Status Synchronize();
  // Makes `waiter` wait for all work enqueued so far on `producer` (an event, no host block).
  // kInternal naming the device when the event cannot be recorded or waited on.
  absl::Status StreamWait(cudaStream_t waiter, cudaStream_t producer);

  // A new event recorded on `stream` now (marks all work enqueued on it so far).
  absl::StatusOr<CudaEvent> RecordEvent(cudaStream_t stream);
  // Makes `waiter` wait (on the device, no host block) for the work `event` marks. An event that
  // was never recorded (empty) is an error: kInvalidArgument.
  absl::Status WaitEvent(cudaStream_t waiter, const CudaEvent& event);

 private:
  CudaDevice() = default;
  int index_ = 0;
  std::string name_;
  kernels::cuda::KernelContext ctx_;
  cudaStream_t comm_stream_ = nullptr;
  std::unique_ptr<CachingAllocator> allocator_;
  void* workspace_ = nullptr;
  cudaEvent_t wait_event_ = nullptr;  // reused by StreamWait (a wait binds the latest record)
};

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_DEVICE_CUDA_DEVICE_H_
