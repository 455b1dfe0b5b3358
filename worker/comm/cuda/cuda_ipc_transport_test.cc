// CudaIpcTransport between two real processes on cuda:0: this test is rank 0 and starts rank 1
// with fork + exec of comm_cuda_test_peer (a process forked after CUDA was initialised cannot use
// CUDA, and other tests of this binary initialise it). Control messages go over UcxTransport; the
// two exchange UCX addresses over a socketpair. Every wait is bounded and the peer is killed and
// reaped on every path. Skipped without a GPU.
#include "worker/comm/cuda/cuda_ipc_transport.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/testing/assert_ok.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/comm/cuda/comm_cuda_testing.h"

namespace dapple::worker::cuda_testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr absl::Duration kCallTimeout = absl::Seconds(20);
constexpr absl::Duration kPeerDeadline = absl::Seconds(60);

std::string PeerPath() {
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return "comm_cuda_test_peer";
  std::string path(self, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/') + 1) + "comm_cuda_test_peer";
}

// Rank 1 in its own process.
class Peer {
 public:
  Peer() = default;
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;
  ~Peer() {
    Kill();
    Reap(absl::Now() + absl::Seconds(5));
    if (fd_ >= 0) close(fd_);
  }

  void Start(const std::string& scenario) {
    int fds[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    ASSERT_EQ(fcntl(fds[0], F_SETFD, FD_CLOEXEC), 0);  // only the peer's end survives exec
    // Everything exec needs is built before fork: the child may only make async-signal-safe
    // calls (this process has threads).
    const std::string path = PeerPath(), fd_arg = std::to_string(fds[1]);
    char* const argv[] = {const_cast<char*>(path.c_str()), const_cast<char*>(scenario.c_str()),
                          const_cast<char*>(fd_arg.c_str()), nullptr};
    const pid_t parent = getpid();
    pid_ = fork();
    ASSERT_GE(pid_, 0);
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(13);
      execv(path.c_str(), argv);
      _exit(127);
    }
    close(fds[1]);
    fd_ = fds[0];
  }

  int fd() const { return fd_; }
  void TellDone() {
    const char c = 'd';
    WriteAll(fd_, &c, 1);
  }
  void Kill() {
    if (pid_ > 0 && !reaped_) kill(pid_, SIGKILL);
  }
  // Exit code, or -1 when the peer did not exit normally before the deadline.
  int Wait(absl::Time deadline = absl::Now() + kPeerDeadline) {
    if (!Reap(deadline)) return -1;
    return WIFEXITED(status_) ? WEXITSTATUS(status_) : -1;
  }

 private:
  bool Reap(absl::Time deadline) {
    if (pid_ <= 0 || reaped_) return reaped_;
    for (;;) {
      const pid_t r = waitpid(pid_, &status_, WNOHANG);
      if (r == pid_ || (r < 0 && errno != EINTR)) {
        reaped_ = true;
        return r == pid_;
      }
      if (absl::Now() >= deadline) return false;
      absl::SleepFor(absl::Milliseconds(2));
    }
  }

  pid_t pid_ = -1;
  int fd_ = -1;
  int status_ = 0;
  bool reaped_ = false;
};

struct Rank0 {
  std::unique_ptr<UcxTransport> ucx;
  std::unique_ptr<CudaDevice> device;
  std::unique_ptr<CudaIpcTransport> ipc;
};

absl::StatusOr<Rank0> ConnectRank0(Peer& peer) {
  Transport::Options options;
  options.timeout = kCallTimeout;
  Rank0 r;
  auto ucx = ConnectUcx(0, 1, peer.fd(), kPeerLabel, options);
  if (!ucx.ok()) return ucx.status();
  r.ucx = std::move(*ucx);
  auto device = CudaDevice::Open(0);
  if (!device.ok()) return device.status();
  r.device = std::move(*device);
  r.ipc = std::make_unique<CudaIpcTransport>(r.ucx.get(), r.device.get());
  return r;
}

class CudaIpcTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string reason;
    if (!GpuUsable(&reason)) GTEST_SKIP() << reason;
  }
};

