// Interleaved 1F1B in the planner: the plan simulator scores a chunked plan per virtual stage
// (Megatron-LM, SC'21, section 2.2.2: the bubble of 1F1B divided by v), the memory model counts
// every chunk, and MakePlan plans parallel.schedule interleaved with P * v balanced virtual
// stages (interleaved_partition.h InterleavedPlan).
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/memory_model.h"
#include "common/schedule/generators.h"
#include "common/schedule/ranks.h"
#include "coordinator/planner/interleaved_partition.h"
#include "coordinator/planner/plan_simulator.h"
#include "coordinator/planner/planner.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

using schedule::ScheduleKind;
using ::testing::HasSubstr;

// One node of `devices` devices with free links (bandwidth huge, latency 0): the step is the
// schedule's compute alone.
v1::ClusterTopology FreeLinks(int devices) {
  v1::ClusterTopology topology;
  topology.set_source("free-links.yaml");
  v1::ClusterNode* node = topology.add_nodes();
  node->set_name("n0");
  node->set_devices(devices);
  node->set_device_memory_bytes(int64_t{16} << 30);
  topology.set_intra_node_bandwidth_bytes_per_s(1e18);
  topology.set_intra_node_latency_ms(0);
  topology.set_inter_node_bandwidth_bytes_per_s(1e18);
  topology.set_inter_node_latency_ms(0);
  return topology;
}

// `layers` equal layers: forward f ms, backward b ms at batch 1; `params` bytes each.
profile::ChainProfile Equal(int layers, double f, double b, int64_t params = 0,
                            int64_t activation = 0) {
  profile::ChainProfile p;
  p.source = "equal.txt";
  p.batch_size = 1;
  for (int i = 0; i < layers; ++i) {
    p.names.push_back(absl::StrCat("layer", i));
    p.forward_ms.push_back(f);
    p.backward_ms.push_back(b);
    p.parameter_bytes.push_back(params);
    p.activation_bytes.push_back(activation);
    p.saved_bytes.push_back(0);
    if (i + 1 < layers) p.cut_bytes.push_back(activation);
  }
  return p;
}

PlanningProblem Problem(profile::ChainProfile profile, int stages, int chunks, int micro_batches,
                        int replicas = 1) {
  PlanningProblem problem;
  problem.profile = std::move(profile);
  problem.topology = FreeLinks(stages * replicas);
  problem.micro_batch_size = replicas;  // one sample per replica
  problem.global_batch = problem.micro_batch_size * micro_batches;
  problem.schedule = ScheduleKind::kInterleaved;
  problem.num_stages = stages;
  problem.interleave = chunks;
  return problem;
}

// Equal chunks of t_f, t_b per chunk (a rank's T_F = v t_f): one flushed step is
// M (T_F + T_B) + (P - 1)(T_F + T_B) / v, the bubble fraction (P - 1) / (v M + P - 1), against
// 1F1B's (M + P - 1)(T_F + T_B) on the same layers (docs/schedules.md).
TEST(InterleavedPlanningTest, EqualChunksMatchMegatronsBubble) {
  const double f = 1.0, b = 2.0;
  for (int p : {2, 4}) {
    for (int v : {2, 3}) {
      for (int m : {p, p + 1, 2 * p + 1, 8}) {
        const int layers = 2 * p * v;  // 2 layers per chunk
        const PlanningProblem problem = Problem(Equal(layers, f, b), p, v, m);
        absl::StatusOr<HybridPlan> plan = InterleavedPlan(problem, 1, "balanced");
        ASSERT_TRUE(plan.ok()) << plan.status();
        ASSERT_EQ(ChunksOf(*plan), v);
        absl::StatusOr<Prediction> pred = SimulatePlan(problem, *plan, ScheduleKind::kInterleaved);
        ASSERT_TRUE(pred.ok()) << pred.status();
        const double rank = (f + b) * 2 * v;  // T_F + T_B of a rank: v chunks of 2 layers
        const std::string where = absl::StrCat("P = ", p, ", v = ", v, ", M = ", m);
        EXPECT_NEAR(pred->step_ms, m * rank + (p - 1) * rank / v, 1e-9) << where;
        EXPECT_NEAR(pred->bubble_fraction, static_cast<double>(p - 1) / (v * m + p - 1), 1e-9)
            << where;
        for (int s = 0; s < p; ++s) {
          EXPECT_DOUBLE_EQ(pred->stages[s].forward_ms, f * 2 * v) << where;
          EXPECT_DOUBLE_EQ(pred->stages[s].backward_ms, b * 2 * v) << where;
          EXPECT_EQ(pred->stages[s].peak_in_flight, schedule::InterleavedInFlight(p, v, m, s))
              << where;
        }
        // The same layers in P contiguous stages under 1F1B.
        PlanningProblem dapple = problem;
        dapple.schedule = ScheduleKind::kDapple;
        HybridPlan contiguous = *plan;
        for (int s = 0; s < p; ++s) {
          contiguous.stages[s].chunks.clear();
          contiguous.stages[s].first_layer = s * 2 * v;
          contiguous.stages[s].last_layer = (s + 1) * 2 * v - 1;
        }
        absl::StatusOr<Prediction> one = SimulatePlan(dapple, contiguous, ScheduleKind::kDapple);
        ASSERT_TRUE(one.ok()) << one.status();
        EXPECT_NEAR(one->step_ms, (m + p - 1) * rank, 1e-9) << where;
        EXPECT_LT(pred->step_ms, one->step_ms) << where;
      }
    }
  }
}

