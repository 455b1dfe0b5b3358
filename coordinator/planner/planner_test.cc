#include "coordinator/planner/planner.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/profile/format_bytes.h"
#include "common/schedule/job_lowering.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

using ::testing::HasSubstr;

// The demo MLP of design.md: 784 -> 1024 -> 1024 -> 10.
v1::JobSpec DemoSpec(int devices, int stages = 0) {
  v1::JobSpec spec;
  spec.set_name("fmnist-mlp");
  v1::ModelSpec* model = spec.mutable_model();
  for (int64_t d : {1, 28, 28}) model->add_input_shape(d);
  auto layer = [&](const std::string& type, int64_t out = 0) {
    v1::LayerSpec* l = model->add_layers();
    l->set_type(type);
    if (type == "linear") l->mutable_linear()->set_out(out);
  };
  layer("flatten");
  layer("linear", 1024);
  layer("relu");
  layer("linear", 1024);
  layer("relu");
  layer("linear", 10);
  model->set_loss("softmax_cross_entropy");
  spec.mutable_training()->set_global_batch(256);
  spec.mutable_training()->set_micro_batch(32);
  spec.mutable_training()->set_epochs(1);
  spec.mutable_parallel()->set_schedule("dapple");
  spec.mutable_parallel()->set_planner("balanced");
  spec.mutable_parallel()->set_devices(devices);
  spec.mutable_parallel()->set_stages(stages);
  return spec;
}

std::vector<std::pair<int, int>> Stages(const v1::ParallelPlan& plan) {
  std::vector<std::pair<int, int>> out;
  for (const v1::PlanStageSummary& s : plan.summary().stages()) {
    out.emplace_back(s.first_layer(), s.last_layer());
  }
  return out;
}

// Found by a fresh user: Pipe-SGD with SGD momentum 0.9 reached 56% test accuracy where dapple
// reached 81%, and nothing said why. The plan notes it above momentum 0.5.
TEST(PlannerTest, PipeSgdWithHighMomentumIsNoted) {
  for (const double momentum : {0.9, 0.5}) {
    v1::JobSpec spec = DemoSpec(2, 1);
    spec.mutable_parallel()->set_schedule("pipesgd");
    spec.mutable_parallel()->set_planner("dp");
    spec.mutable_training()->mutable_optimizer()->set_type("sgd");
    spec.mutable_training()->mutable_optimizer()->set_momentum(momentum);
    PlanInputs inputs;
    inputs.max_replicas = 2;
    auto plan = MakePlan(spec, inputs);
    ASSERT_TRUE(plan.ok()) << plan.status();
    const auto noted = ::testing::Contains(::testing::HasSubstr(
        "Pipe-SGD applies each update one step late, which adds momentum of its own: with "
        "training.optimizer.momentum 0.9 training may oscillate; 0.5 or less suits it"));
    if (momentum > 0.5) {
      EXPECT_THAT(plan->summary().notes(), noted);
    } else {
      EXPECT_THAT(plan->summary().notes(), ::testing::Not(noted));
    }
  }
}

