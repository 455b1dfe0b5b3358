#include "common/model_info.h"

#include <string>
#include <vector>

#include "common/model/layer_registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple {
namespace {

using ::testing::ElementsAre;

v1::ModelSpec MakeModel(const std::vector<int64_t>& input_shape,
                        const std::vector<std::pair<std::string, int64_t>>& layers) {
  v1::ModelSpec m;
  for (int64_t d : input_shape) m.add_input_shape(d);
  for (const auto& [type, out] : layers) {
    v1::LayerSpec* l = m.add_layers();
    l->set_type(type);
    if (type == "linear") l->mutable_linear()->set_out(out);
  }
  m.set_loss("softmax_cross_entropy");
  return m;
}

// flatten, linear 32, relu, linear 16, relu, linear 10 on [1, 4, 4].
v1::ModelSpec SmallMlp() {
  return MakeModel(
      {1, 4, 4},
      {{"flatten", 0}, {"linear", 32}, {"relu", 0}, {"linear", 16}, {"relu", 0}, {"linear", 10}});
}

void ExpectInvalid(const v1::ModelSpec& m, const std::string& message) {
  absl::StatusOr<std::vector<LayerInfo>> infos = InferLayers(m);
  ASSERT_FALSE(infos.ok());
  EXPECT_EQ(infos.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(infos.status().message(), message);
}

TEST(NumElementsTest, ProductAndEmpty) {
  EXPECT_EQ(NumElements({}), 1);
  EXPECT_EQ(NumElements({1, 28, 28}), 784);
  EXPECT_EQ(NumElements({3, 0}), 0);
}

TEST(InferLayersTest, SmallMlpShapesParamsFlops) {
  absl::StatusOr<std::vector<LayerInfo>> infos = InferLayers(SmallMlp());
  ASSERT_TRUE(infos.ok()) << infos.status();
  ASSERT_EQ(infos->size(), 6u);
  const std::vector<LayerInfo>& l = *infos;
  for (int i = 0; i < 6; ++i) EXPECT_EQ(l[i].index, i);

  EXPECT_EQ(l[0].type, "flatten");
  EXPECT_THAT(l[0].input_shape, ElementsAre(1, 4, 4));
  EXPECT_THAT(l[0].output_shape, ElementsAre(16));
  EXPECT_EQ(l[0].param_count, 0);
  EXPECT_EQ(l[0].forward_flops, 0);
  EXPECT_EQ(l[0].backward_flops, 0);
  EXPECT_EQ(l[0].output_bytes, 16 * 4);

  EXPECT_EQ(l[1].type, "linear");
  EXPECT_THAT(l[1].input_shape, ElementsAre(16));
  EXPECT_THAT(l[1].output_shape, ElementsAre(32));
  EXPECT_EQ(l[1].param_count, 16 * 32 + 32);  // 544
  EXPECT_EQ(l[1].forward_flops, 2.0 * 16 * 32);
  EXPECT_EQ(l[1].backward_flops, 4.0 * 16 * 32);
  EXPECT_EQ(l[1].output_bytes, 32 * 4);

  EXPECT_EQ(l[2].type, "relu");
  EXPECT_THAT(l[2].input_shape, ElementsAre(32));
  EXPECT_THAT(l[2].output_shape, ElementsAre(32));
  EXPECT_EQ(l[2].param_count, 0);
  EXPECT_EQ(l[2].forward_flops, 32);
  EXPECT_EQ(l[2].backward_flops, 32);
  EXPECT_EQ(l[2].output_bytes, 32 * 4);

  EXPECT_THAT(l[3].output_shape, ElementsAre(16));
  EXPECT_EQ(l[3].param_count, 32 * 16 + 16);  // 528
  EXPECT_EQ(l[3].forward_flops, 2.0 * 32 * 16);
  EXPECT_EQ(l[3].backward_flops, 4.0 * 32 * 16);

  EXPECT_THAT(l[4].output_shape, ElementsAre(16));
  EXPECT_EQ(l[4].forward_flops, 16);

  EXPECT_EQ(l[5].type, "linear");
  EXPECT_THAT(l[5].input_shape, ElementsAre(16));
  EXPECT_THAT(l[5].output_shape, ElementsAre(10));
  EXPECT_EQ(l[5].param_count, 16 * 10 + 10);  // 170
  EXPECT_EQ(l[5].forward_flops, 2.0 * 16 * 10);
  EXPECT_EQ(l[5].backward_flops, 4.0 * 16 * 10);
  EXPECT_EQ(l[5].output_bytes, 10 * 4);

  int64_t total = 0;
  for (const LayerInfo& info : l) total += info.param_count;
  EXPECT_EQ(total, 544 + 528 + 170);
}

TEST(InferLayersTest, GeluPreservesShapeAndCostsPerElement) {
  absl::StatusOr<std::vector<LayerInfo>> infos =
      InferLayers(MakeModel({2, 3}, {{"gelu", 0}, {"flatten", 0}, {"linear", 4}}));
  ASSERT_TRUE(infos.ok()) << infos.status();
  EXPECT_THAT((*infos)[0].output_shape, ElementsAre(2, 3));
  EXPECT_GT((*infos)[0].forward_flops, 0);
  EXPECT_GT((*infos)[0].backward_flops, 0);
  EXPECT_EQ((*infos)[0].output_bytes, 6 * 4);
  EXPECT_THAT((*infos)[1].output_shape, ElementsAre(6));
  EXPECT_EQ((*infos)[2].param_count, 6 * 4 + 4);
}

TEST(InferLayersTest, UnknownType) {
  ExpectInvalid(MakeModel({1, 4, 4}, {{"flatten", 0}, {"linear", 8}, {"relu", 0}, {"conv9", 0}}),
                "model.layers[3]: unknown layer type 'conv9'; known: "
                "flatten, linear, relu, gelu, dropout, embedding, layernorm, transformer_block, "
                "lm_head, conv2d, maxpool2d, avgpool2d, global_avgpool, batchnorm2d, "
                "residual_block");
  ExpectInvalid(MakeModel({4}, {{"", 0}}),
                "model.layers[0]: unknown layer type ''; known: "
                "flatten, linear, relu, gelu, dropout, embedding, layernorm, transformer_block, "
                "lm_head, conv2d, maxpool2d, avgpool2d, global_avgpool, batchnorm2d, "
                "residual_block");
}

TEST(InferLayersTest, LinearNeedsFlatInput) {
  ExpectInvalid(MakeModel({1, 28, 28}, {{"relu", 0}, {"linear", 10}}),
                "model.layers[1] (linear) needs a flat input, got [1, 28, 28] from model.layers[0] "
                "(relu): add a flatten layer before it");
}

TEST(InferLayersTest, LinearOutMustBePositive) {
  ExpectInvalid(MakeModel({1, 4, 4}, {{"flatten", 0}, {"relu", 0}, {"linear", 0}}),
                "model.layers[2].out 0 must be > 0");
  ExpectInvalid(MakeModel({16}, {{"linear", -3}}), "model.layers[0].out -3 must be > 0");
}

TEST(InferLayersTest, LinearTooLarge) {
  ExpectInvalid(MakeModel({1 << 20}, {{"linear", int64_t{1} << 21}}),
                "model.layers[0] (linear 1048576 -> 2097152) has 2199025352704 parameters, "
                "bringing the model to 2199025352704 (8192.01 GiB of fp32 weights), more than the "
                "maximum 2^28 (268435456, 1 GiB)");
}

TEST(InferLayersTest, LinearOutAtMost2To24) {
  ExpectInvalid(MakeModel({784}, {{"linear", 100000000}}),
                "model.layers[0].out 100000000 is more than the maximum 2^24 (16777216) output "
                "elements per sample");
  ExpectInvalid(MakeModel({1}, {{"linear", (int64_t{1} << 24) + 1}}),
                "model.layers[0].out 16777217 is more than the maximum 2^24 (16777216) output "
                "elements per sample");
  absl::StatusOr<std::vector<LayerInfo>> ok = InferLayers(MakeModel({1}, {{"linear", 1 << 24}}));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)[0].output_bytes, int64_t{4} << 24);
}

