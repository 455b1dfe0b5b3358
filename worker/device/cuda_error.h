// CUDA runtime errors of worker/device as one-line absl::Status messages that name the device
// ("cuda:0: cudaStreamCreateWithFlags: cudaErrorInvalidValue: invalid argument"). Internal to
// worker/device; only in CUDA builds.
//
// Codes: cudaErrorMemoryAllocation -> kResourceExhausted; no driver / no device / device
// unavailable -> kUnavailable; everything else -> kInternal. Thread safety: pure functions.
#ifndef DAPPLE_WORKER_DEVICE_CUDA_ERROR_H_
#define DAPPLE_WORKER_DEVICE_CUDA_ERROR_H_

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace dapple::worker {

inline absl::Status CudaError(int device, cudaError_t err, absl::string_view what) {
  if (err == cudaSuccess) return absl::OkStatus();
  // Non-sticky errors stay in the thread's last-error slot; clear them so a later launch check
  // (cudaGetLastError) does not report this failure as its own.
  (void)cudaGetLastError();
  const std::string msg = absl::StrFormat("cuda:%d: %s: %s: %s", device, what,
                                          cudaGetErrorName(err), cudaGetErrorString(err));
  switch (err) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(msg);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
    case cudaErrorDevicesUnavailable:
      return absl::UnavailableError(msg);
    default:
      return absl::InternalError(msg);
  }
}

inline absl::Status CublasError(int device, cublasStatus_t err, absl::string_view what) {
  if (err == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(
      absl::StrFormat("cuda:%d: %s: %s", device, what, cublasGetStatusString(err)));
}

inline absl::Status CudnnError(int device, cudnnStatus_t err, absl::string_view what) {
  if (err == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(
      absl::StrFormat("cuda:%d: %s: %s", device, what, cudnnGetErrorString(err)));
}

// "512 B", "1.5 MiB", "1.0 PiB": sizes in messages.
inline std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return absl::StrFormat("%d B", bytes);
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024 && unit < 6) {
    v /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.1f %s", v, kUnits[unit]);
}

}  // namespace dapple::worker

#define DAPPLE_CUDA_DEVICE_RETURN_IF_ERROR(device, expr)                                      \
  do {                                                                                        \
    const absl::Status _dapple_dev_st = ::dapple::worker::CudaError((device), (expr), #expr); \
    if (!_dapple_dev_st.ok()) return _dapple_dev_st;                                          \
  } while (0)

#define DAPPLE_CUBLAS_DEVICE_RETURN_IF_ERROR(device, expr)                                      \
  do {                                                                                          \
    const absl::Status _dapple_dev_st = ::dapple::worker::CublasError((device), (expr), #expr); \
    if (!_dapple_dev_st.ok()) return _dapple_dev_st;                                            \
  } while (0)

#define DAPPLE_CUDNN_DEVICE_RETURN_IF_ERROR(device, expr)                                      \
  do {                                                                                         \
    const absl::Status _dapple_dev_st = ::dapple::worker::CudnnError((device), (expr), #expr); \
    if (!_dapple_dev_st.ok()) return _dapple_dev_st;                                           \
  } while (0)

#endif  // DAPPLE_WORKER_DEVICE_CUDA_ERROR_H_
