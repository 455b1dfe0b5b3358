// The device memory a worker reports at registration (RegisterWorkerRequest
// device_memory_bytes / device_memory_shared), which the coordinator's planner uses as the
// memory limit of the worker's device.
// Thread safety: every function may be called from any thread.
#ifndef DAPPLE_WORKER_DAEMON_DEVICE_MEMORY_H_
#define DAPPLE_WORKER_DAEMON_DEVICE_MEMORY_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dapple::worker {

struct DeviceMemory {
  int64_t bytes = 0;  // 0: unknown
  // Shared with the other workers on the same memory: the host's RAM with the host's other cpu
  // workers, a GPU's memory with the other workers on that GPU (physical_device.h).
  bool shared = false;
};

// The memory of `device` ("cpu" or "cuda:N"): `configured_bytes` when > 0 (--device-memory,
// the worker's own, not shared); else for cuda:N the GPU's total memory
// (cudaGetDeviceProperties; 0 when it cannot be read or the build has no CUDA), shared when
// known; for cpu the host's physical RAM (sysconf(_SC_PHYS_PAGES) * page size), shared.
DeviceMemory ProbeDeviceMemory(const std::string& device, int64_t configured_bytes);

// A warning when `configured_bytes` (--device-memory, > 0) is more than `device` has (the GPU's
// total memory, or for cpu the host's RAM): "--device-memory 1.00 TiB is more than this host's
// 23.5 GiB of RAM: the planner plans on the flag's figure, so a plan it makes may not fit". ""
// when it is not more, or what the device has is unknown.
std::string DeviceMemoryWarning(const std::string& device, int64_t configured_bytes);

// Parses --device-memory: a whole number of bytes, or of KiB, MiB, GiB or TiB with that suffix
// ("16GiB", "512 MiB"). kInvalidArgument naming the flag and value for anything else, zero, or
// more than 2^60 bytes.
absl::StatusOr<int64_t> ParseMemorySize(absl::string_view text);

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_DAEMON_DEVICE_MEMORY_H_
