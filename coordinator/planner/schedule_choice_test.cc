#include "coordinator/planner/schedule_choice.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/schedule/job_lowering.h"
#include "coordinator/planner/planner.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

using schedule::ScheduleKind;
using ::testing::Contains;
using ::testing::HasSubstr;

std::vector<std::pair<ScheduleKind, RecomputeMode>> Pairs(const std::vector<ScheduleOption>& o) {
  std::vector<std::pair<ScheduleKind, RecomputeMode>> out;
  for (const ScheduleOption& x : o) out.emplace_back(x.schedule, x.recompute);
  return out;
}

constexpr RecomputeMode kNone = RecomputeMode::kNone;
constexpr RecomputeMode kAuto = RecomputeMode::kAuto;
constexpr RecomputeMode kAll = RecomputeMode::kAll;

TEST(ScheduleOptionsTest, AutoTriesEverySynchronousScheduleAndRecomputationWhereAllowed) {
  ChoiceLimits limits;
  limits.choose_schedule = true;
  // The zero-bubble schedules never recompute; ties go to the earlier entry.
  EXPECT_EQ(Pairs(ScheduleOptions(limits)),
            (std::vector<std::pair<ScheduleKind, RecomputeMode>>{{ScheduleKind::kDapple, kNone},
                                                                 {ScheduleKind::kDapple, kAuto},
                                                                 {ScheduleKind::kZbH1, kNone},
                                                                 {ScheduleKind::kZbH2, kNone},
                                                                 {ScheduleKind::kGPipe, kNone},
                                                                 {ScheduleKind::kGPipe, kAuto}}));
  // An explicit recompute is kept: none everywhere; all only where a schedule recomputes.
  limits.recompute = "none";
  EXPECT_EQ(Pairs(ScheduleOptions(limits)),
            (std::vector<std::pair<ScheduleKind, RecomputeMode>>{{ScheduleKind::kDapple, kNone},
                                                                 {ScheduleKind::kZbH1, kNone},
                                                                 {ScheduleKind::kZbH2, kNone},
                                                                 {ScheduleKind::kGPipe, kNone}}));
  limits.recompute = "all";
  EXPECT_EQ(Pairs(ScheduleOptions(limits)),
            (std::vector<std::pair<ScheduleKind, RecomputeMode>>{{ScheduleKind::kDapple, kAll},
                                                                 {ScheduleKind::kGPipe, kAll}}));
}

// What auto leaves out is said in the plan's notes, so that no row is silently missing.
TEST(ScheduleOptionsTest, WhatAutoLeavesOutIsExplained) {
  ChoiceLimits limits;
  limits.choose_schedule = true;
  EXPECT_THAT(LeftOutNotes(limits), ::testing::IsEmpty());
  limits.recompute = "all";
  EXPECT_THAT(LeftOutNotes(limits),
              ::testing::ElementsAre(
                  "parallel.schedule auto with training.recompute all: zb-h1 and zb-h2 were not "
                  "considered (a recomputed forward does not outlive their split backward; set "
                  "recompute auto or none to include them)"));
  limits.choose_schedule = false;
  EXPECT_THAT(LeftOutNotes(limits), ::testing::IsEmpty());
}

TEST(ScheduleOptionsTest, AFixedScheduleTriesRecomputationOnlyWhenTheSpecSaysAuto) {
  ChoiceLimits limits;
  limits.schedule = ScheduleKind::kGPipe;
  EXPECT_EQ(Pairs(ScheduleOptions(limits)),
            (std::vector<std::pair<ScheduleKind, RecomputeMode>>{{ScheduleKind::kGPipe, kNone}}));
  limits.recompute = "auto";
  EXPECT_EQ(Pairs(ScheduleOptions(limits)),
            (std::vector<std::pair<ScheduleKind, RecomputeMode>>{{ScheduleKind::kGPipe, kNone},
                                                                 {ScheduleKind::kGPipe, kAuto}}));
  limits.schedule = ScheduleKind::kZbH1;
  EXPECT_EQ(Pairs(ScheduleOptions(limits)),
            (std::vector<std::pair<ScheduleKind, RecomputeMode>>{{ScheduleKind::kZbH1, kNone}}));
  limits.schedule = ScheduleKind::kPipeDream;
  limits.recompute = "";
  EXPECT_EQ(
      Pairs(ScheduleOptions(limits)),
      (std::vector<std::pair<ScheduleKind, RecomputeMode>>{{ScheduleKind::kPipeDream, kNone}}));
}

