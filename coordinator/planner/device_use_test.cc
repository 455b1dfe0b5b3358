// Tests of DeviceUseNote (device_use.h): the plan's one note on why it uses fewer devices than
// parallel.devices, for each of its reasons, and through MakePlan.
#include "coordinator/planner/device_use.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "coordinator/planner/plan_simulator.h"
#include "coordinator/planner/planner.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

using ::testing::Contains;
using ::testing::StartsWith;

constexpr int64_t kGiB = int64_t{1} << 30;
constexpr int64_t kMiB = int64_t{1} << 20;

// A chain of layers at batch 8 (forward f, backward 2f), on one node of `devices` devices
// linked at `bandwidth` bytes/s; global batch 8 in micro-batches of `micro_batch`.
PlanningProblem Problem(const std::vector<double>& forward_ms, int64_t parameter_bytes,
                        int64_t activation_bytes, int devices, double bandwidth,
                        int64_t micro_batch = 8) {
  PlanningProblem problem;
  profile::ChainProfile& p = problem.profile;
  p.source = "test";
  p.batch_size = 8;
  for (size_t i = 0; i < forward_ms.size(); ++i) {
    p.names.push_back(absl::StrCat("layer", i));
    p.forward_ms.push_back(forward_ms[i]);
    p.backward_ms.push_back(2 * forward_ms[i]);
    p.parameter_bytes.push_back(parameter_bytes);
    p.activation_bytes.push_back(activation_bytes);
    p.saved_bytes.push_back(0);
    if (i + 1 < forward_ms.size()) p.cut_bytes.push_back(activation_bytes);
  }
  v1::ClusterNode* node = problem.topology.add_nodes();
  node->set_name("node0");
  node->set_devices(devices);
  node->set_device_memory_bytes(16 * kGiB);
  problem.topology.set_source("test cluster");
  problem.topology.set_intra_node_bandwidth_bytes_per_s(bandwidth);
  problem.topology.set_intra_node_latency_ms(0.01);
  problem.topology.set_inter_node_bandwidth_bytes_per_s(bandwidth);
  problem.topology.set_inter_node_latency_ms(0.01);
  problem.global_batch = 8;
  problem.micro_batch_size = micro_batch;
  problem.max_devices = devices;
  problem.max_replicas = devices;
  return problem;
}

// One stage of every layer on device 0, simulated.
PlannedJob OneDevicePlan(const PlanningProblem& problem) {
  PlannedJob planned;
  planned.plan.planner = "dapple";
  planned.plan.micro_batch_size = problem.micro_batch_size;
  planned.plan.micro_batches = static_cast<int>(problem.global_batch / problem.micro_batch_size);
  planned.plan.stages.push_back(StagePlan{0, problem.profile.num_layers() - 1, {0}});
  absl::StatusOr<Prediction> prediction = SimulatePlan(problem, planned.plan, problem.schedule);
  EXPECT_TRUE(prediction.ok()) << prediction.status();
  if (prediction.ok()) planned.prediction = *prediction;
  return planned;
}

double StepMs(const PlanningProblem& problem, const HybridPlan& plan) {
  absl::StatusOr<Prediction> prediction = SimulatePlan(problem, plan, problem.schedule);
  EXPECT_TRUE(prediction.ok()) << prediction.status();
  return prediction.ok() ? prediction->step_ms : 0;
}

TEST(DeviceUseNoteTest, APlanOnEveryDeviceHasNoNote) {
  const PlanningProblem problem = Problem({1, 1}, kMiB, kMiB, 1, 10e9);
  absl::StatusOr<std::string> note = DeviceUseNote(problem, OneDevicePlan(problem), "dapple", 1);
  ASSERT_TRUE(note.ok()) << note.status();
  EXPECT_EQ(*note, "");
}

