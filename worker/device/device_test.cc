#include "worker/device/device.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST(ParseDeviceTest, AcceptsCpuAndCudaN) {
  struct Case {
    const char* text;
    DeviceId::Kind kind;
    int index;
  };
  for (const Case& c :
       {Case{"cpu", DeviceId::Kind::kCpu, 0}, Case{"cuda:0", DeviceId::Kind::kCuda, 0},
        Case{"cuda:7", DeviceId::Kind::kCuda, 7}, Case{"cuda:10", DeviceId::Kind::kCuda, 10},
        Case{"cuda:1023", DeviceId::Kind::kCuda, 1023}}) {
    absl::StatusOr<DeviceId> id = ParseDevice(c.text);
    ASSERT_TRUE(id.ok()) << c.text << ": " << id.status();
    EXPECT_EQ(id->kind, c.kind) << c.text;
    EXPECT_EQ(id->index, c.index) << c.text;
    EXPECT_EQ(id->ToString(), c.text);  // the accepted form is the canonical one
  }
}

TEST(ParseDeviceTest, RejectsEverythingElse) {
  for (const char* bad : {"",
                          "CPU",
                          "gpu",
                          "cuda",
                          "cuda:",
                          "cuda:-1",
                          "cuda:+1",
                          "cuda:01",
                          "cuda:00",
                          "cuda:1024",
                          "cuda:99999999999999999999",
                          "cuda:1 ",
                          " cpu",
                          "cpu ",
                          "cuda: 1",
                          "cuda:0x1",
                          "cuda:1a",
                          "CUDA:0",
                          "cuda0",
                          "cpu:0"}) {
    absl::StatusOr<DeviceId> id = ParseDevice(bad);
    ASSERT_FALSE(id.ok()) << "'" << bad << "' was accepted as " << id->ToString();
    EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(id.status().message()),
                HasSubstr("'" + std::string(bad) +
                          "' is not a device: use \"cpu\" or \"cuda:N\" "
                          "with N in 0..1023"));
  }
}

TEST(DeviceIdTest, Equality) {
  EXPECT_EQ((DeviceId{DeviceId::Kind::kCuda, 2}), (DeviceId{DeviceId::Kind::kCuda, 2}));
  EXPECT_FALSE((DeviceId{DeviceId::Kind::kCuda, 2}) == (DeviceId{DeviceId::Kind::kCuda, 3}));
  EXPECT_FALSE((DeviceId{DeviceId::Kind::kCpu, 0}) == (DeviceId{DeviceId::Kind::kCuda, 0}));
}

TEST(ProbeCudaTest, IsConsistentAndCached) {
  const CudaProbe& p = ProbeCuda();
  EXPECT_EQ(&p, &ProbeCuda());
  EXPECT_GE(p.count, 0);
  EXPECT_EQ(p.names.size(), static_cast<size_t>(p.count));
  if (p.count == 0) {
    EXPECT_FALSE(p.reason.empty());
  } else {
    EXPECT_EQ(p.reason, "");
    for (const std::string& n : p.names) EXPECT_THAT(n, HasSubstr(" GiB)"));
  }
}

// ---- Behaviour on a machine without a usable GPU (every build machine of this project) ----

class NoGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (ProbeCuda().count > 0) GTEST_SKIP() << "this machine has a GPU";
  }
};

TEST_F(NoGpuTest, ProbeSaysWhy) {
  const std::string& reason = ProbeCuda().reason;
  EXPECT_THAT(ProbeCuda().names, IsEmpty());
#if DAPPLE_HAVE_CUDA
  // The runtime's own error names the failing call, e.g. cudaErrorInsufficientDriver 35.
  EXPECT_THAT(reason, HasSubstr("cudaGetDeviceCount: cudaError")) << reason;
#else
  EXPECT_THAT(reason, HasSubstr("built without CUDA")) << reason;
#endif
  EXPECT_EQ(reason.find('\n'), std::string::npos) << "one line: " << reason;
}

TEST_F(NoGpuTest, DefaultIsCpu) { EXPECT_THAT(DefaultDevices(), ElementsAre("cpu")); }

TEST_F(NoGpuTest, CudaWithoutFallbackNamesDeviceReasonAndRemedy) {
  std::string warning = "stale";
  absl::StatusOr<std::vector<std::string>> r = ResolveDevices({"cuda:0"}, false, &warning);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string msg(r.status().message());
  EXPECT_EQ(msg, "--devices cuda:0: " + ProbeCuda().reason +
                     " (start with --devices cpu, or --cpu-fallback)");
  EXPECT_EQ(warning, "");
}

