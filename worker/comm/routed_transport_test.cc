#include "worker/comm/routed_transport.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::worker {
namespace {

// Records what reaches it (a fake for this unit test only).
class RecordingTransport : public Transport {
 public:
  explicit RecordingTransport(std::string name) : name_(std::move(name)) {}
  absl::Status Send(int peer, uint64_t tag, const void*, size_t bytes) override {
    log.push_back(name_ + " send " + std::to_string(peer) + " " + std::to_string(tag));
    return absl::OkStatus();
  }
  absl::Status Recv(int peer, uint64_t tag, void*, size_t) override {
    log.push_back(name_ + " recv " + std::to_string(peer) + " " + std::to_string(tag));
    return absl::OkStatus();
  }
  absl::Status WaitSends() override {
    ++waits;
    return wait_status;
  }
  std::vector<std::string> log;
  int waits = 0;
  absl::Status wait_status;

 private:
  std::string name_;
};

TEST(RoutedTransportTest, SendsEachPeerThroughItsRoute) {
  RecordingTransport ipc("ipc"), nccl("nccl");
  RoutedTransport t;
  t.SetRoute(0, &ipc);
  t.SetRoute(2, &nccl);
  char buf[4];
  ASSERT_TRUE(t.Send(0, 7, buf, 4).ok());
  ASSERT_TRUE(t.Recv(2, 9, buf, 4).ok());
  EXPECT_THAT(ipc.log, ::testing::ElementsAre("ipc send 0 7"));
  EXPECT_THAT(nccl.log, ::testing::ElementsAre("nccl recv 2 9"));
}

TEST(RoutedTransportTest, UnknownPeerNamesIt) {
  RoutedTransport t;
  char buf[1];
  absl::Status s = t.Send(5, 1, buf, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("rank 5"));
}

TEST(RoutedTransportTest, WaitSendsWaitsOnEachTransportOnceAndKeepsTheFirstError) {
  RecordingTransport a("a"), b("b");
  b.wait_status = absl::UnavailableError("peer rank 2 failed");
  RoutedTransport t;
  t.SetRoute(0, &a);
  t.SetRoute(1, &a);
  t.SetRoute(2, &b);
  absl::Status s = t.WaitSends();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(a.waits, 1);
  EXPECT_EQ(b.waits, 1);
}

}  // namespace
}  // namespace dapple::worker
