#include "coordinator/planner/plan_simulator.h"

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "coordinator/planner/cost_model.h"
#include "coordinator/planner/plan_estimator.h"
#include "coordinator/planner/plan_summary.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

using schedule::ScheduleKind;
using ::testing::HasSubstr;

constexpr int64_t kGiB = int64_t{1} << 30;

// `nodes` nodes of `per_node` devices ("n0", "n1", ...): 100 GB/s and 1 us inside a node,
// 1 GB/s and 10 us between nodes.
v1::ClusterTopology Topology(int nodes, int per_node, int64_t memory = 16 * kGiB) {
  v1::ClusterTopology topology;
  topology.set_source("test-cluster.yaml");
  for (int i = 0; i < nodes; ++i) {
    v1::ClusterNode* node = topology.add_nodes();
    node->set_name("n" + std::to_string(i));
    node->set_devices(per_node);
    node->set_device_memory_bytes(memory);
  }
  topology.set_intra_node_bandwidth_bytes_per_s(100e9);
  topology.set_intra_node_latency_ms(0.001);
  topology.set_inter_node_bandwidth_bytes_per_s(1e9);
  topology.set_inter_node_latency_ms(0.01);
  return topology;
}

// `layers` equal layers at profile batch `batch`: forward f ms, backward b ms, no bytes crossing
// a cut (free communication) unless `cut` is set.
profile::ChainProfile Equal(int layers, int64_t batch, double f, double b, int64_t params = 0,
                            int64_t activation = 0, int64_t cut = 0) {
  profile::ChainProfile p;
  p.source = "test-profile.txt";
  p.batch_size = batch;
  for (int i = 0; i < layers; ++i) {
    p.names.push_back("layer" + std::to_string(i));
    p.forward_ms.push_back(f);
    p.backward_ms.push_back(b);
    p.parameter_bytes.push_back(params);
    p.activation_bytes.push_back(activation);
    p.saved_bytes.push_back(0);
    if (i + 1 < layers) p.cut_bytes.push_back(cut);
  }
  return p;
}

// One layer per stage, stage s on device s, M micro-batches of `micro` samples.
HybridPlan OneLayerPerStage(int stages, int micro_batches, int64_t micro) {
  HybridPlan plan;
  plan.planner = "manual";
  for (int s = 0; s < stages; ++s) plan.stages.push_back({s, s, {s}});
  plan.micro_batch_size = micro;
  plan.micro_batches = micro_batches;
  return plan;
}

PlanningProblem Problem(profile::ChainProfile profile, v1::ClusterTopology topology,
                        int64_t global_batch) {
  PlanningProblem problem;
  problem.profile = std::move(profile);
  problem.topology = std::move(topology);
  problem.global_batch = global_batch;
  return problem;
}

TEST(PlanSimulatorTest, EqualStagesMatchTheClosedFormsUnderGPipeAndDapple) {
  const double f = 1.5, b = 2.5;
  for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::kDapple}) {
    for (int p : {1, 2, 3, 4, 8}) {
      for (int m : {1, 2, 4, 7, 16}) {
        SCOPED_TRACE(::testing::Message()
                     << schedule::ScheduleKindName(kind) << " P=" << p << " M=" << m);
        const PlanningProblem problem = Problem(Equal(p, 4, f, b), Topology(1, 8), 4 * m);
        const HybridPlan plan = OneLayerPerStage(p, m, 4);
        absl::StatusOr<Prediction> pred = SimulatePlan(problem, plan, kind);
        ASSERT_TRUE(pred.ok()) << pred.status();
        // The closed form, then the job-wide GLOBAL_NORM's AllGather over the P ranks ((P - 1)
        // latencies of 1 us) once the last backward is done.
        const double norm = GlobalNormMs(problem, plan, kind);
        EXPECT_NEAR(norm, (p - 1) * (0.001 + 16 / 100e9 * 1000), 1e-12);
        const double step = (m + p - 1) * (f + b) + norm;
        EXPECT_NEAR(pred->step_ms, step, 1e-9);
        EXPECT_NEAR(pred->bubble_fraction, (p - 1) * (f + b) / step, 1e-12);
        EXPECT_NEAR(pred->samples_per_second, 4.0 * m / step * 1000, 1e-6);
        ASSERT_EQ(pred->stages.size(), static_cast<size_t>(p));
        for (int s = 0; s < p; ++s) {
          const StagePrediction& st = pred->stages[s];
          EXPECT_DOUBLE_EQ(st.forward_ms, f);
          EXPECT_DOUBLE_EQ(st.backward_ms, b);
          EXPECT_NEAR(st.compute_ms, m * (f + b), 1e-9);
          EXPECT_NEAR(st.idle_ms, (p - 1) * (f + b), 1e-9);
          EXPECT_EQ(st.comm_ms, 0.0);
          EXPECT_NEAR(st.allreduce_ms, norm, 1e-12);
          EXPECT_EQ(st.peak_in_flight, kind == ScheduleKind::kDapple ? std::min(p - s, m) : m)
              << "stage " << s;
        }
      }
    }
  }
}

