// Test helpers for worker/comm/cuda: GPU detection, device buffers, an out-of-band socket channel
// and UCX connection over it, and the CUDA IPC exchange both processes of a test run. Test-only.
// Thread safety: none needed (each test or peer process uses its own objects).
#ifndef DAPPLE_WORKER_COMM_CUDA_COMM_CUDA_TESTING_H_
#define DAPPLE_WORKER_COMM_CUDA_COMM_CUDA_TESTING_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/testing/fd_channel.h"
#include "worker/comm/cuda/cuda_ipc_transport.h"
#include "worker/comm/ucx_transport.h"
#include "worker/device/cuda_device.h"

namespace dapple::worker::cuda_testing {

// True when cuda:0 can be used; otherwise `reason` says why (for GTEST_SKIP). Calls the CUDA
// runtime in this process.
bool GpuUsable(std::string* reason);

// Deterministic bytes for a (seed), so each side can check the other's payload.
std::vector<uint8_t> Pattern(size_t n, uint32_t seed);
// "" when equal, else the first difference: "size 10 vs 12" or "byte 7: got 0x1f, expected 0x20".
std::string FirstDifference(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want);

// cudaMalloc'd memory on the current device (not the caching allocator, so the tests do not
// depend on it). Move-only.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  DeviceMemory(DeviceMemory&& o) noexcept;
  DeviceMemory& operator=(DeviceMemory&& o) noexcept;
  ~DeviceMemory();
  // Copies `bytes` to the device (synchronously). An empty vector gives a null pointer.
  static absl::StatusOr<DeviceMemory> From(const std::vector<uint8_t>& bytes);
  static absl::StatusOr<DeviceMemory> Zeros(size_t bytes);
  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  // Waits for `device`'s compute stream, then copies the contents back.
  absl::StatusOr<std::vector<uint8_t>> Read(CudaDevice& device) const;

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// ---- out-of-band channel: a socketpair between the test and its peer process
// (common/testing/fd_channel.h) ----
using ::dapple::testing::ReadAll;
using ::dapple::testing::RecvString;
using ::dapple::testing::SendString;
using ::dapple::testing::WriteAll;

// Creates this process's UcxTransport (`my_rank`), swaps worker addresses with the other end of
// `fd` (the lower rank sends first) and connects to `peer`, naming it `peer_label` in errors.
absl::StatusOr<std::unique_ptr<UcxTransport>> ConnectUcx(int my_rank, int peer, int fd,
                                                         const std::string& peer_label,
                                                         Transport::Options options);

// One exchange between ranks 0 and 1 over `transport` (the other rank runs the same call): for
// each step, send messages of steps[step] sizes (distinct tags in the runtime's layout: kind in
// the top 4 of 48 bits, step, index) from device buffers, receive the other rank's set in reverse
// order into device buffers, WaitSends, check every payload, then call `after_step` (may be
// null). Returns the first problem (naming step, tag, byte, got and expected).
absl::Status RunExchange(int my_rank, Transport& transport, CudaDevice& device,
                         const std::vector<std::vector<size_t>>& steps,
                         const std::function<absl::Status(int step)>& after_step);

// The IPC exchange both processes run (rank 0: the test, rank 1: the peer): three steps of sizes
// {1, 4099, 0, 1 MiB, 3 MiB + 5}, then {1, 4099, 0, 1 MiB, 5 MiB}, then the first again; checks
// the outbox slot count after each (4; 5: the 5 MiB message needs a new slot; 5: all reused).
absl::Status RunIpcExchange(int my_rank, CudaIpcTransport& transport, CudaDevice& device);

// Label each side gives the other in the multi-process tests.
inline constexpr char kTestLabel[] = "ipc test parent";
inline constexpr char kPeerLabel[] = "ipc test peer";

}  // namespace dapple::worker::cuda_testing

#endif  // DAPPLE_WORKER_COMM_CUDA_COMM_CUDA_TESTING_H_