TEST(PlannerTest, BalancedDemoMlpOnTwoStages) {
  auto plan = MakePlan(DemoSpec(2));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(Stages(*plan), (std::vector<std::pair<int, int>>{{0, 2}, {3, 5}}));
  const v1::ParallelPlanSummary& s = plan->summary();
  EXPECT_EQ(s.planner(), "balanced");
  EXPECT_EQ(s.schedule(), "dapple");
  EXPECT_EQ(s.micro_batches(), 8);
  EXPECT_EQ(s.micro_batch_size(), 32);
  EXPECT_EQ(s.stages(0).replicas(), 1);
  // linear 784x1024 (2 * in * out forward, the weight gradient's 2 * in * out: the first stage
  // computes no input gradient of its first linear) + relu over 1024 (2 per element); flatten is
  // free. The later stage's linears count their input gradients too (6 * in * out).
  EXPECT_DOUBLE_EQ(s.stages(0).compute_flops(), 4.0 * 784 * 1024 + 2 * 1024);
  EXPECT_DOUBLE_EQ(s.stages(1).compute_flops(), 6.0 * 1024 * 1024 + 2 * 1024 + 6.0 * 1024 * 10);
  EXPECT_GT(s.bubble_fraction(), 0.0);
  EXPECT_LT(s.bubble_fraction(), 1.0);
  // The simulator's prediction on the estimated profile and the default one-node topology.
  EXPECT_GT(s.predicted_step_ms(), 0.0);
  EXPECT_NEAR(s.predicted_samples_per_second(), 256 / s.predicted_step_ms() * 1000,
              1e-9 * s.predicted_samples_per_second());
  EXPECT_THAT(s.profile_source(), HasSubstr("estimated from FLOPs"));
  EXPECT_EQ(s.cluster_source(), "one node of 2 devices (coordinator defaults)");
  EXPECT_GT(s.stages(0).peak_memory_bytes(), 0);
  EXPECT_GT(s.stages(1).compute_ms(), 0.0);
  ASSERT_EQ(plan->programs_size(), 2);
  EXPECT_EQ(plan->programs(0).stage(), 0);
  EXPECT_EQ(plan->programs(1).stage(), 1);
  EXPECT_GT(plan->programs(1).actions_size(), 2 * 8);
}

TEST(PlannerTest, BalancedDemoMlpOnThreeStagesIsolatesTheBigLinear) {
  auto plan = MakePlan(DemoSpec(3));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(Stages(*plan), (std::vector<std::pair<int, int>>{{0, 2}, {3, 3}, {4, 5}}));
  EXPECT_EQ(plan->programs_size(), 3);
}

TEST(PlannerTest, OneStageHasNoBubble) {
  auto plan = MakePlan(DemoSpec(1));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(Stages(*plan), (std::vector<std::pair<int, int>>{{0, 5}}));
  EXPECT_DOUBLE_EQ(plan->summary().bubble_fraction(), 0.0);
}

TEST(PlannerTest, GPipeBubbleIsAtLeastDapples) {
  v1::JobSpec gpipe = DemoSpec(2);
  gpipe.mutable_parallel()->set_schedule("gpipe");
  auto a = MakePlan(gpipe);
  auto b = MakePlan(DemoSpec(2));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->summary().schedule(), "gpipe");
  // Both flush once per step; early backward saves memory, not bubble (DAPPLE, section 4).
  EXPECT_GE(a->summary().bubble_fraction(), b->summary().bubble_fraction() - 1e-9);
}

// The zero-bubble schedules plan like dapple (the requested schedule, the same partition) and
// their programs split the backward; ZB-H1's predicted bubble is below dapple's.
TEST(PlannerTest, ZeroBubbleSchedulesPlanTheirPrograms) {
  auto dapple = MakePlan(DemoSpec(2));
  ASSERT_TRUE(dapple.ok()) << dapple.status();
  for (const char* zb : {"zb-h1", "zb-h2"}) {
    v1::JobSpec spec = DemoSpec(2);
    spec.mutable_parallel()->set_schedule(zb);
    auto plan = MakePlan(spec);
    ASSERT_TRUE(plan.ok()) << zb << ": " << plan.status();
    EXPECT_EQ(plan->summary().schedule(), zb);
    ASSERT_EQ(plan->programs_size(), 2);
    EXPECT_EQ(schedule::CountActions(plan->programs(0), v1::BACKWARD), 0) << zb;
    EXPECT_GT(schedule::CountActions(plan->programs(0), v1::BACKWARD_WEIGHT), 0) << zb;
    if (std::string(zb) == "zb-h1") {
      EXPECT_LT(plan->summary().bubble_fraction(), dapple->summary().bubble_fraction()) << zb;
    }
  }
}

