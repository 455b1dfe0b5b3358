#include "worker/daemon/device_memory.h"

#include <unistd.h>

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/profile/format_bytes.h"
#include "worker/device/device.h"

#ifdef DAPPLE_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace dapple::worker {
namespace {

constexpr int64_t kMaxBytes = int64_t{1} << 60;

int64_t CudaTotalMemory(int index) {
#ifdef DAPPLE_HAVE_CUDA
  // Only for a device ResolveDevices accepted, so the runtime and the device exist; an error
  // still just means "unknown".
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) return 0;
  return static_cast<int64_t>(prop.totalGlobalMem);
#else
  (void)index;
  return 0;
#endif
}

int64_t PhysicalRam() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<int64_t>(pages) * static_cast<int64_t>(page_size);
}

}  // namespace

DeviceMemory ProbeDeviceMemory(const std::string& device, int64_t configured_bytes) {
  if (configured_bytes > 0) return {configured_bytes, false};
  absl::StatusOr<DeviceId> id = ParseDevice(device);
  if (id.ok() && id->is_cuda()) {
    const int64_t bytes = CudaTotalMemory(id->index);
    return {bytes, bytes > 0};
  }
  return {PhysicalRam(), true};
}

std::string DeviceMemoryWarning(const std::string& device, int64_t configured_bytes) {
  if (configured_bytes <= 0) return "";
  const DeviceMemory actual = ProbeDeviceMemory(device, 0);
  if (actual.bytes <= 0 || configured_bytes <= actual.bytes) return "";
  absl::StatusOr<DeviceId> id = ParseDevice(device);
  const bool ram = !id.ok() || !id->is_cuda();
  return absl::StrCat("--device-memory ", profile::FormatBytes(configured_bytes), " is more than ",
                      ram ? "this host's " : absl::StrCat(device, "'s "),
                      profile::FormatBytes(actual.bytes), ram ? " of RAM" : "",
                      ": the planner plans on the flag's figure, so a plan it makes may not fit");
}

absl::StatusOr<int64_t> ParseMemorySize(absl::string_view text) {
  const auto invalid = [&]() {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--device-memory '%s' must be a whole number of bytes, KiB, MiB, GiB or TiB "
        "(e.g. 16GiB), more than 0 and at most 1 EiB",
        std::string(text)));
  };
  absl::string_view rest = absl::StripAsciiWhitespace(text);
  int shift = 0;
  for (const auto& [suffix, bits] :
       {std::pair<const char*, int>{"KiB", 10}, {"MiB", 20}, {"GiB", 30}, {"TiB", 40}}) {
    if (absl::ConsumeSuffix(&rest, suffix)) {
      shift = bits;
      break;
    }
  }
  rest = absl::StripTrailingAsciiWhitespace(rest);
  if (rest.empty()) return invalid();
  for (char c : rest) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return invalid();
  }
  int64_t value = 0;
  if (!absl::SimpleAtoi(rest, &value) || value <= 0 || value > (kMaxBytes >> shift)) {
    return invalid();
  }
  return value << shift;
}

}  // namespace dapple::worker
