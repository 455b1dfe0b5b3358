// UcxTransport between real processes: each test forks a child (rank 1) before either side creates
// UCX objects, the two exchange worker addresses over a socketpair, and the parent (rank 0) checks
// the result. Every wait is bounded and the child is killed and reaped on every path.
#include "worker/comm/ucx_transport.h"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <ucs/type/status.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/testing/assert_ok.h"
#include "common/testing/fd_channel.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::worker {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr size_t kLarge = size_t{4} << 20;  // 4 MiB: well above UCX's rendezvous threshold
constexpr absl::Duration kCallTimeout = absl::Seconds(20);
constexpr absl::Duration kChildDeadline = absl::Seconds(30);

// ---- out-of-band channel (socketpair): common/testing/fd_channel.h -----------------------------

using ::dapple::testing::ReadAll;
using ::dapple::testing::RecvString;
using ::dapple::testing::SendString;
using ::dapple::testing::WaitFd;
using ::dapple::testing::WriteAll;

// ---- payloads -----------------------------------------------------------------------------------

std::vector<uint8_t> Pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    v[i] = static_cast<uint8_t>(x >> 24);
  }
  return v;
}

// ---- child process ------------------------------------------------------------------------------

// Runs in the child with its connected transport (rank 1) and its end of the socketpair; returns
// the child's exit code (0 = success).
using ChildBody = std::function<int(UcxTransport&, int)>;

#define CHILD_CHECK(cond)                                                            \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      std::fprintf(stderr, "child: check failed at line %d: %s\n", __LINE__, #cond); \
      return 10;                                                                     \
    }                                                                                \
  } while (0)

#define CHILD_CHECK_OK(expr)                                                                    \
  do {                                                                                          \
    absl::Status child_status_ = (expr);                                                        \
    if (!child_status_.ok()) {                                                                  \
      std::fprintf(stderr, "child: line %d: %s\n", __LINE__, child_status_.ToString().c_str()); \
      return 11;                                                                                \
    }                                                                                           \
  } while (0)

// Blocks the child until the parent says it is done (one byte) or goes away.
int WaitForParent(int fd) {
  char c;
  return ReadAll(fd, &c, 1, absl::Now() + kChildDeadline) ? 0 : 12;
}

class Child {
 public:
  Child() = default;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() {
    Kill();
    Reap(absl::Now() + absl::Seconds(5));
    if (fd_ >= 0) close(fd_);
  }

