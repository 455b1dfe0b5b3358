// The MessageBuffer of a StageBackend whose memory is the host's (the CPU and emulated
// backends): one growable byte buffer and the bounds-checked copies in and out of it, as
// StageBackend::MessageBuffer / WriteMessage / ReadMessage specify.
//
// Thread safety: none; owned by one backend, used by its rank's thread.
#ifndef DAPPLE_WORKER_RUNTIME_HOST_MESSAGE_BUFFER_H_
#define DAPPLE_WORKER_RUNTIME_HOST_MESSAGE_BUFFER_H_

#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace dapple::worker {

class HostMessageBuffer {
 public:
  // A buffer of at least `bytes` bytes, valid until the next Get that grows it.
  // Bytes allocated.
  int64_t held_bytes() const { return static_cast<int64_t>(bytes_.capacity()); }
  void* Get(int64_t bytes) {
    if (bytes > static_cast<int64_t>(bytes_.size())) bytes_.resize(bytes);
    return bytes_.data();
  }
  // Copies `bytes` bytes from `host` into the buffer; kInternal when they exceed it.
  absl::Status Write(const void* host, int64_t bytes) {
    if (bytes > static_cast<int64_t>(bytes_.size())) return TooLarge(bytes);
    std::memcpy(bytes_.data(), host, static_cast<size_t>(bytes));
    return absl::OkStatus();
  }
  // Copies `bytes` bytes from the buffer into `host`; kInternal when they exceed it.
  absl::Status Read(void* host, int64_t bytes) const {
    if (bytes > static_cast<int64_t>(bytes_.size())) return TooLarge(bytes);
    std::memcpy(host, bytes_.data(), static_cast<size_t>(bytes));
    return absl::OkStatus();
  }

 private:
  absl::Status TooLarge(int64_t bytes) const {
    return absl::InternalError(
        absl::StrFormat("message of %d bytes larger than its buffer of %d", bytes, bytes_.size()));
  }

  std::vector<char> bytes_;
};

// kInternal unless floats [offset, offset + count) lie within a stage output of `size` floats
// (StageBackend::ReadOutput's range check).
inline absl::Status CheckOutputRange(int64_t offset, int64_t count, size_t size) {
  if (offset < 0 || count < 0 || offset + count > static_cast<int64_t>(size)) {
    return absl::InternalError(
        absl::StrFormat("output floats [%d, %d) outside the stage output of %d floats", offset,
                        offset + count, size));
  }
  return absl::OkStatus();
}

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_RUNTIME_HOST_MESSAGE_BUFFER_H_