// A stand-in planner: each option's step and peak memory from a table; a missing entry finds no
// plan (kResourceExhausted).
struct Fake {
  std::map<std::pair<ScheduleKind, RecomputeMode>, std::pair<double, int64_t>> plans;
  absl::StatusOr<PlannedJob> operator()(const PlanningProblem& problem) const {
    const auto it = plans.find({problem.schedule, problem.recompute});
    if (it == plans.end()) return absl::ResourceExhaustedError("no plan fits device memory");
    PlannedJob job;
    job.plan.micro_batches = 4;
    job.plan.micro_batch_size = 1;
    StagePlan stage;
    stage.devices = {0};
    job.plan.stages = {stage};
    job.prediction.step_ms = it->second.first;
    job.prediction.stages.resize(1);
    job.prediction.stages[0].peak_memory_bytes = it->second.second;
    return job;
  }
};

ScheduleChoice ChooseOrDie(const Fake& fake, const std::vector<ScheduleOption>& options) {
  // One layer on one device: enough for WithRecompute to judge the fake plans.
  PlanningProblem problem;
  profile::ChainProfile& p = problem.profile;
  p.batch_size = 1;
  p.names = {"l"};
  p.forward_ms = {1};
  p.backward_ms = {2};
  p.parameter_bytes = {4};
  p.activation_bytes = {4};
  p.saved_bytes = {0};
  p.optimizer_ms = {0};
  p.cut_bytes = {};
  v1::ClusterNode* node = problem.topology.add_nodes();
  node->set_name("n");
  node->set_devices(1);
  node->set_device_memory_bytes(int64_t{1} << 30);
  absl::StatusOr<ScheduleChoice> choice = ChooseSchedule(problem, options, fake);
  EXPECT_TRUE(choice.ok()) << choice.status();
  return choice.ok() ? *choice : ScheduleChoice();
}

std::vector<ScheduleOption> AutoOptions() {
  ChoiceLimits limits;
  limits.choose_schedule = true;
  return ScheduleOptions(limits);
}

TEST(ChooseScheduleTest, ZbH1IsChosenWhenItIsFaster) {
  Fake fake;
  fake.plans[{ScheduleKind::kDapple, kNone}] = {100, 1000};
  fake.plans[{ScheduleKind::kDapple, kAuto}] = {100, 1000};
  fake.plans[{ScheduleKind::kZbH1, kNone}] = {88, 1004};
  fake.plans[{ScheduleKind::kGPipe, kNone}] = {100, 1500};
  // zb-h2 and gpipe with recomputation fit nothing.
  const ScheduleChoice choice = ChooseOrDie(fake, AutoOptions());
  ASSERT_EQ(choice.alternatives.size(), 6u);
  ASSERT_EQ(choice.chosen, 2);
  EXPECT_EQ(choice.alternatives[2].option.schedule, ScheduleKind::kZbH1);
  EXPECT_EQ(choice.alternatives[3].status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ChoiceReason(choice), "zb-h1: 12.0% faster than dapple at the same peak memory");

  v1::ParallelPlanSummary summary;
  AddAlternatives(choice, &summary);
  ASSERT_EQ(summary.alternatives_size(), 6);
  EXPECT_TRUE(summary.alternatives(2).chosen());
  EXPECT_EQ(summary.alternatives(2).schedule(), "zb-h1");
  EXPECT_EQ(summary.alternatives(2).recompute(), "none");
  EXPECT_EQ(summary.alternatives(2).layout(), "1x1");
  EXPECT_DOUBLE_EQ(summary.alternatives(2).predicted_step_ms(), 88);
  EXPECT_EQ(summary.alternatives(2).peak_memory_bytes(0), 1004);
  EXPECT_FALSE(summary.alternatives(3).fits());
  EXPECT_EQ(summary.alternatives(3).refused(), "no plan fits device memory");
  EXPECT_EQ(summary.choice_reason(), ChoiceReason(choice));
}