TEST(PlanSimulatorTest, MeasuredOptimizerTimeEndsEachStagesStep) {
  // P = 2 equal stages (F = 1, B = 2 at the micro-batch size), M = 2: the last backward of stage
  // 1 ends at 7, stage 0's at 9 (the closed form (M + P - 1)(F + B)). The job-wide GLOBAL_NORM
  // holds both until 9, plus its AllGather (norm); updates of 0.5 ms (stage 0) and 1.5 ms
  // (stage 1) follow it: the step ends at 9 + norm + 1.5, as the workers run it.
  profile::ChainProfile profile = Equal(2, 4, 1, 2);
  profile.optimizer_ms = {0.5, 1.5};
  PlanningProblem problem = Problem(profile, Topology(1, 2), 8);
  HybridPlan plan;
  plan.stages = {{0, 0, {0}}, {1, 1, {1}}};
  plan.micro_batch_size = 4;
  plan.micro_batches = 2;
  absl::StatusOr<Prediction> pred = SimulatePlan(problem, plan, ScheduleKind::kDapple);
  ASSERT_TRUE(pred.ok()) << pred.status();
  const double norm = GlobalNormMs(problem, plan, ScheduleKind::kDapple);
  EXPECT_GT(norm, 0.0);
  EXPECT_DOUBLE_EQ(pred->step_ms, 9 + norm + 1.5);
  EXPECT_DOUBLE_EQ(pred->stages[0].compute_ms, 2 * 3 + 0.5);
  EXPECT_DOUBLE_EQ(pred->stages[1].compute_ms, 2 * 3 + 1.5);
  // Without optimizer times (files) the closed form holds.
  problem.profile.optimizer_ms.clear();
  pred = SimulatePlan(problem, plan, ScheduleKind::kDapple);
  ASSERT_TRUE(pred.ok()) << pred.status();
  EXPECT_DOUBLE_EQ(pred->step_ms, 9.0 + norm);
}

TEST(PlanSimulatorTest, MemoryByHand) {
  // Two stages: layers 0-1 (params 1000 + 1000, activations 100 + 100 at batch 4) and layer 2
  // (params 3000, activations 300). Micro-batches of 8 samples (twice the profile batch), M=4,
  // momentum (optimizer state = 1 x weights).
  profile::ChainProfile profile = Equal(3, 4, 1, 2);
  profile.parameter_bytes = {1000, 1000, 3000};
  profile.activation_bytes = {100, 100, 300};
  PlanningProblem problem = Problem(profile, Topology(1, 4, 10200), 32);
  problem.optimizer_state_factor = 1.0;
  HybridPlan plan;
  plan.stages = {{0, 1, {0}}, {2, 2, {1}}};
  plan.micro_batch_size = 8;
  plan.micro_batches = 4;

  absl::StatusOr<Prediction> pred = SimulatePlan(problem, plan, ScheduleKind::kDapple);
  ASSERT_TRUE(pred.ok()) << pred.status();
  // Stage 0: weights + grads + momentum = 3 x 2000; 2 micro-batches in flight x 200 x 2; the
  // backward's buffer for the gradient between its two layers (layer 0's output, 100 x 2).
  EXPECT_EQ(pred->stages[0].weight_bytes, 6000);
  EXPECT_EQ(pred->stages[0].peak_in_flight, 2);
  EXPECT_EQ(pred->stages[0].activation_bytes, 800);
  EXPECT_EQ(pred->stages[0].buffer_bytes, 200);
  EXPECT_EQ(pred->stages[0].peak_memory_bytes, 7000);
  // Stage 1: 3 x 3000 + 1 x (300 + its dL/dlogits 300) x 2.
  EXPECT_EQ(pred->stages[1].weight_bytes, 9000);
  EXPECT_EQ(pred->stages[1].activation_bytes, 1200);
  EXPECT_EQ(pred->stages[1].peak_memory_bytes, 10200);
  EXPECT_TRUE(pred->fits_memory);  // 10200 bytes of 10200

  // GPipe keeps all 4 micro-batches: stage 1 needs 9000 + 4 x 1200 > 10200.
  pred = SimulatePlan(problem, plan, ScheduleKind::kGPipe);
  ASSERT_TRUE(pred.ok()) << pred.status();
  EXPECT_EQ(pred->stages[0].activation_bytes, 4 * 400);
  EXPECT_EQ(pred->stages[1].peak_memory_bytes, 9000 + 4800);
  EXPECT_FALSE(pred->fits_memory);

  // Plain SGD keeps no optimizer state; adamw two states.
  problem.optimizer_state_factor = 0;
  pred = SimulatePlan(problem, plan, ScheduleKind::kDapple);
  ASSERT_TRUE(pred.ok()) << pred.status();
  EXPECT_EQ(pred->stages[1].weight_bytes, 6000);
  problem.optimizer_state_factor = 2;
  pred = SimulatePlan(problem, plan, ScheduleKind::kDapple);
  ASSERT_TRUE(pred.ok()) << pred.status();
  EXPECT_EQ(pred->stages[1].weight_bytes, 12000);

  // Two replicas of stage 1 split each micro-batch: activations halve, weights do not.
  problem.optimizer_state_factor = 1;
  plan.stages[1].devices = {1, 2};
  pred = SimulatePlan(problem, plan, ScheduleKind::kDapple);
  ASSERT_TRUE(pred.ok()) << pred.status();
  EXPECT_EQ(pred->stages[1].weight_bytes, 9000);
  EXPECT_EQ(pred->stages[1].activation_bytes, 600);
  EXPECT_EQ(pred->stages[1].peak_memory_bytes, 9600);
}

