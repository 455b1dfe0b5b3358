// StagingTransport over a real UcxTransport between two threads of this process, each with its
// own CudaDevice on cuda:0 (rank 0 and rank 1). Every blocking call has a 20 s timeout, so a bug
// fails instead of hanging. Skipped without a GPU.
#include "worker/comm/cuda/staging_transport.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/status.h"
#include "common/testing/assert_ok.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/comm/cuda/comm_cuda_testing.h"

namespace dapple::worker::cuda_testing {
namespace {

struct Rank {
  std::unique_ptr<UcxTransport> ucx;
  std::unique_ptr<CudaDevice> device;
  std::unique_ptr<StagingTransport> staging;
};

class StagingTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string reason;
    if (!GpuUsable(&reason)) GTEST_SKIP() << reason;
    Transport::Options options;
    options.timeout = absl::Seconds(20);
    for (int r = 0; r < 2; ++r) {
      auto ucx = UcxTransport::Create(r, options);
      ASSERT_OK(ucx.status());
      ranks_[r].ucx = std::move(*ucx);
      auto device = CudaDevice::Open(0);
      ASSERT_OK(device.status());
      ranks_[r].device = std::move(*device);
    }
    for (int r = 0; r < 2; ++r) {
      ASSERT_OK(ranks_[r].ucx->Connect(1 - r, ranks_[1 - r].ucx->LocalAddress(),
                                       absl::StrFormat("thread rank %d", 1 - r)));
      ranks_[r].staging =
          std::make_unique<StagingTransport>(ranks_[r].ucx.get(), ranks_[r].device.get());
    }
  }

  // Runs `body(rank)` on two threads at once and returns their results.
  template <typename Body>
  std::vector<absl::Status> OnBothRanks(Body body) {
    std::vector<absl::Status> result(2);
    std::thread other([&] { result[1] = body(1); });
    result[0] = body(0);
    other.join();
    return result;
  }

  Rank ranks_[2];
};

TEST_F(StagingTransportTest, RoundTripsDeviceBuffersOfManySizesBothWays) {
  const std::vector<size_t> sizes = {0, 1, 4099, size_t{1} << 20, (size_t{3} << 20) + 5};
  const std::vector<absl::Status> results = OnBothRanks([&](int r) {
    return RunExchange(r, *ranks_[r].staging, *ranks_[r].device, {sizes, sizes}, nullptr);
  });
  EXPECT_TRUE(results[0].ok()) << results[0];
  EXPECT_TRUE(results[1].ok()) << results[1];
}

TEST_F(StagingTransportTest, ReusesPinnedBuffersAcrossSteps) {
  // Four 256 KiB messages each way per step: at most 4 sends (until WaitSends) and 4 receives
  // (until their copies ran) hold a buffer at once, so a pool that reuses stays at <= 8 buffers
  // for any number of steps; without reuse 3 steps would need up to 24.
  constexpr size_t kBytes = size_t{256} << 10;
  const std::vector<size_t> sizes(4, kBytes);
  std::vector<size_t> pinned_after_step[2];
  const std::vector<absl::Status> results = OnBothRanks([&](int r) {
    return RunExchange(r, *ranks_[r].staging, *ranks_[r].device, {sizes, sizes, sizes},
                       [&, r](int) {
                         pinned_after_step[r].push_back(ranks_[r].staging->pinned_bytes());
                         return absl::OkStatus();
                       });
  });
  ASSERT_TRUE(results[0].ok()) << results[0];
  ASSERT_TRUE(results[1].ok()) << results[1];
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(pinned_after_step[r].size(), 3u);
    EXPECT_GE(pinned_after_step[r][0], 4 * kBytes) << "rank " << r << ": sends alone need 4";
    EXPECT_LE(pinned_after_step[r][2], 8 * kBytes) << "rank " << r;
  }
}

TEST_F(StagingTransportTest, HostErrorsPassThroughAndStick) {
  // Rank 1 sends 100 bytes; rank 0 expects 64: UCX's kInternal naming both sizes comes back
  // unchanged, and every later call returns it.
  std::vector<uint8_t> payload = Pattern(100, 5);
  absl::StatusOr<DeviceMemory> src = DeviceMemory::From(payload);
  absl::StatusOr<DeviceMemory> dst = DeviceMemory::Zeros(64);
  ASSERT_OK(src.status());
  ASSERT_OK(dst.status());
  const std::vector<absl::Status> results = OnBothRanks([&](int r) -> absl::Status {
    if (r == 1) {
      DAPPLE_RETURN_IF_ERROR(ranks_[1].staging->Send(0, 9, src->data(), src->bytes()));
      // UCX moves the message only while rank 1 progresses. WaitSends returns once it was sent,
      // or with an error once rank 0 gave up on the transport; either is fine here.
      ranks_[1].staging->WaitSends().IgnoreError();
      return absl::OkStatus();
    }
    return ranks_[0].staging->Recv(1, 9, dst->data(), dst->bytes());
  });
  ASSERT_TRUE(results[1].ok()) << results[1];
  const absl::Status& s = results[0];
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_THAT(s.message(), ::testing::AllOf(::testing::HasSubstr("received 100 bytes"),
                                            ::testing::HasSubstr("expected 64")));
  EXPECT_EQ(ranks_[0].staging->Send(1, 10, src->data(), src->bytes()), s);
  EXPECT_EQ(ranks_[0].staging->WaitSends(), s);
}

}  // namespace
}  // namespace dapple::worker::cuda_testing