  // Forks; the child creates its transport only after the fork.
  void Start(ChildBody body) {
    int fds[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    const pid_t parent = getpid();
    pid_ = fork();
    ASSERT_GE(pid_, 0);
    if (pid_ == 0) {
      close(fds[0]);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(13);
      _exit(RunChild(fds[1], body));
    }
    close(fds[1]);
    fd_ = fds[0];
  }

  // Creates the parent's transport (rank 0) and connects both ways.
  std::unique_ptr<UcxTransport> ConnectParent(Transport::Options options = DefaultOptions()) {
    auto t = UcxTransport::Create(0, options);
    EXPECT_TRUE(t.ok()) << t.status();
    if (!t.ok()) return nullptr;
    std::string child_address;
    EXPECT_TRUE(SendString(fd_, (*t)->LocalAddress()));
    EXPECT_TRUE(RecvString(fd_, &child_address, absl::Now() + absl::Seconds(10)));
    const absl::Status connected = (*t)->Connect(1, child_address);
    EXPECT_TRUE(connected.ok()) << connected;
    return connected.ok() ? std::move(*t) : nullptr;
  }

  static Transport::Options DefaultOptions() {
    Transport::Options o;
    o.timeout = kCallTimeout;
    return o;
  }

  void TellDone() {
    const char c = 'd';
    WriteAll(fd_, &c, 1);
  }

  // Exit code of the child, or -1 if it did not exit normally before `deadline`.
  int Wait(absl::Time deadline = absl::Now() + kChildDeadline) {
    if (!Reap(deadline)) return -1;
    return WIFEXITED(status_) ? WEXITSTATUS(status_) : -1;
  }

  void Kill() {
    if (pid_ > 0 && !reaped_) kill(pid_, SIGKILL);
  }

  int fd() const { return fd_; }

 private:
  static int RunChild(int fd, const ChildBody& body) {
    Transport::Options options;
    options.timeout = kCallTimeout;
    auto t = UcxTransport::Create(1, options);
    if (!t.ok()) {
      std::fprintf(stderr, "child: %s\n", t.status().ToString().c_str());
      return 20;
    }
    std::string parent_address;
    if (!RecvString(fd, &parent_address, absl::Now() + absl::Seconds(10))) return 21;
    if (!SendString(fd, (*t)->LocalAddress())) return 22;
    const absl::Status connected = (*t)->Connect(0, parent_address);
    if (!connected.ok()) {
      std::fprintf(stderr, "child: %s\n", connected.ToString().c_str());
      return 23;
    }
    return body(**t, fd);
  }

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

// ---- data exchange ------------------------------------------------------------------------------
// A child that sent something waits for the parent's "done" before it exits: WaitSends only
// completes the sends locally (eager protocol), and a child that exits at once could close its
// endpoint while its data is still on the way.

TEST(UcxTransportTest, ExchangesSmallAndLargeMessagesBothWays) {
  Child child;
  child.Start([](UcxTransport& t, int fd) {
    std::vector<uint8_t> small(16), large(kLarge);
    CHILD_CHECK_OK(t.Recv(0, 1, small.data(), small.size()));
    CHILD_CHECK_OK(t.Recv(0, 2, large.data(), large.size()));
    CHILD_CHECK(small == Pattern(16, 1));
    CHILD_CHECK(large == Pattern(kLarge, 2));
    const std::vector<uint8_t> small_back = Pattern(16, 3), large_back = Pattern(kLarge, 4);
    CHILD_CHECK_OK(t.Send(0, 1, small_back.data(), small_back.size()));
    CHILD_CHECK_OK(t.Send(0, 2, large_back.data(), large_back.size()));
    CHILD_CHECK_OK(t.WaitSends());
    return WaitForParent(fd);
  });
  auto t = child.ConnectParent();
  ASSERT_NE(t, nullptr);
  const std::vector<uint8_t> small = Pattern(16, 1), large = Pattern(kLarge, 2);
  ASSERT_OK(t->Send(1, 1, small.data(), small.size()));
  ASSERT_OK(t->Send(1, 2, large.data(), large.size()));
  std::vector<uint8_t> small_back(16), large_back(kLarge);
  ASSERT_OK(t->Recv(1, 1, small_back.data(), small_back.size()));
  ASSERT_OK(t->Recv(1, 2, large_back.data(), large_back.size()));
  ASSERT_OK(t->WaitSends());
  EXPECT_EQ(small_back, Pattern(16, 3));
  EXPECT_EQ(large_back, Pattern(kLarge, 4));
  child.TellDone();
  EXPECT_EQ(child.Wait(), 0);
}

TEST(UcxTransportTest, SimultaneousLargeSendsDoNotDeadlock) {
  // Both ranks post two 4 MiB sends before either receives: Send must not wait for the receiver,
  // and Recv must progress the outstanding sends.
  auto exchange = [](UcxTransport& t, int peer, uint32_t my_seed, uint32_t peer_seed) -> int {
    const std::vector<uint8_t> a = Pattern(kLarge, my_seed), b = Pattern(kLarge, my_seed + 1);
    CHILD_CHECK_OK(t.Send(peer, 10, a.data(), a.size()));
    CHILD_CHECK_OK(t.Send(peer, 11, b.data(), b.size()));
    std::vector<uint8_t> ra(kLarge), rb(kLarge);
    CHILD_CHECK_OK(t.Recv(peer, 10, ra.data(), ra.size()));
    CHILD_CHECK_OK(t.Recv(peer, 11, rb.data(), rb.size()));
    CHILD_CHECK_OK(t.WaitSends());
    CHILD_CHECK(ra == Pattern(kLarge, peer_seed));
    CHILD_CHECK(rb == Pattern(kLarge, peer_seed + 1));
    return 0;
  };
  Child child;
  child.Start([&](UcxTransport& t, int fd) {
    const int rc = exchange(t, 0, 200, 100);
    return rc != 0 ? rc : WaitForParent(fd);
  });
  auto t = child.ConnectParent();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(exchange(*t, 1, 100, 200), 0);
  child.TellDone();
  EXPECT_EQ(child.Wait(), 0);
}

// WaitSend waits for one message's send alone: a rendezvous send the peer receives only later
// stays out (a program without a flush evaluates with the next step's sends out).
TEST(UcxTransportTest, WaitSendWaitsForThatSendAlone) {
  Child child;
  child.Start([](UcxTransport& t, int fd) {
    std::vector<uint8_t> first(kLarge), second(kLarge);
    CHILD_CHECK_OK(t.Recv(0, 2, second.data(), second.size()));
    CHILD_CHECK(second == Pattern(kLarge, 2));
    // Tag 1 only once the parent's WaitSend of tag 2 returned.
    const int rc = WaitForParent(fd);
    if (rc != 0) return rc;
    CHILD_CHECK_OK(t.Recv(0, 1, first.data(), first.size()));
    CHILD_CHECK(first == Pattern(kLarge, 1));
    return 0;
  });
  auto t = child.ConnectParent();
  ASSERT_NE(t, nullptr);
  EXPECT_TRUE(t->WaitsForOneSend());
  ASSERT_OK(t->WaitSend(1, 7));  // nothing sent with that tag
  const std::vector<uint8_t> first = Pattern(kLarge, 1), second = Pattern(kLarge, 2);
  ASSERT_OK(t->Send(1, 1, first.data(), first.size()));
  ASSERT_OK(t->Send(1, 2, second.data(), second.size()));
  ASSERT_OK(t->WaitSend(1, 2));
  child.TellDone();
  ASSERT_OK(t->WaitSends());
  EXPECT_EQ(child.Wait(), 0);
}

TEST(UcxTransportTest, ReceivesTagsOutOfOrder) {
  Child child;
  child.Start([](UcxTransport& t, int fd) {
    const std::vector<uint8_t> m1 = Pattern(100, 1), m2 = Pattern(kLarge, 2), m3 = Pattern(1000, 3);
    CHILD_CHECK_OK(t.Send(0, 1, m1.data(), m1.size()));
    CHILD_CHECK_OK(t.Send(0, 2, m2.data(), m2.size()));
    CHILD_CHECK_OK(t.Send(0, 3, m3.data(), m3.size()));
    CHILD_CHECK_OK(t.WaitSends());
    return WaitForParent(fd);
  });
  auto t = child.ConnectParent();
  ASSERT_NE(t, nullptr);
  std::vector<uint8_t> m1(100), m2(kLarge), m3(1000);
  ASSERT_OK(t->Recv(1, 3, m3.data(), m3.size()));
  ASSERT_OK(t->Recv(1, 2, m2.data(), m2.size()));
  ASSERT_OK(t->Recv(1, 1, m1.data(), m1.size()));
  EXPECT_EQ(m1, Pattern(100, 1));
  EXPECT_EQ(m2, Pattern(kLarge, 2));
  EXPECT_EQ(m3, Pattern(1000, 3));
  child.TellDone();
  EXPECT_EQ(child.Wait(), 0);
}

TEST(UcxTransportTest, TagsUseOnlyTheLow48Bits) {
  // Bits above 48 belong to the sender's rank: a tag with them set is the same tag.
  Child child;
  child.Start([](UcxTransport& t, int fd) {
    const uint32_t v = 0xC0FFEE;
    CHILD_CHECK_OK(t.Send(0, (uint64_t{0xABCD} << 48) | 7, &v, sizeof(v)));
    CHILD_CHECK_OK(t.WaitSends());
    return WaitForParent(fd);
  });
  auto t = child.ConnectParent();
  ASSERT_NE(t, nullptr);
  uint32_t v = 0;
  ASSERT_OK(t->Recv(1, 7, &v, sizeof(v)));
  EXPECT_EQ(v, 0xC0FFEEu);
  child.TellDone();
  EXPECT_EQ(child.Wait(), 0);
}

// ---- errors -------------------------------------------------------------------------------------

TEST(UcxTransportTest, MessageLargerThanReceiveBufferIsInternalAndSticky) {
  Child child;
  child.Start([](UcxTransport& t, int fd) {
    const std::vector<uint8_t> m = Pattern(100, 1);
    CHILD_CHECK_OK(t.Send(0, 5, m.data(), m.size()));
    CHILD_CHECK_OK(t.WaitSends());
    return WaitForParent(fd);
  });
  auto t = child.ConnectParent();
  ASSERT_NE(t, nullptr);
  std::vector<uint8_t> buf(64);
  const absl::Status s = t->Recv(1, 5, buf.data(), buf.size());
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_THAT(s.message(), AllOf(HasSubstr("tag 5"), HasSubstr("received 100 bytes"),
                                 HasSubstr("expected 64"), HasSubstr("peer rank 1")));
  // Sticky: later calls return the same error without touching the network.
  const absl::Time start = absl::Now();
  EXPECT_EQ(t->Send(1, 6, buf.data(), buf.size()), s);
  EXPECT_EQ(t->Recv(1, 6, buf.data(), buf.size()), s);
  EXPECT_EQ(t->WaitSends(), s);
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(100));
  child.TellDone();
  EXPECT_EQ(child.Wait(), 0);
}

TEST(UcxTransportTest, LargeMessageLargerThanReceiveBufferIsInternal) {
  // 4 MiB goes by rendezvous rather than eager: the mismatch must be caught there too.
  Child child;
  child.Start([](UcxTransport& t, int fd) {
    const std::vector<uint8_t> m = Pattern(kLarge, 1);
    CHILD_CHECK_OK(t.Send(0, 5, m.data(), m.size()));
    t.WaitSends().IgnoreError();  // fails when the parent gives up on the transport
    return WaitForParent(fd);
  });
  auto t = child.ConnectParent();
  ASSERT_NE(t, nullptr);
  std::vector<uint8_t> buf(kLarge / 4);
  const absl::Status s = t->Recv(1, 5, buf.data(), buf.size());
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr("tag 5"), HasSubstr("expected 1048576"), HasSubstr("peer rank 1")));
  child.TellDone();
  EXPECT_EQ(child.Wait(), 0);
}

