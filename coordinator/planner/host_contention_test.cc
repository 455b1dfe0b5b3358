#include "coordinator/planner/host_contention.h"

#include <string>
#include <vector>

#include "common/schedule/generators.h"
#include "common/schedule/lowering.h"
#include "coordinator/planner/cost_model.h"
#include "coordinator/planner/plan_simulator.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

using schedule::ComputeInterval;
using schedule::ScheduleKind;

// `nodes` nodes of `per_node` devices; compute_capacity `capacity` on every node (0: none).
v1::ClusterTopology Topology(int nodes, int per_node, double capacity) {
  v1::ClusterTopology topology;
  for (int i = 0; i < nodes; ++i) {
    v1::ClusterNode* node = topology.add_nodes();
    node->set_name("n" + std::to_string(i));
    node->set_devices(per_node);
    node->set_device_memory_bytes(int64_t{1} << 34);
    node->set_compute_capacity(capacity);
  }
  topology.set_intra_node_bandwidth_bytes_per_s(100e9);
  topology.set_intra_node_latency_ms(0.001);
  topology.set_inter_node_bandwidth_bytes_per_s(1e9);
  topology.set_inter_node_latency_ms(0.01);
  return topology;
}

// Stage s has layer s and device s.
HybridPlan Plan(int stages, int micro_batches, int64_t micro) {
  HybridPlan plan;
  plan.planner = "manual";
  for (int s = 0; s < stages; ++s) plan.stages.push_back({s, s, {s}});
  plan.micro_batch_size = micro;
  plan.micro_batches = micro_batches;
  return plan;
}

// `layers` layers of forward f and backward b ms at batch 8, nothing crossing a cut.
PlanningProblem Problem(int layers, double f, double b, v1::ClusterTopology topology,
                        int64_t global_batch) {
  PlanningProblem problem;
  problem.profile.source = "test";
  problem.profile.batch_size = 8;
  for (int i = 0; i < layers; ++i) {
    problem.profile.names.push_back("layer" + std::to_string(i));
    problem.profile.forward_ms.push_back(f);
    problem.profile.backward_ms.push_back(b);
    problem.profile.parameter_bytes.push_back(0);
    problem.profile.activation_bytes.push_back(0);
    problem.profile.saved_bytes.push_back(0);
    if (i + 1 < layers) problem.profile.cut_bytes.push_back(0);
  }
  problem.topology = std::move(topology);
  problem.global_batch = global_batch;
  return problem;
}

TEST(HostContentionTest, OversubscribedHostsAreThoseWithMoreStagesThanCapacity) {
  const HybridPlan plan = Plan(2, 4, 8);
  const std::vector<SharedHost> shared = OversubscribedHosts(Topology(1, 2, 1.25), plan);
  ASSERT_EQ(shared.size(), 1u);
  EXPECT_DOUBLE_EQ(shared[0].capacity, 1.25);
  EXPECT_EQ(shared[0].processes, (std::vector<int>{1, 1}));
  // No capacity (GPUs, cluster files), enough capacity, or one stage per host: none.
  EXPECT_TRUE(OversubscribedHosts(Topology(1, 2, 0), plan).empty());
  EXPECT_TRUE(OversubscribedHosts(Topology(1, 2, 2.0), plan).empty());
  EXPECT_TRUE(OversubscribedHosts(Topology(2, 1, 1.0), plan).empty());
}

TEST(HostContentionTest, StagesOnOneGpuShareItWithACapacityOfOne) {
  // Node 0: devices 0 and 1 on one GPU, device 2 on another; node 1: devices 3 and 4 on one.
  v1::ClusterTopology topology = Topology(2, 3, 0);
  for (int g : {0, 0, 1}) topology.mutable_nodes(0)->add_device_group(g);
  topology.mutable_nodes(1)->set_devices(2);
  for (int g : {0, 0}) topology.mutable_nodes(1)->add_device_group(g);
  HybridPlan plan;
  plan.stages = {{0, 0, {0, 3}}, {1, 1, {1, 4}}, {2, 2, {2}}};
  plan.micro_batch_size = 8;
  plan.micro_batches = 4;
  const std::vector<SharedHost> shared = OversubscribedHosts(topology, plan);
  ASSERT_EQ(shared.size(), 2u);
  for (const SharedHost& gpu : shared) {
    EXPECT_DOUBLE_EQ(gpu.capacity, 1.0);
    EXPECT_EQ(gpu.processes, (std::vector<int>{1, 1, 0}));
  }
  // One process per GPU, or no device groups (each device its own GPU): none.
  plan.stages = {{0, 0, {0}}, {1, 1, {2}}, {2, 2, {3}}};
  EXPECT_TRUE(OversubscribedHosts(topology, plan).empty());
  plan.stages = {{0, 0, {0, 3}}, {1, 1, {1, 4}}, {2, 2, {2}}};
  EXPECT_TRUE(OversubscribedHosts(Topology(2, 3, 0), plan).empty());
}

