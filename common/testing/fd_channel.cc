#include "common/testing/fd_channel.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#include "absl/time/clock.h"

namespace dapple::testing {

bool WaitFd(int fd, short events, absl::Time deadline) {
  for (;;) {
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0) return false;
    pollfd p{fd, events, 0};
    const int r = poll(&p, 1, static_cast<int>(ms));
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
  }
}

bool WriteAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool ReadAll(int fd, void* data, size_t n, absl::Time deadline) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    if (!WaitFd(fd, POLLIN, deadline)) return false;
    const ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool SendString(int fd, const std::string& s) {
  const uint32_t n = static_cast<uint32_t>(s.size());
  return WriteAll(fd, &n, sizeof(n)) && WriteAll(fd, s.data(), s.size());
}

bool RecvString(int fd, std::string* s, absl::Time deadline) {
  uint32_t n = 0;
  if (!ReadAll(fd, &n, sizeof(n), deadline) || n > (1u << 20)) return false;
  s->resize(n);
  return ReadAll(fd, s->data(), n, deadline);
}

}  // namespace dapple::testing
