#include "coordinator/planner/pipesgd_model.h"

#include <string>
#include <vector>

#include "coordinator/planner/plan_estimator.h"
#include "coordinator/planner/plan_simulator.h"
#include "coordinator/planner/plan_summary.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

using ::testing::HasSubstr;

PipeSgdInputs Inputs(int d, double compute_ms, double bytes, double alpha_ms, double beta,
                     PipeSgdCompression c = PipeSgdCompression::kNone) {
  PipeSgdInputs in;
  in.replicas = d;
  in.compute_ms = compute_ms;
  in.gradient_bytes = bytes;
  in.latency_ms = alpha_ms;
  in.bandwidth_bytes_per_s = beta;
  in.compression = c;
  return in;
}

TEST(PipeSgdModel, CommunicationFarBelowComputeDoesNotPay) {
  // 2 (D - 1) (alpha + S / (D beta)) = 2 (0.01 + 2e6 / 10e9 s) = 2 (0.01 + 0.2) = 0.42 ms.
  const v1::PipeSgdTiming t = PipeSgdTime(Inputs(2, 20.0, 4e6, 0.01, 10e9));
  EXPECT_DOUBLE_EQ(t.allreduce_ms(), 0.42);
  EXPECT_DOUBLE_EQ(t.compression_ms(), 0.0);
  EXPECT_DOUBLE_EQ(t.sync_step_ms(), 20.42);
  EXPECT_DOUBLE_EQ(t.pipelined_step_ms(), 20.0);
  EXPECT_FALSE(t.pays());  // 20 is not below 0.95 x 20.42 = 19.4
  EXPECT_EQ(t.replicas(), 2);
  EXPECT_EQ(PipeSgdLine(t),
            "Pipe-SGD (width 2): 20.0 ms/step vs 20.4 ms synchronous: 2% faster, under the 5% "
            "that would pay for one-step-stale updates: pipelining does not pay off");
}

TEST(PipeSgdModel, CommunicationAsLongAsComputeHalvesTheStep) {
  // 2 x 3 x (0.05 + 10e6 / 10e9 s) = 6 x 1.05 = 6.3 ms, equal to the compute.
  const v1::PipeSgdTiming t = PipeSgdTime(Inputs(4, 6.3, 40e6, 0.05, 10e9));
  EXPECT_NEAR(t.allreduce_ms(), 6.3, 1e-12);
  EXPECT_NEAR(t.sync_step_ms(), 12.6, 1e-12);
  EXPECT_NEAR(t.pipelined_step_ms(), 6.3, 1e-12);
  EXPECT_NEAR(t.sync_step_ms() / t.pipelined_step_ms(), 2.0, 1e-12);
  EXPECT_TRUE(t.pays());
  EXPECT_EQ(PipeSgdLine(t),
            "Pipe-SGD (width 2): 6.3 ms/step vs 12.6 ms synchronous: pipelining pays off");
}

TEST(PipeSgdModel, CommunicationFarAboveComputeHidesOnlyTheCompute) {
  // 2 x 7 x (0.1 + 12.5e6 / 1e9 s) = 14 x 12.6 = 176.4 ms against 10 ms of compute.
  const v1::PipeSgdTiming t = PipeSgdTime(Inputs(8, 10.0, 100e6, 0.1, 1e9));
  EXPECT_NEAR(t.allreduce_ms(), 176.4, 1e-9);
  EXPECT_NEAR(t.sync_step_ms(), 186.4, 1e-9);
  EXPECT_NEAR(t.pipelined_step_ms(), 176.4, 1e-9);
  EXPECT_TRUE(t.pays());  // 176.4 < 0.95 x 186.4 = 177.08, by a little: gain (c + a) / a
  // With 5 ms of compute the gain is under 5%: not worth the staleness.
  EXPECT_FALSE(PipeSgdTime(Inputs(8, 5.0, 100e6, 0.1, 1e9)).pays());
}

