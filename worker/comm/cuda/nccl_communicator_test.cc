// NcclCommunicator on one GPU. NCCL cannot put two ranks of a communicator on the same GPU, so
// there is no 2-rank success test here: the 1-rank communicator checks AllReduceSum (the identity)
// and a send to itself, and a 2-rank communicator whose other rank never joins checks that
// creation fails in time naming that rank instead of hanging. Argument checks run everywhere;
// the rest is skipped without a GPU.
#include "worker/comm/cuda/nccl_communicator.h"

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "common/testing/assert_ok.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/comm/cuda/comm_cuda_testing.h"

namespace dapple::worker::cuda_testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(NcclCommunicatorArgsTest, CreateRejectsBadArguments) {
  const std::string id(NcclCommunicator::kUniqueIdBytes, 'x');
  auto code = [](const absl::StatusOr<std::unique_ptr<NcclCommunicator>>& c) {
    return c.status().code();
  };
  auto short_id = NcclCommunicator::Create("short", 1, 0, nullptr, {});
  EXPECT_EQ(code(short_id), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(short_id.status().message(), AllOf(HasSubstr("5 bytes"), HasSubstr("128")));
  EXPECT_EQ(code(NcclCommunicator::Create(id, 0, 0, nullptr, {})),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(NcclCommunicator::Create(id, 2, 2, nullptr, {})),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(NcclCommunicator::Create(id, 2, -1, nullptr, {})),
            absl::StatusCode::kInvalidArgument);
  NcclCommunicator::Options labels;
  labels.rank_labels = {"only one"};
  auto bad_labels = NcclCommunicator::Create(id, 2, 0, nullptr, labels);
  EXPECT_EQ(code(bad_labels), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_labels.status().message(), HasSubstr("1 rank labels"));
  EXPECT_EQ(code(NcclCommunicator::Create(id, 1, 0, nullptr, {})),
            absl::StatusCode::kInvalidArgument);  // null device
}

class NcclCommunicatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string reason;
    if (!GpuUsable(&reason)) GTEST_SKIP() << reason;
    auto device = CudaDevice::Open(0);
    ASSERT_OK(device.status());
    device_ = std::move(*device);
  }

  absl::StatusOr<std::unique_ptr<NcclCommunicator>> OneRank(
      const std::atomic<bool>* abort = nullptr) {
    absl::StatusOr<std::string> id = NcclCommunicator::NewUniqueId();
    if (!id.ok()) return id.status();
    NcclCommunicator::Options options;
    options.timeout = absl::Seconds(30);
    options.abort = abort;
    options.rank_labels = {"stage 0, worker w-1"};
    return NcclCommunicator::Create(*id, 1, 0, device_.get(), options);
  }

  std::unique_ptr<CudaDevice> device_;
};

TEST_F(NcclCommunicatorTest, NewUniqueIdsAre128BytesAndDiffer) {
  absl::StatusOr<std::string> a = NcclCommunicator::NewUniqueId();
  absl::StatusOr<std::string> b = NcclCommunicator::NewUniqueId();
  ASSERT_OK(a.status());
  ASSERT_OK(b.status());
  EXPECT_EQ(a->size(), 128u);
  EXPECT_NE(*a, *b);
}

