// Test-only helpers of the image layer types' tests (common/model/*_test.cc): specs of each type
// and the inference of a small model.
#ifndef DAPPLE_COMMON_MODEL_IMAGE_LAYERS_TESTING_H_
#define DAPPLE_COMMON_MODEL_IMAGE_LAYERS_TESTING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model/layer_type.h"
#include "common/model_info.h"
#include "dapple/v1/job.pb.h"

namespace dapple::testing {

// {type: conv2d, out_channels, kernel[, stride][, padding][, bias]}; a negative stride or
// padding leaves the key out.
inline v1::LayerSpec Conv(int64_t out_channels, int64_t kernel, int64_t stride = -1,
                          int64_t padding = -1) {
  v1::LayerSpec l;
  l.set_type("conv2d");
  l.mutable_conv2d()->set_out_channels(out_channels);
  l.mutable_conv2d()->set_kernel(kernel);
  if (stride >= 0) l.mutable_conv2d()->set_stride(stride);
  if (padding >= 0) l.mutable_conv2d()->set_padding(padding);
  return l;
}

// {type: maxpool2d or avgpool2d, kernel[, stride][, padding]}.
inline v1::LayerSpec Pool(const std::string& type, int64_t kernel, int64_t stride = -1,
                          int64_t padding = -1) {
  v1::LayerSpec l;
  l.set_type(type);
  v1::Pool2dParams* p = type == "maxpool2d" ? l.mutable_maxpool2d() : l.mutable_avgpool2d();
  p->set_kernel(kernel);
  if (stride >= 0) p->set_stride(stride);
  if (padding >= 0) p->set_padding(padding);
  return l;
}

// {type: residual_block, out_channels[, stride]}.
inline v1::LayerSpec Block(int64_t out_channels, int64_t stride = -1) {
  v1::LayerSpec l;
  l.set_type("residual_block");
  l.mutable_residual_block()->set_out_channels(out_channels);
  if (stride >= 0) l.mutable_residual_block()->set_stride(stride);
  return l;
}

// A layer without keys: {type: relu}, {type: batchnorm2d}, {type: global_avgpool}.
inline v1::LayerSpec Plain(const std::string& type) {
  v1::LayerSpec l;
  l.set_type(type);
  return l;
}

inline v1::ModelSpec ImageModel(const std::vector<int64_t>& input_shape,
                                const std::vector<v1::LayerSpec>& layers) {
  v1::ModelSpec m;
  for (int64_t d : input_shape) m.add_input_shape(d);
  for (const v1::LayerSpec& l : layers) *m.add_layers() = l;
  m.set_loss("softmax_cross_entropy");
  return m;
}

// The message of InferLayers on a model that must be refused ("" when it is accepted).
inline std::string InferError(const std::vector<int64_t>& input_shape,
                              const std::vector<v1::LayerSpec>& layers) {
  absl::StatusOr<std::vector<LayerInfo>> infos = InferLayers(ImageModel(input_shape, layers));
  if (infos.ok()) return "";
  return std::string(infos.status().message());
}

// The names of `params` (or buffers), in order.
inline std::vector<std::string> Names(const std::vector<ParamInfo>& params) {
  std::vector<std::string> names;
  for (const ParamInfo& p : params) names.push_back(p.name);
  return names;
}

}  // namespace dapple::testing

#endif  // DAPPLE_COMMON_MODEL_IMAGE_LAYERS_TESTING_H_
