#include "kernels/cpu/layer_factory.h"

#include <algorithm>
#include <string>
#include <vector>

#include "common/model/layer_registry.h"
#include "gtest/gtest.h"

namespace dapple::kernels {
namespace {

TEST(LayerFactoryTest, EveryTypeTheRegistryPromisesACpuKernelHasOne) {
  // The registry's record is what the coordinator admits jobs by: a type it lists without a
  // factory here would pass submit and fail on the workers.
  const std::vector<std::string> factory = CpuKernelTypes();
  for (const std::string& type : TypesWithKernel(KernelBackend::kCpu)) {
    EXPECT_NE(std::find(factory.begin(), factory.end(), type), factory.end()) << type;
  }
}

TEST(LayerFactoryTest, EveryFactoryTypeIsARegisteredTypeTheRegistryKnowsHasACpuKernel) {
  // The other way round: a kernel the registry does not record would be refused at submit.
  const std::vector<std::string> promised = TypesWithKernel(KernelBackend::kCpu);
  for (const std::string& type : CpuKernelTypes()) {
    EXPECT_NE(FindLayerType(type), nullptr) << type;
    EXPECT_NE(std::find(promised.begin(), promised.end(), type), promised.end()) << type;
  }
}

}  // namespace
}  // namespace dapple::kernels
