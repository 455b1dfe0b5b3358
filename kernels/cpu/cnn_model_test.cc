// A small ResNet through BuildLayers, as a job spec builds it: every image layer type's CPU
// kernel against common/model's declaration of it (parameter and buffer names, shapes, order;
// output shapes).
#include <memory>
#include <string>
#include <vector>

#include "common/model_info.h"
#include "gtest/gtest.h"
#include "kernels/cpu/layer_testing.h"
#include "kernels/cpu/loss.h"
#include "kernels/cpu/model.h"

namespace dapple::kernels {
namespace {

v1::ModelSpec SmallResNet() {
  v1::ModelSpec m;
  for (int64_t d : {1, 12, 12}) m.add_input_shape(d);
  auto add = [&m](const std::string& type) {
    v1::LayerSpec* l = m.add_layers();
    l->set_type(type);
    return l;
  };
  v1::Conv2dParams* stem = add("conv2d")->mutable_conv2d();
  stem->set_out_channels(4);
  stem->set_kernel(3);
  stem->set_padding(1);
  add("batchnorm2d")->mutable_batchnorm2d()->set_momentum(0.2);
  add("relu");
  add("maxpool2d")->mutable_maxpool2d()->set_kernel(2);                  // [4, 6, 6]
  add("residual_block")->mutable_residual_block()->set_out_channels(4);  // identity
  v1::ResidualBlockParams* down = add("residual_block")->mutable_residual_block();
  down->set_out_channels(8);
  down->set_stride(2);  // [8, 3, 3], projection
  v1::Pool2dParams* avg = add("avgpool2d")->mutable_avgpool2d();
  avg->set_kernel(3);
  avg->set_stride(1);
  avg->set_padding(1);    // [8, 3, 3]
  add("global_avgpool");  // [8]
  add("linear")->mutable_linear()->set_out(10);
  m.set_loss("softmax_cross_entropy");
  return m;
}

std::vector<std::unique_ptr<Layer>> Build(const v1::ModelSpec& m, int first, int last) {
  absl::StatusOr<std::vector<std::unique_ptr<Layer>>> layers = BuildLayers(m, first, last, 42);
  EXPECT_TRUE(layers.ok()) << layers.status();
  return layers.ok() ? std::move(*layers) : std::vector<std::unique_ptr<Layer>>{};
}

TEST(CnnModelTest, KernelsMatchTheRegistryAndTrain) {
  const v1::ModelSpec m = SmallResNet();
  absl::StatusOr<std::vector<LayerInfo>> infos = InferLayers(m);
  ASSERT_TRUE(infos.ok()) << infos.status();
  std::vector<std::unique_ptr<Layer>> layers = Build(m, 0, m.layers_size() - 1);
  ASSERT_EQ(layers.size(), infos->size());
  Tensor x = testing::RandomTensor({5, 1, 12, 12}, 1, 0, 1);
  std::vector<Tensor> acts(layers.size() + 1);
  std::vector<LayerCache> caches(layers.size());
  acts[0] = x;
  const ForwardContext ctx = testing::TrainingContext(42, 0, 0);
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerInfo& info = (*infos)[i];
    EXPECT_EQ(layers[i]->Type(), info.type);
    std::vector<Param*> params = layers[i]->Params();
    ASSERT_EQ(params.size(), info.params.size()) << info.type;
    for (size_t k = 0; k < params.size(); ++k) {
      EXPECT_EQ(params[k]->name, ParamName(info.index, info.params[k].name));
      EXPECT_EQ(params[k]->value.shape, info.params[k].shape) << params[k]->name;
    }
    std::vector<Param*> buffers = layers[i]->Buffers();
    ASSERT_EQ(buffers.size(), info.buffers.size()) << info.type;
    for (size_t k = 0; k < buffers.size(); ++k) {
      EXPECT_EQ(buffers[k]->name, ParamName(info.index, info.buffers[k].name));
      EXPECT_EQ(buffers[k]->value.shape, info.buffers[k].shape) << buffers[k]->name;
    }
    layers[i]->Forward(acts[i], &acts[i + 1], &caches[i], ctx);
    std::vector<int64_t> want{5};
    want.insert(want.end(), info.output_shape.begin(), info.output_shape.end());
    EXPECT_EQ(acts[i + 1].shape, want) << info.type;
  }
  const int32_t labels[5] = {0, 3, 9, 1, 3};
  Tensor dy, dx;
  SoftmaxCrossEntropy(acts.back(), labels, 0.2f, &dy, nullptr);
  for (int i = static_cast<int>(layers.size()) - 1; i >= 0; --i) {
    layers[i]->Backward(acts[i], acts[i + 1], dy, i > 0 ? &dx : nullptr, &caches[i]);
    std::swap(dy, dx);
  }
  for (Param* p : CollectParams(layers)) EXPECT_GT(testing::MaxAbs(p->grad.data), 0) << p->name;
}

TEST(CnnModelTest, AnySplitGivesBitwiseTheSameInitialWeights) {
  const v1::ModelSpec m = SmallResNet();
  std::vector<std::unique_ptr<Layer>> whole = Build(m, 0, m.layers_size() - 1);
  std::vector<std::unique_ptr<Layer>> tail = Build(m, 5, m.layers_size() - 1);
  std::vector<Param*> a = CollectParams(whole);
  std::vector<Param*> b = CollectParams(tail);
  ASSERT_LT(b.size(), a.size());
  const size_t offset = a.size() - b.size();
  for (size_t i = 0; i < b.size(); ++i) {
    EXPECT_EQ(a[offset + i]->name, b[i]->name);
    EXPECT_EQ(a[offset + i]->value.data, b[i]->value.data) << b[i]->name;
  }
}

}  // namespace
}  // namespace dapple::kernels