TEST(PlanSimulatorTest, MemoryCountsTheStageInputAndWhatLayersSave) {
  // A chain at batch 4: outputs 100, 100, 300 (each the next layer's input), saved bytes 40, 0,
  // 60 (what their backwards keep besides), a model input of 50. Micro-batches of 8 samples
  // (twice the profile batch), M = 4, dapple: 2 in flight on stage 0, 1 on stage 1.
  profile::ChainProfile profile = Equal(3, 4, 1, 2);
  profile.activation_bytes = {100, 100, 300};
  profile.saved_bytes = {40, 0, 60};
  profile.cut_bytes = {100, 100};
  profile.input_bytes = 50;
  const PlanningProblem problem = Problem(profile, Topology(1, 4), 32);
  HybridPlan plan;
  plan.stages = {{0, 1, {0}}, {2, 2, {1}}};
  plan.micro_batch_size = 8;
  plan.micro_batches = 4;
  absl::StatusOr<Prediction> pred = SimulatePlan(problem, plan, ScheduleKind::kDapple);
  ASSERT_TRUE(pred.ok()) << pred.status();
  // Stage 0: (model input 50 + 100 + 40 + 100) x 2 (8 samples) x 2 micro-batches.
  EXPECT_EQ(pred->stages[0].activation_bytes, (50 + 100 + 40 + 100) * 2 * 2);
  // Stage 1: (its input, the cut after layer 1, 100 + 300 + 60, and the last stage's dL/dlogits
  // 300) x 2 x 1; the saved bytes are held, never sent: the transfer stays the cut's 100 bytes
  // (free links here).
  EXPECT_EQ(pred->stages[1].activation_bytes, (100 + 300 + 60 + 300) * 2);
  // The analytical estimator counts the same bytes.
  const MemoryEstimate estimate = PlanEstimator(problem).Memory(plan);
  for (int s = 0; s < 2; ++s) {
    EXPECT_EQ(estimate.stages[s].activation_bytes, pred->stages[s].activation_bytes) << s;
  }
  // Two replicas of stage 1 halve its share of every micro-batch, its input included.
  plan.stages[1].devices = {1, 2};
  pred = SimulatePlan(problem, plan, ScheduleKind::kDapple);
  ASSERT_TRUE(pred.ok()) << pred.status();
  EXPECT_EQ(pred->stages[1].activation_bytes, 100 + 300 + 60 + 300);
}

// A data-parallel plan has no bubble, but step - busy - allreduce is a difference of sums of
// times, and cancellation left idle_ms -5.68e-14 and bubble_fraction -6e-17 (vgg-19-pbs-32.txt,
// dp on two nodes of 8 GPUs). Idle time is clamped at 0 where it is computed.
TEST(PlanSimulatorTest, IdleTimeAndBubbleAreNeverNegative) {
  std::mt19937 rng(19);
  std::uniform_real_distribution<double> ms(0.01, 7.0);
  int cases = 0;
  for (int trial = 0; trial < 40; ++trial) {
    profile::ChainProfile profile = Equal(19, 32, 1, 1, 0, 0, 0);
    for (int i = 0; i < profile.num_layers(); ++i) {
      profile.forward_ms[i] = ms(rng);
      profile.backward_ms[i] = ms(rng);
      profile.parameter_bytes[i] = static_cast<int64_t>(ms(rng) * 1e7);
    }
    for (const int m : {1, 2, 4}) {
      HybridPlan plan;
      plan.planner = "dp";
      plan.stages.push_back({0, profile.num_layers() - 1, {}});
      for (int d = 0; d < 16; ++d) plan.stages[0].devices.push_back(d);
      plan.micro_batch_size = 16 * 32 / m;
      plan.micro_batches = m;
      for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::kDapple}) {
        const absl::StatusOr<Prediction> pred =
            SimulatePlan(Problem(profile, Topology(2, 8), 16 * 32), plan, kind);
        ASSERT_TRUE(pred.ok()) << pred.status();
        SCOPED_TRACE(::testing::Message() << "trial " << trial << " M=" << m);
        EXPECT_GE(pred->stages[0].idle_ms, 0.0);
        EXPECT_GE(pred->bubble_fraction, 0.0);
        // One stage waits for nobody: any idle time is rounding, far below the step.
        EXPECT_LE(pred->stages[0].idle_ms, 1e-9 * pred->step_ms);
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 240);
}

TEST(PlanSimulatorTest, ReplicasHalveComputeAndAddTheAllReduce) {
  // Pure data parallelism on one node: P = 1, params 1e8 bytes per layer, 2 layers.
  const PlanningProblem problem = Problem(Equal(2, 8, 1, 2, 100000000), Topology(1, 4), 32);
  HybridPlan plan;
  plan.stages = {{0, 1, {0}}};
  plan.micro_batch_size = 8;
  plan.micro_batches = 4;
  absl::StatusOr<Prediction> one = SimulatePlan(problem, plan, ScheduleKind::kDapple);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_DOUBLE_EQ(one->step_ms, 4 * (2.0 + 4.0));
  EXPECT_EQ(one->stages[0].allreduce_ms, 0.0);

  plan.stages[0].devices = {0, 1};
  absl::StatusOr<Prediction> two = SimulatePlan(problem, plan, ScheduleKind::kDapple);
  ASSERT_TRUE(two.ok()) << two.status();
  // Ring over 2 devices: 2 latencies + 1 x 2e8 bytes / 100 GB/s = 2 us + 2 ms.
  const double allreduce = 2 * 0.001 + 2e8 / 100e9 * 1000;
  EXPECT_DOUBLE_EQ(AllReduceMs(problem.topology, 2e8, {0, 1}), allreduce);
  EXPECT_DOUBLE_EQ(two->stages[0].forward_ms, 1.0);
  EXPECT_DOUBLE_EQ(two->stages[0].compute_ms, 4 * 3.0);
  // The replicas' ALLREDUCE, then the job-wide GLOBAL_NORM among the two ranks.
  const double norm = GlobalNormMs(problem, plan, ScheduleKind::kDapple);
  EXPECT_DOUBLE_EQ(two->stages[0].allreduce_ms, allreduce + norm);
  EXPECT_DOUBLE_EQ(two->step_ms, 4 * 3.0 + allreduce + norm);
  EXPECT_NEAR(two->stages[0].idle_ms, 0.0, 1e-12);

  // A replicated middle of a pipeline: only that stage pays the AllReduce, at the end.
  const PlanningProblem pipe = Problem(Equal(2, 8, 1, 2, 100000000), Topology(1, 4), 8);
  HybridPlan split;
  split.stages = {{0, 0, {0}}, {1, 1, {1, 2}}};
  split.micro_batch_size = 8;
  split.micro_batches = 1;
  absl::StatusOr<Prediction> pred = SimulatePlan(pipe, split, ScheduleKind::kDapple);
  ASSERT_TRUE(pred.ok()) << pred.status();
  const double ar1 = AllReduceMs(pipe.topology, 1e8, {1, 2});
  const double norm3 = GlobalNormMs(pipe, split, ScheduleKind::kDapple);
  EXPECT_DOUBLE_EQ(pred->stages[0].allreduce_ms, norm3);
  EXPECT_DOUBLE_EQ(pred->stages[1].allreduce_ms, ar1 + norm3);
  EXPECT_DOUBLE_EQ(pred->stages[1].forward_ms, 0.5);
  // Stage 0: F [0,1); stage 1: F [1,1.5), B [1.5,2.5), AllReduce [2.5, 2.5 + ar1); stage 0:
  // B [2.5,4.5). The GLOBAL_NORM of all three ranks starts when the last of them gets there.
  EXPECT_DOUBLE_EQ(pred->step_ms, std::max(4.5, 2.5 + ar1) + norm3);
}