TEST(PlannerTest, UniformAndManual) {
  v1::JobSpec uniform = DemoSpec(4);
  uniform.mutable_parallel()->set_planner("uniform");
  auto u = MakePlan(uniform);
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(Stages(*u), (std::vector<std::pair<int, int>>{{0, 1}, {2, 3}, {4, 4}, {5, 5}}));

  v1::JobSpec manual = DemoSpec(2);
  manual.mutable_parallel()->set_planner("manual");
  v1::StageRange* r0 = manual.mutable_parallel()->add_stage_ranges();
  r0->set_first_layer(0);
  r0->set_last_layer(3);
  v1::StageRange* r1 = manual.mutable_parallel()->add_stage_ranges();
  r1->set_first_layer(4);
  r1->set_last_layer(5);
  auto m = MakePlan(manual);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(Stages(*m), (std::vector<std::pair<int, int>>{{0, 3}, {4, 5}}));
  EXPECT_EQ(m->summary().planner(), "manual");

  r1->set_first_layer(5);
  EXPECT_THAT(MakePlan(manual).status().message(), HasSubstr("ranges must be contiguous"));
}

TEST(PlannerTest, StagesResolveFromTheSpec) {
  EXPECT_EQ(*ResolveNumStages(DemoSpec(4)), 4);
  v1::JobSpec dapple = DemoSpec(4);
  dapple.mutable_parallel()->set_planner("dapple");
  EXPECT_EQ(*ResolveNumStages(dapple), 0);  // the planner chooses
  dapple.mutable_parallel()->set_stages(3);
  EXPECT_EQ(*ResolveNumStages(dapple), 3);
  EXPECT_EQ(*ResolveNumStages(DemoSpec(4, 2)), 2);
  auto too_many = ResolveNumStages(DemoSpec(2, 3));
  EXPECT_EQ(too_many.status().message(),
            "parallel.stages 3 but parallel.devices is 2: each stage needs its own device: set "
            "devices to at least 3");
  EXPECT_FALSE(ResolveNumStages(DemoSpec(0)).ok());
}

