// parallel.schedule auto and interleaved 1F1B (interleaved_choice.h, schedule_choice.h): which
// v's and depths the job allows, the options and their names, and MakePlan's choice on jobs
// where interleaved wins (many layers, few micro-batches: 1F1B's bubble is large), loses (many
// micro-batches on slow links: its v times more transfers cost more than the bubble it saves)
// and does not fit (its warm-up holds more activations than 1F1B's).
#include "coordinator/planner/interleaved_choice.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/schedule/job_lowering.h"
#include "common/schedule/lowering.h"
#include "common/schedule/ranks.h"
#include "coordinator/planner/planner.h"
#include "coordinator/planner/schedule_choice.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

using schedule::ScheduleKind;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

InterleavedJob Job(int layers, int stages, int devices, int micro_batches) {
  InterleavedJob job;
  job.num_layers = layers;
  job.num_stages = stages;
  job.devices = devices;
  job.micro_batches = micro_batches;
  job.planner = "balanced";
  return job;
}

TEST(InterleavedChoiceTest, DepthsNeedALayerPerVirtualStageAndMAtLeastP) {
  // A fixed P: itself when P * v <= L and M >= P.
  EXPECT_THAT(InterleavedDepths(Job(8, 2, 2, 4), 2), ElementsAre(2));
  EXPECT_THAT(InterleavedDepths(Job(8, 2, 2, 4), 4), ElementsAre(2));
  EXPECT_THAT(InterleavedDepths(Job(7, 2, 2, 4), 4), IsEmpty());  // 8 virtual stages, 7 layers
  EXPECT_THAT(InterleavedDepths(Job(8, 4, 4, 3), 2), IsEmpty());  // M = 3 < P = 4
  EXPECT_THAT(InterleavedDepths(Job(8, 1, 1, 4), 2),
              IsEmpty());  // one stage: nothing to interleave
  // The planner chooses P: the divisors of the devices from 2 on that fit.
  EXPECT_THAT(InterleavedDepths(Job(16, 0, 8, 8), 2), ElementsAre(2, 4, 8));
  EXPECT_THAT(InterleavedDepths(Job(16, 0, 8, 8), 3), ElementsAre(2, 4));  // 8 x 3 > 16
  EXPECT_THAT(InterleavedDepths(Job(16, 0, 8, 2), 2), ElementsAre(2));     // M = 2
  EXPECT_THAT(InterleavedDepths(Job(16, 0, 6, 8), 2), ElementsAre(2, 3, 6));
  InterleavedJob capped = Job(16, 0, 8, 8);
  capped.max_replicas = 2;  // at most 2 replicas per stage: P >= 4
  EXPECT_THAT(InterleavedDepths(capped, 2), ElementsAre(4, 8));
}

TEST(InterleavedChoiceTest, LimitsListTheVsTheJobAllowsOrSayWhyNone) {
  ChoiceLimits limits;
  SetInterleaveLimits(Job(12, 2, 2, 4), &limits);  // a fixed schedule: nothing
  EXPECT_THAT(limits.interleave, IsEmpty());
  EXPECT_EQ(limits.interleave_left_out, "");
  limits.choose_schedule = true;
  SetInterleaveLimits(Job(12, 2, 2, 4), &limits);
  EXPECT_THAT(limits.interleave, ElementsAre(2, 3, 4));
  SetInterleaveLimits(Job(6, 2, 2, 4), &limits);
  EXPECT_THAT(limits.interleave, ElementsAre(2, 3));
  EXPECT_THAT(LeftOutNotes(limits), IsEmpty());

  SetInterleaveLimits(Job(3, 2, 2, 4), &limits);
  EXPECT_THAT(limits.interleave, IsEmpty());
  EXPECT_THAT(LeftOutNotes(limits),
              ElementsAre("parallel.schedule auto: interleaved 1F1B was not considered "
                          "(parallel.stages 2 with 3 layers and M = 4: it needs at least 2 "
                          "stages, 2 layers per stage and M >= stages)"));
  SetInterleaveLimits(Job(8, 0, 1, 4), &limits);
  EXPECT_THAT(limits.interleave_left_out,
              HasSubstr("no depth of at least 2 stages dividing parallel.devices 1"));

  InterleavedJob job = Job(12, 2, 2, 4);
  job.cuda = true;
  SetInterleaveLimits(job, &limits);
  EXPECT_THAT(limits.interleave, IsEmpty());
  EXPECT_EQ(limits.interleave_left_out, "not implemented on CUDA yet");
  job = Job(12, 2, 2, 4);
  job.recompute = "all";
  SetInterleaveLimits(job, &limits);
  EXPECT_THAT(limits.interleave_left_out, HasSubstr("its stages do not recompute"));
  job = Job(12, 2, 2, 4);
  job.tied_layer = 11;
  job.tied_owner = 0;
  SetInterleaveLimits(job, &limits);
  EXPECT_EQ(limits.interleave_left_out, "tied weights: layer 11 copies a parameter of layer 0");
  job = Job(12, 2, 2, 4);
  job.planner = "uniform";
  SetInterleaveLimits(job, &limits);
  EXPECT_THAT(limits.interleave_left_out, HasSubstr("parallel.planner uniform"));
  job.planner = "dapple";
  SetInterleaveLimits(job, &limits);
  EXPECT_THAT(limits.interleave, ElementsAre(2, 3, 4));
}