// A replica runs its share of each micro-batch: the per-sample part of the layers' time
// halves, their fixed part does not (a measured profile's two batch sizes).
TEST(PlanSimulatorTest, ReplicasPayTheFixedPartOfTheirShare) {
  PlanningProblem problem = Problem(Equal(2, 8, 1, 2), Topology(1, 4), 32);
  problem.profile.forward_fixed_ms = {0.5, 0.5};
  problem.profile.backward_fixed_ms = {1, 1};
  HybridPlan plan;
  plan.stages = {{0, 1, {0, 1}}};
  plan.micro_batch_size = 8;
  plan.micro_batches = 4;
  absl::StatusOr<Prediction> pred = SimulatePlan(problem, plan, ScheduleKind::kDapple);
  ASSERT_TRUE(pred.ok()) << pred.status();
  // 4 samples of 8 per replica: 2 x (0.5 + 0.5 / 2) forward, 2 x (1 + 1 / 2) backward.
  EXPECT_DOUBLE_EQ(pred->stages[0].forward_ms, 1.5);
  EXPECT_DOUBLE_EQ(pred->stages[0].backward_ms, 3.0);
  EXPECT_NEAR(PlanEstimator(problem).Latency(plan).step_ms, pred->step_ms, 1e-9);
  problem.profile.forward_fixed_ms = {0.5, 5};
  pred = SimulatePlan(problem, plan, ScheduleKind::kDapple);
  ASSERT_FALSE(pred.ok());
  EXPECT_THAT(std::string(pred.status().message()),
              HasSubstr("profile layer 1 (layer1) forward_fixed_ms 5 must be in [0, 1]"));
}

TEST(PlanSimulatorTest, SlowLinkLengthensTwoStagesByBothTransfers) {
  // Cut of 1e6 bytes at the profile batch of 4; micro-batches of 8 move 2e6 bytes.
  const profile::ChainProfile profile = Equal(2, 4, 1, 2, 0, 0, 1000000);
  HybridPlan plan = OneLayerPerStage(2, 1, 8);
  const double f = 2, b = 4;  // at 8 samples
  for (const auto& [second_device, transfer] :
       {std::pair{1, 0.001 + 2e6 / 100e9 * 1000}, std::pair{4, 0.01 + 2e6 / 1e9 * 1000}}) {
    SCOPED_TRACE(::testing::Message() << "second stage on device " << second_device);
    plan.stages[1].devices = {second_device};
    for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::kDapple}) {
      const PlanningProblem problem = Problem(profile, Topology(2, 4), 8);
      absl::StatusOr<Prediction> pred = SimulatePlan(problem, plan, kind);
      ASSERT_TRUE(pred.ok()) << pred.status();
      const double norm = GlobalNormMs(problem, plan, kind);
      EXPECT_DOUBLE_EQ(pred->step_ms, 2 * (f + b) + 2 * transfer + norm);
      EXPECT_DOUBLE_EQ(pred->stages[0].comm_ms, 2 * transfer);
      EXPECT_DOUBLE_EQ(pred->stages[1].comm_ms, 2 * transfer);
      EXPECT_DOUBLE_EQ(pred->stages[0].idle_ms, pred->step_ms - (f + b) - norm);
    }
  }
}

// CPU processes of one host (a node with a compute capacity) move activations through host
// memory: the copies are the transfer, run by the sender in its SEND and the receiver in its
// RECV (HostCopyMsPerSide each), and the link keeps only its latency. The work is the same, so
// with one micro-batch (every action on the critical path) the step is too; what moves is where
// the time is spent: the ranks' overhead instead of the link. The analytical estimate follows.
TEST(PlanSimulatorTest, HostMemoryLinksPutTheCopiesOnTheRanks) {
  const profile::ChainProfile profile = Equal(2, 4, 1, 2, 0, 0, 1000000);
  const double f = 2, b = 4, latency = 0.001, transfer = latency + 2e6 / 100e9 * 1000;
  const double copy = (transfer - latency) / 2;
  for (int m : {1, 4}) {
    SCOPED_TRACE(m);
    const HybridPlan plan = OneLayerPerStage(2, m, 8);
    PlanningProblem gpus = Problem(profile, Topology(1, 2), 8 * m);
    PlanningProblem cpus = gpus;
    cpus.topology.mutable_nodes(0)->set_compute_capacity(8);  // cores enough: no contention
    absl::StatusOr<Prediction> on_gpus = SimulatePlan(gpus, plan, ScheduleKind::kDapple);
    absl::StatusOr<Prediction> on_cpus = SimulatePlan(cpus, plan, ScheduleKind::kDapple);
    ASSERT_TRUE(on_gpus.ok() && on_cpus.ok());
    const double norm = GlobalNormMs(cpus, plan, ScheduleKind::kDapple);
    if (m == 1) {
      EXPECT_DOUBLE_EQ(on_gpus->step_ms, 2 * (f + b) + 2 * transfer + norm);
      EXPECT_NEAR(on_cpus->step_ms, on_gpus->step_ms, 1e-12);
    }
    for (int s = 0; s < 2; ++s) {
      EXPECT_DOUBLE_EQ(on_gpus->stages[s].comm_ms, 2 * m * transfer);
      EXPECT_DOUBLE_EQ(on_cpus->stages[s].comm_ms, 2 * m * latency);
      EXPECT_DOUBLE_EQ(on_gpus->stages[s].overhead_ms, 0.0);
      // Each stage sends and receives 2 messages per micro-batch.
      EXPECT_NEAR(on_cpus->stages[s].overhead_ms, 2 * m * copy, 1e-12);
      EXPECT_NEAR(on_cpus->stages[s].compute_ms, m * (f + b) + 2 * m * copy, 1e-12);
    }
    // The analytical estimate (plan_estimator.h) is a closed form of the same costs: within a
    // transfer of the simulation on either topology (here within 0.1%).
    EXPECT_NEAR(PlanEstimator(gpus).Latency(plan).step_ms, on_gpus->step_ms,
                1e-3 * on_gpus->step_ms);
    EXPECT_NEAR(PlanEstimator(cpus).Latency(plan).step_ms, on_cpus->step_ms,
                1e-3 * on_cpus->step_ms);
  }
}