TEST(PipeSgdModel, CompressionShrinksTheWireAndCostsCodecTime) {
  // fp16: (D - 1) (alpha + S / 2 / beta) = 0.01 + 2e6 / 1e9 s = 2.01 ms; codec (S + D S) /
  // 2e9 B/s = 12e6 / 2e9 s = 6 ms.
  v1::PipeSgdTiming t = PipeSgdTime(Inputs(2, 5.0, 4e6, 0.01, 1e9, PipeSgdCompression::kFp16));
  EXPECT_NEAR(t.allreduce_ms(), 2.01, 1e-12);
  EXPECT_NEAR(t.compression_ms(), 6.0, 1e-12);
  EXPECT_NEAR(t.sync_step_ms(), 13.01, 1e-12);
  EXPECT_NEAR(t.pipelined_step_ms(), 8.01, 1e-12);
  EXPECT_TRUE(t.pays());
  // int8: 0.01 + (1e6 + 4) / 1e9 s = 1.010004 ms.
  t = PipeSgdTime(Inputs(2, 5.0, 4e6, 0.01, 1e9, PipeSgdCompression::kInt8));
  EXPECT_NEAR(t.allreduce_ms(), 1.010004, 1e-12);
  EXPECT_NEAR(t.compression_ms(), 6.0, 1e-12);
  // Uncompressed on the same link: 2 (0.01 + 2e6 / 1e9 s) = 4.02 ms.
  EXPECT_NEAR(PipeSgdTime(Inputs(2, 5.0, 4e6, 0.01, 1e9)).allreduce_ms(), 4.02, 1e-12);
}

TEST(PipeSgdModel, OneReplicaHasNothingToPipeline) {
  const v1::PipeSgdTiming t = PipeSgdTime(Inputs(1, 5.0, 4e6, 0.01, 1e9));
  EXPECT_EQ(t.allreduce_ms(), 0.0);
  EXPECT_EQ(t.sync_step_ms(), 5.0);
  EXPECT_EQ(t.pipelined_step_ms(), 5.0);
  EXPECT_FALSE(t.pays());
}

TEST(PipeSgdModel, ParsesCompressionNames) {
  EXPECT_EQ(ParsePipeSgdCompression("").value(), PipeSgdCompression::kNone);
  EXPECT_EQ(ParsePipeSgdCompression("none").value(), PipeSgdCompression::kNone);
  EXPECT_EQ(ParsePipeSgdCompression("fp16").value(), PipeSgdCompression::kFp16);
  EXPECT_EQ(ParsePipeSgdCompression("int8").value(), PipeSgdCompression::kInt8);
  absl::StatusOr<PipeSgdCompression> bad = ParsePipeSgdCompression("int4");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("\"int4\""));
}