// The memory model counts every chunk's weights (and their gradients and optimizer state) and
// the interleaved schedule's chunk activations in flight.
TEST(InterleavedPlanningTest, MemoryCountsEveryChunk) {
  const int p = 2, v = 2, m = 4;
  const int64_t params = 1000, activation = 400;
  PlanningProblem problem = Problem(Equal(8, 1, 2, params, activation), p, v, m);
  problem.optimizer_state_factor = 1;
  absl::StatusOr<HybridPlan> plan = InterleavedPlan(problem, 1, "balanced");
  ASSERT_TRUE(plan.ok()) << plan.status();
  absl::StatusOr<Prediction> pred = SimulatePlan(problem, *plan, ScheduleKind::kInterleaved);
  ASSERT_TRUE(pred.ok()) << pred.status();
  for (int s = 0; s < p; ++s) {
    // 4 layers of 1000 bytes: weights, gradients and one momentum copy.
    EXPECT_EQ(pred->stages[s].weight_bytes, 3 * 4 * params) << s;
    EXPECT_EQ(pred->stages[s].peak_in_flight, schedule::InterleavedInFlight(p, v, m, s)) << s;
    EXPECT_GT(pred->stages[s].activation_bytes, 0) << s;
  }
  // Rank 0 holds more chunk activations than rank 1 (its warm-up is longer).
  EXPECT_GT(pred->stages[0].peak_in_flight, pred->stages[1].peak_in_flight);
}

TEST(InterleavedPlanningTest, ReplicasSplitEveryChunksMicroBatch) {
  PlanningProblem problem = Problem(Equal(8, 1, 2, 1000), 2, 2, 4, /*replicas=*/2);
  problem.topology.set_intra_node_latency_ms(0.01);  // the AllReduce takes time
  absl::StatusOr<HybridPlan> plan = InterleavedPlan(problem, 2, "balanced");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->stages[0].devices, (std::vector<int>{0, 1}));
  EXPECT_EQ(plan->stages[1].devices, (std::vector<int>{2, 3}));
  absl::StatusOr<Prediction> pred = SimulatePlan(problem, *plan, ScheduleKind::kInterleaved);
  ASSERT_TRUE(pred.ok()) << pred.status();
  // Each replica runs one of the micro-batch's 2 samples through its 4 layers, and
  // AllReduces all of the rank's chunks' parameters.
  EXPECT_NEAR(pred->stages[0].forward_ms, 4.0, 1e-9);
  EXPECT_GT(pred->stages[0].allreduce_ms, 0);
}

TEST(InterleavedPlanningTest, ChunkedPlansAreCheckedPerVirtualStage) {
  const PlanningProblem problem = Problem(Equal(8, 1, 2), 2, 2, 4);
  absl::StatusOr<HybridPlan> plan = InterleavedPlan(problem, 1, "balanced");
  ASSERT_TRUE(plan.ok()) << plan.status();
  absl::StatusOr<Prediction> dapple = SimulatePlan(problem, *plan, ScheduleKind::kDapple);
  ASSERT_FALSE(dapple.ok());
  EXPECT_THAT(std::string(dapple.status().message()),
              HasSubstr("stage 0 holds 2 layer ranges (chunks), which only schedule "
                        "interleaved runs"));
  HybridPlan gap = *plan;
  gap.stages[1].chunks[1].set_first_layer(7);  // virtual stage 3 starts after a gap
  absl::StatusOr<Prediction> bad = SimulatePlan(problem, gap, ScheduleKind::kInterleaved);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("virtual stage 3 starts at layer 7 but virtual stage 2 ends at layer 5"));
  HybridPlan uneven = *plan;
  uneven.stages[1].chunks.pop_back();
  bad = SimulatePlan(problem, uneven, ScheduleKind::kInterleaved);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("stage 1 holds 1 chunks"));
}

