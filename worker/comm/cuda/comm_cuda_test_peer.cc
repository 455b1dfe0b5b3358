// The second process of the CUDA IPC tests (rank 1), started by cuda_ipc_transport_test.cc with
// fork + exec so that it initialises CUDA itself. Usage: comm_cuda_test_peer SCENARIO FD, where
// FD is its end of a socketpair with the test (rank 0).
//   exchange: runs cuda_testing::RunIpcExchange, then waits for the test's "done" byte.
//   die:      sends one 64 KiB message (tag 7, Pattern seed 77), waits for its ack, then blocks
//             until the test kills it.
// Exit code: 0 success, 2 usage, 3 setup failed, 4 scenario failed (reason on stderr).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "worker/comm/cuda/comm_cuda_testing.h"
#include "worker/comm/cuda/cuda_ipc_transport.h"
#include "worker/device/cuda_device.h"

namespace dapple::worker::cuda_testing {
namespace {

int Fail(int code, const absl::Status& s) {
  std::fprintf(stderr, "comm_cuda_test_peer: %s\n", s.ToString().c_str());
  return code;
}

int Run(const std::string& scenario, int fd) {
  Transport::Options options;
  options.timeout = absl::Seconds(20);
  absl::StatusOr<std::unique_ptr<UcxTransport>> ucx = ConnectUcx(1, 0, fd, kTestLabel, options);
  if (!ucx.ok()) return Fail(3, ucx.status());
  absl::StatusOr<std::unique_ptr<CudaDevice>> device = CudaDevice::Open(0);
  if (!device.ok()) return Fail(3, device.status());
  CudaIpcTransport ipc(ucx->get(), device->get());
  char done = 0;
  if (scenario == "exchange") {
    if (absl::Status s = RunIpcExchange(1, ipc, **device); !s.ok()) return Fail(4, s);
    // Exiting before the test has its acks would look like a failure to it.
    return ReadAll(fd, &done, 1, absl::Now() + absl::Seconds(30)) ? 0 : 4;
  }
  if (scenario == "die") {
    absl::StatusOr<DeviceMemory> m = DeviceMemory::From(Pattern(64 << 10, 77));
    if (!m.ok()) return Fail(3, m.status());
    if (absl::Status s = ipc.Send(0, 7, m->data(), m->bytes()); !s.ok()) return Fail(4, s);
    if (absl::Status s = ipc.WaitSends(); !s.ok()) return Fail(4, s);
    ReadAll(fd, &done, 1, absl::Now() + absl::Seconds(30));  // the test kills us meanwhile
    return 0;
  }
  std::fprintf(stderr, "comm_cuda_test_peer: unknown scenario %s\n", scenario.c_str());
  return 2;
}

}  // namespace
}  // namespace dapple::worker::cuda_testing

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: comm_cuda_test_peer exchange|die FD\n");
    return 2;
  }
  return dapple::worker::cuda_testing::Run(argv[1], std::atoi(argv[2]));
}