TEST(ChooseScheduleTest, GPipeOnlyWhenItIsFaster) {
  Fake fake;
  fake.plans[{ScheduleKind::kDapple, kNone}] = {100, 1000};
  fake.plans[{ScheduleKind::kGPipe, kNone}] = {100, 1000};  // a tie: the simpler 1F1B
  ScheduleChoice choice = ChooseOrDie(fake, AutoOptions());
  EXPECT_EQ(choice.chosen, 0);
  EXPECT_EQ(ChoiceReason(choice),
            "dapple: within 1% of gpipe's step and listed first (the simpler schedule, or less "
            "peak memory)");
  fake.plans[{ScheduleKind::kGPipe, kNone}] = {100 * (1 - 1e-12), 1000};  // within rounding
  EXPECT_EQ(ChooseOrDie(fake, AutoOptions()).chosen, 0);
  fake.plans[{ScheduleKind::kGPipe, kNone}] = {95, 3000};
  choice = ChooseOrDie(fake, AutoOptions());
  ASSERT_EQ(choice.chosen, 4);
  EXPECT_EQ(ChoiceReason(choice), "gpipe: 5.0% faster than dapple at 3.00x its peak memory");
  // As fast, with less memory: the smaller peak wins the tie.
  fake.plans[{ScheduleKind::kGPipe, kNone}] = {100, 900};
  choice = ChooseOrDie(fake, AutoOptions());
  ASSERT_EQ(choice.chosen, 4);
  EXPECT_THAT(ChoiceReason(choice), HasSubstr("within 1% of dapple's step with less peak memory"));
  // Dapple winning names the runner-up.
  fake.plans[{ScheduleKind::kGPipe, kNone}] = {110, 1000};
  choice = ChooseOrDie(fake, AutoOptions());
  EXPECT_EQ(choice.chosen, 0);
  EXPECT_EQ(ChoiceReason(choice), "dapple: no alternative is faster (next: gpipe, 10.0% slower)");
  // ... never the same plan under recompute auto that recomputes nothing (it was named the
  // runner-up "within 1%" of itself).
  fake.plans[{ScheduleKind::kDapple, kAuto}] = {100, 1000};
  choice = ChooseOrDie(fake, AutoOptions());
  EXPECT_EQ(choice.chosen, 0);
  EXPECT_EQ(ChoiceReason(choice), "dapple: no alternative is faster (next: gpipe, 10.0% slower)");
}

TEST(ChooseScheduleTest, RecomputationWhenOnlyItFits) {
  Fake fake;
  fake.plans[{ScheduleKind::kDapple, kAuto}] = {130, 900};
  fake.plans[{ScheduleKind::kGPipe, kAuto}] = {133, 800};
  const ScheduleChoice choice = ChooseOrDie(fake, AutoOptions());
  ASSERT_EQ(choice.chosen, 1);
  EXPECT_EQ(ChoiceReason(choice),
            "dapple with recompute auto: the fastest that fits; dapple fits no plan in device "
            "memory");
}

// Steps within 1% are a tie, inside what the model can tell apart on a real host: less peak
// memory wins it, then the earlier option (dapple first). A fresh user's replicated stage had
// zb-h2 "0.0% faster" (29.37 against 29.38 ms) at a larger peak memory, and got zb-h2.
TEST(ChooseScheduleTest, StepsWithinOnePercentAreATie) {
  Fake fake;
  fake.plans[{ScheduleKind::kDapple, kNone}] = {29.38, 1000};
  fake.plans[{ScheduleKind::kZbH2, kNone}] = {29.37, 1005};
  ScheduleChoice choice = ChooseOrDie(fake, AutoOptions());
  ASSERT_GE(choice.chosen, 0);
  EXPECT_EQ(choice.alternatives[choice.chosen].option.schedule, ScheduleKind::kDapple);
  // Within 1% with less memory: the leaner plan.
  fake.plans[{ScheduleKind::kZbH2, kNone}] = {29.5, 900};
  choice = ChooseOrDie(fake, AutoOptions());
  ASSERT_GE(choice.chosen, 0);
  EXPECT_EQ(choice.alternatives[choice.chosen].option.schedule, ScheduleKind::kZbH2);
  // 2% faster is faster, whatever the memory.
  fake.plans[{ScheduleKind::kZbH2, kNone}] = {28.79, 1100};
  choice = ChooseOrDie(fake, AutoOptions());
  ASSERT_GE(choice.chosen, 0);
  EXPECT_EQ(choice.alternatives[choice.chosen].option.schedule, ScheduleKind::kZbH2);
}