TEST(PlannerTest, Errors) {
  auto l_lt_p = MakePlan(DemoSpec(8));
  EXPECT_EQ(l_lt_p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(l_lt_p.status().message(),
              HasSubstr("the model has 6 layers but the plan has 8 stages"));

  v1::JobSpec planner = DemoSpec(2);
  planner.mutable_parallel()->set_planner("magic");
  EXPECT_EQ(MakePlan(planner).status().message(),
            "parallel.planner 'magic' is unknown; known: balanced, uniform, manual, dapple, "
            "pipedream, pipedream-code, dp");

  v1::JobSpec batch = DemoSpec(2);
  batch.mutable_training()->set_micro_batch(48);
  EXPECT_EQ(MakePlan(batch).status().message(),
            "training.global_batch 256 is not divisible by training.micro_batch 48");

  v1::JobSpec schedule = DemoSpec(2);
  schedule.mutable_parallel()->set_schedule("zigzag");
  EXPECT_EQ(MakePlan(schedule).status().code(), absl::StatusCode::kInvalidArgument);

  v1::JobSpec layer = DemoSpec(2);
  layer.mutable_model()->mutable_layers(2)->set_type("conv9");
  EXPECT_THAT(MakePlan(layer).status().message(), HasSubstr("model.layers[2]"));
}

// The demo's layers as a measured profile would name them, `ms` per layer forward (backward 2x),
// with the model's own fp32 parameter bytes ((in * out + out) * 4 for a linear layer).
v1::ModelProfile DemoProfile(double ms = 1.0) {
  v1::ModelProfile p;
  p.set_source("measured.txt");
  p.set_batch_size(32);
  const std::pair<const char*, int64_t> layers[] = {
      {"flatten", 0}, {"linear", (784 * 1024 + 1024) * 4},
      {"relu", 0},    {"linear", (1024 * 1024 + 1024) * 4},
      {"relu", 0},    {"linear", (1024 * 10 + 10) * 4}};
  for (const auto& [type, parameter_bytes] : layers) {
    v1::LayerProfile* l = p.add_layers();
    l->set_id(type);
    l->set_name(type);
    l->set_forward_ms(ms);
    l->set_backward_ms(2 * ms);
    l->set_activation_bytes(32 * 1024 * 4);
    l->set_parameter_bytes(parameter_bytes);
  }
  return p;
}

v1::ClusterTopology TwoNodes(int per_node, int64_t memory = int64_t{16} << 30) {
  v1::ClusterTopology t;
  t.set_source("two.yaml");
  for (int n = 0; n < 2; ++n) {
    v1::ClusterNode* node = t.add_nodes();
    node->set_name(absl::StrCat("n", n));
    node->set_devices(per_node);
    node->set_device_memory_bytes(memory);
  }
  t.set_intra_node_bandwidth_bytes_per_s(130e9);
  t.set_intra_node_latency_ms(0.005);
  t.set_inter_node_bandwidth_bytes_per_s(3.125e9);
  t.set_inter_node_latency_ms(0.01);
  return t;
}

TEST(PlannerTest, DappleChoosesTheDepthWithinTheJobsDevicesWithoutReplicas) {
  v1::JobSpec spec = DemoSpec(4);
  spec.mutable_parallel()->set_planner("dapple");
  PlanInputs inputs;
  inputs.profile = DemoProfile();
  inputs.topology = TwoNodes(4);
  auto plan = MakePlan(spec, inputs);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const v1::ParallelPlanSummary& s = plan->summary();
  EXPECT_EQ(s.planner(), "dapple");
  EXPECT_EQ(s.profile_source(), "measured.txt");
  EXPECT_EQ(s.cluster_source(), "two.yaml");
  EXPECT_EQ(s.micro_batch_size(), 32);
  EXPECT_EQ(s.micro_batches(), 8);
  ASSERT_GE(s.stages_size(), 1);
  ASSERT_LE(s.stages_size(), 4);
  int expected_first = 0;
  for (const v1::PlanStageSummary& stage : s.stages()) {
    EXPECT_EQ(stage.replicas(), 1);
    EXPECT_EQ(stage.first_layer(), expected_first);
    expected_first = stage.last_layer() + 1;
  }
  EXPECT_EQ(expected_first, 6);
  EXPECT_EQ(plan->programs_size(), s.stages_size());
}

// Schedule pipedream with planner pipedream on a compute-bound profile (300 ms per layer and
// micro-batch, a few MiB of weights): replicating stages pays, and 1F1B-RR's whole micro-batches
// cap every stage at M replicas.
TEST(PlannerTest, PipeDreamReplicatesStagesUpToMReplicas) {
  // The demo on 4 devices of two nodes under schedule pipedream; max_replicas is the job's
  // devices: MakePlan itself caps pipedream at M.
  auto plan_pipedream = [](int64_t micro_batch, bool vertical_sync) {
    v1::JobSpec spec = DemoSpec(4);
    spec.mutable_parallel()->set_schedule("pipedream");
    spec.mutable_parallel()->set_planner("pipedream");
    spec.mutable_parallel()->mutable_pipedream()->set_vertical_sync(vertical_sync);
    spec.mutable_training()->set_micro_batch(micro_batch);
    PlanInputs inputs;
    inputs.profile = DemoProfile(100.0);
    inputs.topology = TwoNodes(2);
    inputs.max_replicas = 4;
    return MakePlan(spec, inputs);
  };
  // micro_batch 1: 1F1B-RR never splits a micro-batch, so one sample per micro-batch still
  // allows replicas (split-concat would need D samples).
  for (const int64_t micro_batch : {128, 64, 1}) {
    SCOPED_TRACE(absl::StrCat("micro_batch ", micro_batch));
    const int m = static_cast<int>(256 / micro_batch);
    auto plan = plan_pipedream(micro_batch, /*vertical_sync=*/false);
    ASSERT_TRUE(plan.ok()) << plan.status();
    const v1::ParallelPlanSummary& s = plan->summary();
    EXPECT_EQ(s.schedule(), "pipedream");
    EXPECT_EQ(s.micro_batches(), m);
    int most = 0;
    int devices = 0;
    for (const v1::PlanStageSummary& stage : s.stages()) {
      EXPECT_LE(stage.replicas(), m) << "stage " << stage.first_layer();
      most = std::max(most, stage.replicas());
      devices += stage.replicas();
    }
    EXPECT_GT(most, 1) << "replication pays on this profile";
    EXPECT_LE(devices, 4);
    // A replicated stage all-reduces once per step.
    ASSERT_EQ(plan->programs_size(), s.stages_size());
    for (int st = 0; st < s.stages_size(); ++st) {
      int allreduces = 0;
      for (const v1::Action& a : plan->programs(st).actions()) {
        allreduces += a.kind() == v1::ALLREDUCE;
      }
      EXPECT_EQ(allreduces, s.stages(st).replicas() > 1 ? 1 : 0) << "stage " << st;
    }
  }
  // Vertical sync's versions are counted (common/memory_model.h WeightVersions): no note
  // disclaims them any more.
  auto synced = plan_pipedream(64, /*vertical_sync=*/true);
  ASSERT_TRUE(synced.ok()) << synced.status();
  EXPECT_THAT(synced->summary().notes(),
              ::testing::Not(::testing::Contains(HasSubstr("vertical sync"))));
  // M = 1: one replica per stage; a plan on fewer than the 4 devices says why (device_use.h).
  auto plan = plan_pipedream(256, /*vertical_sync=*/false);
  ASSERT_TRUE(plan.ok()) << plan.status();
  int used = 0;
  for (const v1::PlanStageSummary& stage : plan->summary().stages()) {
    EXPECT_EQ(stage.replicas(), 1);
    used += stage.replicas();
  }
  if (used < 4) {
    EXPECT_THAT(plan->summary().notes(), ::testing::Contains(::testing::StartsWith(absl::StrCat(
                                             "uses ", used, " of the 4 parallel.devices: "))));
  } else {
    EXPECT_THAT(plan->summary().notes(),
                ::testing::Not(::testing::Contains(::testing::StartsWith("uses "))));
  }
}

// Planner pipedream-code under schedule pipedream: PipeDream's code limits replicas not at all
// (MakePlan does not cap it at M), then picks an M >= every stage's replicas itself; the plan
// runs as 1F1B-RR, and its summary and PlanProfile name the planner and that schedule.
TEST(PlannerTest, PipeDreamCodePlansJobsForOneFOneBRoundRobin) {
  v1::JobSpec spec = DemoSpec(4);
  spec.mutable_parallel()->set_schedule("pipedream");
  spec.mutable_parallel()->set_planner("pipedream-code");
  spec.mutable_training()->set_micro_batch(64);
  PlanInputs inputs;
  inputs.profile = DemoProfile(100.0);
  inputs.topology = TwoNodes(2);
  inputs.max_replicas = 4;
  auto plan = MakePlan(spec, inputs);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const v1::ParallelPlanSummary& s = plan->summary();
  EXPECT_EQ(s.planner(), "pipedream-code");
  EXPECT_EQ(s.schedule(), "pipedream");
  EXPECT_EQ(s.micro_batches(), 4);
  int devices = 0;
  for (const v1::PlanStageSummary& stage : s.stages()) {
    EXPECT_LE(stage.replicas(), 4);
    devices += stage.replicas();
  }
  // The code uses every device (no --use_fewer_machines).
  EXPECT_EQ(devices, 4);
  EXPECT_GT(s.predicted_step_ms(), 0);
  ASSERT_EQ(plan->programs_size(), s.stages_size());

  auto profile_plan = PlanProfile(DemoProfile(100.0), TwoNodes(2), "pipedream-code", 256);
  ASSERT_TRUE(profile_plan.ok()) << profile_plan.status();
  EXPECT_EQ(profile_plan->planner(), "pipedream-code");
  EXPECT_EQ(profile_plan->schedule(), "pipedream");
}

// Planners that place devices / P replicas (balanced, uniform, manual) are refused beyond M
// under pipedream (the spec's validation says so first; MakePlan does not rely on it).
TEST(PlannerTest, PipeDreamRefusesMoreReplicasThanMicroBatches) {
  v1::JobSpec spec = DemoSpec(8, 2);
  spec.mutable_parallel()->set_schedule("pipedream");
  spec.mutable_parallel()->set_planner("uniform");
  spec.mutable_training()->set_micro_batch(128);
  auto plan = MakePlan(spec);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(plan.status().message(),
            "parallel.planner uniform gives stage 0 4 replicas, but parallel.schedule pipedream "
            "sends whole micro-batches round-robin to a stage's replicas and "
            "training.global_batch 256 / training.micro_batch 128 = 2 micro-batches per step: "
            "each replica needs at least one (at most 2 replicas per stage): use fewer "
            "parallel.devices or a smaller micro_batch");
  // M = 1 in the singular.
  spec.mutable_training()->set_micro_batch(256);
  spec.mutable_parallel()->set_devices(4);
  EXPECT_EQ(MakePlan(spec).status().message(),
            "parallel.planner uniform gives stage 0 2 replicas, but parallel.schedule pipedream "
            "sends whole micro-batches round-robin to a stage's replicas and "
            "training.global_batch 256 / training.micro_batch 256 = 1 micro-batch per step: "
            "each replica needs at least one (at most 1 replica per stage): use fewer "
            "parallel.devices or a smaller micro_batch");
  spec.mutable_training()->set_micro_batch(128);
  plan = MakePlan(spec);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->summary().stages(0).replicas(), 2);
  EXPECT_EQ(plan->summary().stages(1).replicas(), 2);
  // Split-concat's micro_batch >= replicas does not bind: a micro-batch of 1 on 2 replicas.
  spec.mutable_training()->set_micro_batch(1);
  plan = MakePlan(spec);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->summary().stages(0).replicas(), 2);
}

