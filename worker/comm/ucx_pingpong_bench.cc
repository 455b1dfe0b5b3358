// Ping-pong between two forked processes over UcxTransport (not a test).
//  pingpong: rank 0 sends a message, rank 1 returns it (one round trip).
//  exchange: both ranks send to each other at once, then receive (as pipeline neighbours do).
// Prints the median and minimum time per iteration and the throughput (2 x bytes per iteration)
// for each size.
//
//   ucx_pingpong_bench [iterations=200]
//
// Runs with the transport's defaults (UCX_TLS=tcp unless the environment sets it).
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "worker/comm/ucx_transport.h"

namespace {

using dapple::worker::Transport;
using dapple::worker::UcxTransport;

constexpr size_t kSizes[] = {64 << 10, 1 << 20, 4 << 20};
constexpr int kWarmup = 10;

bool WriteAll(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = write(fd, c, n);
    if (w <= 0) return false;
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool ReadAll(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = read(fd, c, n);
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// Creates this rank's transport and connects it to the other rank through the socketpair end.
std::unique_ptr<UcxTransport> Setup(int rank, int fd) {
  Transport::Options options;
  options.timeout = absl::Seconds(30);
  auto t = UcxTransport::Create(rank, options);
  if (!t.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, t.status().ToString().c_str());
    return nullptr;
  }
  const std::string& mine = (*t)->LocalAddress();
  const uint32_t n = static_cast<uint32_t>(mine.size());
  uint32_t m = 0;
  std::string theirs;
  if (!WriteAll(fd, &n, sizeof(n)) || !WriteAll(fd, mine.data(), n) ||
      !ReadAll(fd, &m, sizeof(m))) {
    return nullptr;
  }
  theirs.resize(m);
  if (!ReadAll(fd, theirs.data(), m)) return nullptr;
  const absl::Status s = (*t)->Connect(1 - rank, theirs);
  if (!s.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, s.ToString().c_str());
    return nullptr;
  }
  return std::move(*t);
}

// Both ranks send `bytes` to each other at the same time, then receive: returns the times of these
// exchanges (rank 0) or an empty vector (rank 1); exits on error.
std::vector<absl::Duration> Exchange(UcxTransport& t, int rank, size_t bytes, int iterations) {
  std::vector<char> out(bytes, static_cast<char>(rank)), in(bytes);
  std::vector<absl::Duration> times;
  const int peer = 1 - rank;
  for (int i = 0; i < kWarmup + iterations; ++i) {
    const absl::Time start = absl::Now();
    absl::Status s = t.Send(peer, i, out.data(), bytes);
    if (s.ok()) s = t.Recv(peer, i, in.data(), bytes);
    if (s.ok()) s = t.WaitSends();
    if (!s.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, s.ToString().c_str());
      std::exit(1);
    }
    if (rank == 0 && i >= kWarmup) times.push_back(absl::Now() - start);
  }
  return times;
}

// Returns round-trip times (rank 0) or an empty vector (rank 1); exits on error.
std::vector<absl::Duration> PingPong(UcxTransport& t, int rank, size_t bytes, int iterations) {
  std::vector<char> buf(bytes, static_cast<char>(rank));
  std::vector<absl::Duration> rtts;
  const int peer = 1 - rank;
  for (int i = 0; i < kWarmup + iterations; ++i) {
    const absl::Time start = absl::Now();
    absl::Status s;
    if (rank == 0) {
      s = t.Send(peer, i, buf.data(), bytes);
      if (s.ok()) s = t.Recv(peer, i, buf.data(), bytes);
      if (s.ok()) s = t.WaitSends();
    } else {
      s = t.Recv(peer, i, buf.data(), bytes);
      if (s.ok()) s = t.Send(peer, i, buf.data(), bytes);
      if (s.ok()) s = t.WaitSends();
    }
    if (!s.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, s.ToString().c_str());
      std::exit(1);
    }
    if (rank == 0 && i >= kWarmup) rtts.push_back(absl::Now() - start);
  }
  return rtts;
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 200;
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return 1;
  const pid_t child = fork();
  if (child < 0) return 1;
  const int rank = child == 0 ? 1 : 0;
  if (child == 0) prctl(PR_SET_PDEATHSIG, SIGKILL);
  auto t = Setup(rank, fds[rank == 0 ? 0 : 1]);
  if (t == nullptr) {
    if (child > 0) kill(child, SIGKILL);
    return 1;
  }
  const char* tls = std::getenv("UCX_TLS");
  if (rank == 0) {
    std::printf("UCX_TLS=%s, %d iterations after %d warm-up\n", tls ? tls : "(tcp default)",
                iterations, kWarmup);
    std::printf("%-9s %10s %12s %12s %12s\n", "pattern", "bytes", "median_us", "min_us", "MB/s");
  }
  auto report = [](const char* what, size_t bytes, std::vector<absl::Duration> times) {
    std::sort(times.begin(), times.end());
    const absl::Duration median = times[times.size() / 2];
    std::printf("%-9s %10zu %12.1f %12.1f %12.1f\n", what, bytes,
                absl::ToDoubleMicroseconds(median), absl::ToDoubleMicroseconds(times.front()),
                2.0 * static_cast<double>(bytes) / absl::ToDoubleSeconds(median) / 1e6);
  };
  for (size_t bytes : kSizes) {
    std::vector<absl::Duration> rtts = PingPong(*t, rank, bytes, iterations);
    if (rank == 0) report("pingpong", bytes, std::move(rtts));
  }
  for (size_t bytes : kSizes) {
    std::vector<absl::Duration> times = Exchange(*t, rank, bytes, iterations);
    if (rank == 0) report("exchange", bytes, std::move(times));
  }
  t.reset();
  if (rank == 1) _exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
