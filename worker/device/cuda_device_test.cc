#include "worker/device/cuda_device.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>
#include <utility>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/device/device.h"

namespace dapple::worker {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr size_t kPiB = size_t{1} << 50;

class CudaDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (ProbeCuda().count == 0) GTEST_SKIP() << "no usable GPU: " << ProbeCuda().reason;
    absl::StatusOr<std::unique_ptr<CudaDevice>> dev = CudaDevice::Open(0);
    ASSERT_TRUE(dev.ok()) << dev.status();
    dev_ = *std::move(dev);
  }
  std::unique_ptr<CudaDevice> dev_;
};

// Holds a stream at a host function until Open() (or a 5 s deadline, so a failing test cannot
// hang): lets a test see that work queued behind it on another stream really waits.
class Gate {
 public:
  static void CUDART_CB Hold(void* arg) {
    auto* gate = static_cast<Gate*>(arg);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!gate->open_.load() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  void Open() { open_.store(true); }

 private:
  std::atomic<bool> open_{false};
};

// Without a usable GPU (every build machine): a clean error, never a crash.
TEST(CudaDeviceNoGpuTest, OpenAndPinnedAreUnavailable) {
  if (ProbeCuda().count > 0) GTEST_SKIP() << "this machine has a GPU";
  absl::StatusOr<std::unique_ptr<CudaDevice>> dev = CudaDevice::Open(0);
  ASSERT_FALSE(dev.ok());
  EXPECT_EQ(dev.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(dev.status().message(), "cuda:0: " + ProbeCuda().reason);

  absl::StatusOr<PinnedBuffer> pinned = PinnedBuffer::Allocate(4096);
  ASSERT_FALSE(pinned.ok());
  EXPECT_EQ(pinned.status().code(), absl::StatusCode::kUnavailable) << pinned.status();
  EXPECT_THAT(std::string(pinned.status().message()), StartsWith("cannot pin 4.0 KiB"));
  // (cudaGetLastError keeps returning the initialisation error without a driver: not checked.)
}

TEST_F(CudaDeviceTest, OpenSetsUpStreamsCublasAndWorkspace) {
  EXPECT_EQ(dev_->index(), 0);
  cudaDeviceProp prop;
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  EXPECT_EQ(dev_->name(), prop.name);
  EXPECT_THAT(ProbeCuda().names[0], StartsWith(dev_->name() + " ("));

  ASSERT_NE(dev_->compute_stream(), nullptr);
  ASSERT_NE(dev_->comm_stream(), nullptr);
  EXPECT_NE(dev_->compute_stream(), dev_->comm_stream());
  for (cudaStream_t s : {dev_->compute_stream(), dev_->comm_stream()}) {
    unsigned int flags = 0;
    ASSERT_EQ(cudaStreamGetFlags(s, &flags), cudaSuccess);
    EXPECT_EQ(flags, static_cast<unsigned int>(cudaStreamNonBlocking));
  }

  const kernels::cuda::KernelContext& ctx = dev_->ctx();
  EXPECT_EQ(ctx.stream, dev_->compute_stream());
  ASSERT_NE(ctx.cublas, nullptr);
  cudaStream_t bound = nullptr;
  ASSERT_EQ(cublasGetStream(ctx.cublas, &bound), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(bound, dev_->compute_stream());
  cublasMath_t mode = CUBLAS_TF32_TENSOR_OP_MATH;
  ASSERT_EQ(cublasGetMathMode(ctx.cublas, &mode), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(mode, CUBLAS_DEFAULT_MATH);
  EXPECT_NE(ctx.workspace, nullptr);
  EXPECT_EQ(ctx.workspace_bytes, size_t{32} << 20);
  EXPECT_TRUE(dev_->Synchronize().ok());
}

TEST_F(CudaDeviceTest, OpenOfMissingDeviceIsUnavailable) {
  const int n = ProbeCuda().count;
  absl::StatusOr<std::unique_ptr<CudaDevice>> dev = CudaDevice::Open(n);
  ASSERT_FALSE(dev.ok());
  EXPECT_EQ(dev.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(dev.status().message()),
              StartsWith("cuda:" + std::to_string(n) + ": no such device"));
  dev = CudaDevice::Open(-1);
  EXPECT_EQ(dev.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(dev.status().message()), StartsWith("cuda:-1: "));
}

TEST_F(CudaDeviceTest, AllocateCopyRoundTrip) {
  constexpr int kN = 1000;
  absl::StatusOr<DeviceBuffer> buf = dev_->Allocate(kN * sizeof(float));
  ASSERT_TRUE(buf.ok()) << buf.status();
  EXPECT_EQ(buf->bytes(), kN * sizeof(float));
  absl::StatusOr<PinnedBuffer> src = PinnedBuffer::Allocate(kN * sizeof(float));
  absl::StatusOr<PinnedBuffer> dst = PinnedBuffer::Allocate(kN * sizeof(float));
  ASSERT_TRUE(src.ok() && dst.ok());
  float* in = static_cast<float*>(src->data());
  float* out = static_cast<float*>(dst->data());
  for (int i = 0; i < kN; ++i) {
    in[i] = 0.5f * static_cast<float>(i) - 7.0f;
    out[i] = -1.0f;
  }
  cudaStream_t s = dev_->compute_stream();
  ASSERT_EQ(cudaMemcpyAsync(buf->as<float>(), in, kN * sizeof(float), cudaMemcpyHostToDevice, s),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(out, buf->data(), kN * sizeof(float), cudaMemcpyDeviceToHost, s),
            cudaSuccess);
  ASSERT_TRUE(dev_->Synchronize().ok());
  for (int i = 0; i < kN; ++i) {
    ASSERT_EQ(out[i], in[i]) << "index " << i << ": got " << out[i] << ", expected " << in[i];
  }
}

TEST_F(CudaDeviceTest, AllocateZeroIsEmpty) {
  absl::StatusOr<DeviceBuffer> buf = dev_->Allocate(0);
  ASSERT_TRUE(buf.ok()) << buf.status();
  EXPECT_TRUE(buf->empty());
  EXPECT_EQ(buf->bytes(), 0u);
  EXPECT_EQ(dev_->allocator().Stats().device_allocations, 0);
}

TEST_F(CudaDeviceTest, FreedBufferIsReusedWithoutCudaMalloc) {
  void* first = nullptr;
  {
    absl::StatusOr<DeviceBuffer> buf = dev_->Allocate(1 << 20);
    ASSERT_TRUE(buf.ok()) << buf.status();
    first = buf->data();
  }
  const AllocatorStats before = dev_->allocator().Stats();
  EXPECT_EQ(before.device_allocations, 1);
  EXPECT_EQ(before.bytes_in_use, 0);
  EXPECT_EQ(before.bytes_cached, 1 << 20);
  absl::StatusOr<DeviceBuffer> again = dev_->Allocate(1 << 20);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->data(), first);
  EXPECT_EQ(dev_->allocator().Stats().device_allocations, 1);
}

TEST_F(CudaDeviceTest, OutOfMemoryIsResourceExhaustedNamingDevice) {
  absl::StatusOr<DeviceBuffer> huge = dev_->Allocate(kPiB);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted) << huge.status();
  EXPECT_THAT(std::string(huge.status().message()),
              StartsWith("cuda:0: out of memory allocating 1.0 PiB (in use "));
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  absl::StatusOr<DeviceBuffer> small = dev_->Allocate(4096);
  EXPECT_TRUE(small.ok()) << small.status();
}

TEST_F(CudaDeviceTest, DeviceBufferMoveSemantics) {
  CachingAllocator& alloc = dev_->allocator();
  absl::StatusOr<DeviceBuffer> a = dev_->Allocate(4096);
  ASSERT_TRUE(a.ok()) << a.status();
  void* p = a->data();

  DeviceBuffer b(std::move(*a));
  EXPECT_TRUE(a->empty());
  EXPECT_EQ(a->bytes(), 0u);
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(b.bytes(), 4096u);
  EXPECT_EQ(alloc.Stats().bytes_in_use, 4096);

  absl::StatusOr<DeviceBuffer> c = dev_->Allocate(8192);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(alloc.Stats().bytes_in_use, 4096 + 8192);
  *c = std::move(b);  // gives c's own 8 KiB back
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(c->data(), p);
  EXPECT_EQ(c->bytes(), 4096u);
  EXPECT_EQ(alloc.Stats().bytes_in_use, 4096);

  c->Reset();
  EXPECT_TRUE(c->empty());
  EXPECT_EQ(alloc.Stats().bytes_in_use, 0);
  c->Reset();  // twice is harmless
  EXPECT_EQ(alloc.Stats().bytes_in_use, 0);
  EXPECT_EQ(alloc.Stats().bytes_cached, 4096 + 8192);
}

TEST_F(CudaDeviceTest, PinnedBuffer) {
  absl::StatusOr<PinnedBuffer> buf = PinnedBuffer::Allocate(4096);
  ASSERT_TRUE(buf.ok()) << buf.status();
  ASSERT_NE(buf->data(), nullptr);
  EXPECT_EQ(buf->bytes(), 4096u);
  std::memset(buf->data(), 0xab, 4096);
  cudaPointerAttributes attr;
  ASSERT_EQ(cudaPointerGetAttributes(&attr, buf->data()), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeHost);  // page-locked, not pageable

  void* p = buf->data();
  PinnedBuffer moved(std::move(*buf));
  EXPECT_EQ(buf->data(), nullptr);
  EXPECT_EQ(buf->bytes(), 0u);
  EXPECT_EQ(moved.data(), p);
  EXPECT_EQ(static_cast<unsigned char*>(moved.data())[4095], 0xab);
  PinnedBuffer assigned;
  assigned = std::move(moved);
  EXPECT_EQ(assigned.data(), p);
  EXPECT_EQ(moved.data(), nullptr);

  absl::StatusOr<PinnedBuffer> empty = PinnedBuffer::Allocate(0);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->data(), nullptr);

  absl::StatusOr<PinnedBuffer> huge = PinnedBuffer::Allocate(kPiB);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted) << huge.status();
  EXPECT_THAT(std::string(huge.status().message()), HasSubstr("cannot pin 1.0 PiB"));
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// Sets src to 0, then: comm stream = [gate, memset(src, 7)]; compute stream = [wait (by
// `order`), copy src -> dst, copy dst -> host]. With the wait, compute stays busy while the gate
// is closed and the host sees 7s; without it, it would copy the 0s.
template <typename Order>
void CheckComputeWaitsForComm(CudaDevice& dev, Order order) {
  constexpr size_t kBytes = 1 << 20;
  absl::StatusOr<DeviceBuffer> src = dev.Allocate(kBytes);
  absl::StatusOr<DeviceBuffer> dst = dev.Allocate(kBytes);
  absl::StatusOr<PinnedBuffer> host = PinnedBuffer::Allocate(kBytes);
  ASSERT_TRUE(src.ok() && dst.ok() && host.ok());
  cudaStream_t compute = dev.compute_stream(), comm = dev.comm_stream();
  ASSERT_EQ(cudaMemsetAsync(src->data(), 0, kBytes, compute), cudaSuccess);
  ASSERT_TRUE(dev.Synchronize().ok());

  Gate gate;
  ASSERT_EQ(cudaLaunchHostFunc(comm, &Gate::Hold, &gate), cudaSuccess);
  EXPECT_EQ(cudaMemsetAsync(src->data(), 7, kBytes, comm), cudaSuccess);
  order();
  EXPECT_EQ(cudaMemcpyAsync(dst->data(), src->data(), kBytes, cudaMemcpyDeviceToDevice, compute),
            cudaSuccess);
  EXPECT_EQ(cudaMemcpyAsync(host->data(), dst->data(), kBytes, cudaMemcpyDeviceToHost, compute),
            cudaSuccess);
  EXPECT_EQ(cudaStreamQuery(compute), cudaErrorNotReady) << "compute did not wait for comm";
  (void)cudaGetLastError();
  gate.Open();  // before any ASSERT: the comm stream must not stay blocked
  // comm first: Hold must be done with `gate` before this function can return.
  ASSERT_EQ(cudaStreamSynchronize(comm), cudaSuccess);
  ASSERT_TRUE(dev.Synchronize().ok());
  const unsigned char* got = static_cast<const unsigned char*>(host->data());
  for (size_t i = 0; i < kBytes; ++i) {
    ASSERT_EQ(got[i], 7) << "index " << i << ": got " << int{got[i]} << ", expected 7";
  }
}

TEST_F(CudaDeviceTest, StreamWaitOrdersComputeAfterComm) {
  CudaDevice& dev = *dev_;
  CheckComputeWaitsForComm(
      dev, [&] { EXPECT_TRUE(dev.StreamWait(dev.compute_stream(), dev.comm_stream()).ok()); });
  EXPECT_TRUE(dev.StreamWait(dev.compute_stream(), dev.compute_stream()).ok());
}

TEST_F(CudaDeviceTest, RecordEventAndWaitEvent) {
  CudaDevice& dev = *dev_;
  CudaEvent event;
  CheckComputeWaitsForComm(dev, [&] {
    absl::StatusOr<CudaEvent> e = dev.RecordEvent(dev.comm_stream());
    ASSERT_TRUE(e.ok()) << e.status();
    event = *std::move(e);
    EXPECT_TRUE(dev.WaitEvent(dev.compute_stream(), event).ok());
  });
  EXPECT_TRUE(event.Synchronize().ok());

  CudaEvent never;
  absl::Status s = dev.WaitEvent(dev.compute_stream(), never);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("cuda:0: WaitEvent on an event that was never"));
}

}  // namespace
}  // namespace dapple::worker
