#include "worker/daemon/device_memory.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::worker {
namespace {

TEST(ParseMemorySizeTest, BytesAndBinaryUnits) {
  EXPECT_EQ(*ParseMemorySize("1024"), 1024);
  EXPECT_EQ(*ParseMemorySize("16GiB"), int64_t{16} << 30);
  EXPECT_EQ(*ParseMemorySize("512 MiB"), int64_t{512} << 20);
  EXPECT_EQ(*ParseMemorySize("3KiB"), 3 * 1024);
  EXPECT_EQ(*ParseMemorySize("1TiB"), int64_t{1} << 40);
}

TEST(ParseMemorySizeTest, RefusesWhatIsNotAPositiveSize) {
  for (const char* bad : {"", "0", "0GiB", "-1", "1.5GiB", "16GB", "GiB", "lots", "2000000TiB"}) {
    absl::StatusOr<int64_t> v = ParseMemorySize(bad);
    ASSERT_FALSE(v.ok()) << bad << " -> " << *v;
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(v.status().message()),
                ::testing::StartsWith(std::string("--device-memory '") + bad + "'"));
  }
}

TEST(ProbeDeviceMemoryTest, ConfiguredWinsAndCpuIsTheSharedHostRam) {
  const DeviceMemory configured = ProbeDeviceMemory("cpu", 123456);
  EXPECT_EQ(configured.bytes, 123456);
  EXPECT_FALSE(configured.shared);
  const DeviceMemory cpu = ProbeDeviceMemory("cpu", 0);
  EXPECT_GT(cpu.bytes, int64_t{64} << 20);  // any machine that runs the tests has more
  EXPECT_TRUE(cpu.shared);
}

// --device-memory above what the device has is accepted (a test may want a smaller or larger
// figure) but said at start: a fresh user's 1 TiB on a 23.5 GiB host was planned on silently.
TEST(DeviceMemoryWarningTest, MoreThanTheHostHasIsSaid) {
  const int64_t ram = ProbeDeviceMemory("cpu", 0).bytes;
  ASSERT_GT(ram, 0);
  EXPECT_EQ(DeviceMemoryWarning("cpu", 0), "");
  EXPECT_EQ(DeviceMemoryWarning("cpu", ram / 2), "");
  const std::string warning = DeviceMemoryWarning("cpu", int64_t{1} << 50);
  EXPECT_THAT(warning, ::testing::StartsWith("--device-memory 1.00 PiB is more than this host's "));
  EXPECT_THAT(warning, ::testing::HasSubstr(" of RAM: the planner plans on the flag's figure"));
}

}  // namespace
}  // namespace dapple::worker
