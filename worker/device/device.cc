#include "worker/device/device.h"

#include <algorithm>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

#if DAPPLE_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace dapple::worker {
namespace {

constexpr int kMaxCudaIndex = 1023;

#if DAPPLE_HAVE_CUDA
std::string RuntimeVersion() {
  int v = 0;
  if (cudaRuntimeGetVersion(&v) != cudaSuccess) return "?";
  return absl::StrFormat("%d.%d", v / 1000, (v % 1000) / 10);
}

std::string Describe(cudaError_t err) {
  return absl::StrFormat("%s %d: %s", cudaGetErrorName(err), static_cast<int>(err),
                         cudaGetErrorString(err));
}

CudaProbe RunProbe() {
  CudaProbe probe;
  // The runtime leaves `count` untouched when it fails (no driver, no device): start from 0.
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // do not leave the failure for the next unrelated check
    switch (err) {
      case cudaErrorInsufficientDriver:
        probe.reason = absl::StrCat("no usable CUDA driver (missing, or older than CUDA runtime ",
                                    RuntimeVersion(), "): cudaGetDeviceCount: ", Describe(err));
        break;
      case cudaErrorNoDevice:
        probe.reason = absl::StrCat("no CUDA device: cudaGetDeviceCount: ", Describe(err));
        break;
      default:
        probe.reason = absl::StrCat("CUDA is not usable: cudaGetDeviceCount: ", Describe(err));
        break;
    }
    return probe;
  }
  if (count <= 0) {
    probe.reason = "no CUDA device: cudaGetDeviceCount found 0";
    return probe;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop;
    const cudaError_t perr = cudaGetDeviceProperties(&prop, i);
    if (perr != cudaSuccess) {
      (void)cudaGetLastError();
      // Devices are numbered densely, so only those before the broken one can be offered.
      if (i == 0) {
        probe.reason =
            absl::StrCat("CUDA is not usable: cudaGetDeviceProperties(0): ", Describe(perr));
      }
      break;
    }
    probe.names.push_back(absl::StrFormat("%s (%.1f GiB)", prop.name,
                                          static_cast<double>(prop.totalGlobalMem) / (1ull << 30)));
    probe.count = i + 1;
  }
  return probe;
}
#else
CudaProbe RunProbe() {
  CudaProbe probe;
  probe.reason = "this dapple was built without CUDA (no CUDA compiler at build time)";
  return probe;
}
#endif

// Why `id` (a CUDA device) cannot be used here; empty when it can.
std::string Unusable(const DeviceId& id, const CudaProbe& probe) {
  if (id.index < probe.count) return "";
  if (probe.count == 0) return probe.reason;
  return absl::StrFormat("no such device: this machine has %d CUDA device%s (cuda:0..cuda:%d)",
                         probe.count, probe.count == 1 ? "" : "s", probe.count - 1);
}

}  // namespace

std::string DeviceId::ToString() const {
  return is_cuda() ? absl::StrCat("cuda:", index) : std::string("cpu");
}

absl::StatusOr<DeviceId> ParseDevice(absl::string_view text) {
  auto invalid = [&] {
    return absl::InvalidArgumentError(absl::StrFormat(
        "'%s' is not a device: use \"cpu\" or \"cuda:N\" with N in 0..%d", text, kMaxCudaIndex));
  };
  if (text == "cpu") return DeviceId{DeviceId::Kind::kCpu, 0};
  constexpr absl::string_view kCuda = "cuda:";
  if (!absl::StartsWith(text, kCuda)) return invalid();
  const absl::string_view digits = text.substr(kCuda.size());
  // At most 4 digits, so the value cannot overflow; a leading zero would make "cuda:01" and
  // "cuda:1" two names for one device, which breaks the repeat check.
  if (digits.empty() || digits.size() > 4 || (digits.size() > 1 && digits[0] == '0')) {
    return invalid();
  }
  int index = 0;
  for (char c : digits) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return invalid();
    index = index * 10 + (c - '0');
  }
  if (index > kMaxCudaIndex) return invalid();
  return DeviceId{DeviceId::Kind::kCuda, index};
}

const CudaProbe& ProbeCuda() {
  static const CudaProbe* const probe = new CudaProbe(RunProbe());  // thread-safe init, never freed
  return *probe;
}

std::vector<std::string> DefaultDevices() {
  const CudaProbe& probe = ProbeCuda();
  if (probe.count == 0) return {"cpu"};
  std::vector<std::string> out;
  for (int i = 0; i < probe.count; ++i) out.push_back(absl::StrCat("cuda:", i));
  return out;
}

absl::StatusOr<std::vector<std::string>> ResolveDevices(const std::vector<std::string>& devices,
                                                        bool cpu_fallback, std::string* warning) {
  if (warning != nullptr) warning->clear();
  if (devices.empty()) return absl::InvalidArgumentError("--devices needs at least one device");
  std::vector<DeviceId> ids;
  std::set<std::string> seen;
  for (const std::string& d : devices) {
    absl::StatusOr<DeviceId> id = ParseDevice(d);
    if (!id.ok())
      return absl::InvalidArgumentError(absl::StrCat("--devices ", id.status().message()));
    if (!seen.insert(id->ToString()).second) {
      return absl::InvalidArgumentError(absl::StrFormat("--devices lists '%s' twice", d));
    }
    ids.push_back(*id);
  }

  const CudaProbe& probe = ProbeCuda();
  std::vector<std::string> out;
  std::vector<std::string> dropped;
  std::string reason;
  // One cpu stands in for all unusable CUDA devices, at the place of the first of them.
  bool has_cpu = seen.count("cpu") > 0;
  for (const DeviceId& id : ids) {
    const std::string why = id.is_cuda() ? Unusable(id, probe) : "";
    if (why.empty()) {
      out.push_back(id.ToString());
      continue;
    }
    if (!cpu_fallback) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "--devices %s: %s (start with --devices cpu, or --cpu-fallback)", id.ToString(), why));
    }
    if (reason.empty()) reason = why;
    dropped.push_back(id.ToString());
    if (!has_cpu) {
      out.push_back("cpu");
      has_cpu = true;
    }
  }
  if (!dropped.empty() && warning != nullptr) {
    const bool cpu_listed = std::find(devices.begin(), devices.end(), "cpu") != devices.end();
    *warning = absl::StrFormat(
        "--devices %s: %s; %s (--cpu-fallback)", absl::StrJoin(dropped, ","), reason,
        cpu_listed ? "offering the other devices only" : "offering cpu instead");
  }
  return out;
}

}  // namespace dapple::worker
