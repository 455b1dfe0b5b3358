// An out-of-band channel for multi-process tests: blocking writes and deadline-bounded reads on a
// file descriptor (a socketpair or pipe between a test and a child it forked), and
// length-prefixed strings on top (u32 length in host order, then the bytes; at most 1 MiB).
// Every read gives up at `deadline`, so a child that dies or hangs fails the test instead of
// stalling it. Return false on EOF, error or deadline. Thread safety: one thread per fd.
#ifndef DAPPLE_COMMON_TESTING_FD_CHANNEL_H_
#define DAPPLE_COMMON_TESTING_FD_CHANNEL_H_

#include <cstddef>
#include <string>

#include "absl/time/time.h"

namespace dapple::testing {

// Waits until `fd` is ready for `events` (poll(2) flags) or `deadline`; false on deadline/error.
bool WaitFd(int fd, short events, absl::Time deadline);
bool WriteAll(int fd, const void* data, size_t n);
bool ReadAll(int fd, void* data, size_t n, absl::Time deadline);
bool SendString(int fd, const std::string& s);
bool RecvString(int fd, std::string* s, absl::Time deadline);

}  // namespace dapple::testing

#endif  // DAPPLE_COMMON_TESTING_FD_CHANNEL_H_
