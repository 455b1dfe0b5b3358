#include "coordinator/planner/cost_model.h"

#include <vector>

#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

// Two nodes of four devices: devices 0-3 on node "a", 4-7 on node "b".
v1::ClusterTopology TwoNodes() {
  v1::ClusterTopology topology;
  topology.set_source("hand-made");
  for (const char* name : {"a", "b"}) {
    v1::ClusterNode* node = topology.add_nodes();
    node->set_name(name);
    node->set_devices(4);
    node->set_device_memory_bytes(int64_t{16} << 30);
  }
  topology.set_intra_node_bandwidth_bytes_per_s(100e9);
  topology.set_intra_node_latency_ms(0.005);
  topology.set_inter_node_bandwidth_bytes_per_s(1e9);
  topology.set_inter_node_latency_ms(0.01);
  return topology;
}

profile::ChainProfile FourLayers() {
  profile::ChainProfile p;
  p.source = "hand-made";
  p.batch_size = 32;
  p.names = {"l0", "l1", "l2", "l3"};
  p.forward_ms = {1, 2, 3, 4};
  p.backward_ms = {2, 4, 6, 8};
  p.parameter_bytes = {100, 200, 300, 400};
  p.activation_bytes = {1000, 2000, 3000, 4000};
  p.saved_bytes = {0, 0, 0, 0};
  p.cut_bytes = {1000, 2000, 3000};
  return p;
}

TEST(CostModelTest, ComputeScalesLinearlyWithSamples) {
  const profile::ChainProfile p = FourLayers();
  EXPECT_DOUBLE_EQ(ForwardMs(p, 1, 2, 32), 5.0);
  EXPECT_DOUBLE_EQ(ForwardMs(p, 1, 2, 16), 2.5);
  EXPECT_DOUBLE_EQ(ForwardMs(p, 1, 2, 64), 10.0);
  EXPECT_DOUBLE_EQ(ForwardMs(p, 0, 3, 8), 10.0 / 4);
  EXPECT_DOUBLE_EQ(BackwardMs(p, 3, 3, 32), 8.0);
  EXPECT_DOUBLE_EQ(BackwardMs(p, 0, 3, 48), 20.0 * 1.5);
  // A micro-batch split over 3 replicas: a fractional share is priced as such.
  EXPECT_DOUBLE_EQ(ForwardMs(p, 0, 0, 32.0 / 3), 1.0 / 3);
}

// With fixed parts (a measured profile's two batch sizes) only the rest scales with samples.
TEST(CostModelTest, FixedPartsDoNotScaleWithSamples) {
  profile::ChainProfile p = FourLayers();  // batch 32
  p.forward_fixed_ms = {0.5, 1, 0, 0};
  p.backward_fixed_ms = {1, 2, 0, 0};
  // Layers 0-1 at 16 samples: fixed 1.5 + (3 - 1.5) / 2 forward, 3 + (6 - 3) / 2 backward.
  EXPECT_DOUBLE_EQ(ForwardMs(p, 0, 1, 16), 1.5 + 0.75);
  EXPECT_DOUBLE_EQ(BackwardMs(p, 0, 1, 16), 3 + 1.5);
  EXPECT_DOUBLE_EQ(ForwardMs(p, 0, 1, 32), 3.0);  // the profile's batch: its own time
  EXPECT_DOUBLE_EQ(ForwardMs(p, 2, 3, 16), 3.5);  // no fixed part: linear
  EXPECT_DOUBLE_EQ(ScaledMs(4, 1, 0.25), 1 + 3 * 0.25);
}

TEST(CostModelTest, ParametersAreSummed) {
  const profile::ChainProfile p = FourLayers();
  EXPECT_EQ(ParameterBytes(p, 0, 3), 1000);
  EXPECT_EQ(ParameterBytes(p, 2, 2), 300);
}

TEST(CostModelTest, TiedGradientSumIsARingOfTwoOverTheStagesLink) {
  const v1::ClusterTopology t = TwoNodes();
  // 2 latency + bytes / bandwidth: one round each way, every replica pair at once.
  EXPECT_DOUBLE_EQ(TiedGradientSumMs(t, 1e6, {0}, {3}), 2 * 0.005 + 1e6 / 100e9 * 1000);
  EXPECT_DOUBLE_EQ(TiedGradientSumMs(t, 1e6, {0, 1}, {4, 5}), 2 * 0.01 + 1e6 / 1e9 * 1000);
  EXPECT_EQ(TiedGradientSumMs(t, 0, {0}, {3}), 0.0);
  EXPECT_EQ(TiedGradientSumMs(t, 1e6, {2}, {2}), 0.0);  // one stage holds both: nothing to sum
}