TEST(InferLayersTest, TotalParametersAtMost2To28) {
  // 16384 * 16383 + 16384 = 2^28 exactly: the largest model allowed.
  absl::StatusOr<std::vector<LayerInfo>> ok = InferLayers(MakeModel({16383}, {{"linear", 16384}}));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)[0].param_count, int64_t{1} << 28);
  ExpectInvalid(MakeModel({16384}, {{"linear", 16384}}),
                "model.layers[0] (linear 16384 -> 16384) has 268451840 parameters, bringing the "
                "model to 268451840 (1.00 GiB of fp32 weights), more than the maximum 2^28 "
                "(268435456, 1 GiB)");
  // Each layer fits alone; the sum does not, and the message names the layer that crosses it.
  ExpectInvalid(MakeModel({8192}, {{"linear", 16384}, {"relu", 0}, {"linear", 8192}}),
                "model.layers[2] (linear 16384 -> 8192) has 134225920 parameters, bringing the "
                "model to 268460032 (1.00 GiB of fp32 weights), more than the maximum 2^28 "
                "(268435456, 1 GiB)");
}

TEST(InferLayersTest, ParametersOfAnotherTypeAreRefused) {
  // Only a client that builds the proto itself can do this: the YAML parser reads each key into
  // its own type's message.
  v1::ModelSpec m = MakeModel({1, 4, 4}, {{"flatten", 0}, {"linear", 8}, {"relu", 0}});
  m.mutable_layers(2)->mutable_linear()->set_out(5);
  ExpectInvalid(m, "model.layers[2] (relu) sets parameters of linear: relu takes none");
  m = MakeModel({4}, {{"linear", 8}});
  m.mutable_layers(0)->mutable_dropout()->set_p(0.5);
  ExpectInvalid(m, "model.layers[0] (linear) sets parameters of dropout: linear takes linear");
  // An unknown type is reported as unknown, whatever its parameters.
  m = MakeModel({4}, {{"conv3d", 0}});
  m.mutable_layers(0)->mutable_linear()->set_out(3);
  ExpectInvalid(m,
                "model.layers[0]: unknown layer type 'conv3d'; known: flatten, linear, relu, gelu, "
                "dropout, embedding, layernorm, transformer_block, lm_head, conv2d, maxpool2d, "
                "avgpool2d, global_avgpool, batchnorm2d, residual_block");
}