TEST(PlannerTest, AProfilesInputNodesAreDroppedSoStagesIndexTheModel) {
  v1::ModelProfile profile = DemoProfile();
  v1::ModelProfile with_input;
  with_input.set_source("graph.txt");
  with_input.set_batch_size(32);
  v1::LayerProfile* input = with_input.add_layers();
  input->set_id("node1");
  input->set_name("Input0");
  input->set_input(true);
  input->set_activation_bytes(32 * 784 * 4);
  for (const v1::LayerProfile& l : profile.layers()) *with_input.add_layers() = l;
  for (int i = 0; i + 1 < with_input.layers_size(); ++i) {
    v1::ProfileEdge* e = with_input.add_edges();
    e->set_src(i);
    e->set_dst(i + 1);
  }
  PlanInputs inputs;
  inputs.profile = with_input;
  auto plan = MakePlan(DemoSpec(2), inputs);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->summary().stages_size(), 2);
  EXPECT_EQ(plan->summary().stages(0).first_layer(), 0);
  EXPECT_EQ(plan->summary().stages(1).last_layer(), 5);  // the model's last layer
}

TEST(PlannerTest, AMismatchedProfileIsRefused) {
  v1::ModelProfile profile = DemoProfile();
  profile.mutable_layers(2)->set_name("gelu");
  PlanInputs inputs;
  inputs.profile = profile;
  auto plan = MakePlan(DemoSpec(2), inputs);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), HasSubstr("model.layers[2]"));
}