// Messages in flight overlap the link's latency (simulator.h, link_latency_per_boundary): a
// tiny model's back-to-back warm-up activations each arrive one latency after they are sent, on
// a GPU link and through host memory alike. (A link that waited out each message's latency put
// a gpipe job of a tiny MLP on two cpu workers at 2.1 ms a step; it ran 1.0-1.6 ms.)
TEST(PlanSimulatorTest, MessagesInFlightOverlapTheLinksLatency) {
  const profile::ChainProfile profile = Equal(2, 4, 1, 2, 0, 0, 4);  // 8 bytes per micro-batch
  const double latency = 5;
  const HybridPlan plan = OneLayerPerStage(2, 4, 8);  // forward 2, backward 4
  for (bool host_memory : {false, true}) {
    SCOPED_TRACE(host_memory ? "through host memory" : "GPU link");
    PlanningProblem problem = Problem(profile, Topology(1, 2), 32);
    problem.topology.set_intra_node_latency_ms(latency);
    if (host_memory) problem.topology.mutable_nodes(0)->set_compute_capacity(8);
    absl::StatusOr<Prediction> pred = SimulatePlan(problem, plan, ScheduleKind::kGPipe);
    ASSERT_TRUE(pred.ok()) << pred.status();
    // Stage 0: F0..F3 [0,8), the activations arriving at 7, 9, 11, 13. Stage 1: F0..F3 [7,15),
    // B3..B0 [15,31), the gradients arriving at 24, 28, 32, 36. Stage 0: B3..B0 [24,40), then
    // GLOBAL_NORM. (Waiting out each latency, stage 1's F3 would start at 22.)
    EXPECT_NEAR(pred->step_ms, 40 + GlobalNormMs(problem, plan, ScheduleKind::kGPipe), 1e-6);
    // Each message still counts its whole transfer, latency included.
    EXPECT_NEAR(pred->stages[0].comm_ms, 8 * latency, 1e-6);
  }
}

TEST(PlanSimulatorTest, PipeDreamSteadyStateHasNoBubbleForEqualStages) {
  const double f = 1, b = 2;
  for (int p : {1, 2, 4, 6}) {
    for (int m : {1, 2, 3, 8}) {
      SCOPED_TRACE(::testing::Message() << "P=" << p << " M=" << m);
      PlanningProblem problem = Problem(Equal(p, 2, f, b, 1000, 10), Topology(1, 8), 2 * m);
      problem.optimizer_state_factor = 1;
      absl::StatusOr<Prediction> pred =
          SimulatePlan(problem, OneLayerPerStage(p, m, 2), ScheduleKind::kPipeDream);
      ASSERT_TRUE(pred.ok()) << pred.status();
      EXPECT_NEAR(pred->step_ms, m * (f + b), 1e-9);
      EXPECT_NEAR(pred->bubble_fraction, 0.0, 1e-12);
      for (int s = 0; s < p; ++s) {
        const StagePrediction& st = pred->stages[s];
        EXPECT_NEAR(st.compute_ms, m * (f + b), 1e-9);
        EXPECT_NEAR(st.idle_ms, 0.0, 1e-9);
        // Without flushes stage s always holds P - s micro-batches, even when M is smaller.
        // At an update its P - s - 1 in-flight micro-batches are consecutive and ran under
        // ceil((P - s - 1) / M) versions, each stashed, plus the swap copy of the live weights
        // (common/memory_model.h).
        EXPECT_EQ(st.peak_in_flight, p - s);
        const int stashed = (p - s - 1 + m - 1) / m;
        EXPECT_EQ(st.weight_bytes, 1000 * (2 + 1) + 1000 * (stashed > 0 ? stashed + 1 : 0));
        // The last stage also keeps each micro-batch's dL/dlogits (its output's 10 bytes).
        EXPECT_EQ(st.activation_bytes, (s == p - 1 ? 20 : 10) * (p - s));
      }
    }
  }
}