TEST(InferLayersTest, AtMost4096Layers) {
  std::vector<std::pair<std::string, int64_t>> layers(4096, {"relu", 0});
  EXPECT_TRUE(InferLayers(MakeModel({4}, layers)).ok());
  layers.push_back({"relu", 0});
  ExpectInvalid(MakeModel({4}, layers), "model.layers has 4097 layers, more than the maximum 4096");
}

TEST(InferLayersTest, EmptyModelOrInputShape) {
  ExpectInvalid(MakeModel({1, 4, 4}, {}),
                "model.layers is empty: a model needs at least one layer");
  ExpectInvalid(MakeModel({}, {{"relu", 0}}),
                "model.input_shape is empty: give the per-sample shape, e.g. [1, 28, 28]");
}

TEST(InferLayersTest, InputShapeDimsMustBePositiveAndBounded) {
  ExpectInvalid(MakeModel({1, 0, 4}, {{"flatten", 0}}), "model.input_shape[1] 0 must be > 0");
  ExpectInvalid(MakeModel({-2}, {{"relu", 0}}), "model.input_shape[0] -2 must be > 0");
  ExpectInvalid(MakeModel({1 << 20, 1 << 20, 2}, {{"flatten", 0}}),
                "model.input_shape [1048576, 1048576, 2] has more than the maximum 2^24 "
                "(16777216) elements per sample");
  ExpectInvalid(MakeModel({4097, 4096}, {{"flatten", 0}}),
                "model.input_shape [4097, 4096] has more than the maximum 2^24 (16777216) "
                "elements per sample");
  // Dims near int64's limit are refused before their product can overflow.
  ExpectInvalid(MakeModel({int64_t{1} << 62, int64_t{1} << 62}, {{"flatten", 0}}),
                "model.input_shape [4611686018427387904, 4611686018427387904] has more than the "
                "maximum 2^24 (16777216) elements per sample");
  EXPECT_TRUE(InferLayers(MakeModel({4096, 4096}, {{"flatten", 0}})).ok());
}

// A stage holds per sample its input (fp32, token ids too), every layer's output and what each
// layer saves for its backward.
TEST(CheckKernelsTest, EveryJobNeedsCpuKernelsAndCudaJobsCudaOnes) {
  v1::ModelSpec m = SmallMlp();
  for (const char* device_type : {"", "any", "cpu", "cuda", "emulated"}) {
    EXPECT_TRUE(CheckKernels(m, device_type, false).ok()) << device_type;
  }
  EXPECT_TRUE(CheckKernels(m, "cuda", true).ok());
  // Find a type without a CPU kernel, if this build has one.
  for (const std::string& type : LayerTypeNames()) {
    if (HasKernel(type, KernelBackend::kCpu)) continue;
    m.mutable_layers(2)->set_type(type);
    for (const char* device_type : {"", "any", "cpu", "cuda", "emulated"}) {
      int layer = -1;
      const absl::Status s = CheckKernels(m, device_type, false, &layer);
      EXPECT_EQ(s, NoKernelError(2, type, KernelBackend::kCpu)) << device_type;
      EXPECT_EQ(layer, 2);
    }
    break;
  }
}

// The image layers run in fp32 only: a bf16 job with one is refused at its layer, an fp32 one
// (and a bf16 job's other layers) pass.
TEST(CheckKernelsTest, Bf16JobsNeedBf16CudaKernels) {
  v1::ModelSpec m = SmallMlp();
  m.mutable_layers(2)->set_type("conv2d");
  ASSERT_FALSE(HasKernel("conv2d", KernelBackend::kCudaBf16));
  int layer = -1;
  EXPECT_EQ(CheckKernels(m, "cuda", true, &layer),
            NoKernelError(2, "conv2d", KernelBackend::kCudaBf16));
  EXPECT_EQ(layer, 2);
  EXPECT_THAT(std::string(NoKernelError(2, "conv2d", KernelBackend::kCudaBf16).message()),
              ::testing::StartsWith("model.layers[2] (conv2d): no bf16 CUDA kernel in this "
                                    "build; the types with one: flatten, linear, relu, gelu, "
                                    "dropout, embedding, layernorm, transformer_block, lm_head"));
  EXPECT_TRUE(CheckKernels(m, "cuda", false).ok());
}

