#include "coordinator/cluster/rendezvous.h"

#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

v1::PublishEndpointRequest Endpoint(const std::string& job, int stage, const std::string& addr) {
  v1::PublishEndpointRequest r;
  r.set_job_id(job);
  r.set_worker_id(absl::StrCat("w-", stage + 1));
  r.set_stage(stage);
  r.set_replica(0);
  r.set_ucx_address(addr);
  return r;
}

TEST(RendezvousTest, CompleteWhenEveryRankPublished) {
  Rendezvous rv;
  rv.Open("job-1", {1, 1, 1});
  EXPECT_FALSE(rv.Complete("job-1"));
  ASSERT_TRUE(rv.Publish(Endpoint("job-1", 2, "c")).ok());
  ASSERT_TRUE(rv.Publish(Endpoint("job-1", 0, "a")).ok());
  EXPECT_FALSE(rv.Complete("job-1"));
  ASSERT_TRUE(rv.Publish(Endpoint("job-1", 0, "a2")).ok());  // republishing replaces
  EXPECT_FALSE(rv.Complete("job-1"));
  ASSERT_TRUE(rv.Publish(Endpoint("job-1", 1, std::string("b\0b", 3))).ok());
  EXPECT_TRUE(rv.Complete("job-1"));
  auto peers = rv.Peers("job-1");
  ASSERT_EQ(peers.size(), 3u);
  EXPECT_EQ(peers[0].ucx_address(), "a2");
  EXPECT_EQ(peers[1].ucx_address(), std::string("b\0b", 3));
  EXPECT_EQ(peers[1].worker_id(), "w-2");
  EXPECT_EQ(peers[2].stage(), 2);
  rv.Close("job-1");
  EXPECT_TRUE(rv.Peers("job-1").empty());
  EXPECT_FALSE(rv.Complete("job-1"));
}

TEST(RendezvousTest, RejectsUnknownJobsAndRanks) {
  Rendezvous rv;
  EXPECT_EQ(rv.Publish(Endpoint("job-1", 0, "a")).code(), absl::StatusCode::kNotFound);
  rv.Open("job-1", {1, 1});
  absl::Status s = rv.Publish(Endpoint("job-1", 2, "a"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "job job-1 has stages 0..1, got stage 2 replica 0");
  v1::PublishEndpointRequest r = Endpoint("job-1", 0, "a");
  r.set_replica(1);
  s = rv.Publish(r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "job job-1 has replicas 0..0 of stage 0, got replica 1");
}

TEST(RendezvousTest, ReplicatedStagesCompleteWhenEveryReplicaPublished) {
  Rendezvous rv;
  rv.Open("job-1", {2, 1});  // stage 0 on two replicas, stage 1 on one
  EXPECT_EQ(rv.Missing("job-1"), (std::vector<std::string>{"stage 0 replica 0", "stage 0 replica 1",
                                                           "stage 1 replica 0"}));
  ASSERT_TRUE(rv.Publish(Endpoint("job-1", 1, "c")).ok());
  v1::PublishEndpointRequest r = Endpoint("job-1", 0, "b");
  r.set_replica(1);
  ASSERT_TRUE(rv.Publish(r).ok());
  EXPECT_FALSE(rv.Complete("job-1"));
  EXPECT_EQ(rv.Missing("job-1"), std::vector<std::string>{"stage 0 replica 0"});
  ASSERT_TRUE(rv.Publish(Endpoint("job-1", 0, "a")).ok());
  EXPECT_TRUE(rv.Complete("job-1"));
  EXPECT_TRUE(rv.Missing("job-1").empty());
  const std::vector<v1::PeerEndpoint> peers = rv.Peers("job-1");
  ASSERT_EQ(peers.size(), 3u);
  EXPECT_EQ(peers[0].ucx_address(), "a");
  EXPECT_EQ(peers[1].replica(), 1);
  EXPECT_EQ(peers[1].ucx_address(), "b");
  EXPECT_EQ(peers[2].stage(), 1);
  r.set_replica(2);
  EXPECT_EQ(rv.Publish(r).message(), "job job-1 has replicas 0..1 of stage 0, got replica 2");
}

}  // namespace
}  // namespace dapple::coordinator