TEST(ChooseScheduleTest, NothingFits) {
  const ScheduleChoice choice = ChooseOrDie(Fake(), AutoOptions());
  EXPECT_EQ(choice.chosen, -1);
  EXPECT_EQ(choice.alternatives.size(), 6u);
  EXPECT_EQ(ChoiceReason(choice), "");
  EXPECT_EQ(NoneFitsNote(choice, choice.alternatives.front()),
            " (parallel.schedule auto planned dapple, dapple with recompute auto, zb-h1, zb-h2, "
            "gpipe and gpipe with recompute auto: none fits; the need above is dapple's)");
  // The need quoted is the reported alternative's; a fixed schedule's alternatives came from
  // training.recompute auto (a user read "parallel.schedule auto" on a spec of schedule dapple,
  // and dapple's name on the recomputing plan's figure).
  EXPECT_THAT(NoneFitsNote(choice, choice.alternatives[1]),
              HasSubstr("the need above is dapple with recompute auto's)"));
  ScheduleChoice fixed = choice;
  fixed.alternatives.resize(2);
  EXPECT_EQ(NoneFitsNote(fixed, fixed.alternatives[1]),
            " (training.recompute auto planned dapple and dapple with recompute auto: none fits; "
            "the need above is dapple with recompute auto's)");
  PlanningProblem problem;
  EXPECT_EQ(ChooseSchedule(problem, {}, Fake()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The demo MLP of design.md (784 -> 1024 -> 1024 -> 10) on two balanced stages: each
// schedule's plan is the same partition, so the choice is the schedule's own.
v1::JobSpec DemoSpec() {
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
  spec.mutable_training()->set_global_batch(2048);
  spec.mutable_training()->set_micro_batch(256);
  spec.mutable_training()->set_epochs(1);
  spec.mutable_parallel()->set_schedule("auto");
  spec.mutable_parallel()->set_planner("balanced");
  spec.mutable_parallel()->set_devices(2);
  spec.mutable_parallel()->set_stages(2);
  return spec;
}

v1::ParallelPlan PlanOrDie(const v1::JobSpec& spec, const PlanInputs& inputs = {}) {
  absl::StatusOr<v1::ParallelPlan> plan = MakePlan(spec, inputs);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *plan : v1::ParallelPlan();
}

v1::ParallelPlan PlanAs(v1::JobSpec spec, const char* schedule, const char* recompute = "",
                        const PlanInputs& inputs = {}) {
  spec.mutable_parallel()->set_schedule(schedule);
  spec.mutable_training()->set_recompute(recompute);
  return PlanOrDie(spec, inputs);
}

int64_t MaxPeak(const v1::ParallelPlanSummary& s) {
  int64_t peak = 0;
  for (const v1::PlanStageSummary& stage : s.stages()) {
    peak = std::max(peak, stage.peak_memory_bytes());
  }
  return peak;
}

const v1::PlanAlternative* Find(const v1::ParallelPlanSummary& s, const std::string& schedule,
                                const std::string& recompute) {
  for (const v1::PlanAlternative& a : s.alternatives()) {
    if (a.schedule() == schedule && a.recompute() == recompute) return &a;
  }
  return nullptr;
}

// The demo's layers as a measured profile would name them, 1 ms forward and 2 ms backward each,
// so that the balanced planner's two stages (3 layers each) are equal.
v1::ModelProfile EqualLayersProfile() {
  v1::ModelProfile p;
  p.set_source("equal.txt");
  p.set_batch_size(256);
  const std::pair<const char*, int64_t> layers[] = {
      {"flatten", 0}, {"linear", (784 * 1024 + 1024) * 4},
      {"relu", 0},    {"linear", (1024 * 1024 + 1024) * 4},
      {"relu", 0},    {"linear", (1024 * 10 + 10) * 4}};
  for (const auto& [type, parameter_bytes] : layers) {
    v1::LayerProfile* l = p.add_layers();
    l->set_id(type);
    l->set_name(type);
    l->set_forward_ms(1);
    l->set_backward_ms(2);
    l->set_activation_bytes(256 * 1024 * 4);
    l->set_parameter_bytes(parameter_bytes);
  }
  return p;
}

// Unlimited memory, equal stages: ZB-H2 (almost no bubble) is the fastest; its programs split
// the backward, and the summary lists every alternative with the reason.
TEST(ScheduleAutoTest, ZbH2WinsOnEqualStagesWithoutAMemoryLimit) {
  PlanInputs inputs;
  inputs.profile = EqualLayersProfile();
  const v1::ParallelPlan plan = PlanOrDie(DemoSpec(), inputs);
  const v1::ParallelPlanSummary& s = plan.summary();
  EXPECT_EQ(s.schedule(), "zb-h2");
  // dapple and gpipe with and without recomputation, zb-h1, zb-h2, interleaved v=2 and v=3 (the
  // 6 layers hold at most 3 chunks per stage on 2 stages).
  ASSERT_EQ(s.alternatives_size(), 8);
  EXPECT_TRUE(Find(s, "zb-h2", "none")->chosen());
  EXPECT_LT(s.predicted_step_ms(), Find(s, "zb-h1", "none")->predicted_step_ms());
  EXPECT_THAT(s.choice_reason(), ::testing::StartsWith("zb-h2: "));
  EXPECT_THAT(s.choice_reason(), HasSubstr("faster than dapple"));
  EXPECT_EQ(schedule::CountActions(plan.programs(0), v1::BACKWARD), 0);
  EXPECT_GT(schedule::CountActions(plan.programs(0), v1::BACKWARD_WEIGHT), 0);
  // The chosen plan is the zb-h2 plan a spec naming it gets.
  const v1::ParallelPlanSummary zb = PlanAs(DemoSpec(), "zb-h2", "", inputs).summary();
  EXPECT_DOUBLE_EQ(s.predicted_step_ms(), zb.predicted_step_ms());
  EXPECT_EQ(zb.alternatives_size(), 0);  // a fixed schedule considers one option
}

// Unequal stages (the estimated profile: the second stage is the bottleneck) with gradient
// clipping, which keeps the non-finite check a barrier between steps: ZB-H1 and ZB-H2 tie on the
// (flushed) step, and the tie goes to ZB-H1's smaller peak memory; both beat dapple.
TEST(ScheduleAutoTest, ZbH1WinsATieWithZbH2ByMemory) {
  v1::JobSpec spec = DemoSpec();
  spec.mutable_training()->set_max_grad_norm(1.0);
  const v1::ParallelPlanSummary s = PlanOrDie(spec).summary();
  EXPECT_EQ(s.schedule(), "zb-h1");
  const v1::PlanAlternative* h2 = Find(s, "zb-h2", "none");
  EXPECT_NEAR(h2->predicted_step_ms(), s.predicted_step_ms(), 1e-9 * s.predicted_step_ms());
  EXPECT_GT(*std::max_element(h2->peak_memory_bytes().begin(), h2->peak_memory_bytes().end()),
            MaxPeak(s));
  EXPECT_THAT(s.choice_reason(), ::testing::StartsWith("zb-h1: "));
  EXPECT_LT(s.predicted_step_ms(), Find(s, "dapple", "none")->predicted_step_ms());
}

// The same job without clipping (and without skipped steps): zb-h2's check is deferred
// (schedule::DefersNonFiniteCheck), its steps run back to back, and its steady-state step beats
// ZB-H1's flushed one; the same with max_consecutive_skipped_steps > 0 is the flushed step again.
TEST(ScheduleAutoTest, ZbH2StepsBackToBackWithoutABarrier) {
  const v1::ParallelPlanSummary s = PlanOrDie(DemoSpec()).summary();
  EXPECT_EQ(s.schedule(), "zb-h2");
  EXPECT_LT(s.predicted_step_ms(), Find(s, "zb-h1", "none")->predicted_step_ms());
  v1::JobSpec skipping = DemoSpec();
  skipping.mutable_training()->set_max_consecutive_skipped_steps(1);
  const v1::ParallelPlanSummary flushed = PlanAs(skipping, "zb-h2").summary();
  EXPECT_LT(s.predicted_step_ms(), flushed.predicted_step_ms());
  EXPECT_EQ(PlanOrDie(skipping).summary().schedule(), "zb-h1");
}

// A memory limit between ZB-H1's peak and ZB-H2's: ZB-H1 is chosen, faster than dapple.
TEST(ScheduleAutoTest, ZbH1WhenZbH2DoesNotFit) {
  const v1::ParallelPlanSummary h1 = PlanAs(DemoSpec(), "zb-h1").summary();
  const v1::ParallelPlanSummary h2 = PlanAs(DemoSpec(), "zb-h2").summary();
  const v1::ParallelPlanSummary dapple = PlanAs(DemoSpec(), "dapple").summary();
  ASSERT_LT(MaxPeak(h1), MaxPeak(h2));
  ASSERT_LT(h1.predicted_step_ms(), dapple.predicted_step_ms());
  PlanInputs inputs;
  inputs.defaults.device_memory_bytes = MaxPeak(h1);
  const v1::ParallelPlanSummary s = PlanOrDie(DemoSpec(), inputs).summary();
  EXPECT_EQ(s.schedule(), "zb-h1");
  EXPECT_FALSE(Find(s, "zb-h2", "none")->fits());
  EXPECT_THAT(Find(s, "zb-h2", "none")->refused(), HasSubstr("device memory"));
  EXPECT_LE(s.predicted_step_ms(), Find(s, "dapple", "none")->predicted_step_ms());
}

// A limit only recomputation meets: dapple with recompute auto, the stages over it recomputing.
TEST(ScheduleAutoTest, RecomputationWhenOnlyItFits) {
  const v1::ParallelPlanSummary keep = PlanAs(DemoSpec(), "dapple", "none").summary();
  const v1::ParallelPlanSummary all = PlanAs(DemoSpec(), "dapple", "all").summary();
  int64_t keep_min = MaxPeak(keep);
  for (const v1::PlanStageSummary& stage : keep.stages()) {
    keep_min = std::min(keep_min, stage.peak_memory_bytes());
  }
  PlanInputs inputs;
  inputs.defaults.device_memory_bytes = std::max(MaxPeak(all), keep_min);
  ASSERT_LT(inputs.defaults.device_memory_bytes, MaxPeak(keep));
  const v1::ParallelPlanSummary s = PlanOrDie(DemoSpec(), inputs).summary();
  EXPECT_EQ(s.schedule(), "dapple");
  int recomputing = 0;
  for (const v1::PlanStageSummary& stage : s.stages()) {
    EXPECT_LE(stage.peak_memory_bytes(), inputs.defaults.device_memory_bytes);
    recomputing += stage.recompute();
  }
  EXPECT_EQ(recomputing, 1);
  EXPECT_TRUE(Find(s, "dapple", "auto")->chosen());
  EXPECT_FALSE(Find(s, "dapple", "none")->fits());
  EXPECT_THAT(s.choice_reason(), HasSubstr("dapple fits no plan in device memory"));
  // The layout marks the recomputing stage.
  EXPECT_THAT(Find(s, "dapple", "auto")->layout(), HasSubstr("r"));
}

// On CUDA stages: every candidate the CPU gets, the zero-bubble schedules and recomputation
// included (the CUDA backend splits its backward and recomputes), but interleaved 1F1B (not on
// CUDA yet: interleaved_choice.h).
TEST(ScheduleAutoTest, CudaGetsEveryScheduleButInterleaved) {
  v1::JobSpec spec = DemoSpec();
  auto names = [](const v1::ParallelPlanSummary& s, bool drop_interleaved) {
    std::vector<std::string> out;
    for (const v1::PlanAlternative& a : s.alternatives()) {
      if (drop_interleaved && a.schedule() == "interleaved") continue;
      out.push_back(absl::StrCat(a.schedule(), " ", a.recompute()));
    }
    return out;
  };
  const std::vector<std::string> cpu = names(PlanOrDie(spec).summary(), true);
  spec.mutable_parallel()->set_device_type("cuda");
  const std::vector<std::string> cuda = names(PlanOrDie(spec).summary(), false);
  EXPECT_EQ(cuda, cpu);
  EXPECT_THAT(cuda, ::testing::Contains("zb-h1 none"));
  EXPECT_THAT(cuda, ::testing::Contains("zb-h2 none"));
  EXPECT_THAT(cuda, ::testing::Contains("dapple auto"));
  PlanInputs on_cuda;  // the workers' kind says cuda too
  on_cuda.device_kind = "cuda";
  spec.mutable_parallel()->set_device_type("any");
  EXPECT_EQ(names(PlanOrDie(spec, on_cuda).summary(), false), cpu);
}

// Nothing fits, whatever the schedule: the first schedule's refusal (dapple's, with recomputation
// where it was tried: the least memory dapple needs), naming whose need it states.
TEST(ScheduleAutoTest, NothingFitsIsRefusedAsForDapple) {
  PlanInputs inputs;
  inputs.defaults.device_memory_bytes = 1 << 20;
  auto plan = MakePlan(DemoSpec(), inputs);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(plan.status().message(), HasSubstr("parallel.planner balanced: no plan fits"));
  // Every option was tried, and the refusal says so, and whose need it states.
  EXPECT_THAT(plan.status().message(),
              HasSubstr("(parallel.schedule auto planned dapple, dapple with recompute auto, "));
  EXPECT_THAT(plan.status().message(),
              HasSubstr("none fits; the need above is dapple with recompute auto's)"));
}

TEST(ScheduleAutoTest, PlanProfileChoosesToo) {
  v1::ModelProfile profile;
  profile.set_source("p.txt");
  profile.set_batch_size(8);
  for (int i = 0; i < 8; ++i) {
    v1::LayerProfile* l = profile.add_layers();
    l->set_id(absl::StrCat("l", i));
    l->set_name(l->id());
    l->set_forward_ms(1);
    l->set_backward_ms(2);
    l->set_activation_bytes(int64_t{1} << 20);
    l->set_parameter_bytes(int64_t{64} << 20);
  }
  v1::ClusterTopology topology;
  topology.set_source("four.yaml");
  v1::ClusterNode* node = topology.add_nodes();
  node->set_name("n");
  node->set_devices(4);
  node->set_device_memory_bytes(int64_t{16} << 30);
  topology.set_intra_node_bandwidth_bytes_per_s(100e9);
  topology.set_inter_node_bandwidth_bytes_per_s(10e9);
  auto chosen = PlanProfile(profile, topology, "", 64, "auto");
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_EQ(chosen->alternatives_size(), 6);
  // Interleaved needs a job's P, v, layers and M: the plan says so rather than omit it silently.
  EXPECT_THAT(chosen->notes(),
              Contains(HasSubstr("interleaved 1F1B was not considered (a plan without a job "
                                 "spec does not try it: dapplectl plan JOB.yaml")));
  auto dapple = PlanProfile(profile, topology, "", 64);
  ASSERT_TRUE(dapple.ok()) << dapple.status();
  EXPECT_EQ(dapple->schedule(), "dapple");
  EXPECT_EQ(dapple->alternatives_size(), 0);
  EXPECT_LE(chosen->predicted_step_ms(), dapple->predicted_step_ms() * (1 + 1e-9));
  auto zb = PlanProfile(profile, topology, "", 64, "zb-h1");
  ASSERT_TRUE(zb.ok()) << zb.status();
  EXPECT_EQ(zb->schedule(), "zb-h1");
  EXPECT_EQ(PlanProfile(profile, topology, "", 64, "pipedream").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanProfile(profile, topology, "", 64, "magic").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dapple::coordinator
