#include "coordinator/planner/planner.h"

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
    l->set_out(out);
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
  // linear 784x1024 (6 * in * out) + relu over 1024 (2 per element); flatten is free.
  EXPECT_DOUBLE_EQ(s.stages(0).compute_flops(), 6.0 * 784 * 1024 + 2 * 1024);
  EXPECT_DOUBLE_EQ(s.stages(1).compute_flops(), 6.0 * 1024 * 1024 + 2 * 1024 + 6.0 * 1024 * 10);
  EXPECT_GT(s.bubble_fraction(), 0.0);
  EXPECT_LT(s.bubble_fraction(), 1.0);
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
  EXPECT_EQ(*ResolveNumStages(DemoSpec(4, 2)), 2);
  auto too_many = ResolveNumStages(DemoSpec(2, 3));
  EXPECT_EQ(too_many.status().message(),
            "parallel.stages 3 but parallel.devices is 2: each stage needs its own device");
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
            "parallel.planner 'magic' is unknown; known: balanced, uniform, manual");

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

}  // namespace
}  // namespace dapple::coordinator
