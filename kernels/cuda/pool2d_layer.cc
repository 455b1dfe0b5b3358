// The pooling layers on the GPU on cuDNN (cudnn_ops.h), fp32: maxpool2d and avgpool2d (the
// twins of kernels/cpu/pool2d.h's Pool2dLayer: x [N, C, H, W] -> y [N, C, H', W']) and
// global_avgpool (kernels/cpu/global_avgpool.h: one H x W average window, y [N, C]). No
// parameters and nothing saved: max pooling's backward finds each window's maximum again from
// x and y (common/model counts oneDNN's 1-byte workspace per output for maxpool2d: the GPU
// keeps less than the planner assumes).
#include <memory>

#include "kernels/cuda/cudnn_ops.h"
#include "kernels/cuda/layers_internal.h"

namespace dapple::kernels::cuda::internal {
namespace {

class Pool2dLayer : public DeviceLayer {
 public:
  Pool2dLayer(const LayerInfo& info, PoolKind kind, const PoolGeometry& shape)
      : DeviceLayer(info, Dtype::kFp32), shape_(shape), op_(kind) {}

  std::string Type() const override { return info().type; }

  absl::StatusOr<LayerBuffers> Buffers(int64_t) const override { return LayerBuffers(); }

  absl::Status Forward(const KernelContext& ctx, const void* x, void* y, int64_t rows,
                       DeviceCache* cache, const ForwardContext& fctx, Scratch) override {
    cache->ctx = fctx;
    if (rows == 0) return absl::OkStatus();
    return op_.Forward(ctx, Geometry(rows), static_cast<const float*>(x), static_cast<float*>(y));
  }

  absl::Status BackwardInput(const KernelContext& ctx, const void* x, const void* y, const void* dy,
                             void* dx, int64_t rows, DeviceCache*, Scratch) override {
    if (dx == nullptr || rows == 0) return absl::OkStatus();
    return op_.Backward(ctx, Geometry(rows), static_cast<const float*>(x),
                        static_cast<const float*>(y), static_cast<const float*>(dy),
                        static_cast<float*>(dx));
  }

 private:
  PoolGeometry Geometry(int64_t rows) const {
    PoolGeometry g = shape_;
    g.n = rows;
    return g;
  }

  PoolGeometry shape_;  // n unused
  CudnnPool2d op_;
};

std::unique_ptr<DeviceLayer> MakePool(const LayerInfo& info, const v1::Pool2dParams& p,
                                      PoolKind kind) {
  const std::vector<int64_t>& in = info.input_shape;
  PoolGeometry g;
  g.c = in[0], g.h = in[1], g.w = in[2];
  g.kernel_h = g.kernel_w = p.kernel();
  g.stride = p.has_stride() ? p.stride() : p.kernel();
  g.padding = p.padding();
  return std::make_unique<Pool2dLayer>(info, kind, g);
}

}  // namespace

std::unique_ptr<DeviceLayer> MakeMaxPool2dLayer(const LayerInfo& info, const v1::LayerSpec& spec,
                                                Dtype) {
  return MakePool(info, spec.maxpool2d(), PoolKind::kMax);
}

std::unique_ptr<DeviceLayer> MakeAvgPool2dLayer(const LayerInfo& info, const v1::LayerSpec& spec,
                                                Dtype) {
  return MakePool(info, spec.avgpool2d(), PoolKind::kAverage);
}

// Average pooling with one window over the whole image: y [N, C, 1, 1], which is y [N, C].
std::unique_ptr<DeviceLayer> MakeGlobalAvgPoolLayer(const LayerInfo& info, const v1::LayerSpec&,
                                                    Dtype) {
  const std::vector<int64_t>& in = info.input_shape;
  PoolGeometry g;
  g.c = in[0], g.h = in[1], g.w = in[2];
  g.kernel_h = in[1], g.kernel_w = in[2], g.stride = 1, g.padding = 0;
  return std::make_unique<Pool2dLayer>(info, PoolKind::kAverage, g);
}

}  // namespace dapple::kernels::cuda::internal
