#include "kernels/cuda/layer.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace dapple::kernels::cuda {

size_t DtypeBytes(Dtype dtype) { return dtype == Dtype::kFp32 ? sizeof(float) : sizeof(bf16); }

const char* DtypeName(Dtype dtype) { return dtype == Dtype::kFp32 ? "fp32" : "bf16"; }

std::string DeviceLayer::Name() const {
  return absl::StrCat("layer", info_.index, " (", info_.type, ")");
}

absl::Status DeviceLayer::BindParams(std::vector<DeviceParam> params) {
  if (params.size() != info_.params.size()) {
    return absl::InternalError(absl::StrCat(Name(), ": ", params.size(),
                                            " device parameters bound, the declaration has ",
                                            info_.params.size()));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamInfo& p = info_.params[i];
    const int64_t count = NumElements(p.shape);
    if (params[i].count != count || params[i].value == nullptr || params[i].grad == nullptr) {
      return absl::InternalError(
          absl::StrCat(Name(), ": parameter ", p.name, " bound with ", params[i].count,
                       " elements (null value or grad: ",
                       params[i].value == nullptr || params[i].grad == nullptr,
                       "), the declaration has ", count));
    }
    if (dtype_ == Dtype::kBf16 && params[i].value_bf16 == nullptr) {
      return absl::InternalError(
          absl::StrCat(Name(), ": bf16 layer without a bf16 copy of ", p.name));
    }
  }
  params_ = std::move(params);
  return absl::OkStatus();
}

absl::Status DeviceLayer::BackwardWeight(const KernelContext& ctx, const void* x, const void* y,
                                         const void* dy, int64_t rows, DeviceCache* cache,
                                         Scratch scratch) {
  (void)ctx, (void)x, (void)y, (void)dy, (void)rows, (void)cache, (void)scratch;
  return absl::OkStatus();
}

absl::Status DeviceLayer::BindBuffers(std::vector<float*> buffers) {
  if (buffers.size() != info_.buffers.size()) {
    return absl::InternalError(absl::StrCat(Name(), ": ", buffers.size(),
                                            " device buffers bound, the declaration has ",
                                            info_.buffers.size()));
  }
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (buffers[i] == nullptr) {
      return absl::InternalError(
          absl::StrCat(Name(), ": buffer ", info_.buffers[i].name, " bound to null"));
    }
  }
  buffers_ = std::move(buffers);
  return absl::OkStatus();
}

absl::Status DeviceLayer::ReadStepStatistics(const KernelContext& ctx, double* host) {
  (void)ctx, (void)host;
  return absl::OkStatus();
}

absl::Status DeviceLayer::ApplyStepStatistics(const KernelContext& ctx, const double* summed) {
  (void)ctx, (void)summed;
  return absl::OkStatus();
}

}  // namespace dapple::kernels::cuda