TEST(UcxTransportTest, MessageSmallerThanReceiveBufferIsInternalNamingBothSizes) {
  Child child;
  child.Start([](UcxTransport& t, int fd) {
    const std::vector<uint8_t> m = Pattern(100, 1);
    CHILD_CHECK_OK(t.Send(0, 5, m.data(), m.size()));
    CHILD_CHECK_OK(t.WaitSends());
    return WaitForParent(fd);
  });
  auto t = child.ConnectParent();
  ASSERT_NE(t, nullptr);
  std::vector<uint8_t> buf(200);
  const absl::Status s = t->Recv(1, 5, buf.data(), buf.size());
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_THAT(s.message(), AllOf(HasSubstr("tag 5"), HasSubstr("received 100 bytes"),
                                 HasSubstr("expected 200"), HasSubstr("peer rank 1")));
  child.TellDone();
  EXPECT_EQ(child.Wait(), 0);
}

TEST(UcxTransportTest, AbortFlagFromAnotherThreadEndsRecvPromptly) {
  Child child;
  child.Start([](UcxTransport&, int fd) { return WaitForParent(fd); });  // never sends
  std::atomic<bool> abort{false};
  Transport::Options options = Child::DefaultOptions();
  options.abort = &abort;
  auto t = child.ConnectParent(options);
  ASSERT_NE(t, nullptr);
  std::atomic<int64_t> aborted_at_ns{0};
  std::thread aborter([&] {
    absl::SleepFor(absl::Milliseconds(200));
    aborted_at_ns = absl::GetCurrentTimeNanos();
    abort = true;
  });
  uint64_t v = 0;
  const absl::Status s = t->Recv(1, 9, &v, sizeof(v));
  const absl::Duration latency = absl::Now() - absl::FromUnixNanos(aborted_at_ns.load());
  aborter.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_THAT(s.message(), AllOf(HasSubstr("tag 9"), HasSubstr("peer rank 1")));
  EXPECT_LT(latency, absl::Seconds(1));
  EXPECT_EQ(t->WaitSends(), s);
  child.TellDone();
  EXPECT_EQ(child.Wait(), 0);
}