// 1F1B-RR: stage s of D_s replicas runs with warm-up K_s = D_s + ... + D_{P-1}; a replica holds
// ceil(K_s / D_s) WHOLE micro-batches of activations and stashes the versions its in-flight
// micro-batches ran under (one here: at M = 6 they all ran under the same), plus the swap copy. Two
// equal layers (f = 1, b = 2 ms at 8 samples), 1000 parameter bytes and 80 activation bytes at 8
// samples each, micro-batches of 8, optimizer state factor 1.
TEST(PlanSimulatorTest, PipeDreamReplicasHoldCeilKOverDWholeMicroBatches) {
  struct Case {
    std::vector<int> replicas;
    std::vector<int> in_flight;  // ceil(K_s / D_s), by hand
    std::vector<int> stashed;    // weight copies besides the live one, by hand
  };
  const Case cases[] = {
      {{2, 1}, {2, 1}, {2, 0}},  // K = 3, 1
      {{2, 2}, {2, 1}, {2, 2}},  // K = 4, 2
      {{1, 2}, {3, 1}, {2, 2}},  // K = 3, 2
      {{3, 1}, {2, 1}, {2, 0}},  // K = 4, 1
      {{1, 1}, {2, 1}, {2, 0}},  // no replicas
  };
  for (const Case& c : cases) {
    const int m = 6;
    SCOPED_TRACE(::testing::Message() << "D = " << c.replicas[0] << ", " << c.replicas[1]);
    PlanningProblem problem = Problem(Equal(2, 8, 1, 2, 1000, 80), Topology(1, 8), 8 * m);
    problem.optimizer_state_factor = 1;
    HybridPlan plan = OneLayerPerStage(2, m, 8);
    int device = 0;
    for (int s = 0; s < 2; ++s) {
      plan.stages[s].devices.clear();
      for (int r = 0; r < c.replicas[s]; ++r) plan.stages[s].devices.push_back(device++);
    }
    absl::StatusOr<Prediction> pred = SimulatePlan(problem, plan, ScheduleKind::kPipeDream);
    ASSERT_TRUE(pred.ok()) << pred.status();
    for (int s = 0; s < 2; ++s) {
      const StagePrediction& st = pred->stages[s];
      EXPECT_EQ(st.peak_in_flight, c.in_flight[s]) << "stage " << s;
      // The last stage also keeps each micro-batch's dL/dlogits (80 bytes).
      EXPECT_EQ(st.activation_bytes, (s == 1 ? 160 : 80) * c.in_flight[s]) << "stage " << s;
      EXPECT_EQ(st.weight_bytes, 1000 * (2 + 1) + 1000 * c.stashed[s]) << "stage " << s;
      EXPECT_EQ(st.peak_memory_bytes, st.weight_bytes + st.activation_bytes);
      // The stage as a whole finishes a micro-batch every (f + b) / D_s (section 3.1).
      EXPECT_DOUBLE_EQ(st.forward_ms, 1.0 / c.replicas[s]);
      EXPECT_DOUBLE_EQ(st.backward_ms, 2.0 / c.replicas[s]);
    }
    // Stage 1 alone (no AllReduce) with D = 1 is the bottleneck: M (f + b) per update.
    if (c.replicas[1] == 1 && c.replicas[0] > 1) {
      EXPECT_NEAR(pred->step_ms, m * 3.0, 1e-9);
    }
  }
}

// Split-concat needs a micro-batch of at least D samples; 1F1B-RR needs M >= D micro-batches.
TEST(PlanSimulatorTest, PipeDreamReplicasNeedMicroBatchesNotSamples) {
  const PlanningProblem problem = Problem(Equal(2, 1, 1, 2), Topology(1, 8), 4);
  HybridPlan plan = OneLayerPerStage(2, 4, 1);  // micro-batches of one sample
  plan.stages[0].devices = {0, 1};
  plan.stages[1].devices = {2, 3};
  EXPECT_TRUE(SimulatePlan(problem, plan, ScheduleKind::kPipeDream).ok());
  absl::StatusOr<Prediction> dapple = SimulatePlan(problem, plan, ScheduleKind::kDapple);
  EXPECT_THAT(dapple.status().message(), HasSubstr("each replica needs at least one sample"));
  plan.stages[1].devices = {2, 3, 4, 5, 6};
  absl::StatusOr<Prediction> pred = SimulatePlan(problem, plan, ScheduleKind::kPipeDream);
  EXPECT_EQ(pred.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pred.status().message(),
            "micro_batches 4 is fewer than stage 1's 5 replicas: schedule pipedream sends whole "
            "micro-batches round-robin and each replica needs at least one per step");
}

TEST(PlanSimulatorTest, PipeDreamSteadyStateIsTheSlowestStage) {
  // Stage 1 takes twice as long: steady state = M x (its F + B), with the others idle.
  profile::ChainProfile profile = Equal(3, 2, 1, 2);
  profile.forward_ms[1] = 2;
  profile.backward_ms[1] = 4;
  const int m = 4;
  absl::StatusOr<Prediction> pred = SimulatePlan(
      Problem(profile, Topology(1, 4), 2 * m), OneLayerPerStage(3, m, 2), ScheduleKind::kPipeDream);
  ASSERT_TRUE(pred.ok()) << pred.status();
  EXPECT_NEAR(pred->step_ms, m * 6.0, 1e-9);
  EXPECT_NEAR(pred->stages[1].idle_ms, 0.0, 1e-9);
  EXPECT_NEAR(pred->stages[0].idle_ms, m * 3.0, 1e-9);
  EXPECT_NEAR(pred->bubble_fraction, 2 * m * 3.0 / (3 * m * 6.0), 1e-9);
  // The synchronous schedules pay warm-up and cool-down on top.
  absl::StatusOr<Prediction> dapple = SimulatePlan(
      Problem(profile, Topology(1, 4), 2 * m), OneLayerPerStage(3, m, 2), ScheduleKind::kDapple);
  ASSERT_TRUE(dapple.ok()) << dapple.status();
  EXPECT_GT(dapple->step_ms, pred->step_ms);
}

