#include "worker/device/cuda_device.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/device/cuda_error.h"
#include "worker/device/device.h"

namespace dapple::worker {
namespace {

constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

}  // namespace

// ---- DeviceBuffer ----

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : allocator_(std::exchange(o.allocator_, nullptr)),
      ptr_(std::exchange(o.ptr_, nullptr)),
      bytes_(std::exchange(o.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    Reset();
    allocator_ = std::exchange(o.allocator_, nullptr);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() { Reset(); }

void DeviceBuffer::Reset() {
  if (ptr_ != nullptr && allocator_ != nullptr) allocator_->Free(ptr_);
  allocator_ = nullptr;
  ptr_ = nullptr;
  bytes_ = 0;
}

// ---- PinnedBuffer ----

PinnedBuffer::PinnedBuffer(PinnedBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_ != nullptr && cudaFreeHost(ptr_) != cudaSuccess) (void)cudaGetLastError();
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

PinnedBuffer::~PinnedBuffer() {
  if (ptr_ != nullptr && cudaFreeHost(ptr_) != cudaSuccess) (void)cudaGetLastError();
}

absl::StatusOr<PinnedBuffer> PinnedBuffer::Allocate(size_t bytes) {
  PinnedBuffer buf;
  if (bytes == 0) return buf;
  void* ptr = nullptr;
  const cudaError_t err = cudaMallocHost(&ptr, bytes);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    const std::string msg =
        absl::StrFormat("cannot pin %s of host memory: cudaMallocHost: %s: %s", FormatBytes(bytes),
                        cudaGetErrorName(err), cudaGetErrorString(err));
    if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver) {
      return absl::UnavailableError(msg);
    }
    // With a working driver, a failure here means the host could not pin that much (the runtime
    // reports it as cudaErrorMemoryAllocation, or for absurd sizes possibly as another code).
    return absl::ResourceExhaustedError(msg);
  }
  buf.ptr_ = ptr;
  buf.bytes_ = bytes;
  return buf;
}

// ---- CudaEvent ----

CudaEvent::CudaEvent(CudaEvent&& o) noexcept
    : device_(o.device_), event_(std::exchange(o.event_, nullptr)) {}

CudaEvent& CudaEvent::operator=(CudaEvent&& o) noexcept {
  if (this != &o) {
    if (event_ != nullptr && cudaEventDestroy(event_) != cudaSuccess) (void)cudaGetLastError();
    device_ = o.device_;
    event_ = std::exchange(o.event_, nullptr);
  }
  return *this;
}

CudaEvent::~CudaEvent() {
  if (event_ != nullptr && cudaEventDestroy(event_) != cudaSuccess) (void)cudaGetLastError();
}

absl::Status CudaEvent::Synchronize() const {
  if (event_ == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrFormat("cuda:%d: Synchronize on an event that was never recorded", device_));
  }
  return CudaError(device_, cudaEventSynchronize(event_), "cudaEventSynchronize");
}

// ---- CudaDevice ----

absl::StatusOr<std::unique_ptr<CudaDevice>> CudaDevice::Open(int index) {
  const CudaProbe& probe = ProbeCuda();
  if (probe.count == 0) {
    return absl::UnavailableError(absl::StrFormat("cuda:%d: %s", index, probe.reason));
  }
  if (index < 0 || index >= probe.count) {
    return absl::UnavailableError(
        absl::StrFormat("cuda:%d: no such device: this machine has %d CUDA device%s (cuda:0..%d)",
                        index, probe.count, probe.count == 1 ? "" : "s", probe.count - 1));
  }
  // The destructor copes with a partly opened device, so every early return below cleans up.
  std::unique_ptr<CudaDevice> dev(new CudaDevice());
  dev->index_ = index;
  DAPPLE_CUDA_DEVICE_RETURN_IF_ERROR(index, cudaSetDevice(index));
  cudaDeviceProp prop;
  DAPPLE_CUDA_DEVICE_RETURN_IF_ERROR(index, cudaGetDeviceProperties(&prop, index));
  dev->name_ = prop.name;
  // Non-blocking: the legacy default stream (used by stray synchronous calls) must not
  // serialise with the stage's work.
  DAPPLE_CUDA_DEVICE_RETURN_IF_ERROR(
      index, cudaStreamCreateWithFlags(&dev->ctx_.stream, cudaStreamNonBlocking));
  DAPPLE_CUDA_DEVICE_RETURN_IF_ERROR(
      index, cudaStreamCreateWithFlags(&dev->comm_stream_, cudaStreamNonBlocking));
  DAPPLE_CUDA_DEVICE_RETURN_IF_ERROR(
      index, cudaEventCreateWithFlags(&dev->wait_event_, cudaEventDisableTiming));
  DAPPLE_CUBLAS_DEVICE_RETURN_IF_ERROR(index, cublasCreate(&dev->ctx_.cublas));
  DAPPLE_CUBLAS_DEVICE_RETURN_IF_ERROR(index, cublasSetStream(dev->ctx_.cublas, dev->ctx_.stream));
  // Pure fp32 (no TF32): the parity harness compares against the CPU within 1e-5 relative.
  DAPPLE_CUBLAS_DEVICE_RETURN_IF_ERROR(index,
                                       cublasSetMathMode(dev->ctx_.cublas, CUBLAS_DEFAULT_MATH));
  // cuDNN for the image layers (kernels/cuda/cudnn_ops.h), on the same stream; its convolutions
  // share the workspace below (stream-ordered with cuBLAS's use of it).
  DAPPLE_CUDNN_DEVICE_RETURN_IF_ERROR(index, cudnnCreate(&dev->ctx_.cudnn));
  DAPPLE_CUDNN_DEVICE_RETURN_IF_ERROR(index, cudnnSetStream(dev->ctx_.cudnn, dev->ctx_.stream));
  // An explicit workspace keeps cuBLAS from allocating its own per stream behind the allocator's
  // back (and makes the footprint known up front).
  DAPPLE_CUDA_DEVICE_RETURN_IF_ERROR(index, cudaMalloc(&dev->workspace_, kCublasWorkspaceBytes));
  DAPPLE_CUBLAS_DEVICE_RETURN_IF_ERROR(
      index, cublasSetWorkspace(dev->ctx_.cublas, dev->workspace_, kCublasWorkspaceBytes));
  dev->ctx_.workspace = dev->workspace_;
  dev->ctx_.workspace_bytes = kCublasWorkspaceBytes;
  dev->allocator_ = std::make_unique<CachingAllocator>(index);
  return dev;
}