TEST(PlannerTest, MoreDevicesThanTheClusterHasAreRefused) {
  PlanInputs inputs;
  inputs.topology = TwoNodes(1);
  auto plan = MakePlan(DemoSpec(3), inputs);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(plan.status().message(),
            "parallel.devices 3 but the cluster (two.yaml) has 2 devices: set devices to at most "
            "2, or plan on a cluster with at least 3");
}

TEST(PlannerTest, PlansThatFitNoDeviceAreRefusedWithTheMemoryTheyNeed) {
  PlanInputs inputs;
  inputs.defaults.device_memory_bytes = 1 << 20;  // the big linear's weights alone are 4 MiB
  auto balanced = MakePlan(DemoSpec(2), inputs);
  EXPECT_EQ(balanced.status().code(), absl::StatusCode::kResourceExhausted);
  // The planner's message, with the spec's fields that change it.
  EXPECT_THAT(std::string(balanced.status().message()),
              ::testing::StartsWith("parallel.planner balanced: no plan fits device memory: the "
                                    "best needs "));
  EXPECT_THAT(std::string(balanced.status().message()),
              ::testing::EndsWith("but devices have 1.00 MiB: to fit, spread the model over more "
                                  "parallel.devices (now 2, one stage each), or use a smaller "
                                  "training.micro_batch (now 32) or devices with more memory"));

  v1::JobSpec manual = DemoSpec(2);
  manual.mutable_parallel()->set_planner("manual");
  for (auto [first, last] : {std::pair{0, 2}, std::pair{3, 5}}) {
    v1::StageRange* r = manual.mutable_parallel()->add_stage_ranges();
    r->set_first_layer(first);
    r->set_last_layer(last);
  }
  auto m = MakePlan(manual, inputs);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(m.status().message()),
              ::testing::StartsWith("parallel.planner manual: its plan needs "));
  EXPECT_THAT(m.status().message(), HasSubstr("(stage 1: weights "));
  EXPECT_THAT(std::string(m.status().message()),
              ::testing::EndsWith("but devices have 1.00 MiB: to fit, split the model into more "
                                  "parallel.stages ranges (now 2, on parallel.devices 2), or use "
                                  "a smaller training.micro_batch (now 32) or devices with more "
                                  "memory"));
}