TEST(PlanSimulatorTest, MalformedPlansNameTheRule) {
  const PlanningProblem problem = Problem(Equal(4, 4, 1, 2), Topology(1, 4), 16);
  auto plan = [] {
    HybridPlan p;
    p.stages = {{0, 1, {0}}, {2, 3, {1, 2}}};
    p.micro_batch_size = 4;
    p.micro_batches = 4;
    return p;
  };
  ASSERT_TRUE(SimulatePlan(problem, plan(), ScheduleKind::kDapple).ok());
  struct Case {
    HybridPlan plan;
    std::string message;
    bool split_concat_only = false;  // a rule of gpipe and dapple only
  };
  std::vector<Case> cases;
  cases.push_back({plan(), "the plan has no stages"});
  cases.back().plan.stages.clear();
  cases.push_back({plan(), "stage 0 starts at layer 1: the first stage must start at layer 0"});
  cases.back().plan.stages[0].first_layer = 1;
  cases.push_back({plan(),
                   "stage 1 starts at layer 3 but stage 0 ends at layer 1: stages must be "
                   "contiguous"});
  cases.back().plan.stages[1].first_layer = 3;
  cases.push_back({plan(),
                   "the last stage ends at layer 2 but the model has 4 layers (0..3): "
                   "stages must cover every layer"});
  cases.back().plan.stages[1].last_layer = 2;
  cases.push_back({plan(), "stage 1 ends at layer 4 but the model has 4 layers (0..3)"});
  cases.back().plan.stages[1].last_layer = 4;
  cases.push_back({plan(),
                   "stage 1 is empty (first_layer 2 > last_layer 1): every stage needs "
                   "at least one layer"});
  cases.back().plan.stages = {{0, 1, {0}}, {2, 1, {1}}, {2, 3, {2}}};
  cases.push_back({plan(), "stage 0 has no devices: every stage needs at least one"});
  cases.back().plan.stages[0].devices.clear();
  cases.push_back({plan(), "stage 1 uses device 4 but the topology has 4 devices (0..3)"});
  cases.back().plan.stages[1].devices = {1, 4};
  cases.push_back({plan(), "stage 1 uses device -1"});
  cases.back().plan.stages[1].devices = {-1};
  cases.push_back({plan(),
                   "device 1 is used twice (stage 1 and stage 1): each device runs one "
                   "replica"});
  cases.back().plan.stages[1].devices = {1, 1};
  cases.push_back({plan(), "device 0 is used twice (stage 0 and stage 1)"});
  cases.back().plan.stages[1].devices = {2, 0};
  cases.push_back({plan(), "micro_batch_size 4 x micro_batches 2 = 8 is not global_batch 16"});
  cases.back().plan.micro_batches = 2;
  cases.push_back({plan(), "micro_batch_size 0 must be > 0"});
  cases.back().plan.micro_batch_size = 0;
  cases.push_back({plan(), "micro_batches -1 must be > 0"});
  cases.back().plan.micro_batches = -1;
  cases.push_back({plan(),
                   "micro_batch_size 1 is smaller than stage 1's 2 replicas: each replica "
                   "needs at least one sample"});
  cases.back().plan.micro_batch_size = 1;
  cases.back().plan.micro_batches = 16;
  cases.back().split_concat_only = true;  // pipedream never splits a micro-batch
  for (const Case& c : cases) {
    for (ScheduleKind kind :
         {ScheduleKind::kGPipe, ScheduleKind::kDapple, ScheduleKind::kPipeDream}) {
      if (c.split_concat_only && kind == ScheduleKind::kPipeDream) continue;
      absl::StatusOr<Prediction> pred = SimulatePlan(problem, c.plan, kind);
      ASSERT_FALSE(pred.ok()) << c.message;
      EXPECT_EQ(pred.status().code(), absl::StatusCode::kInvalidArgument) << c.message;
      EXPECT_THAT(std::string(pred.status().message()), HasSubstr(c.message));
      EXPECT_EQ(std::string(pred.status().message()).find('\n'), std::string::npos);
    }
  }
}