TEST_F(CudaIpcTransportTest, ExchangesMessagesOfManySizesBothWaysAndReusesSlots) {
  Peer peer;
  ASSERT_NO_FATAL_FAILURE(peer.Start("exchange"));
  absl::StatusOr<Rank0> r = ConnectRank0(peer);
  ASSERT_OK(r.status());
  // Both ranks run the same three steps: send everything, receive in reverse tag order,
  // WaitSends, check payloads and slot counts.
  const absl::Status exchanged = RunIpcExchange(0, *r->ipc, *r->device);
  EXPECT_TRUE(exchanged.ok()) << exchanged;
  // Slots for rank 1: 64 KiB (1 B), 64 KiB (4099 B), 1 MiB, 3 MiB + 64 KiB, 5 MiB.
  EXPECT_EQ(r->ipc->outbox_bytes(1), (size_t{2} << 16) + (size_t{9} << 20) + (size_t{64} << 10));
  // Unmap the peer's slots while it still lives; then let it exit.
  r->ipc.reset();
  peer.TellDone();
  EXPECT_EQ(peer.Wait(), 0) << "the peer process failed (its reason is on stderr)";
}

TEST_F(CudaIpcTransportTest, SizeMismatchIsInternalNamingBothSizes) {
  Peer peer;
  ASSERT_NO_FATAL_FAILURE(peer.Start("die"));  // sends 64 KiB with tag 7
  absl::StatusOr<Rank0> r = ConnectRank0(peer);
  ASSERT_OK(r.status());
  absl::StatusOr<DeviceMemory> dst = DeviceMemory::Zeros(1000);
  ASSERT_OK(dst.status());
  const absl::Status s = r->ipc->Recv(1, 7, dst->data(), dst->bytes());
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_THAT(s.message(), AllOf(HasSubstr("tag 7"), HasSubstr("received 65536 bytes"),
                                 HasSubstr("expected 1000"), HasSubstr("peer rank 1")));
  // Sticky.
  EXPECT_EQ(r->ipc->Send(1, 8, dst->data(), dst->bytes()), s);
  EXPECT_EQ(r->ipc->WaitSends(), s);
}

TEST_F(CudaIpcTransportTest, AckKindTagIsRejected) {
  Peer peer;
  ASSERT_NO_FATAL_FAILURE(peer.Start("die"));
  absl::StatusOr<Rank0> r = ConnectRank0(peer);
  ASSERT_OK(r.status());
  absl::StatusOr<DeviceMemory> src = DeviceMemory::From(Pattern(16, 1));
  ASSERT_OK(src.status());
  const absl::Status s =
      r->ipc->Send(1, CudaIpcTransport::kAckKind << 44, src->data(), src->bytes());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("kind 15"));
}

// Last in this file: the killed peer leaves a mapping of its memory in this process.
TEST_F(CudaIpcTransportTest, PeerKilledMidExchangeIsUnavailableNamingIt) {
  Peer peer;
  ASSERT_NO_FATAL_FAILURE(peer.Start("die"));
  absl::StatusOr<Rank0> r = ConnectRank0(peer);
  ASSERT_OK(r.status());
  absl::StatusOr<DeviceMemory> first = DeviceMemory::Zeros(64 << 10);
  ASSERT_OK(first.status());
  ASSERT_OK(r->ipc->Recv(1, 7, first->data(), first->bytes()));
  absl::StatusOr<std::vector<uint8_t>> got = first->Read(*r->device);
  ASSERT_OK(got.status());
  EXPECT_EQ(FirstDifference(*got, Pattern(64 << 10, 77)), "");

  peer.Kill();
  const absl::Time start = absl::Now();
  absl::StatusOr<DeviceMemory> second = DeviceMemory::Zeros(64 << 10);
  ASSERT_OK(second.status());
  const absl::Status s = r->ipc->Recv(1, 8, second->data(), second->bytes());
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), AllOf(HasSubstr("peer rank 1"), HasSubstr(kPeerLabel)));
  // UCX on tcp notices a killed process within milliseconds; the call timeout is 20 s.
  EXPECT_LT(took, absl::Seconds(10));
  EXPECT_EQ(r->ipc->WaitSends(), s);  // sticky
}

}  // namespace
}  // namespace dapple::worker::cuda_testing
