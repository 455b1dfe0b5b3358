// NcclTransport on one GPU. Its data path needs two GPUs (NCCL cannot put both ranks of a
// communicator on one GPU), so there is no exchange test here; what one GPU can check: a peer
// that never joins makes Connect fail in time naming it (and the failure sticks), and calls to an
// unconnected peer are refused without failing the transport. Skipped without a GPU except the
// argument checks.
#include "worker/comm/cuda/nccl_transport.h"

#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "common/testing/assert_ok.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/comm/cuda/comm_cuda_testing.h"

namespace dapple::worker::cuda_testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(NcclTransportArgsTest, CreateRejectsNullDeviceAndNegativeRank) {
  EXPECT_EQ(NcclTransport::Create(0, nullptr, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(NcclTransport::Create(-1, nullptr, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

class NcclTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string reason;
    if (!GpuUsable(&reason)) GTEST_SKIP() << reason;
    auto device = CudaDevice::Open(0);
    ASSERT_OK(device.status());
    device_ = std::move(*device);
    Transport::Options options;
    options.timeout = absl::Seconds(1);
    auto t = NcclTransport::Create(0, device_.get(), options, "stage 0, worker w-1");
    ASSERT_OK(t.status());
    transport_ = std::move(*t);
  }

  std::unique_ptr<CudaDevice> device_;
  std::unique_ptr<NcclTransport> transport_;
};

TEST_F(NcclTransportTest, ConnectToAPeerThatNeverJoinsFailsNamingItAndSticks) {
  absl::StatusOr<std::string> up = NcclCommunicator::NewUniqueId();
  absl::StatusOr<std::string> down = NcclCommunicator::NewUniqueId();
  ASSERT_OK(up.status());
  ASSERT_OK(down.status());
  const absl::Time start = absl::Now();
  const absl::Status s = transport_->Connect(1, *up, *down, "stage 1, worker w-2");
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(s.message(), AllOf(HasSubstr("peer rank 1 (stage 1, worker w-2)"),
                                 HasSubstr("low-to-high"), HasSubstr("not ready after 1s")));
  EXPECT_LT(took, absl::Seconds(10));
  int dummy = 0;
  EXPECT_EQ(transport_->Send(1, 5, &dummy, sizeof(dummy)), s);
  EXPECT_EQ(transport_->WaitSends(), s);
}

TEST_F(NcclTransportTest, UnconnectedPeerIsRefusedWithoutFailingTheTransport) {
  int dummy = 0;
  const absl::Status send = transport_->Send(2, 5, &dummy, sizeof(dummy));
  EXPECT_EQ(send.code(), absl::StatusCode::kFailedPrecondition) << send;
  EXPECT_THAT(send.message(), AllOf(HasSubstr("peer rank 2"), HasSubstr("Connect")));
  EXPECT_EQ(transport_->Recv(2, 5, &dummy, sizeof(dummy)).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(transport_->WaitSends().ok());
}

TEST_F(NcclTransportTest, ConnectRejectsItselfAndMalformedIds) {
  const std::string id(NcclCommunicator::kUniqueIdBytes, 'x');
  EXPECT_EQ(transport_->Connect(0, id, id).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(transport_->Connect(1, "short", id).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(transport_->WaitSends().ok());  // not sticky
}

}  // namespace
}  // namespace dapple::worker::cuda_testing