TEST(PlanSimulatorTest, MalformedProblemsNameTheField) {
  const HybridPlan plan = OneLayerPerStage(2, 2, 2);
  struct Case {
    PlanningProblem problem;
    std::string message;
  };
  const PlanningProblem good = Problem(Equal(2, 2, 1, 2, 0, 0, 100), Topology(1, 2), 4);
  ASSERT_TRUE(SimulatePlan(good, plan, ScheduleKind::kDapple).ok());
  std::vector<Case> cases;
  cases.push_back({good, "the profile has no layers"});
  cases.back().problem.profile = profile::ChainProfile{};
  cases.push_back({good, "profile batch_size 0 must be > 0"});
  cases.back().problem.profile.batch_size = 0;
  cases.push_back({good, "profile cut_bytes has 2 entries for 2 layers (want 1)"});
  cases.back().problem.profile.cut_bytes.push_back(0);
  cases.push_back({good, "profile backward_ms has 1 entries for 2 layers (want 2)"});
  cases.back().problem.profile.backward_ms.pop_back();
  cases.push_back({good, "profile layer 1 (layer1) forward_ms -1 must be finite and >= 0"});
  cases.back().problem.profile.forward_ms[1] = -1;
  cases.push_back({good, "profile layer 0 (layer0) parameter_bytes -5 must be >= 0"});
  cases.back().problem.profile.parameter_bytes[0] = -5;
  cases.push_back({good, "global_batch 0 must be > 0"});
  cases.back().problem.global_batch = 0;
  cases.push_back({good, "optimizer_state_factor -1 must be finite and >= 0"});
  cases.back().problem.optimizer_state_factor = -1;
  cases.push_back({good, "the topology's link for stages 0 -> 1 has bandwidth 0 bytes/s"});
  cases.back().problem.topology.set_intra_node_bandwidth_bytes_per_s(0);
  for (const Case& c : cases) {
    absl::StatusOr<Prediction> pred = SimulatePlan(c.problem, plan, ScheduleKind::kDapple);
    ASSERT_FALSE(pred.ok()) << c.message;
    EXPECT_EQ(pred.status().code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(std::string(pred.status().message()), HasSubstr(c.message));
  }
}

TEST(PlanSimulatorTest, ManyStagesAndReplicasOnAThousandDevices) {
  // 1000 layers, 125 stages of 8 layers, 8 replicas each on 125 nodes of 8: one step of the
  // kind the planners score by the thousand. The closed form still holds: no cut bytes, the
  // AllReduce of each stage overlaps earlier stages' cool-down except on stage 0.
  const int layers = 1000, p = 125, d = 8, m = 64;
  const PlanningProblem problem =
      Problem(Equal(layers, 64, 0.08, 0.16, 4000), Topology(p, d), int64_t{64} * m);
  HybridPlan plan;
  for (int s = 0; s < p; ++s) {
    StagePlan stage{s * 8, s * 8 + 7, {}};
    for (int r = 0; r < d; ++r) stage.devices.push_back(s * d + r);
    plan.stages.push_back(stage);
  }
  plan.micro_batch_size = 64;
  plan.micro_batches = m;
  absl::StatusOr<Prediction> pred = SimulatePlan(problem, plan, ScheduleKind::kDapple);
  ASSERT_TRUE(pred.ok()) << pred.status();
  const double f = 8 * 0.08 / d, b = 8 * 0.16 / d;
  const double allreduce = AllReduceMs(problem.topology, 8 * 4000, plan.stages[0].devices);
  // Then the job-wide GLOBAL_NORM: a ring AllGather over all 1000 ranks, 999 inter-node hops.
  const double norm = GlobalNormMs(problem, plan, ScheduleKind::kDapple);
  EXPECT_NEAR(norm, 999 * (0.01 + 16 / 1e9 * 1000), 1e-9);
  EXPECT_NEAR(pred->step_ms, (m + p - 1) * (f + b) + allreduce + norm, 1e-6);
  EXPECT_EQ(pred->stages[0].peak_in_flight, std::min(p, m));
  EXPECT_TRUE(pred->fits_memory);
}

TEST(PlanSummaryTest, CarriesThePlanAndItsPrediction) {
  PlanningProblem problem = Problem(Equal(4, 4, 1, 2, 1000, 100, 50), Topology(2, 2), 16);
  HybridPlan plan;
  plan.planner = "dapple";
  plan.placement_policy = "fresh_first";
  plan.stages = {{0, 2, {0, 1}}, {3, 3, {2}}};
  plan.micro_batch_size = 4;
  plan.micro_batches = 4;
  absl::StatusOr<Prediction> pred = SimulatePlan(problem, plan, ScheduleKind::kDapple);
  ASSERT_TRUE(pred.ok()) << pred.status();
  const v1::ParallelPlanSummary summary = ToSummary(problem, plan, *pred, ScheduleKind::kDapple);
  EXPECT_EQ(summary.planner(), "dapple");
  EXPECT_EQ(summary.schedule(), "dapple");
  EXPECT_EQ(summary.micro_batches(), 4);
  EXPECT_EQ(summary.micro_batch_size(), 4);
  EXPECT_EQ(summary.placement_policy(), "fresh_first");
  EXPECT_EQ(summary.profile_source(), "test-profile.txt");
  EXPECT_EQ(summary.cluster_source(), "test-cluster.yaml");
  EXPECT_EQ(summary.num_devices(), 3);
  EXPECT_DOUBLE_EQ(summary.predicted_step_ms(), pred->step_ms);
  EXPECT_DOUBLE_EQ(summary.predicted_samples_per_second(), pred->samples_per_second);
  EXPECT_DOUBLE_EQ(summary.bubble_fraction(), pred->bubble_fraction);
  ASSERT_EQ(summary.stages_size(), 2);
  const v1::PlanStageSummary& s0 = summary.stages(0);
  EXPECT_EQ(s0.first_layer(), 0);
  EXPECT_EQ(s0.last_layer(), 2);
  EXPECT_EQ(s0.replicas(), 2);
  EXPECT_THAT(s0.placement(), ::testing::ElementsAre("n0/0", "n0/1"));
  EXPECT_THAT(summary.stages(1).placement(), ::testing::ElementsAre("n1/0"));
  EXPECT_TRUE(s0.worker_ids().empty());
  EXPECT_TRUE(s0.devices().empty());
  EXPECT_TRUE(s0.hostnames().empty());
  for (int s = 0; s < 2; ++s) {
    const StagePrediction& p = pred->stages[s];
    const v1::PlanStageSummary& out = summary.stages(s);
    EXPECT_DOUBLE_EQ(out.forward_ms(), p.forward_ms);
    EXPECT_DOUBLE_EQ(out.backward_ms(), p.backward_ms);
    EXPECT_DOUBLE_EQ(out.compute_ms(), p.compute_ms);
    EXPECT_DOUBLE_EQ(out.idle_ms(), p.idle_ms);
    EXPECT_DOUBLE_EQ(out.comm_ms(), p.comm_ms);
    EXPECT_DOUBLE_EQ(out.allreduce_ms(), p.allreduce_ms);
    EXPECT_EQ(out.peak_memory_bytes(), p.peak_memory_bytes);
    EXPECT_EQ(out.peak_in_flight(), p.peak_in_flight);
    EXPECT_DOUBLE_EQ(out.bubble_fraction(), p.idle_ms / pred->step_ms);
  }
  EXPECT_GT(summary.stages(0).allreduce_ms(), 0.0);
  EXPECT_GT(summary.stages(1).comm_ms(), 0.0);

  // Without a prediction for this plan the per-stage prediction fields stay 0.
  const v1::ParallelPlanSummary bare =
      ToSummary(problem, plan, Prediction{}, ScheduleKind::kPipeDream);
  EXPECT_EQ(bare.schedule(), "pipedream");
  EXPECT_EQ(bare.stages(0).replicas(), 2);
  EXPECT_EQ(bare.stages(0).compute_ms(), 0.0);
  EXPECT_EQ(bare.stages(0).peak_memory_bytes(), 0);
}

}  // namespace
}  // namespace dapple::coordinator