TEST(InterleavedChoiceTest, OptionsTryEachVBeforeGPipeWithoutRecomputation) {
  ChoiceLimits limits;
  limits.choose_schedule = true;
  limits.interleave = {2, 3};
  std::vector<std::string> names;
  for (const ScheduleOption& o : ScheduleOptions(limits)) names.push_back(OptionName(o));
  EXPECT_THAT(names, ElementsAre("dapple", "dapple with recompute auto", "zb-h1", "zb-h2",
                                 "interleaved v=2", "interleaved v=3", "gpipe",
                                 "gpipe with recompute auto"));
  // A fixed interleaved schedule: one option, planned with the spec's v.
  ChoiceLimits fixed;
  fixed.schedule = ScheduleKind::kInterleaved;
  const std::vector<ScheduleOption> one = ScheduleOptions(fixed);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(OptionName(one[0]), "interleaved");
}

// `layers` model layers (flatten, then linear 64 layers), each 1 ms forward and 2 ms backward
// in the profile, `activation` bytes per micro-batch each; P stages on P devices, M
// micro-batches of 16 samples, schedule auto, planner balanced.
v1::JobSpec AutoSpec(int layers, int stages, int micro_batches) {
  v1::JobSpec spec;
  spec.set_name("mlp-auto");
  v1::ModelSpec* model = spec.mutable_model();
  for (int64_t d : {1, 8, 8}) model->add_input_shape(d);
  model->add_layers()->set_type("flatten");
  for (int i = 1; i < layers; ++i) {
    v1::LayerSpec* linear = model->add_layers();
    linear->set_type("linear");
    linear->mutable_linear()->set_out(64);
  }
  model->set_loss("softmax_cross_entropy");
  spec.mutable_training()->set_global_batch(16 * micro_batches);
  spec.mutable_training()->set_micro_batch(16);
  spec.mutable_training()->set_epochs(1);
  spec.mutable_parallel()->set_schedule("auto");
  spec.mutable_parallel()->set_planner("balanced");
  spec.mutable_parallel()->set_stages(stages);
  spec.mutable_parallel()->set_devices(stages);
  return spec;
}

v1::ModelProfile EqualProfile(int layers, int64_t activation) {
  v1::ModelProfile p;
  p.set_source("equal.txt");
  p.set_batch_size(16);
  for (int i = 0; i < layers; ++i) {
    v1::LayerProfile* l = p.add_layers();
    l->set_id(i == 0 ? "flatten" : "linear");
    l->set_name(l->id());
    l->set_forward_ms(1);
    l->set_backward_ms(2);
    l->set_activation_bytes(activation);
  }
  return p;
}

// One node of `devices`; links of `bandwidth` bytes/s and `latency_ms`.
v1::ClusterTopology Node(int devices, double bandwidth, double latency_ms) {
  v1::ClusterTopology topology;
  topology.set_source("node.yaml");
  v1::ClusterNode* node = topology.add_nodes();
  node->set_name("n0");
  node->set_devices(devices);
  node->set_device_memory_bytes(int64_t{16} << 30);
  topology.set_intra_node_bandwidth_bytes_per_s(bandwidth);
  topology.set_intra_node_latency_ms(latency_ms);
  topology.set_inter_node_bandwidth_bytes_per_s(bandwidth);
  topology.set_inter_node_latency_ms(latency_ms);
  return topology;
}

const v1::PlanAlternative* Find(const v1::ParallelPlanSummary& s, const std::string& schedule,
                                int interleave = 0) {
  for (const v1::PlanAlternative& a : s.alternatives()) {
    if (a.schedule() == schedule && a.recompute() == "none" && a.interleave() == interleave) {
      return &a;
    }
  }
  return nullptr;
}

int64_t MaxPeak(const v1::PlanAlternative& a) {
  int64_t peak = 0;
  for (int64_t b : a.peak_memory_bytes()) peak = std::max(peak, b);
  return peak;
}

