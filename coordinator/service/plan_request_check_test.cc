#include "coordinator/service/plan_request_check.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

v1::ClusterTopology GoodCluster() {
  v1::ClusterTopology t;
  v1::ClusterNode* n = t.add_nodes();
  n->set_name("a");
  n->set_devices(8);
  n->set_device_memory_bytes(int64_t{16} << 30);
  t.set_intra_node_bandwidth_bytes_per_s(130e9);
  t.set_inter_node_bandwidth_bytes_per_s(3.125e9);
  t.set_intra_node_latency_ms(0.005);
  t.set_inter_node_latency_ms(0.01);
  return t;
}

v1::ModelProfile GoodProfile() {
  v1::ModelProfile p;
  p.set_batch_size(32);
  for (int i = 0; i < 3; ++i) {
    v1::LayerProfile* l = p.add_layers();
    l->set_forward_ms(1);
    l->set_backward_ms(2);
    l->set_activation_bytes(100);
    l->set_parameter_bytes(10);
  }
  return p;
}

TEST(PlanRequestCheckTest, Cluster) {
  EXPECT_TRUE(CheckTopology(GoodCluster()).ok());
  v1::ClusterTopology t = GoodCluster();
  t.clear_nodes();
  EXPECT_EQ(CheckTopology(t).message(), "cluster has no nodes: give at least one");
  t = GoodCluster();
  t.mutable_nodes(0)->set_devices(0);
  EXPECT_EQ(CheckTopology(t).message(), "cluster.nodes[0].devices 0 must be >= 1");
  t = GoodCluster();
  *t.add_nodes() = t.nodes(0);
  EXPECT_EQ(CheckTopology(t).message(),
            "cluster.nodes[1].name 'a' is repeated: node names must differ");
  t = GoodCluster();
  t.mutable_nodes(0)->set_device_memory_bytes(0);
  EXPECT_EQ(CheckTopology(t).message(), "cluster.nodes[0].device_memory_bytes 0 must be > 0");
  t = GoodCluster();
  t.set_inter_node_bandwidth_bytes_per_s(0);
  EXPECT_EQ(CheckTopology(t).message(),
            "cluster.inter_node_bandwidth_bytes_per_s 0 must be a finite number > 0");
  t = GoodCluster();
  t.set_intra_node_latency_ms(std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(CheckTopology(t).message(),
            "cluster.intra_node_latency_ms nan must be a finite number >= 0");
  t = GoodCluster();
  t.mutable_nodes(0)->set_devices(kMaxPlanDevices + 1);
  EXPECT_EQ(CheckTopology(t).code(), absl::StatusCode::kInvalidArgument);
  // Per-device memory: one entry per device, each in range (profile::ValidateTopology's rules).
  t = GoodCluster();
  t.mutable_nodes(0)->add_device_memory_per_device(int64_t{1} << 30);
  EXPECT_EQ(CheckTopology(t).message(),
            absl::StrCat("cluster: nodes[0].device_memory_per_device has 1 entries: it has one per "
                         "device (",
                         t.nodes(0).devices(), ") or none"));
  t = GoodCluster();
  for (int d = 0; d < t.nodes(0).devices(); ++d) {
    t.mutable_nodes(0)->add_device_memory_per_device(d == 0 ? 0 : int64_t{1} << 30);
  }
  EXPECT_EQ(CheckTopology(t).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(CheckTopology(t).message()),
              ::testing::HasSubstr("nodes[0].device_memory_per_device[0] 0"));
}

TEST(PlanRequestCheckTest, Profile) {
  EXPECT_TRUE(CheckProfile(GoodProfile()).ok());
  v1::ModelProfile p = GoodProfile();
  p.set_batch_size(0);
  EXPECT_EQ(CheckProfile(p).message(), "profile.batch_size 0 must be > 0");
  p = GoodProfile();
  p.mutable_layers(1)->set_forward_ms(-1);
  EXPECT_EQ(CheckProfile(p).message(),
            "profile.layers[1].forward_ms -1 must be a finite number >= 0");
  p = GoodProfile();
  p.mutable_layers(1)->set_backward_ms(1e308);  // finite, yet sums to infinity
  EXPECT_EQ(CheckProfile(p).message(),
            "profile.layers[1].backward_ms 1e+308 must be at most 1e+09");
  p = GoodProfile();
  p.mutable_layers(2)->set_parameter_bytes(-5);
  EXPECT_EQ(CheckProfile(p).message(), "profile.layers[2].parameter_bytes -5 must be >= 0");
  p = GoodProfile();
  p.mutable_layers(0)->set_saved_bytes(-1);
  EXPECT_EQ(CheckProfile(p).message(), "profile.layers[0].saved_bytes -1 must be >= 0");
  p = GoodProfile();
  v1::ProfileEdge* e = p.add_edges();
  e->set_src(0);
  e->set_dst(3);
  EXPECT_EQ(CheckProfile(p).message(), "profile.edges[0] 0 -> 3 names a layer outside 0..2");
  p.clear_layers();
  EXPECT_EQ(CheckProfile(p).message(), "profile has no layers");
}

}  // namespace
}  // namespace dapple::coordinator
