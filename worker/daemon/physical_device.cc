#include "worker/daemon/physical_device.h"

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "worker/device/device.h"

#ifdef DAPPLE_HAVE_CUDA
#include <cuda_runtime.h>

#include <cstring>
#endif

namespace dapple::worker {

std::string FormatGpuUuid(const unsigned char (&b)[16]) {
  return absl::StrFormat("GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                         b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11],
                         b[12], b[13], b[14], b[15]);
}

std::string PhysicalDevice(const std::string& device) {
  absl::StatusOr<DeviceId> id = ParseDevice(device);
  if (!id.ok() || !id->is_cuda()) return "";
#ifdef DAPPLE_HAVE_CUDA
  // Only for a device ResolveDevices accepted; an error still just means "unknown".
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, id->index) != cudaSuccess) return "";
  unsigned char bytes[16];
  static_assert(sizeof(prop.uuid.bytes) == sizeof(bytes));
  std::memcpy(bytes, prop.uuid.bytes, sizeof(bytes));
  return FormatGpuUuid(bytes);
#else
  return "";
#endif
}

}  // namespace dapple::worker