TEST(CostModelTest, TiedGradientSumIsChargedToTheTwoStagesHoldingCopies) {
  PlanningProblem problem;
  problem.profile = FourLayers();
  problem.topology = TwoNodes();
  problem.profile.ties = {{0, 3, 4096}};  // layer 3 holds a copy of 4096 bytes of layer 0's
  HybridPlan plan;
  plan.stages = {{0, 0, {0}}, {1, 2, {1}}, {3, 3, {4}}};
  const double sum = TiedGradientSumMs(problem.topology, 4096, {0}, {4});
  EXPECT_EQ(TiedGradientMsPerStage(problem, plan), (std::vector<double>{sum, 0, sum}));
  plan.stages = {{0, 3, {0, 1}}};
  EXPECT_EQ(TiedGradientMsPerStage(problem, plan), (std::vector<double>{0}));
}

TEST(CostModelTest, IntraNodeLinkOnlyWhenEveryDeviceSharesANode) {
  const v1::ClusterTopology t = TwoNodes();
  EXPECT_DOUBLE_EQ(LinkBandwidth(t, {0}, {3}), 100e9);
  EXPECT_DOUBLE_EQ(LinkLatencyMs(t, {0}, {3}), 0.005);
  EXPECT_DOUBLE_EQ(LinkBandwidth(t, {5, 6}, {7, 4}), 100e9);
  EXPECT_DOUBLE_EQ(LinkBandwidth(t, {3}, {4}), 1e9);
  EXPECT_DOUBLE_EQ(LinkLatencyMs(t, {3}, {4}), 0.01);
  // One replica on the other node makes the slowest link an inter-node one.
  EXPECT_DOUBLE_EQ(LinkBandwidth(t, {0, 1}, {2, 5}), 1e9);
  EXPECT_DOUBLE_EQ(LinkBandwidth(t, {0, 4}, {1}), 1e9);
  EXPECT_DOUBLE_EQ(LinkBandwidth(t, {0, 1, 2, 3}, {0, 1, 2, 3}), 100e9);
  EXPECT_DOUBLE_EQ(LinkBandwidth(t, {0, 1, 2, 3, 4}, {}), 1e9);
}

TEST(CostModelTest, TransferIsLatencyPlusBytesOverParallelBandwidth) {
  const v1::ClusterTopology t = TwoNodes();
  // 1 GB at 100 GB/s = 10 ms, plus 5 us.
  EXPECT_DOUBLE_EQ(TransferMs(t, 1e9, {0}, {1}), 0.005 + 10.0);
  // At 1 GB/s between nodes: 1000 ms plus 10 us.
  EXPECT_DOUBLE_EQ(TransferMs(t, 1e9, {0}, {4}), 0.01 + 1000.0);
  // Split-concat: max(|from|, |to|) transfers carry equal shares at once.
  EXPECT_DOUBLE_EQ(TransferMs(t, 1e9, {0, 1}, {2}), 0.005 + 5.0);
  EXPECT_DOUBLE_EQ(TransferMs(t, 1e9, {0}, {1, 2, 3}), 0.005 + 10.0 / 3);
  EXPECT_DOUBLE_EQ(TransferMs(t, 1e9, {0, 1}, {4, 5}), 0.01 + 500.0);
  // Nothing moves: no bytes, or the same devices on both sides.
  EXPECT_DOUBLE_EQ(TransferMs(t, 0, {0}, {4}), 0.0);
  EXPECT_DOUBLE_EQ(TransferMs(t, 1e9, {2, 3}, {2, 3}), 0.0);
  // Linear in bytes beyond the latency.
  EXPECT_DOUBLE_EQ(TransferMs(t, 3e9, {0}, {4}) - 0.01, 3 * (TransferMs(t, 1e9, {0}, {4}) - 0.01));
}

TEST(CostModelTest, RingAllReduceFormula) {
  const v1::ClusterTopology t = TwoNodes();
  // n = 4 in one node: 2 (n - 1) latencies + 2 (n - 1) / n * bytes / bandwidth.
  EXPECT_DOUBLE_EQ(AllReduceMs(t, 4e8, {0, 1, 2, 3}), 2 * 3 * 0.005 + 1.5 * 4e8 / 100e9 * 1000);
  // n = 2 across nodes: the inter-node link.
  EXPECT_DOUBLE_EQ(AllReduceMs(t, 4e8, {0, 4}), 2 * 1 * 0.01 + 1.0 * 4e8 / 1e9 * 1000);
  // n = 8 spanning both nodes.
  EXPECT_DOUBLE_EQ(AllReduceMs(t, 8e8, {0, 1, 2, 3, 4, 5, 6, 7}),
                   2 * 7 * 0.01 + 2.0 * 7 / 8 * 8e8 / 1e9 * 1000);
  // One device has nothing to reduce.
  EXPECT_DOUBLE_EQ(AllReduceMs(t, 4e8, {3}), 0.0);
  EXPECT_DOUBLE_EQ(AllReduceMs(t, 4e8, {}), 0.0);
}