// An MLP of 8 layers with 4 equal linear layers (flatten to 256, then linear 256 four times
// with relu between), so that 4 virtual stages can be equal.
v1::JobSpec InterleavedSpec(int stages, int chunks, int devices, int micro_batches) {
  v1::JobSpec spec;
  spec.set_name("mlp-interleaved");
  v1::ModelSpec* model = spec.mutable_model();
  for (int64_t d : {1, 16, 16}) model->add_input_shape(d);
  model->add_layers()->set_type("flatten");
  for (int i = 0; i < 4; ++i) {
    if (i > 0) model->add_layers()->set_type("relu");
    v1::LayerSpec* linear = model->add_layers();
    linear->set_type("linear");
    linear->mutable_linear()->set_out(256);
  }
  model->set_loss("softmax_cross_entropy");
  spec.mutable_training()->set_global_batch(16 * micro_batches);
  spec.mutable_training()->set_micro_batch(16);
  spec.mutable_training()->set_epochs(1);
  spec.mutable_parallel()->set_schedule("interleaved");
  spec.mutable_parallel()->set_interleave(chunks);
  spec.mutable_parallel()->set_planner("balanced");
  spec.mutable_parallel()->set_stages(stages);
  spec.mutable_parallel()->set_devices(devices);
  return spec;
}

TEST(InterleavedPlanningTest, MakePlanCutsVirtualStagesAndBuildsTheirPrograms) {
  for (const char* planner : {"balanced", "dapple"}) {
    for (int replicas : {1, 2}) {
      const int p = 2, v = 2, m = 5;
      v1::JobSpec spec = InterleavedSpec(p, v, p * replicas, m);
      spec.mutable_parallel()->set_planner(planner);
      absl::StatusOr<v1::ParallelPlan> plan = MakePlan(spec);
      ASSERT_TRUE(plan.ok()) << plan.status();
      const v1::ParallelPlanSummary& s = plan->summary();
      const std::string where = absl::StrCat(planner, " D = ", replicas);
      EXPECT_EQ(s.schedule(), "interleaved") << where;
      EXPECT_EQ(s.planner(), planner) << where;
      EXPECT_EQ(s.micro_batches(), m);
      ASSERT_EQ(s.stages_size(), p) << where;
      // Virtual stage k = chunk k / P of rank k % P; together they cover the layers in order.
      int next = 0;
      for (int k = 0; k < p * v; ++k) {
        const std::vector<v1::StageRange> chunks = schedule::StageChunks(s, k % p);
        ASSERT_EQ(static_cast<int>(chunks.size()), v) << where;
        EXPECT_EQ(chunks[k / p].first_layer(), next) << where << " virtual stage " << k;
        next = chunks[k / p].last_layer() + 1;
      }
      EXPECT_EQ(next, spec.model().layers_size()) << where;
      for (int r = 0; r < p; ++r) {
        const v1::PlanStageSummary& stage = s.stages(r);
        EXPECT_EQ(stage.first_layer(), stage.chunks(0).first_layer());
        EXPECT_EQ(stage.last_layer(), stage.chunks(0).last_layer());
        EXPECT_EQ(stage.replicas(), replicas) << where;
        EXPECT_EQ(stage.peak_in_flight(), schedule::InterleavedInFlight(p, v, m, r)) << where;
        EXPECT_GT(stage.compute_flops(), 0);
      }
      EXPECT_GT(s.predicted_step_ms(), 0);
      // The programs name the virtual stages (rank r runs r, r + P, ...).
      ASSERT_EQ(plan->programs_size(), p);
      for (int r = 0; r < p; ++r) {
        int highest = 0;
        for (const v1::Action& a : plan->programs(r).actions()) {
          highest = std::max(highest, static_cast<int>(a.stage()));
          EXPECT_EQ(a.stage() % p, r) << where;
        }
        EXPECT_EQ(highest, (v - 1) * p + r) << where;
      }
    }
  }
}

TEST(InterleavedPlanningTest, InterleavedBeatsOneFOneBOnTheSameJob) {
  const v1::JobSpec spec = InterleavedSpec(2, 2, 2, 4);
  v1::JobSpec dapple = spec;
  dapple.mutable_parallel()->set_schedule("dapple");
  dapple.mutable_parallel()->set_interleave(0);
  absl::StatusOr<v1::ParallelPlan> interleaved = MakePlan(spec);
  absl::StatusOr<v1::ParallelPlan> one = MakePlan(dapple);
  ASSERT_TRUE(interleaved.ok()) << interleaved.status();
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_LT(interleaved->summary().bubble_fraction(), one->summary().bubble_fraction());
}

TEST(InterleavedPlanningTest, APlanWithoutAJobNeedsTheSpec) {
  absl::StatusOr<v1::ParallelPlanSummary> summary =
      PlanProfile(v1::ModelProfile(), FreeLinks(2), "dapple", 0, "interleaved");
  ASSERT_FALSE(summary.ok());
  EXPECT_THAT(std::string(summary.status().message()),
              HasSubstr("an interleaved plan needs a job spec"));
}

}  // namespace
}  // namespace dapple::coordinator