// training.recompute (stage_memory.h StageRecomputes): all recomputes every stage; auto only
// the stages that do not fit the device memory without it, so that a limit only recomputation
// meets is planned (the workers run it: tests/planner_runtime_memory_test.cc).
TEST(PlannerTest, RecomputationIsChosenForTheStagesThatDoNotFitWithoutIt) {
  for (const char* planner : {"balanced", "dapple"}) {
    SCOPED_TRACE(planner);
    v1::JobSpec spec = DemoSpec(2, 2);
    spec.mutable_parallel()->set_planner(planner);
    spec.mutable_parallel()->set_schedule("gpipe");  // all M = 8 micro-batches in flight
    spec.mutable_training()->set_global_batch(2048);
    spec.mutable_training()->set_micro_batch(256);
    auto keep = MakePlan(spec);
    ASSERT_TRUE(keep.ok()) << keep.status();
    spec.mutable_training()->set_recompute("all");
    auto all = MakePlan(spec);
    ASSERT_TRUE(all.ok()) << all.status();
    ASSERT_EQ(Stages(*all), Stages(*keep));
    int64_t keep_min = std::numeric_limits<int64_t>::max(), keep_max = 0, all_max = 0;
    for (int s = 0; s < 2; ++s) {
      const v1::PlanStageSummary& k = keep->summary().stages(s);
      const v1::PlanStageSummary& r = all->summary().stages(s);
      EXPECT_FALSE(k.recompute());
      EXPECT_TRUE(r.recompute());
      EXPECT_LT(r.peak_memory_bytes(), k.peak_memory_bytes());
      // One more forward per micro-batch before its backward.
      EXPECT_GT(r.compute_ms(), k.compute_ms());
      keep_min = std::min(keep_min, k.peak_memory_bytes());
      keep_max = std::max(keep_max, k.peak_memory_bytes());
      all_max = std::max(all_max, r.peak_memory_bytes());
    }
    EXPECT_GT(all->summary().predicted_step_ms(), keep->summary().predicted_step_ms());

    PlanInputs capped;
    capped.defaults.device_memory_bytes = std::max(all_max, keep_min);
    ASSERT_LT(capped.defaults.device_memory_bytes, keep_max);
    spec.mutable_training()->set_recompute("auto");
    auto plan = MakePlan(spec, capped);
    ASSERT_TRUE(plan.ok()) << plan.status();
    int recomputing = 0;
    for (const v1::PlanStageSummary& stage : plan->summary().stages()) {
      EXPECT_LE(stage.peak_memory_bytes(), capped.defaults.device_memory_bytes);
      recomputing += stage.recompute();
    }
    EXPECT_GE(recomputing, 1);
    if (std::string(planner) == "balanced") {
      // The fixed partition: exactly the stages over the limit recompute; without recomputation
      // the plan is refused.
      for (int s = 0; s < 2; ++s) {
        EXPECT_EQ(
            plan->summary().stages(s).recompute(),
            keep->summary().stages(s).peak_memory_bytes() > capped.defaults.device_memory_bytes);
      }
      spec.mutable_training()->set_recompute("none");
      auto refused = MakePlan(spec, capped);
      EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
      // The error names the fix that keeps the partition and the batch.
      EXPECT_THAT(std::string(refused.status().message()),
                  HasSubstr(": to fit, set training.recompute: auto (a plan fits with it), or "
                            "spread the model over more parallel.stages (now 2"));
      // Below what even recomputation needs, recompute: auto's refusal quotes the need with
      // recomputation (it once quoted the one without: 75 MiB where 44 MiB would do).
      PlanInputs tighter;
      tighter.defaults.device_memory_bytes = all_max - 1;
      spec.mutable_training()->set_recompute("auto");
      auto too_small = MakePlan(spec, tighter);
      EXPECT_EQ(too_small.status().code(), absl::StatusCode::kResourceExhausted);
      const auto [needs, has] = profile::FormatBytesApart(all_max, all_max - 1);
      EXPECT_THAT(std::string(too_small.status().message()),
                  HasSubstr(absl::StrCat("the best needs ", needs, " on a device")));
    }
  }
}

