#include "worker/comm/cuda/comm_cuda_testing.h"

#include <cuda_runtime.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/status.h"
#include "kernels/cuda/cuda_status.h"

namespace dapple::worker::cuda_testing {

bool GpuUsable(std::string* reason) {
  int count = 0;  // left untouched when there is no driver
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count < 1) {
    (void)cudaGetLastError();
    *reason = absl::StrFormat("no usable CUDA device (cudaGetDeviceCount: %s, count %d)",
                              cudaGetErrorName(err), count);
    return false;
  }
  return true;
}

std::vector<uint8_t> Pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  uint32_t x = seed * 2654435761u + 12345u;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    v[i] = static_cast<uint8_t>(x >> 24);
  }
  return v;
}

std::string FirstDifference(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want) {
  if (got.size() != want.size()) {
    return absl::StrFormat("size %d, expected %d", got.size(), want.size());
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      return absl::StrFormat("byte %d of %d: got %#x, expected %#x", i, got.size(), got[i],
                             want[i]);
    }
  }
  return "";
}

// ---- DeviceMemory ----

DeviceMemory::DeviceMemory(DeviceMemory&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

DeviceMemory& DeviceMemory::operator=(DeviceMemory&& o) noexcept {
  if (this != &o) {
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

DeviceMemory::~DeviceMemory() {
  if (ptr_ != nullptr) cudaFree(ptr_);
}

absl::StatusOr<DeviceMemory> DeviceMemory::Zeros(size_t bytes) {
  DeviceMemory m;
  if (bytes == 0) return m;
  DAPPLE_CUDA_RETURN_IF_ERROR(cudaMalloc(&m.ptr_, bytes));
  m.bytes_ = bytes;
  DAPPLE_CUDA_RETURN_IF_ERROR(cudaMemset(m.ptr_, 0, bytes));
  // cudaMemset may still run when it returns, and CudaDevice's streams do not wait for the
  // legacy default stream.
  DAPPLE_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  return m;
}

absl::StatusOr<DeviceMemory> DeviceMemory::From(const std::vector<uint8_t>& bytes) {
  DAPPLE_ASSIGN_OR_RETURN(DeviceMemory m, Zeros(bytes.size()));
  if (!bytes.empty()) {
    DAPPLE_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(m.ptr_, bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
    // A pageable host-to-device cudaMemcpy may return before its DMA has finished.
    DAPPLE_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  }
  return m;
}

absl::StatusOr<std::vector<uint8_t>> DeviceMemory::Read(CudaDevice& device) const {
  DAPPLE_RETURN_IF_ERROR(device.Synchronize());
  std::vector<uint8_t> out(bytes_);
  if (bytes_ > 0) {
    DAPPLE_CUDA_RETURN_IF_ERROR(cudaMemcpy(out.data(), ptr_, bytes_, cudaMemcpyDeviceToHost));
  }
  return out;
}

absl::StatusOr<std::unique_ptr<UcxTransport>> ConnectUcx(int my_rank, int peer, int fd,
                                                         const std::string& peer_label,
                                                         Transport::Options options) {
  DAPPLE_ASSIGN_OR_RETURN(std::unique_ptr<UcxTransport> t, UcxTransport::Create(my_rank, options));
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  std::string peer_address;
  const bool swapped =
      my_rank < peer ? SendString(fd, t->LocalAddress()) && RecvString(fd, &peer_address, deadline)
                     : RecvString(fd, &peer_address, deadline) && SendString(fd, t->LocalAddress());
  if (!swapped) {
    return absl::UnavailableError(
        absl::StrFormat("rank %d: swapping UCX addresses with rank %d failed", my_rank, peer));
  }
  DAPPLE_RETURN_IF_ERROR(t->Connect(peer, peer_address, peer_label));
  return t;
}

// ---- exchanges ----

namespace {

uint64_t Tag(int sender, int step, int i) {
  const uint64_t kind = sender == 0 ? 1 : 2;  // activations up, gradients down
  return (kind << 44) | (static_cast<uint64_t>(step) << 16) | static_cast<uint64_t>(i);
}

uint32_t Seed(int sender, int step, int i) {
  return static_cast<uint32_t>(1000 * sender + 100 * step + i + 1);
}

}  // namespace

absl::Status RunExchange(int my_rank, Transport& transport, CudaDevice& device,
                         const std::vector<std::vector<size_t>>& steps,
                         const std::function<absl::Status(int step)>& after_step) {
  const int peer = 1 - my_rank;
  for (int step = 0; step < static_cast<int>(steps.size()); ++step) {
    const std::vector<size_t>& sizes = steps[step];
    const int n = static_cast<int>(sizes.size());
    std::vector<DeviceMemory> sent;  // kept until WaitSends (transport.h)
    for (int i = 0; i < n; ++i) {
      DAPPLE_ASSIGN_OR_RETURN(DeviceMemory m,
                              DeviceMemory::From(Pattern(sizes[i], Seed(my_rank, step, i))));
      DAPPLE_RETURN_IF_ERROR(transport.Send(peer, Tag(my_rank, step, i), m.data(), sizes[i]));
      sent.push_back(std::move(m));
    }
    std::vector<DeviceMemory> received(n);
    for (int i = n - 1; i >= 0; --i) {
      DAPPLE_ASSIGN_OR_RETURN(received[i], DeviceMemory::Zeros(sizes[i]));
      DAPPLE_RETURN_IF_ERROR(
          transport.Recv(peer, Tag(peer, step, i), received[i].data(), sizes[i]));
    }
    DAPPLE_RETURN_IF_ERROR(transport.WaitSends());
    for (int i = 0; i < n; ++i) {
      DAPPLE_ASSIGN_OR_RETURN(std::vector<uint8_t> got, received[i].Read(device));
      const std::string diff = FirstDifference(got, Pattern(sizes[i], Seed(peer, step, i)));
      if (!diff.empty()) {
        return absl::InternalError(absl::StrFormat("rank %d step %d tag %#x from rank %d: %s",
                                                   my_rank, step, Tag(peer, step, i), peer, diff));
      }
    }
    if (after_step) DAPPLE_RETURN_IF_ERROR(after_step(step));
  }
  return absl::OkStatus();
}

absl::Status RunIpcExchange(int my_rank, CudaIpcTransport& transport, CudaDevice& device) {
  const std::vector<size_t> first = {1, 4099, 0, size_t{1} << 20, (size_t{3} << 20) + 5};
  const std::vector<size_t> larger = {1, 4099, 0, size_t{1} << 20, size_t{5} << 20};
  const int expected_slots[3] = {4, 5, 5};
  const int peer = 1 - my_rank;
  return RunExchange(my_rank, transport, device, {first, larger, first}, [&](int step) {
    if (transport.outbox_slots(peer) == expected_slots[step]) return absl::OkStatus();
    return absl::InternalError(
        absl::StrFormat("rank %d step %d: %d outbox slots for rank %d, expected %d", my_rank, step,
                        transport.outbox_slots(peer), peer, expected_slots[step]));
  });
}

}  // namespace dapple::worker::cuda_testing