TEST(UcxTransportTest, RecvTimesOutWithDeadlineExceeded) {
  Child child;
  child.Start([](UcxTransport&, int fd) { return WaitForParent(fd); });
  Transport::Options options = Child::DefaultOptions();
  options.timeout = absl::Milliseconds(300);
  auto t = child.ConnectParent(options);
  ASSERT_NE(t, nullptr);
  uint64_t v = 0;
  const absl::Time start = absl::Now();
  const absl::Status s = t->Recv(1, 7, &v, sizeof(v));
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(s.message(), AllOf(HasSubstr("tag 7"), HasSubstr("peer rank 1")));
  EXPECT_GE(took, absl::Milliseconds(300));
  EXPECT_LT(took, absl::Seconds(1));
  child.TellDone();
  EXPECT_EQ(child.Wait(), 0);
}

// A killed peer's message says what happened and keeps UCX's own (misleading on tcp) reason in
// parentheses.
void ExpectConnectionLost(const absl::Status& s) {
  EXPECT_THAT(
      s.message(),
      HasSubstr("failed: connection lost (the process exited or the network failed) (UCX: "))
      << s;
}

TEST(UcxTransportTest, DescribePeerFailureNamesALostConnection) {
  for (ucs_status_t st : {UCS_ERR_ENDPOINT_TIMEOUT, UCS_ERR_CONNECTION_RESET, UCS_ERR_NOT_CONNECTED,
                          UCS_ERR_UNREACHABLE, UCS_ERR_IO_ERROR, UCS_ERR_REJECTED}) {
    EXPECT_EQ(DescribePeerFailure(st),
              absl::StrCat("connection lost (the process exited or the network failed) (UCX: ",
                           ucs_status_string(st), ")"));
  }
  EXPECT_EQ(DescribePeerFailure(UCS_ERR_ENDPOINT_TIMEOUT),
            "connection lost (the process exited or the network failed) (UCX: Endpoint timeout)");
  EXPECT_EQ(DescribePeerFailure(UCS_ERR_NO_MEMORY), "UCX error (Out of memory)");
}

