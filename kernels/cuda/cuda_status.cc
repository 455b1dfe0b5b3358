#include "kernels/cuda/cuda_status.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace dapple::kernels::cuda {
namespace {

// Errors that mean "this process has no usable GPU" (no device, no or a stub or mismatched
// driver, devices busy in exclusive mode, a bad ordinal): the caller may retry elsewhere or
// later, so kUnavailable rather than kInternal.
bool IsNoUsableGpu(cudaError_t err) {
  switch (err) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInitializationError:
    case cudaErrorDevicesUnavailable:
    case cudaErrorInvalidDevice:
    case cudaErrorStubLibrary:
    case cudaErrorSystemNotReady:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
      return true;
    default:
      return false;
  }
}

}  // namespace

absl::Status CudaStatus(cudaError_t err, absl::string_view what) {
  if (err == cudaSuccess) return absl::OkStatus();
  std::string message = absl::StrCat(what, ": ", cudaGetErrorString(err));
  if (err == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(message);
  if (IsNoUsableGpu(err)) return absl::UnavailableError(message);
  return absl::InternalError(message);
}

absl::Status CublasStatus(cublasStatus_t err, absl::string_view what) {
  if (err == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  std::string message =
      absl::StrCat(what, ": ", cublasGetStatusName(err), " (", cublasGetStatusString(err), ")");
  if (err == CUBLAS_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(message);
  // cublasCreate reports a missing GPU or driver as NOT_INITIALIZED.
  if (err == CUBLAS_STATUS_NOT_INITIALIZED) return absl::UnavailableError(message);
  return absl::InternalError(message);
}

}  // namespace dapple::kernels::cuda
