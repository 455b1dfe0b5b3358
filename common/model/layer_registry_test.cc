// The registry's record of which backends have kernels (layer_registry.h).
#include "common/model/layer_registry.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple {
namespace {

using ::testing::Contains;
using ::testing::Not;

TEST(LayerRegistryTest, EveryTypeIsListedOnce) {
  const std::vector<std::string> names = LayerTypeNames();
  for (const std::string& name : names) {
    EXPECT_EQ(std::count(names.begin(), names.end(), name), 1) << name;
    ASSERT_NE(FindLayerType(name), nullptr) << name;
    EXPECT_EQ(FindLayerType(name)->name(), name);
  }
  EXPECT_EQ(FindLayerType("conv3d"), nullptr);
}

TEST(LayerRegistryTest, KernelsPerBackend) {
  EXPECT_TRUE(HasKernel("linear", KernelBackend::kCpu));
  EXPECT_TRUE(HasKernel("transformer_block", KernelBackend::kCuda));
  EXPECT_FALSE(HasKernel("conv3d", KernelBackend::kCpu));
  // A CUDA kernel needs the CPU one: the CUDA backend initialises from the CPU layers.
  for (const std::string& type : TypesWithKernel(KernelBackend::kCuda)) {
    EXPECT_TRUE(HasKernel(type, KernelBackend::kCpu)) << type;
  }
  EXPECT_THAT(TypesWithKernel(KernelBackend::kCpu), Contains("linear"));
  EXPECT_THAT(TypesWithKernel(KernelBackend::kCpu), Not(Contains("conv3d")));
  EXPECT_EQ(KernelBackendName(KernelBackend::kCpu), "CPU");
  EXPECT_EQ(KernelBackendName(KernelBackend::kCuda), "CUDA");
  EXPECT_EQ(KernelBackendName(KernelBackend::kCudaBf16), "bf16 CUDA");
  // A bf16 kernel is a CUDA kernel in bf16: the backend builds it from the same table.
  for (const std::string& type : TypesWithKernel(KernelBackend::kCudaBf16)) {
    EXPECT_TRUE(HasKernel(type, KernelBackend::kCuda)) << type;
  }
  EXPECT_TRUE(HasKernel("transformer_block", KernelBackend::kCudaBf16));
  EXPECT_FALSE(HasKernel("conv2d", KernelBackend::kCudaBf16));
}

TEST(LayerRegistryTest, NoKernelErrorNamesTheLayerAndWhatRuns) {
  const absl::Status s = NoKernelError(3, "conv2d", KernelBackend::kCpu);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  const std::string message(s.message());
  EXPECT_EQ(message.rfind("model.layers[3] (conv2d): no CPU kernel in this build; the types with "
                          "one: flatten, linear, ",
                          0),
            0u)
      << message;
}

}  // namespace
}  // namespace dapple