// A batch norm over a [C, 1, 1] image sees one value per channel per sample: one row of a
// micro-batch is too few; over [C, 2, 2] one row gives four values.
TEST(BatchNormOverOneValueTest, RowsTimesValuesPerSample) {
  v1::ModelSpec m = MakeModel({1, 4, 4}, {{"conv2d", 0}, {"batchnorm2d", 0}, {"flatten", 0}});
  m.mutable_layers(0)->mutable_conv2d()->set_out_channels(3);
  m.mutable_layers(0)->mutable_conv2d()->set_kernel(4);
  absl::StatusOr<std::vector<LayerInfo>> infos = InferLayers(m);
  ASSERT_TRUE(infos.ok()) << infos.status();
  EXPECT_EQ((*infos)[0].batch_norm_values_per_sample, 0);
  EXPECT_EQ((*infos)[1].batch_norm_values_per_sample, 1);
  ASSERT_NE(BatchNormOverOneValue(*infos, 1), nullptr);
  EXPECT_EQ(BatchNormOverOneValue(*infos, 1)->index, 1);
  EXPECT_EQ(BatchNormOverOneValue(*infos, 2), nullptr);
  EXPECT_EQ(MinRowsPerReplica(*infos), 2);

  m.mutable_layers(0)->mutable_conv2d()->set_kernel(3);  // [3, 2, 2]
  infos = InferLayers(m);
  ASSERT_TRUE(infos.ok()) << infos.status();
  EXPECT_EQ((*infos)[1].batch_norm_values_per_sample, 4);
  EXPECT_EQ(BatchNormOverOneValue(*infos, 1), nullptr);
  EXPECT_EQ(MinRowsPerReplica(*infos), 1);

  // A residual block of stride 4 on [1, 4, 4]: its batch norms see its [2, 1, 1] output.
  v1::ModelSpec block = MakeModel({1, 4, 4}, {{"residual_block", 0}, {"flatten", 0}});
  block.mutable_layers(0)->mutable_residual_block()->set_out_channels(2);
  block.mutable_layers(0)->mutable_residual_block()->set_stride(4);
  infos = InferLayers(block);
  ASSERT_TRUE(infos.ok()) << infos.status();
  EXPECT_THAT((*infos)[0].output_shape, ElementsAre(2, 1, 1));
  EXPECT_EQ((*infos)[0].batch_norm_values_per_sample, 1);
  EXPECT_EQ(MinRowsPerReplica(*infos), 2);
  EXPECT_EQ(MinRowsPerReplica(*InferLayers(SmallMlp())), 1);
}

TEST(StageActivationBytesTest, InputOutputsAndSavedBytes) {
  v1::ModelSpec model;
  model.add_input_shape(16);
  model.set_input_type("tokens");
  v1::LayerSpec* l = model.add_layers();
  l->set_type("embedding");
  l->mutable_embedding()->set_vocab(32);
  l->mutable_embedding()->set_dim(8);
  l = model.add_layers();
  l->set_type("transformer_block");
  l->mutable_transformer_block()->set_heads(2);
  model.add_layers()->set_type("layernorm");
  const std::vector<LayerInfo> infos = InferLayers(model).value();
  EXPECT_EQ(InputBytes(infos[0]), 16 * 4);  // 16 token ids as floats
  EXPECT_EQ(InputBytes(infos[1]), 16 * 8 * 4);
  // The forward's saved tensors, then the gradients BackwardInput keeps for BackwardWeight.
  const int64_t block_saved =
      (7 * 16 * 8 + 2 * 16 * 32 + 2 * 16 * 16 + 4 * 16 + 7 * 16 * 8 + 16 * 32) * 4;
  EXPECT_EQ(infos[1].saved_bytes, block_saved);
  EXPECT_EQ(StageActivationBytesPerSample(infos, 0, 0), 16 * 4 + 16 * 8 * 4);
  EXPECT_EQ(StageActivationBytesPerSample(infos, 1, 2),
            16 * 8 * 4 + (16 * 8 * 4 + block_saved) + (16 * 8 * 4 + 2 * 16 * 4));
  EXPECT_EQ(StageActivationBytesPerSample(infos, 0, 2),
            16 * 4 + 3 * 16 * 8 * 4 + block_saved + 2 * 16 * 4);
}

}  // namespace
}  // namespace dapple