// A data-parallel plan (one stage on 2 devices of one node, 10 GB/s, 0.01 ms): the simulator
// scores dapple as compute + AllReduce and pipesgd as max(compute, AllReduce); the summary
// carries the timing for either schedule; the estimator agrees.
TEST(PipeSgdModel, FillsPlansOfOneReplicatedStage) {
  v1::ClusterTopology topology;
  topology.set_source("test.yaml");
  v1::ClusterNode* node = topology.add_nodes();
  node->set_name("n0");
  node->set_devices(2);
  node->set_device_memory_bytes(int64_t{16} << 30);
  topology.set_intra_node_bandwidth_bytes_per_s(10e9);
  topology.set_intra_node_latency_ms(0.01);
  topology.set_inter_node_bandwidth_bytes_per_s(1e9);
  topology.set_inter_node_latency_ms(0.1);
  profile::ChainProfile profile;
  profile.source = "test.txt";
  profile.batch_size = 32;
  for (int i = 0; i < 2; ++i) {
    profile.names.push_back("layer" + std::to_string(i));
    profile.forward_ms.push_back(1.0);  // per 32 samples
    profile.backward_ms.push_back(2.0);
    profile.parameter_bytes.push_back(20'000'000);  // 40 MB of gradients in all
    profile.activation_bytes.push_back(0);
    profile.saved_bytes.push_back(0);
  }
  profile.cut_bytes.push_back(0);
  PlanningProblem problem;
  problem.profile = profile;
  problem.topology = topology;
  problem.global_batch = 128;
  HybridPlan plan;
  plan.planner = "dp";
  plan.stages.push_back({0, 1, {0, 1}});
  plan.micro_batch_size = 32;
  plan.micro_batches = 4;
  // Per replica: 4 micro-batches of 16 samples: 4 x (2 x 0.5 + 2 x 1) = 12 ms of compute.
  // AllReduce: 2 (0.01 + 20e6 / 10e9 s) = 4.02 ms; then the job-wide GLOBAL_NORM between the
  // two replicas, an AllGather of 16 bytes: 0.01 ms + 16 / 10e9 s.
  problem.schedule = schedule::ScheduleKind::kDapple;
  absl::StatusOr<Prediction> dapple = SimulatePlan(problem, plan, problem.schedule);
  ASSERT_TRUE(dapple.ok()) << dapple.status();
  EXPECT_NEAR(dapple->step_ms, 16.02 + 0.01 + 16 / 10e9 * 1000, 1e-9);
  v1::ParallelPlanSummary summary = ToSummary(problem, plan, *dapple, problem.schedule);
  ASSERT_TRUE(summary.has_pipesgd());
  EXPECT_EQ(summary.pipesgd().replicas(), 2);
  EXPECT_NEAR(summary.pipesgd().compute_ms(), 12.0, 1e-9);
  EXPECT_NEAR(summary.pipesgd().allreduce_ms(), 4.02, 1e-9);
  EXPECT_NEAR(summary.pipesgd().sync_step_ms(), 16.02, 1e-9);
  EXPECT_NEAR(summary.pipesgd().pipelined_step_ms(), 12.0, 1e-9);
  EXPECT_TRUE(summary.pipesgd().pays());
  EXPECT_THAT(summary.notes(),
              ::testing::Contains(
                  "Pipe-SGD (width 2): 12.0 ms/step vs 16.0 ms synchronous: pipelining pays off: "
                  "set parallel.schedule: pipesgd to use it (updates one step stale)"));

  problem.schedule = schedule::ScheduleKind::kPipeSgd;
  absl::StatusOr<Prediction> pipesgd = SimulatePlan(problem, plan, problem.schedule);
  ASSERT_TRUE(pipesgd.ok()) << pipesgd.status();
  EXPECT_NEAR(pipesgd->step_ms, 12.0, 1e-9);
  summary = ToSummary(problem, plan, *pipesgd, problem.schedule);
  EXPECT_EQ(summary.schedule(), "pipesgd");
  EXPECT_NEAR(summary.predicted_step_ms(), 12.0, 1e-9);
  EXPECT_NEAR(summary.pipesgd().pipelined_step_ms(), 12.0, 1e-9);
  EXPECT_NEAR(PlanEstimator(problem).Latency(plan).step_ms, 12.0, 1e-9);
  // Under pipesgd the line only reports: it is the schedule that runs.
  EXPECT_THAT(summary.notes(),
              ::testing::Contains(
                  "Pipe-SGD (width 2): 12.0 ms/step vs 16.0 ms synchronous: pipelining pays off"));

  // One device per stage: no data parallelism, no Pipe-SGD line.
  HybridPlan single = plan;
  single.stages[0].devices = {0};
  problem.schedule = schedule::ScheduleKind::kDapple;
  summary = ToSummary(problem, single, SimulatePlan(problem, single, problem.schedule).value(),
                      problem.schedule);
  EXPECT_FALSE(summary.has_pipesgd());
}

}  // namespace
}  // namespace dapple::coordinator