TEST(PlannerTest, ManualPlansArePredictedToo) {
  v1::JobSpec manual = DemoSpec(2);
  manual.mutable_parallel()->set_planner("manual");
  for (auto [first, last] : {std::pair{0, 3}, std::pair{4, 5}}) {
    v1::StageRange* r = manual.mutable_parallel()->add_stage_ranges();
    r->set_first_layer(first);
    r->set_last_layer(last);
  }
  auto m = MakePlan(manual);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->summary().planner(), "manual");
  EXPECT_GT(m->summary().predicted_step_ms(), 0);
  EXPECT_GT(m->summary().stages(0).compute_ms(), m->summary().stages(1).compute_ms());
}

TEST(PlannerTest, PlanProfileUsesTheWholeClusterAndSixteenProfileBatches) {
  v1::ModelProfile profile = DemoProfile();
  auto s = PlanProfile(profile, TwoNodes(2), "", 0);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->planner(), "dapple");
  EXPECT_EQ(s->micro_batches() * s->micro_batch_size(), kDefaultProfileBatches * 32);
  EXPECT_GT(s->predicted_step_ms(), 0);
  auto pd = PlanProfile(profile, TwoNodes(2), "pipedream", 64);
  ASSERT_TRUE(pd.ok()) << pd.status();
  EXPECT_EQ(pd->planner(), "pipedream");
  EXPECT_EQ(pd->micro_batches() * pd->micro_batch_size(), 64);
  EXPECT_EQ(PlanProfile(profile, TwoNodes(2), "magic", 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PlannerTest, NominalRatesAndTopology) {
  PlanDefaults d;
  EXPECT_EQ(NominalFlopsPerSecond("cuda", d), d.cuda_flops_per_second);
  EXPECT_EQ(NominalFlopsPerSecond("cuda:NVIDIA H200", d), d.cuda_flops_per_second);
  EXPECT_EQ(NominalFlopsPerSecond("cpu", d), d.cpu_flops_per_second);
  const v1::ClusterTopology t = SingleNodeTopology(3, d);
  ASSERT_EQ(t.nodes_size(), 1);
  EXPECT_EQ(t.nodes(0).devices(), 3);
  EXPECT_EQ(t.nodes(0).device_memory_bytes(), d.device_memory_bytes);
  EXPECT_EQ(t.source(), "one node of 3 devices (coordinator defaults)");
}

}  // namespace
}  // namespace dapple::coordinator