TEST(HostContentionTest, TwoStagesOnOneGpuArePlannedAsOnOneCore) {
  // A GPU shared by two stages' processes is planned as a host of one core's capacity: the step
  // cannot beat both stages' work one after the other (PlansOnASharedHostCannotBeatItsCapacity).
  v1::ClusterTopology gpu = Topology(1, 2, 0);
  for (int g : {0, 0}) gpu.mutable_nodes(0)->add_device_group(g);
  const HybridPlan plan = Plan(2, 8, 8);
  const double work = 8 * 2 * 3.0;
  for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::kDapple}) {
    absl::StatusOr<Prediction> shared = SimulatePlan(Problem(2, 1, 2, gpu, 64), plan, kind);
    absl::StatusOr<Prediction> one_core =
        SimulatePlan(Problem(2, 1, 2, Topology(1, 2, 1.0), 64), plan, kind);
    ASSERT_TRUE(shared.ok() && one_core.ok());
    EXPECT_GE(shared->step_ms, work * (1 - 1e-3));
    EXPECT_NEAR(shared->step_ms, one_core->step_ms, 1e-9);
    for (const StagePrediction& stage : shared->stages) EXPECT_GT(stage.contention_ms, 0.0);
  }
}

TEST(HostContentionTest, ReplicasOnOneHostCountAsProcesses) {
  HybridPlan plan;
  plan.stages = {{0, 0, {0, 1}}, {1, 1, {2}}};
  plan.micro_batch_size = 8;
  plan.micro_batches = 1;
  const std::vector<SharedHost> shared = OversubscribedHosts(Topology(1, 3, 2.0), plan);
  ASSERT_EQ(shared.size(), 1u);
  EXPECT_EQ(shared[0].processes, (std::vector<int>{2, 1}));
}

TEST(HostContentionTest, MeanSlowdownIsTheTimeAverageOverEachStagesCompute) {
  SharedHost host;
  host.capacity = 1.0;
  host.processes = {1, 1};
  // Stage 0 computes [0, 2), stage 1 [1, 3): both at once in [1, 2), each at half speed there.
  const std::vector<std::vector<ComputeInterval>> intervals = {{{0, 2}}, {{1, 3}}};
  std::vector<double> f = MeanSlowdown({host}, intervals);
  EXPECT_DOUBLE_EQ(f[0], (1.0 + 2.0) / 2.0);
  EXPECT_DOUBLE_EQ(f[1], (2.0 + 1.0) / 2.0);
  // 1.25 cores: two at once run at 1.25 / 2 of full speed, a slowdown of 1.6.
  host.capacity = 1.25;
  f = MeanSlowdown({host}, intervals);
  EXPECT_DOUBLE_EQ(f[0], (1.0 + 1.6) / 2.0);
  // Back-to-back actions of one stage are not two processes; a stage off the host is not slowed.
  host.capacity = 1.0;
  host.processes = {1, 0};
  f = MeanSlowdown({host}, {{{0, 1}, {1, 2}}, {{0, 2}}});
  EXPECT_DOUBLE_EQ(f[0], 1.0);
  EXPECT_DOUBLE_EQ(f[1], 1.0);
}

TEST(HostContentionTest, TwoProcessesWithFullOverlapConvergeToTwiceSlower) {
  // Two independent one-stage-like programs that always compute together: the fixed point is
  // the processor-sharing answer, capacity 1 -> twice the time.
  SharedHost host;
  host.capacity = 1.0;
  host.processes = {1, 1};
  schedule::ActionCosts costs;
  costs.forward_per_stage = {1.0, 1.0};
  costs.backward_per_stage = {2.0, 2.0};
  costs.optimizer_step_per_stage = {0.0, 0.0};
  // P = 2, M = 64 under 1F1B: both stages compute nearly all the time.
  std::vector<schedule::OpProgram> programs;
  for (int s = 0; s < 2; ++s) {
    programs.push_back(schedule::LowerOps(schedule::GenerateOps(ScheduleKind::kDapple, 2, 64, s), 2,
                                          s, schedule::LowerOptions{}));
  }
  absl::StatusOr<std::vector<double>> f = ContendedSlowdown(programs, costs, {host});
  ASSERT_TRUE(f.ok()) << f.status();
  for (double x : *f) {
    EXPECT_GT(x, 1.9);
    EXPECT_LE(x, 2.0 + 1e-9);
  }
}

