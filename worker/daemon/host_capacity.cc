#include "worker/daemon/host_capacity.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "common/median.h"
#include "kernels/cpu/dense.h"

namespace dapple::worker {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kMaxThreads = 16;

double ElapsedMs(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// What stages compute: one sgemm on the calling thread (the worker's BLAS runs one thread per
// process). 512^3 is large enough to be compute-bound, small enough for about 3 ms.
void DefaultWork() {
  constexpr int64_t kN = 512;
  thread_local std::vector<float> x(kN * kN, 0.5f);
  thread_local std::vector<float> w(kN * kN, 0.25f);
  thread_local std::vector<float> y(kN * kN);
  kernels::DenseForward(x.data(), kN, kN, kN, w.data(), nullptr, y.data());
}

// A host-wide file in $TMPDIR (/tmp by default) locked with `operation`; -1 when it cannot be
// opened or locked, and then `*busy` (when given) says whether another holder's lock was the
// reason.
int OpenLocked(const char* name, int operation, bool* busy = nullptr) {
  if (busy != nullptr) *busy = false;
  const char* dir = std::getenv("TMPDIR");
  const std::string path = std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") + "/" + name;
  // Read-only: flock needs no write access, so a file another user created (0644 under their
  // umask) still serves every worker of the host.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC, 0666);
  // It holds nothing: readable by every user of the host whatever the creator's umask (a
  // process started with umask 077 made it 0600). Only its owner can, and need, do this.
  if (fd >= 0) (void)::fchmod(fd, 0666);
  if (fd >= 0 && ::flock(fd, operation) != 0) {
    if (busy != nullptr) *busy = errno == EWOULDBLOCK;
    ::close(fd);
    return -1;
  }
  return fd;
}

constexpr char kMeasurementLockFile[] = "dapple-host-capacity.lock";
constexpr char kJobLockFile[] = "dapple-host-jobs.lock";

}  // namespace

HostMeasurementLock::HostMeasurementLock() : fd_(OpenLocked(kMeasurementLockFile, LOCK_EX)) {}

HostMeasurementLock::~HostMeasurementLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

HostJobLock::HostJobLock() : fd_(OpenLocked(kJobLockFile, LOCK_SH | LOCK_NB)) {}

HostJobLock::~HostJobLock() {
  if (fd_ >= 0) ::close(fd_);
}

bool HostRunsJob() {
  // flock locks belong to open file descriptions, so this process's own HostJobLock conflicts
  // with the exclusive probe like another process's.
  bool busy = false;
  const int fd = OpenLocked(kJobLockFile, LOCK_EX | LOCK_NB, &busy);
  if (fd >= 0) ::close(fd);
  return busy;
}

double CapacityFromTimes(int threads, double single_ms, double parallel_ms) {
  if (threads <= 1 || !(single_ms > 0) || !(parallel_ms > 0)) return 1.0;
  return std::clamp(threads * single_ms / parallel_ms, 1.0, static_cast<double>(threads));
}

double MeasureHostComputeCapacity(int threads, int trials, const std::function<void()>& work) {
  if (threads <= 0) {
    // At most kMaxThreads: more than any host runs stages at once, and the BLAS has a bounded
    // number of per-thread buffers.
    threads = std::min(kMaxThreads, static_cast<int>(std::thread::hardware_concurrency()));
  }
  if (threads <= 1) return 1.0;
  const HostMeasurementLock lock;
  const std::function<void()> run = work ? work : DefaultWork;
  constexpr int kRepeats = 4;  // work items per thread per timing
  auto timed = [&](int n) {
    const Clock::time_point start = Clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < n; ++t) {
      pool.emplace_back([&] {
        for (int r = 0; r < kRepeats; ++r) run();
      });
    }
    for (std::thread& t : pool) t.join();
    return ElapsedMs(start);
  };
  timed(threads);  // warm-up: pages, caches, the BLAS's buffers of every thread
  std::vector<double> capacities;
  for (int trial = 0; trial < std::max(1, trials); ++trial) {
    const double single = timed(1);
    capacities.push_back(CapacityFromTimes(threads, single, timed(threads)));
  }
  return dapple::Median(std::move(capacities));
}

void HostCapacityEstimate::Add(double capacity) {
  if (std::isfinite(capacity) && capacity >= 1) measured_.push_back(capacity);
}

double HostCapacityEstimate::Median() const { return dapple::Median(measured_); }

}  // namespace dapple::worker
