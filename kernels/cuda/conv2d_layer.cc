// The conv2d layer on the GPU, the twin of kernels/cpu/conv2d.h's Conv2dLayer on cuDNN
// (cudnn_ops.h): x [N, C, H, W] -> y [N, O, H', W'], fp32. Parameters weight [O, C, k, k] and,
// with bias, bias [O]. Nothing saved beyond x; BackwardWeight adds the filter (and bias)
// gradients straight into the parameters' gradients (cuDNN's beta = 1).
#include <memory>

#include "kernels/cuda/cudnn_ops.h"
#include "kernels/cuda/layers_internal.h"

namespace dapple::kernels::cuda::internal {
namespace {

class Conv2dLayer : public DeviceLayer {
 public:
  Conv2dLayer(const LayerInfo& info, int64_t kernel, int64_t stride, int64_t padding)
      : DeviceLayer(info, Dtype::kFp32),
        shape_{0,
               info.input_shape[0],
               info.input_shape[1],
               info.input_shape[2],
               info.output_shape[0],
               kernel,
               stride,
               padding} {}

  std::string Type() const override { return "conv2d"; }

  absl::StatusOr<LayerBuffers> Buffers(int64_t) const override { return LayerBuffers(); }

  absl::Status Forward(const KernelContext& ctx, const void* x, void* y, int64_t rows,
                       DeviceCache* cache, const ForwardContext& fctx, Scratch) override {
    cache->ctx = fctx;
    if (rows == 0) return absl::OkStatus();
    return op_.Forward(ctx, Geometry(rows), static_cast<const float*>(x), param(0).value,
                       has_bias() ? param(1).value : nullptr, static_cast<float*>(y));
  }

  absl::Status BackwardInput(const KernelContext& ctx, const void*, const void*, const void* dy,
                             void* dx, int64_t rows, DeviceCache*, Scratch) override {
    if (dx == nullptr || rows == 0) return absl::OkStatus();
    return op_.BackwardData(ctx, Geometry(rows), static_cast<const float*>(dy), param(0).value,
                            static_cast<float*>(dx));
  }

  absl::Status BackwardWeight(const KernelContext& ctx, const void* x, const void*, const void* dy,
                              int64_t rows, DeviceCache*, Scratch) override {
    if (rows == 0) return absl::OkStatus();
    return op_.BackwardFilter(ctx, Geometry(rows), static_cast<const float*>(x),
                              static_cast<const float*>(dy), param(0).grad,
                              has_bias() ? param(1).grad : nullptr);
  }

 private:
  bool has_bias() const { return info().params.size() == 2; }
  ConvGeometry Geometry(int64_t rows) const {
    ConvGeometry g = shape_;
    g.n = rows;
    return g;
  }

  ConvGeometry shape_;  // n unused
  CudnnConv2d op_;
};

}  // namespace

std::unique_ptr<DeviceLayer> MakeConv2dLayer(const LayerInfo& info, const v1::LayerSpec& spec,
                                             Dtype) {
  const v1::Conv2dParams& p = spec.conv2d();
  return std::make_unique<Conv2dLayer>(info, p.kernel(), p.has_stride() ? p.stride() : 1,
                                       p.padding());
}

}  // namespace dapple::kernels::cuda::internal