TEST_F(NcclCommunicatorTest, OneRankAllReduceSumIsTheIdentity) {
  auto comm = OneRank();
  ASSERT_OK(comm.status());
  EXPECT_EQ((*comm)->nranks(), 1);
  constexpr size_t kCount = 1000;
  std::vector<float> values(kCount);
  for (size_t i = 0; i < kCount; ++i) values[i] = 0.25f * static_cast<float>(i) - 7.0f;
  std::vector<uint8_t> bytes(kCount * sizeof(float));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  absl::StatusOr<DeviceMemory> d = DeviceMemory::From(bytes);
  ASSERT_OK(d.status());
  const cudaStream_t stream = device_->comm_stream();
  ASSERT_OK((*comm)->AllReduceSum(static_cast<float*>(d->data()), kCount, stream));
  ASSERT_OK((*comm)->Wait(stream));
  std::vector<float> got(kCount);
  ASSERT_EQ(cudaMemcpy(got.data(), d->data(), bytes.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  for (size_t i = 0; i < kCount; ++i) {
    ASSERT_EQ(got[i], values[i]) << "index " << i;  // a sum over one rank is exact
  }
}

TEST_F(NcclCommunicatorTest, OneRankSendsToItselfInAGroup) {
  auto comm = OneRank();
  ASSERT_OK(comm.status());
  const std::vector<uint8_t> payload = Pattern(4099, 3);
  absl::StatusOr<DeviceMemory> src = DeviceMemory::From(payload);
  absl::StatusOr<DeviceMemory> dst = DeviceMemory::Zeros(payload.size());
  ASSERT_OK(src.status());
  ASSERT_OK(dst.status());
  const cudaStream_t stream = device_->comm_stream();
  ASSERT_OK((*comm)->SendRecv(src->data(), 0, dst->data(), 0, payload.size(), stream));
  ASSERT_OK((*comm)->Wait(stream));
  std::vector<uint8_t> got(payload.size());
  ASSERT_EQ(cudaMemcpy(got.data(), dst->data(), got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(FirstDifference(got, payload), "");
}

TEST_F(NcclCommunicatorTest, MissingRankTimesOutNamingIt) {
  // Rank 1 never joins (on one GPU it could not: see the top of this file).
  absl::StatusOr<std::string> id = NcclCommunicator::NewUniqueId();
  ASSERT_OK(id.status());
  NcclCommunicator::Options options;
  options.timeout = absl::Seconds(2);
  options.rank_labels = {"stage 0, worker w-1", "stage 1, worker w-2"};
  const absl::Time start = absl::Now();
  auto comm = NcclCommunicator::Create(*id, 2, 0, device_.get(), options);
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded) << comm.status();
  EXPECT_THAT(comm.status().message(), AllOf(HasSubstr("2 ranks"), HasSubstr("not ready after 2s"),
                                             HasSubstr("rank 1 (stage 1, worker w-2)"),
                                             HasSubstr("rank 0 (stage 0, worker w-1)")));
  EXPECT_GE(took, absl::Seconds(2));
  EXPECT_LT(took, absl::Seconds(12)) << "ncclCommAbort of the half-made communicator hung";
}

TEST_F(NcclCommunicatorTest, AbortFlagEndsCreate) {
  absl::StatusOr<std::string> id = NcclCommunicator::NewUniqueId();
  ASSERT_OK(id.status());
  std::atomic<bool> abort{false};
  NcclCommunicator::Options options;
  options.timeout = absl::Seconds(60);
  options.abort = &abort;
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(100));
    abort.store(true);
  });
  const absl::Time start = absl::Now();
  auto comm = NcclCommunicator::Create(*id, 2, 0, device_.get(), options);
  const absl::Duration took = absl::Now() - start;
  setter.join();
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kAborted) << comm.status();
  EXPECT_LT(took, absl::Seconds(10));
}

TEST_F(NcclCommunicatorTest, AbortFlagEndsWaitOnAStuckStreamAndSticks) {
  std::atomic<bool> abort{false};
  auto comm = OneRank(&abort);
  ASSERT_OK(comm.status());
  // A host function holds the stream until released (at most 5 s), standing in for a peer that
  // never posts its half of an operation.
  static std::atomic<bool> release{false};
  release.store(false);
  const cudaStream_t stream = device_->comm_stream();
  ASSERT_EQ(cudaLaunchHostFunc(
                stream,
                [](void*) {
                  const absl::Time end = absl::Now() + absl::Seconds(5);
                  while (!release.load() && absl::Now() < end)
                    absl::SleepFor(absl::Milliseconds(1));
                },
                nullptr),
            cudaSuccess);
  // The stream is released 200 ms after the abort flag: Wait notices the flag within a
  // millisecond, so kAborted (not OK) shows the flag ended it. The release lets ncclCommAbort
  // finish: it frees device memory, which waits for work already on the device.
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(100));
    abort.store(true);
    absl::SleepFor(absl::Milliseconds(200));
    release.store(true);
  });
  const absl::Time start = absl::Now();
  const absl::Status s = (*comm)->Wait(stream);
  const absl::Duration took = absl::Now() - start;
  setter.join();
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_LT(took, absl::Seconds(3));
  EXPECT_THAT(s.message(), HasSubstr("stage 0, worker w-1"));
  // Aborted: every later call returns the same error without touching NCCL.
  EXPECT_EQ((*comm)->AllReduceSum(nullptr, 0, stream), s);
  EXPECT_EQ((*comm)->Check(), s);
  EXPECT_EQ((*comm)->status(), s);
}

}  // namespace
}  // namespace dapple::worker::cuda_testing
