#include "worker/daemon/profile_runner.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "worker/daemon/host_capacity.h"
#include "worker/device/device.h"
#include "worker/runtime/layer_profiler.h"
#if DAPPLE_HAVE_CUDA
#include "worker/device/cuda_device.h"
#include "worker/runtime/cuda/cuda_stage_backend.h"
#endif

namespace dapple::worker {
namespace {

absl::StatusOr<v1::ModelProfile> Measure(const v1::ProfileRequest& request) {
  const std::string device = request.device().empty() ? "cpu" : request.device();
  absl::StatusOr<DeviceId> id = ParseDevice(device);
  if (!id.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("profile device: ", id.status().message()));
  }
  ProfileOptions options;
  options.batch_size = request.batch_size();
  if (!id->is_cuda()) {
    // The host's cores are what a cpu profile times: another worker of the host measuring its
    // capacity and loopback link (both cores for about half a second, at its refinement times)
    // made two of this VM's profiles of the demo MLP 1.4-1.5x slow, and every plan of the model
    // with them. Measured one at a time, as those measurements already are among themselves.
    const HostMeasurementLock lock;
    return MeasureProfile(
        request.spec(),
        [](const v1::JobSpec& spec, int first, int last) {
          return MakeCpuStageBackend(spec, first, last);
        },
        "cpu", options);
  }
#if DAPPLE_HAVE_CUDA
  DAPPLE_ASSIGN_OR_RETURN(std::unique_ptr<CudaDevice> gpu, CudaDevice::Open(id->index));
  CudaDevice* raw = gpu.get();
  return MeasureProfile(
      request.spec(),
      [raw](const v1::JobSpec& spec, int first, int last) {
        return MakeCudaStageBackend(spec, first, last, raw);
      },
      device, options);
#else
  return absl::FailedPreconditionError(
      absl::StrCat(device, ": this dapple-worker was built without CUDA"));
#endif
}

}  // namespace

v1::ReportProfileRequest RunProfileRequest(const std::string& worker_id,
                                           const v1::ProfileRequest& request) {
  v1::ReportProfileRequest report;
  report.set_worker_id(worker_id);
  report.set_request_id(request.request_id());
  absl::StatusOr<v1::ModelProfile> profile = Measure(request);
  if (profile.ok()) {
    *report.mutable_profile() = *std::move(profile);
  } else {
    report.set_error(std::string(profile.status().message()));
  }
  return report;
}

}  // namespace dapple::worker
