#include "dapplectl/plan_inputs.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::ctl {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// In a folder of this process's own: ctest runs test cases as parallel processes, and files of
// one name written by two of them race.
std::string Write(const std::string& name, const std::string& text) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/plan_inputs_test.", getpid());
  mkdir(dir.c_str(), 0755);
  const std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

constexpr char kProfile[] =
    "node1 -- Input0 -- forward_compute_time=0, backward_compute_time=0, "
    "activation_size=1024, parameter_size=0\n"
    "node2 -- Linear(caf\xE9) -- forward_compute_time=1.5, backward_compute_time=3, "
    "activation_size=512, parameter_size=4096\n"
    "\tnode1 -- node2\n";

TEST(PlanInputsTest, ReadsAProfileEscapingBytesThatAreNotUtf8) {
  const std::string path = Write("tiny-pbs-4.txt", kProfile);
  absl::StatusOr<v1::ModelProfile> p = ReadPlanProfile(path, 0);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->batch_size(), 4);  // from the file name
  ASSERT_EQ(p->layers_size(), 2);
  EXPECT_EQ(p->layers(1).name(), "Linear(caf\\xE9)");
  EXPECT_DOUBLE_EQ(p->layers(1).forward_ms(), 1.5);
  p = ReadPlanProfile(path, 16);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->batch_size(), 16);  // as given
}

TEST(PlanInputsTest, ABadProfileIsReportedByFileAndLine) {
  const std::string path = Write(
      "bad-pbs-2.txt",
      "node1 -- Linear -- forward_compute_time=1, backward_compute_time=2, activation_size=8, "
      "parameter_size=0\n"
      "node2 -- Linear -- forward_compute_time=oops, backward_compute_time=2, "
      "activation_size=8, parameter_size=0\n");
  absl::StatusOr<v1::ModelProfile> p = ReadPlanProfile(path, 0);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(p.status().message()), StartsWith(path + ":2:"));
  EXPECT_THAT(p.status().message(), HasSubstr("forward_compute_time"));
  const std::string missing = ::testing::TempDir() + "/no-such-profile.txt";
  EXPECT_THAT(ReadPlanProfile(missing, 2).status().message(), HasSubstr(missing));
}

TEST(PlanInputsTest, ReadsAClusterAndReportsABadOneByFileAndLine) {
  const std::string good = Write("two.yaml",
                                 "name: two\n"
                                 "nodes: 2\n"
                                 "devices_per_node: 8\n"
                                 "device_memory: 16 GiB\n"
                                 "intra_node: {bandwidth: 130 GB/s, latency: 5 us}\n"
                                 "inter_node: {bandwidth: 25 Gbit/s, latency: 10 us}\n");
  absl::StatusOr<v1::ClusterTopology> c = ReadPlanCluster(good);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->nodes_size(), 2);
  EXPECT_EQ(c->nodes(1).devices(), 8);
  EXPECT_EQ(c->nodes(0).device_memory_bytes(), int64_t{16} << 30);
  const std::string bad = Write("bad.yaml",
                                "nodes: 2\n"
                                "devices_per_node: 8\n"
                                "device_memory: lots\n"
                                "intra_node: {bandwidth: 130 GB/s, latency: 5 us}\n"
                                "inter_node: {bandwidth: 25 Gbit/s, latency: 10 us}\n");
  c = ReadPlanCluster(bad);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(c.status().message()), StartsWith(bad + ":3:"));
  EXPECT_THAT(c.status().message(), HasSubstr("device_memory"));
}

}  // namespace
}  // namespace dapple::ctl
