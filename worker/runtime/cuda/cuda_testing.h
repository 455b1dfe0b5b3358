// Test-only helpers of worker/runtime/cuda's tests (several stages on threads of one process, each
// with its own CudaDevice): a fixture that skips without a GPU, a copy between any two buffers,
// and an in-process transport between CUDA stages on one device. The transport's Send copies the
// device buffer to a host mailbox once the sender's compute stream is idle; Recv waits (at most 60
// s: kDeadlineExceeded) for it and copies it into the receiver's device buffer. Thread safety: the
// mailbox is shared by every stage's thread; one transport per stage.
#ifndef DAPPLE_WORKER_RUNTIME_CUDA_CUDA_TESTING_H_
#define DAPPLE_WORKER_RUNTIME_CUDA_CUDA_TESTING_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "worker/comm/transport.h"
#include "worker/device/cuda_device.h"
#include "worker/device/device.h"

namespace dapple::worker {

// A parameterized fixture whose tests report skipped where no GPU is usable.
template <typename Param>
class GpuParamTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    if (ProbeCuda().count == 0) GTEST_SKIP() << "no GPU: " << ProbeCuda().reason;
  }
};

// cudaMemcpy between any two buffers (host or device: cudaMemcpyDefault), then waits for the
// device: the CopyFn of gpt_parity_testing.h's pipelines between stages.
inline absl::Status AnyCopy(void* dst, const void* src, size_t bytes) {
  if (cudaMemcpy(dst, src, bytes, cudaMemcpyDefault) != cudaSuccess ||
      cudaDeviceSynchronize() != cudaSuccess) {
    return absl::InternalError("cudaMemcpy between stages");
  }
  return absl::OkStatus();
}

class DeviceMailbox {
 public:
  void Put(int src, int dst, uint64_t tag, std::vector<char> bytes) {
    absl::MutexLock l(&mu_);
    box_[{src, dst, tag}] = std::move(bytes);
  }
  absl::StatusOr<std::vector<char>> Take(int src, int dst, uint64_t tag) {
    absl::MutexLock l(&mu_);
    auto key = std::make_tuple(src, dst, tag);
    auto present = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return box_.count(key) > 0; };
    if (!mu_.AwaitWithTimeout(absl::Condition(&present), absl::Seconds(60))) {
      return absl::DeadlineExceededError("no message");
    }
    std::vector<char> v = std::move(box_[key]);
    box_.erase(key);
    return v;
  }

 private:
  absl::Mutex mu_;
  std::map<std::tuple<int, int, uint64_t>, std::vector<char>> box_ ABSL_GUARDED_BY(mu_);
};

class DeviceTestTransport : public Transport {
 public:
  DeviceTestTransport(DeviceMailbox* box, int rank, CudaDevice* dev)
      : box_(box), rank_(rank), dev_(dev) {}
  absl::Status Send(int peer, uint64_t tag, const void* data, size_t bytes) override {
    if (cudaStreamSynchronize(dev_->compute_stream()) != cudaSuccess) {
      return absl::InternalError("sync");
    }
    std::vector<char> host(bytes);
    if (cudaMemcpy(host.data(), data, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) {
      return absl::InternalError("d2h");
    }
    box_->Put(rank_, peer, tag, std::move(host));
    return absl::OkStatus();
  }
  absl::Status Recv(int peer, uint64_t tag, void* data, size_t bytes) override {
    auto v = box_->Take(peer, rank_, tag);
    if (!v.ok()) return v.status();
    if (v->size() != bytes) return absl::InternalError("size mismatch");
    if (cudaMemcpy(data, v->data(), bytes, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaDeviceSynchronize() != cudaSuccess) {
      return absl::InternalError("h2d");
    }
    return absl::OkStatus();
  }
  absl::Status WaitSends() override { return absl::OkStatus(); }

 private:
  DeviceMailbox* box_;
  int rank_;
  CudaDevice* dev_;
};

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_RUNTIME_CUDA_CUDA_TESTING_H_