TEST_F(NoGpuTest, FirstUnusableDeviceIsNamed) {
  absl::StatusOr<std::vector<std::string>> r = ResolveDevices({"cpu", "cuda:3"}, false, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("--devices cuda:3: "));
}

TEST_F(NoGpuTest, FallbackOffersCpuWithWarning) {
  std::string warning;
  absl::StatusOr<std::vector<std::string>> r = ResolveDevices({"cuda:0"}, true, &warning);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(*r, ElementsAre("cpu"));
  EXPECT_EQ(warning,
            "--devices cuda:0: " + ProbeCuda().reason + "; offering cpu instead (--cpu-fallback)");
}

TEST_F(NoGpuTest, FallbackReplacesAllCudaByOneCpu) {
  std::string warning;
  absl::StatusOr<std::vector<std::string>> r = ResolveDevices({"cuda:1", "cuda:0"}, true, &warning);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(*r, ElementsAre("cpu"));
  EXPECT_THAT(warning, HasSubstr("--devices cuda:1,cuda:0: "));
  EXPECT_THAT(warning, HasSubstr("offering cpu instead"));
}

TEST_F(NoGpuTest, FallbackKeepsAListedCpuOnce) {
  std::string warning;
  absl::StatusOr<std::vector<std::string>> r = ResolveDevices({"cuda:0", "cpu"}, true, &warning);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(*r, ElementsAre("cpu"));
  EXPECT_THAT(warning, HasSubstr("--devices cuda:0: "));
  EXPECT_THAT(warning, HasSubstr("offering the other devices only"));
}

TEST_F(NoGpuTest, FallbackWithoutWarningPointer) {
  absl::StatusOr<std::vector<std::string>> r = ResolveDevices({"cuda:0"}, true, nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(*r, ElementsAre("cpu"));
}

// ---- Behaviour on a machine with a GPU (the H200 run) ----

class WithGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (ProbeCuda().count == 0) GTEST_SKIP() << "no usable GPU: " << ProbeCuda().reason;
  }
};

TEST_F(WithGpuTest, DefaultIsEveryCudaDevice) {
  std::vector<std::string> want;
  for (int i = 0; i < ProbeCuda().count; ++i) want.push_back("cuda:" + std::to_string(i));
  EXPECT_EQ(DefaultDevices(), want);
}

TEST_F(WithGpuTest, ExistingCudaDeviceResolves) {
  std::string warning = "stale";
  absl::StatusOr<std::vector<std::string>> r = ResolveDevices({"cuda:0", "cpu"}, false, &warning);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(*r, ElementsAre("cuda:0", "cpu"));
  EXPECT_EQ(warning, "");
}

TEST_F(WithGpuTest, MissingIndexNamesTheCount) {
  const int n = ProbeCuda().count;
  const std::string missing = "cuda:" + std::to_string(n);
  absl::StatusOr<std::vector<std::string>> r = ResolveDevices({missing}, false, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("--devices " + missing + ": no such device: this machine has " +
                        std::to_string(n) + " CUDA device"));

  std::string warning;
  r = ResolveDevices({"cuda:0", missing}, true, &warning);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(*r, ElementsAre("cuda:0", "cpu"));
  EXPECT_THAT(warning, HasSubstr("--devices " + missing + ": no such device"));
}

// ---- Independent of the machine ----

TEST(ResolveDevicesTest, CpuAlwaysResolves) {
  for (bool fallback : {false, true}) {
    std::string warning = "stale";
    absl::StatusOr<std::vector<std::string>> r = ResolveDevices({"cpu"}, fallback, &warning);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_THAT(*r, ElementsAre("cpu"));
    EXPECT_EQ(warning, "");
  }
}

TEST(ResolveDevicesTest, SyntaxErrorsAndRepeatsAreInvalidArgument) {
  for (bool fallback : {false, true}) {
    absl::StatusOr<std::vector<std::string>> r = ResolveDevices({"cpu", "cpu"}, fallback, nullptr);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("--devices lists 'cpu' twice"));

    r = ResolveDevices({"cuda:0", "cuda:0"}, fallback, nullptr);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("--devices lists 'cuda:0' twice"));

    r = ResolveDevices({"cpu", "gpu0"}, fallback, nullptr);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("--devices 'gpu0' is not a device"));

    r = ResolveDevices({}, fallback, nullptr);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("at least one device"));
  }
}

}  // namespace
}  // namespace dapple::worker