TEST(UcxTransportTest, KilledPeerDuringRecvIsUnavailable) {
  Child child;
  child.Start([](UcxTransport& t, int fd) {
    const uint8_t hello = 1;  // one exchange first, as in a real job
    CHILD_CHECK_OK(t.Send(0, 1, &hello, 1));
    CHILD_CHECK_OK(t.WaitSends());
    return WaitForParent(fd);
  });
  auto t = child.ConnectParent();
  ASSERT_NE(t, nullptr);
  uint8_t hello = 0;
  ASSERT_OK(t->Recv(1, 1, &hello, 1));
  std::atomic<int64_t> killed_at_ns{0};
  std::thread killer([&] {
    absl::SleepFor(absl::Milliseconds(200));
    killed_at_ns = absl::GetCurrentTimeNanos();
    child.Kill();
  });
  uint64_t v = 0;
  const absl::Status s = t->Recv(1, 2, &v, sizeof(v));
  const absl::Duration detection = absl::Now() - absl::FromUnixNanos(killed_at_ns.load());
  killer.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("peer rank 1 failed"));
  ExpectConnectionLost(s);
  EXPECT_LT(detection, absl::Seconds(2)) << "tcp sees the killed peer's sockets close";
  std::printf("dead peer detected after %s: %s\n", absl::FormatDuration(detection).c_str(),
              std::string(s.message()).c_str());
  const absl::Time start = absl::Now();
  t.reset();  // destruction must not wait on the dead peer
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

TEST(UcxTransportTest, PeerKilledBeforeAnyExchangeIsUnavailable) {
  // No message has crossed yet, so the connection handshake may still be unfinished.
  Child child;
  child.Start([](UcxTransport&, int fd) { return WaitForParent(fd); });
  auto t = child.ConnectParent();
  ASSERT_NE(t, nullptr);
  std::thread killer([&] {
    absl::SleepFor(absl::Milliseconds(200));
    child.Kill();
  });
  const absl::Time start = absl::Now();
  uint64_t v = 0;
  const absl::Status s = t->Recv(1, 2, &v, sizeof(v));
  killer.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("peer rank 1 failed"));
  ExpectConnectionLost(s);
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
}

TEST(UcxTransportTest, KilledPeerDuringWaitSendsIsUnavailable) {
  Child child;
  child.Start([](UcxTransport& t, int fd) {
    const uint8_t ready = 1;
    CHILD_CHECK_OK(t.Send(0, 1, &ready, 1));
    CHILD_CHECK_OK(t.WaitSends());
    return WaitForParent(fd);  // never receives the large messages
  });
  auto t = child.ConnectParent();
  ASSERT_NE(t, nullptr);
  uint8_t ready = 0;
  ASSERT_OK(t->Recv(1, 1, &ready, 1));
  const std::vector<uint8_t> a = Pattern(kLarge, 1), b = Pattern(kLarge, 2);
  ASSERT_OK(t->Send(1, 2, a.data(), a.size()));
  ASSERT_OK(t->Send(1, 3, b.data(), b.size()));
  std::thread killer([&] {
    absl::SleepFor(absl::Milliseconds(200));
    child.Kill();
  });
  const absl::Time start = absl::Now();
  const absl::Status s = t->WaitSends();
  killer.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("peer rank 1 failed"));
  ExpectConnectionLost(s);
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
}

