// Which devices a worker can offer: "cpu" and "cuda:N".
//
// Built with and without CUDA: without it (DAPPLE_HAVE_CUDA unset) ProbeCuda reports no device
// and says why. A missing driver or GPU is never a crash: cudaGetDeviceCount's error codes
// (35 insufficient driver, 100 no device, ...) become a count of 0 and a one-line reason.
// Thread safety: every function may be called from any thread.
#ifndef DAPPLE_WORKER_DEVICE_DEVICE_H_
#define DAPPLE_WORKER_DEVICE_DEVICE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dapple::worker {

struct DeviceId {
  enum class Kind { kCpu, kCuda };
  Kind kind = Kind::kCpu;
  int index = 0;  // cuda:N; 0 for cpu

  bool is_cuda() const { return kind == Kind::kCuda; }
  std::string ToString() const;  // "cpu", "cuda:1"
  bool operator==(const DeviceId& o) const { return kind == o.kind && index == o.index; }
};

// "cpu" or "cuda:N" with N in [0, 1023], nothing else (no spaces, no leading zeros, no sign).
// kInvalidArgument naming the value and the accepted forms.
absl::StatusOr<DeviceId> ParseDevice(absl::string_view text);

struct CudaProbe {
  int count = 0;                   // usable CUDA devices; 0 when none
  std::vector<std::string> names;  // per device, e.g. "NVIDIA H200 (139.8 GiB)"
  std::string reason;              // why count is 0 ("no CUDA driver: ..."), empty otherwise
};

// Asks the CUDA runtime once per process (cached).
const CudaProbe& ProbeCuda();

// The devices a worker offers when --devices is not given: "cuda:0".."cuda:N-1", or {"cpu"}
// when there is no usable GPU.
std::vector<std::string> DefaultDevices();

// Checks a worker's --devices against this machine. Each entry must parse and each cuda:N must
// exist (N < ProbeCuda().count). With `cpu_fallback`, cuda entries that cannot be used are
// replaced by one "cpu" and `*warning` says so; without it, kFailedPrecondition naming the device
// and the reason ("--devices cuda:0: no CUDA device: ... (start with --devices cpu, or
// --cpu-fallback)"). kInvalidArgument for an unparsable entry or a repeat. Returns the devices to
// offer.
absl::StatusOr<std::vector<std::string>> ResolveDevices(const std::vector<std::string>& devices,
                                                        bool cpu_fallback, std::string* warning);

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_DEVICE_DEVICE_H_