// Cheap layers and slow links: a second stage sends the big activations and a second replica
// all-reduces big weights, so both plans on 2 devices are slower.
TEST(DeviceUseNoteTest, SaysThatMoreDevicesWouldBeSlower) {
  const PlanningProblem problem = Problem({0.1, 0.1}, 256 * kMiB, 256 * kMiB, 2, 1e9);
  const PlannedJob planned = OneDevicePlan(problem);
  HybridPlan replicated = planned.plan;
  replicated.stages[0].devices.push_back(1);
  HybridPlan split = planned.plan;
  split.stages = {StagePlan{0, 0, {0}}, StagePlan{1, 1, {1}}};
  const double replicated_ms = StepMs(problem, replicated);
  const double split_ms = StepMs(problem, split);
  ASSERT_GT(replicated_ms, planned.prediction.step_ms);
  ASSERT_GT(split_ms, planned.prediction.step_ms);
  const bool replica_best = replicated_ms < split_ms;
  absl::StatusOr<std::string> note = DeviceUseNote(problem, planned, "dapple", 2);
  ASSERT_TRUE(note.ok()) << note.status();
  EXPECT_EQ(*note,
            absl::StrFormat(
                "uses 1 of the 2 parallel.devices: more would not make a step faster on this "
                "model: the best plan on 2 devices (%s) is predicted at %.1f ms per step vs "
                "%.1f ms for this plan",
                replica_best ? "stage 0 on 2 replicas" : "stage 0 split into layers 0-0 and 1-1",
                replica_best ? replicated_ms : split_ms, planned.prediction.step_ms));
  // A restart onto the workers left names them, not the spec's parallel.devices.
  note = DeviceUseNote(problem, planned, "dapple", 2, "live workers (parallel.devices 4)");
  ASSERT_TRUE(note.ok()) << note.status();
  EXPECT_THAT(*note, StartsWith("uses 1 of the 2 live workers (parallel.devices 4): "));
}

// Heavy layers and fast links: the note says which plan on more devices is faster.
TEST(DeviceUseNoteTest, NamesAFasterPlanOnMoreDevices) {
  const PlanningProblem problem = Problem({100, 100}, kMiB, kMiB, 2, 100e9);
  const PlannedJob planned = OneDevicePlan(problem);
  absl::StatusOr<std::string> note = DeviceUseNote(problem, planned, "dapple", 2);
  ASSERT_TRUE(note.ok()) << note.status();
  EXPECT_THAT(*note, StartsWith(absl::StrFormat("uses 1 of the 2 parallel.devices: planner dapple "
                                                "chose this plan, predicted at %.1f ms per step; "
                                                "on 2 devices, ",
                                                planned.prediction.step_ms)));
}

// The limits no plan passes: the stages (one per layer) and the replicas per stage, with why.
TEST(DeviceUseNoteTest, NamesTheLimitsNoPlanPasses) {
  // Schedule pipedream, M = 1: one replica per stage, and 2 layers make at most 2 stages.
  PlanningProblem pipedream = Problem({1, 1}, kMiB, kMiB, 4, 10e9);
  pipedream.schedule = schedule::ScheduleKind::kPipeDream;
  PlannedJob two_stages;
  two_stages.plan.planner = "pipedream";
  two_stages.plan.micro_batch_size = 8;
  two_stages.plan.micro_batches = 1;
  two_stages.plan.stages = {StagePlan{0, 0, {0}}, StagePlan{1, 1, {1}}};
  absl::StatusOr<std::string> note = DeviceUseNote(pipedream, two_stages, "pipedream", 4);
  ASSERT_TRUE(note.ok()) << note.status();
  EXPECT_EQ(*note,
            "uses 2 of the 4 parallel.devices: no plan can use more: at most 2 stages (one per "
            "layer or more), each on at most 1 replica (parallel.schedule pipedream sends whole "
            "micro-batches round-robin to a stage's replicas and training.global_batch 8 / "
            "training.micro_batch 8 = 1 micro-batch per step)");

  // Planner dp: one stage whose replicas split each micro-batch of 6 evenly: at most 3 of 4.
  PlanningProblem dp = Problem({1}, kMiB, kMiB, 4, 10e9, /*micro_batch=*/6);
  dp.global_batch = 12;
  PlannedJob three;
  three.plan.planner = "dp";
  three.plan.micro_batch_size = 6;
  three.plan.micro_batches = 2;
  three.plan.stages = {StagePlan{0, 0, {0, 1, 2}}};
  note = DeviceUseNote(dp, three, "dp", 4);
  ASSERT_TRUE(note.ok()) << note.status();
  EXPECT_EQ(*note,
            "uses 3 of the 4 parallel.devices: no plan can use more: one stage (planner dp), on "
            "at most 3 replicas (a stage's replicas split every micro-batch evenly, and 3 is the "
            "largest divisor of training.micro_batch 6 up to 4)");
}