TEST(HostContentionTest, PlansOnASharedHostCannotBeatItsCapacity) {
  // 2 equal layers, 2 stages on one host. Work per step: 8 micro-batches x 2 layers x (1 + 2) ms.
  const double work = 8 * 2 * 3.0;
  const HybridPlan plan = Plan(2, 8, 8);
  for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::kDapple}) {
    absl::StatusOr<Prediction> own =
        SimulatePlan(Problem(2, 1, 2, Topology(1, 2, 0), 64), plan, kind);
    absl::StatusOr<Prediction> one_core =
        SimulatePlan(Problem(2, 1, 2, Topology(1, 2, 1.0), 64), plan, kind);
    absl::StatusOr<Prediction> enough =
        SimulatePlan(Problem(2, 1, 2, Topology(1, 2, 2.0), 64), plan, kind);
    ASSERT_TRUE(own.ok() && one_core.ok() && enough.ok());
    // Each stage on its own device: the pipeline's (M + P - 1) x 3 ms, then the job-wide
    // GLOBAL_NORM's AllGather between the two ranks.
    const double norm = GlobalNormMs(Problem(2, 1, 2, Topology(1, 2, 0), 64), plan, kind);
    EXPECT_DOUBLE_EQ(own->step_ms, (8 + 1) * 3.0 + norm);
    EXPECT_DOUBLE_EQ(enough->step_ms, own->step_ms);
    EXPECT_EQ(own->stages[0].contention_ms, 0.0);
    // One core does at most 1 ms of work per ms; the fill and drain run one stage alone.
    EXPECT_GE(one_core->step_ms, work * (1 - 1e-3));
    EXPECT_LE(one_core->step_ms, work + 2 * 3.0);
    for (const StagePrediction& stage : one_core->stages) {
      EXPECT_GT(stage.contention_ms, 0.0);
      EXPECT_NEAR(stage.compute_ms - stage.contention_ms, 8 * 3.0, 1e-6);
    }
  }
}

TEST(HostContentionTest, OverheadTermsAreChargedWhereTheRuntimeSpendsThem) {
  PlanningProblem problem = Problem(2, 1, 2, Topology(2, 1, 0), 64);
  problem.profile.input_ms_per_sample = 0.01;
  problem.profile.loss_ms_per_sample = 0.02;
  problem.profile.action_ms = 0.1;
  // P = 1: data loading and the loss, 64 samples each; no sends.
  HybridPlan one;
  one.stages = {{0, 1, {0}}};
  one.micro_batch_size = 8;
  one.micro_batches = 8;
  absl::StatusOr<Prediction> p1 = SimulatePlan(problem, one, ScheduleKind::kDapple);
  ASSERT_TRUE(p1.ok()) << p1.status();
  EXPECT_NEAR(p1->step_ms, 8 * 2 * 3.0 + 64 * 0.03, 1e-9);
  EXPECT_NEAR(p1->stages[0].overhead_ms, 64 * 0.03, 1e-9);
  // P = 2: stage 0 loads, stage 1 runs the loss, and each sends and receives 2 M times.
  absl::StatusOr<Prediction> p2 = SimulatePlan(problem, Plan(2, 8, 8), ScheduleKind::kDapple);
  ASSERT_TRUE(p2.ok()) << p2.status();
  EXPECT_NEAR(p2->stages[0].overhead_ms, 64 * 0.01 + 16 * 0.1, 1e-9);
  EXPECT_NEAR(p2->stages[1].overhead_ms, 64 * 0.02 + 16 * 0.1, 1e-9);
  EXPECT_NEAR(p2->stages[0].forward_ms, 1.0 + 8 * 0.01, 1e-12);
  EXPECT_NEAR(p2->stages[1].backward_ms, 2.0 + 8 * 0.02, 1e-12);
}

}  // namespace
}  // namespace dapple::coordinator