TEST(UcxTransportTest, PeerThatExitsWithSendsOutstandingDoesNotHangDestructor) {
  // The parent posts a large send the child never receives, then the child exits normally;
  // destroying the parent's transport without WaitSends must return promptly.
  Child child;
  child.Start([](UcxTransport&, int fd) { return WaitForParent(fd); });
  auto t = child.ConnectParent();
  ASSERT_NE(t, nullptr);
  const std::vector<uint8_t> a = Pattern(kLarge, 1);
  ASSERT_OK(t->Send(1, 2, a.data(), a.size()));
  child.TellDone();
  EXPECT_EQ(child.Wait(), 0);
  const absl::Time start = absl::Now();
  t.reset();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

// CPU used by this process (all threads) during the middle 800 ms of a Recv that times out after
// 1 s (sampled from another thread, so set-up and the teardown after the timeout are not counted).
absl::Duration IdleRecvCpu(UcxTransport& t) {
  auto cpu = [] {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return absl::DurationFromTimespec(ts);
  };
  absl::Duration used;
  std::thread sampler([&] {
    absl::SleepFor(absl::Milliseconds(100));
    const absl::Duration before = cpu();
    absl::SleepFor(absl::Milliseconds(800));
    used = cpu() - before;
  });
  uint64_t v = 0;
  const absl::Status s = t.Recv(1, 99, &v, sizeof(v));
  sampler.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  return used;
}

TEST(UcxTransportTest, IdleRecvUsesAlmostNoCpu) {
  Child child;
  child.Start([](UcxTransport& t, int fd) {
    const uint8_t hello = 1;  // completes the connection handshake, as in a running job
    CHILD_CHECK_OK(t.Send(0, 1, &hello, 1));
    CHILD_CHECK_OK(t.WaitSends());
    return WaitForParent(fd);
  });
  Transport::Options options = Child::DefaultOptions();
  options.timeout = absl::Seconds(1);
  auto t = child.ConnectParent(options);
  ASSERT_NE(t, nullptr);
  uint8_t hello = 0;
  ASSERT_OK(t->Recv(1, 1, &hello, 1));
  const absl::Duration used = IdleRecvCpu(*t);
  std::printf("idle recv, connected peer: %s CPU in 800 ms\n", absl::FormatDuration(used).c_str());
  // About 0.5 % here (one wakeup per 20 ms); a busy-waiting loop would use ~100 %.
  EXPECT_LT(used, absl::Milliseconds(16));  // < 2 %
  child.TellDone();
  EXPECT_EQ(child.Wait(), 0);
}

TEST(UcxTransportTest, IdleRecvBesideAnUnfinishedHandshakeUsesLittleCpu) {
  // The child never progresses its worker, so the tcp handshake stays unfinished and the worker's
  // event fd stays readable; the wait must back off instead of spinning.
  Child child;
  child.Start([](UcxTransport&, int fd) { return WaitForParent(fd); });
  Transport::Options options = Child::DefaultOptions();
  options.timeout = absl::Seconds(1);
  auto t = child.ConnectParent(options);
  ASSERT_NE(t, nullptr);
  const absl::Duration used = IdleRecvCpu(*t);
  std::printf("idle recv, peer not progressing: %s CPU in 800 ms\n",
              absl::FormatDuration(used).c_str());
  // About 3 % here (backoff sleeps of 2 ms); spinning on the ready fd would use ~100 %.
  EXPECT_LT(used, absl::Milliseconds(80));  // < 10 %
  child.TellDone();
  EXPECT_EQ(child.Wait(), 0);
}

// ---- argument checks (one process, no peer) -----------------------------------------------------

TEST(UcxTransportTest, RejectsBadRanksAddressesAndUnconnectedPeers) {
  EXPECT_EQ(UcxTransport::Create(-1, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(UcxTransport::Create(1 << 16, {}).status().code(), absl::StatusCode::kInvalidArgument);
  auto t = UcxTransport::Create(3, {});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE((*t)->LocalAddress().empty());
  EXPECT_EQ((*t)->Connect(4, "").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*t)->Connect(4, "not a UCX worker address").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*t)->Connect(3, (*t)->LocalAddress()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*t)->Connect(-2, (*t)->LocalAddress()).code(), absl::StatusCode::kInvalidArgument);
  uint8_t b = 0;
  const absl::Status s = (*t)->Send(4, 1, &b, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("peer rank 4"));
  EXPECT_EQ((*t)->Recv(4, 1, &b, 1).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE((*t)->WaitSends().ok());  // argument errors do not fail the transport
}

}  // namespace
}  // namespace dapple::worker