// The highest virtual stage an action of `program` names.
int HighestStage(const v1::RankProgram& program) {
  int highest = 0;
  for (const v1::Action& a : program.actions()) highest = std::max(highest, a.stage());
  return highest;
}

// 16 equal layers on P = 4 stages with M = 4 and free links: 1F1B's bubble is (P - 1) /
// (M + P - 1) = 3/7; interleaved v = 4 (one layer per virtual stage) cuts it to (P - 1) /
// (v M + P - 1) = 3/19, faster than zb-h1 and zb-h2 too. The plan runs it: 4 chunks per stage,
// programs over 16 virtual stages.
TEST(InterleavedChoiceTest, InterleavedWinsWithManyLayersAndFewMicroBatches) {
  PlanInputs inputs;
  inputs.profile = EqualProfile(16, int64_t{1} << 20);
  inputs.topology = Node(4, 1e18, 0);
  const v1::JobSpec spec = AutoSpec(16, 4, 4);
  absl::StatusOr<v1::ParallelPlan> plan = MakePlan(spec, inputs);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const v1::ParallelPlanSummary& s = plan->summary();
  EXPECT_EQ(s.schedule(), "interleaved");
  ASSERT_EQ(s.alternatives_size(), 9);  // dapple x2, zb-h1, zb-h2, interleaved x3, gpipe x2
  const v1::PlanAlternative* v4 = Find(s, "interleaved", 4);
  ASSERT_NE(v4, nullptr);
  EXPECT_TRUE(v4->chosen());
  EXPECT_DOUBLE_EQ(v4->predicted_step_ms(), s.predicted_step_ms());
  EXPECT_NEAR(s.bubble_fraction(), 3.0 / 19, 1e-9);
  EXPECT_NEAR(Find(s, "dapple")->bubble_fraction(), 3.0 / 7, 1e-9);
  for (const char* other : {"dapple", "zb-h1", "zb-h2", "gpipe"}) {
    EXPECT_LT(s.predicted_step_ms(), Find(s, other)->predicted_step_ms()) << other;
  }
  EXPECT_THAT(s.choice_reason(), ::testing::StartsWith("interleaved v=4: "));
  EXPECT_THAT(s.choice_reason(), HasSubstr("faster than dapple"));
  // The chosen v is in the plan's chunks, and the programs the workers get (JobPrograms reads
  // v from them: the spec says auto) name all 16 virtual stages.
  ASSERT_EQ(s.stages_size(), 4);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(schedule::StageChunks(s, r).size(), 4u) << r;
    EXPECT_EQ(HighestStage(plan->programs(r)), 12 + r) << r;
  }
  absl::StatusOr<schedule::LowerOptions> lower = schedule::LowerOptionsFor(spec, s);
  ASSERT_TRUE(lower.ok()) << lower.status();
  EXPECT_EQ(lower->chunks, 4);
}

// The same job on slow links (100 MB/s, 0.5 ms): every virtual boundary is a transfer, and
// interleaved's v times more of them cost more than the bubble it saves: every v is slower
// than dapple, and zb-h2 wins.
TEST(InterleavedChoiceTest, InterleavedLosesWhenTransfersCostMore) {
  PlanInputs inputs;
  inputs.profile = EqualProfile(16, int64_t{1} << 20);
  inputs.topology = Node(4, 1e8, 0.5);
  absl::StatusOr<v1::ParallelPlan> plan = MakePlan(AutoSpec(16, 4, 4), inputs);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const v1::ParallelPlanSummary& s = plan->summary();
  EXPECT_EQ(s.schedule(), "zb-h2");
  for (int v : {2, 3, 4}) {
    const v1::PlanAlternative* a = Find(s, "interleaved", v);
    ASSERT_NE(a, nullptr) << v;
    EXPECT_TRUE(a->fits()) << v;
    EXPECT_FALSE(a->chosen()) << v;
    EXPECT_GT(a->predicted_step_ms(), Find(s, "dapple")->predicted_step_ms()) << v;
  }
}