CudaDevice::~CudaDevice() {
  // Nothing here can report an error; each failure is cleared so it does not leak into the next
  // user of this thread's CUDA state.
  auto check = [](cudaError_t err) {
    if (err != cudaSuccess) (void)cudaGetLastError();
  };
  check(cudaSetDevice(index_));
  if (ctx_.stream != nullptr) check(cudaStreamSynchronize(ctx_.stream));
  if (comm_stream_ != nullptr) check(cudaStreamSynchronize(comm_stream_));
  if (ctx_.cublas != nullptr) (void)cublasDestroy(ctx_.cublas);
  if (ctx_.cudnn != nullptr) (void)cudnnDestroy(ctx_.cudnn);
  allocator_.reset();
  if (workspace_ != nullptr) check(cudaFree(workspace_));
  if (wait_event_ != nullptr) check(cudaEventDestroy(wait_event_));
  if (comm_stream_ != nullptr) check(cudaStreamDestroy(comm_stream_));
  if (ctx_.stream != nullptr) check(cudaStreamDestroy(ctx_.stream));
}

absl::StatusOr<DeviceBuffer> CudaDevice::Allocate(size_t bytes) {
  if (bytes == 0) return DeviceBuffer();
  absl::StatusOr<void*> ptr = allocator_->Allocate(bytes);
  if (!ptr.ok()) return ptr.status();
  return DeviceBuffer(allocator_.get(), *ptr, bytes);
}

absl::Status CudaDevice::Synchronize() {
  return CudaError(index_, cudaStreamSynchronize(ctx_.stream),
                   "cudaStreamSynchronize(compute stream)");
}

absl::Status CudaDevice::StreamWait(cudaStream_t waiter, cudaStream_t producer) {
  if (waiter == producer) return absl::OkStatus();  // a stream is already ordered with itself
  DAPPLE_CUDA_DEVICE_RETURN_IF_ERROR(index_, cudaEventRecord(wait_event_, producer));
  // The wait binds to the record above at enqueue time, so re-recording later is safe.
  DAPPLE_CUDA_DEVICE_RETURN_IF_ERROR(index_, cudaStreamWaitEvent(waiter, wait_event_, 0));
  return absl::OkStatus();
}

absl::StatusOr<CudaEvent> CudaDevice::RecordEvent(cudaStream_t stream) {
  cudaEvent_t ev = nullptr;
  DAPPLE_CUDA_DEVICE_RETURN_IF_ERROR(index_, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  CudaEvent event(index_, ev);  // owns ev from here on, also on the error path
  DAPPLE_CUDA_DEVICE_RETURN_IF_ERROR(index_, cudaEventRecord(ev, stream));
  return event;
}

absl::Status CudaDevice::WaitEvent(cudaStream_t waiter, const CudaEvent& event) {
  if (event.empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("cuda:%d: WaitEvent on an event that was never recorded", index_));
  }
  DAPPLE_CUDA_DEVICE_RETURN_IF_ERROR(index_, cudaStreamWaitEvent(waiter, event.event(), 0));
  return absl::OkStatus();
}

}  // namespace dapple::worker