TEST(CostModelTest, RingAllGatherFormula) {
  const v1::ClusterTopology t = TwoNodes();
  // n - 1 rounds, each one member's bytes over the slowest link.
  EXPECT_DOUBLE_EQ(AllGatherMs(t, 16, {0, 1, 2}), 2 * (0.005 + 16 / 100e9 * 1000));
  EXPECT_DOUBLE_EQ(AllGatherMs(t, 16, {0, 4}), 1 * (0.01 + 16 / 1e9 * 1000));
  EXPECT_DOUBLE_EQ(AllGatherMs(t, 16, {5}), 0.0);
}

// The jobs' measured overhead of a collective across processes joins each one once, never a
// single device's (nothing crosses a process).
TEST(CostModelTest, EveryCollectiveOfTwoOrMoreDevicesPaysTheMeasuredOverheadOnce) {
  v1::ClusterTopology t = TwoNodes();
  const double all_reduce = AllReduceMs(t, 4e8, {0, 1, 2, 3});
  const double all_gather = AllGatherMs(t, 16, {0, 1, 2});
  const double tied = TiedGradientSumMs(t, 1e6, {0}, {3});
  t.set_collective_overhead_ms(4.5);
  EXPECT_DOUBLE_EQ(AllReduceMs(t, 4e8, {0, 1, 2, 3}), all_reduce + 4.5);
  EXPECT_DOUBLE_EQ(AllGatherMs(t, 16, {0, 1, 2}), all_gather + 4.5);
  EXPECT_DOUBLE_EQ(TiedGradientSumMs(t, 1e6, {0}, {3}), tied + 4.5);
  EXPECT_DOUBLE_EQ(AllReduceMs(t, 4e8, {3}), 0.0);
  EXPECT_DOUBLE_EQ(AllGatherMs(t, 16, {5}), 0.0);
  EXPECT_DOUBLE_EQ(TiedGradientSumMs(t, 1e6, {2}, {2}), 0.0);
}

// The job-wide GLOBAL_NORM: over every rank of the plan, under the schedules whose programs hold
// it (job_lowering.h TakesGlobalNorm).
TEST(CostModelTest, GlobalNormIsAnAllGatherOfEveryRankWhenTheScheduleHoldsIt) {
  PlanningProblem problem;
  problem.profile = FourLayers();
  problem.topology = TwoNodes();
  HybridPlan plan;
  plan.stages = {{0, 1, {0, 1}}, {2, 3, {4}}};
  const double three_ranks = AllGatherMs(problem.topology, 16, {0, 1, 4});
  for (auto kind : {schedule::ScheduleKind::kDapple, schedule::ScheduleKind::kGPipe,
                    schedule::ScheduleKind::kZbH1, schedule::ScheduleKind::kInterleaved}) {
    EXPECT_DOUBLE_EQ(GlobalNormMs(problem, plan, kind), three_ranks)
        << schedule::ScheduleKindName(kind);
  }
  EXPECT_DOUBLE_EQ(GlobalNormMs(problem, plan, schedule::ScheduleKind::kPipeDream), 0.0);
  EXPECT_DOUBLE_EQ(GlobalNormMs(problem, plan, schedule::ScheduleKind::kPipeSgd), 0.0);
  problem.max_grad_norm = 1.0;  // PipeDream clips through it
  EXPECT_DOUBLE_EQ(GlobalNormMs(problem, plan, schedule::ScheduleKind::kPipeDream), three_ranks);
  EXPECT_DOUBLE_EQ(GlobalNormMs(problem, plan, schedule::ScheduleKind::kPipeSgd), 0.0);
  plan.stages = {{0, 3, {2}}};  // one rank: nothing to gather
  EXPECT_DOUBLE_EQ(GlobalNormMs(problem, plan, schedule::ScheduleKind::kDapple), 0.0);
}

// Only the cpu processes of one host (a node with a compute capacity) talk through host memory.
TEST(CostModelTest, HostMemoryLinksJoinCpuProcessesOfOneHost) {
  v1::ClusterTopology t = TwoNodes();
  EXPECT_FALSE(HostMemoryLink(t, {0}, {1}));  // GPUs (no compute capacity)
  t.mutable_nodes(0)->set_compute_capacity(1.9);
  EXPECT_TRUE(HostMemoryLink(t, {0}, {1}));
  EXPECT_TRUE(HostMemoryLink(t, {0, 1}, {2, 3}));
  EXPECT_FALSE(HostMemoryLink(t, {0}, {4}));  // another node
  EXPECT_FALSE(HostMemoryLink(t, {4}, {5}));  // node b has none
  // The copies of a transfer, half on each side; the link keeps its latency.
  EXPECT_DOUBLE_EQ(HostCopyMsPerSide(0.3, 0.1), 0.1);
  EXPECT_DOUBLE_EQ(HostCopyMsPerSide(0.05, 0.1), 0.0);
}

}  // namespace
}  // namespace dapple::coordinator