// The rows of docs/planner.md's table "where interleaved wins and where it loses" (each
// option's predicted step), printed for the docs:
//   build/coordinator/coordinator_planner_test --gtest_filter='*PrintsTheDocsTable' | grep '^| '
TEST(InterleavedChoiceTest, PrintsTheDocsTable) {
  struct Case {
    const char* name;
    int micro_batches;
    double bandwidth, latency_ms;
  };
  for (const Case& c : {Case{"M = 4, free links", 4, 1e18, 0},
                        Case{"M = 4, 100 MB/s links, 0.5 ms latency", 4, 1e8, 0.5},
                        Case{"M = 64, free links", 64, 1e18, 0}}) {
    PlanInputs inputs;
    inputs.profile = EqualProfile(16, int64_t{1} << 20);
    inputs.topology = Node(4, c.bandwidth, c.latency_ms);
    absl::StatusOr<v1::ParallelPlan> plan = MakePlan(AutoSpec(16, 4, c.micro_batches), inputs);
    ASSERT_TRUE(plan.ok()) << plan.status();
    const v1::ParallelPlanSummary& s = plan->summary();
    auto ms = [&](const char* schedule, int v = 0) {
      const v1::PlanAlternative* a = Find(s, schedule, v);
      return a == nullptr ? std::string("-") : absl::StrFormat("%.1f ms", a->predicted_step_ms());
    };
    std::printf("| %s | %s | %s | %s | %s / %s / %s | %s |\n", c.name, ms("dapple").c_str(),
                ms("zb-h1").c_str(), ms("zb-h2").c_str(), ms("interleaved", 2).c_str(),
                ms("interleaved", 3).c_str(), ms("interleaved", 4).c_str(),
                s.choice_reason().c_str());
  }
}

// A device memory between interleaved v=2's peak and v=3's: v = 3 and 4 (more chunk
// activations in flight: InterleavedInFlight) and the zero-bubble schedules are refused for
// memory, and v = 2, the fastest that fits, is chosen over dapple.
TEST(InterleavedChoiceTest, MemoryRefusesTheVsThatDoNotFit) {
  PlanInputs inputs;
  inputs.profile = EqualProfile(16, int64_t{1} << 20);
  inputs.topology = Node(4, 1e18, 0);
  absl::StatusOr<v1::ParallelPlan> unlimited = MakePlan(AutoSpec(16, 4, 4), inputs);
  ASSERT_TRUE(unlimited.ok()) << unlimited.status();
  const int64_t v2 = MaxPeak(*Find(unlimited->summary(), "interleaved", 2));
  const int64_t v3 = MaxPeak(*Find(unlimited->summary(), "interleaved", 3));
  ASSERT_LT(MaxPeak(*Find(unlimited->summary(), "dapple")), v2);
  ASSERT_LT(v2, v3);
  inputs.topology->mutable_nodes(0)->set_device_memory_bytes((v2 + v3) / 2);
  absl::StatusOr<v1::ParallelPlan> plan = MakePlan(AutoSpec(16, 4, 4), inputs);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const v1::ParallelPlanSummary& s = plan->summary();
  EXPECT_TRUE(Find(s, "interleaved", 2)->fits());
  for (int v : {3, 4}) {
    const v1::PlanAlternative* a = Find(s, "interleaved", v);
    ASSERT_NE(a, nullptr) << v;
    EXPECT_FALSE(a->fits()) << v;
    EXPECT_THAT(a->refused(), HasSubstr("but devices have")) << v;
  }
  // What is chosen fits (zb-h1, at less memory than interleaved's per-chunk slots, and faster
  // here; before the chunks were counted on their own interleaved v=2 looked leaner than it is).
  for (const v1::PlanStageSummary& stage : s.stages()) {
    EXPECT_LE(stage.peak_memory_bytes(), (v2 + v3) / 2);
  }
  ASSERT_GE(s.alternatives_size(), 1);
  for (const v1::PlanAlternative& a : s.alternatives()) {
    if (!a.chosen()) continue;
    EXPECT_TRUE(a.fits());
    for (int64_t peak : a.peak_memory_bytes()) EXPECT_LE(peak, (v2 + v3) / 2);
  }
}

// With planner dapple and stages auto the depth is searched too: every P dividing the devices
// that fits, the fastest kept.
TEST(InterleavedChoiceTest, TheDepthIsSearchedWhenThePlannerChoosesIt) {
  PlanInputs inputs;
  inputs.profile = EqualProfile(16, int64_t{1} << 20);
  inputs.topology = Node(4, 1e18, 0);
  inputs.max_replicas = 0;
  v1::JobSpec spec = AutoSpec(16, 0, 4);
  spec.mutable_parallel()->set_planner("dapple");
  spec.mutable_parallel()->set_devices(4);
  absl::StatusOr<v1::ParallelPlan> plan = MakePlan(spec, inputs);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const v1::ParallelPlanSummary& s = plan->summary();
  for (int v : {2, 3, 4}) {
    const v1::PlanAlternative* a = Find(s, "interleaved", v);
    ASSERT_NE(a, nullptr) << v;
    ASSERT_TRUE(a->fits()) << v << ": " << a->refused();
    // P = 2 (2 replicas each) or P = 4 stages.
    EXPECT_THAT(a->peak_memory_bytes_size(), ::testing::AnyOf(2, 4)) << v;
  }
}

}  // namespace
}  // namespace dapple::coordinator