// A plan of replicated stages whose next step up needs more devices than the job has: the note
// names the replica counts the micro-batch allows.
TEST(DeviceUseNoteTest, SaysWhenNoPlanWithinTheDevicesIsAStageAway) {
  const PlanningProblem problem = Problem({1, 1}, kMiB, kMiB, 12, 10e9);
  PlannedJob planned;
  planned.plan.planner = "dapple";
  planned.plan.micro_batch_size = 8;
  planned.plan.micro_batches = 1;
  planned.plan.stages = {StagePlan{0, 1, {0, 1, 2, 3, 4, 5, 6, 7}}};
  absl::StatusOr<std::string> note = DeviceUseNote(problem, planned, "dapple", 12);
  ASSERT_TRUE(note.ok()) << note.status();
  EXPECT_EQ(*note,
            "uses 8 of the 12 parallel.devices: no plan within them splits a stage of this one "
            "or gives a stage more replicas (a stage's replicas split each micro-batch evenly, "
            "so training.micro_batch 8 allows 1, 2, 4 or 8 replicas per stage)");
}

// Through MakePlan: the note is in the plan's notes (what `dapplectl plan` and `get` show).
// A planner dp job of `model` on 4 devices, at global batch `global_batch` in micro-batches of
// `micro_batch`.
v1::JobSpec DataParallelSpec(v1::ModelSpec model, int64_t global_batch, int64_t micro_batch) {
  v1::JobSpec spec;
  spec.set_name("dp");
  model.set_loss("softmax_cross_entropy");
  *spec.mutable_model() = std::move(model);
  spec.mutable_training()->set_global_batch(global_batch);
  spec.mutable_training()->set_micro_batch(micro_batch);
  spec.mutable_training()->set_epochs(1);
  spec.mutable_parallel()->set_schedule("dapple");
  spec.mutable_parallel()->set_planner("dp");
  spec.mutable_parallel()->set_devices(4);
  return spec;
}

TEST(DeviceUseNoteTest, MakePlanAddsTheNote) {
  v1::ModelSpec model;
  model.add_input_shape(784);
  v1::LayerSpec* layer = model.add_layers();
  layer->set_type("linear");
  layer->mutable_linear()->set_out(10);
  const v1::JobSpec spec = DataParallelSpec(model, 12, 6);
  PlanInputs inputs;
  inputs.max_replicas = 4;
  absl::StatusOr<v1::ParallelPlan> plan = MakePlan(spec, inputs);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->summary().num_devices(), 3);
  EXPECT_THAT(plan->summary().notes(),
              Contains("uses 3 of the 4 parallel.devices: no plan can use more: one stage "
                       "(planner dp), on at most 3 replicas (a stage's replicas split every "
                       "micro-batch evenly, and 3 is the largest divisor of training.micro_batch "
                       "6 up to 4)"));
}

// A batch norm over one value per channel per sample ([4, 1, 1] after a 28x28 convolution):
// replicas that planners dp and dapple choose keep 2 rows of every micro-batch each, so of 4
// devices a micro-batch of 4 uses 2 per stage (found by a fresh user's CNN on planner-chosen
// replicas, which normalised one row per replica and could not learn).
TEST(DeviceUseNoteTest, ReplicasKeepTwoRowsForABatchNorm) {
  v1::ModelSpec model;
  for (int64_t d : {1, 28, 28}) model.add_input_shape(d);
  v1::LayerSpec* conv = model.add_layers();
  conv->set_type("conv2d");
  conv->mutable_conv2d()->set_out_channels(4);
  conv->mutable_conv2d()->set_kernel(28);
  for (const char* type : {"batchnorm2d", "relu", "flatten"}) model.add_layers()->set_type(type);
  v1::LayerSpec* linear = model.add_layers();
  linear->set_type("linear");
  linear->mutable_linear()->set_out(10);
  v1::JobSpec spec = DataParallelSpec(model, 8, 4);
  PlanInputs inputs;
  inputs.max_replicas = 4;
  absl::StatusOr<v1::ParallelPlan> plan = MakePlan(spec, inputs);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->summary().num_devices(), 2);
  EXPECT_THAT(plan->summary().notes(),
              Contains("uses 2 of the 4 parallel.devices: no plan can use more: one stage "
                       "(planner dp), on at most 2 replicas (a stage's replicas each compute an "
                       "equal share of every micro-batch (training.micro_batch 4), at least 2 rows "
                       "so that the model's batch norm normalises more than one value per "
                       "channel)"));
  // DAPPLE's planner, choosing stages and replicas: no stage on more than 2.
  spec.mutable_parallel()->set_planner("dapple");
  spec.mutable_parallel()->set_stages(0);  // auto
  plan = MakePlan(spec, inputs);
  ASSERT_TRUE(plan.ok()) << plan.status();
  for (const v1::PlanStageSummary& stage : plan->summary().stages()) {
    EXPECT_LE(stage.replicas(), 2) << plan->summary().DebugString();
  }
}

}  // namespace
}  // namespace dapple::coordinator
