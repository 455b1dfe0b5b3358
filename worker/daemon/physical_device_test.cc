#include "worker/daemon/physical_device.h"

#include "gtest/gtest.h"

namespace dapple::worker {
namespace {

TEST(PhysicalDeviceTest, FormatsTheUuidAsNvidiaSmiDoes) {
  const unsigned char bytes[16] = {0x8c, 0x1a, 0x3f, 0x2e, 0x00, 0x12, 0xab, 0xcd,
                                   0xef, 0x01, 0x23, 0x45, 0x67, 0x89, 0x0a, 0xff};
  EXPECT_EQ(FormatGpuUuid(bytes), "GPU-8c1a3f2e-0012-abcd-ef01-234567890aff");
}

TEST(PhysicalDeviceTest, CpuAndUnknownDevicesHaveNone) {
  EXPECT_EQ(PhysicalDevice("cpu"), "");
  EXPECT_EQ(PhysicalDevice("tpu:0"), "");
  EXPECT_EQ(PhysicalDevice(""), "");
}

}  // namespace
}  // namespace dapple::worker
