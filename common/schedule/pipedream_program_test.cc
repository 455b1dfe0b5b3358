#include "common/schedule/pipedream_program.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/schedule/action.h"
#include "common/schedule/generators.h"
#include "common/schedule/golden_test_util.h"
#include "common/schedule/job_programs.h"
#include "common/schedule/lowering.h"
#include "common/schedule/simulator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::schedule {
namespace {

using ::testing::HasSubstr;

PipeDreamProgramOptions Options(std::vector<int> replicas, int m, int64_t steps,
                                bool vertical_sync = false, int64_t first_step = 0) {
  PipeDreamProgramOptions o;
  o.layout.replicas = std::move(replicas);
  o.layout.num_micro_batches = m;
  o.layout.num_steps = steps;
  o.layout.first_micro_batch = first_step * m;
  o.first_step = first_step;
  o.vertical_sync = vertical_sync;
  return o;
}

bool IsWeightAction(v1::ActionKind kind) {
  return kind == v1::USE_WEIGHTS || kind == v1::RESTORE_WEIGHTS || kind == v1::STASH_WEIGHTS ||
         kind == v1::DROP_WEIGHTS;
}

// The expanded run without its weight actions.
std::string RunWithoutWeights(const v1::RankProgram& program, int m) {
  const v1::RankProgram run = ExpandRun(program, m);
  std::vector<v1::Action> kept;
  for (const v1::Action& a : run.actions()) {
    if (!IsWeightAction(a.kind())) kept.push_back(a);
  }
  return ActionsToString(kept);
}

// Without replicas the steps laid end to end are PipeDream's continuous run of T = steps * M
// micro-batches with an update every M backwards, lowered: the program changes where the
// order comes from, not the order.
TEST(PipeDreamProgramTest, StepsLaidEndToEndAreTheContinuousRun) {
  for (int p : {1, 2, 3, 4}) {
    for (int m : {1, 2, 4}) {
      const int steps = 5;
      const PipeDreamProgramOptions o = Options(std::vector<int>(p, 1), m, steps);
      for (int s = 0; s < p; ++s) {
        SCOPED_TRACE(absl::StrCat("P=", p, " M=", m, " stage ", s));
        const v1::RankProgram program = BuildPipeDreamProgram(o, s, 0);
        EXPECT_EQ(program.micro_batch_ids(), m + std::min(p - s, steps * m));
        EXPECT_TRUE(program.whole_micro_batches());
        const v1::RankProgram want = Lower(GeneratePipeDream(p, steps * m, s, m), p, s);
        EXPECT_EQ(
            RunWithoutWeights(program, m),
            ActionsToString(std::vector<v1::Action>(want.actions().begin(), want.actions().end())));
      }
    }
  }
}

// The steady state is one phase: a long run needs no more phases than a short one.
TEST(PipeDreamProgramTest, SteadyStateIsOnePhase) {
  for (const std::vector<int>& replicas :
       std::vector<std::vector<int>>{{1, 1, 1}, {2, 1}, {1, 3}, {2, 2}, {3, 1}}) {
    for (int m : {3, 4}) {
      const v1::RankProgram short_run =
          BuildPipeDreamProgram(Options(replicas, m, 20), 0, 1 % replicas[0]);
      const v1::RankProgram long_run =
          BuildPipeDreamProgram(Options(replicas, m, 2000), 0, 1 % replicas[0]);
      EXPECT_EQ(short_run.phases_size(), long_run.phases_size());
      EXPECT_LE(long_run.phases_size(), 6);
      int64_t steps = 0;
      for (const v1::ProgramPhase& phase : long_run.phases()) steps += phase.steps();
      EXPECT_EQ(steps, 2000);
    }
  }
}

// Stage 0 of two with one micro-batch per step: its forward of step t + 1's micro-batch runs
// before update t, so version t is stashed for that micro-batch's backward in step t + 1; the
// last stage never holds an older version.
TEST(PipeDreamProgramTest, StashesTheVersionAnInFlightMicroBatchNeeds) {
  const PipeDreamProgramOptions o = Options({1, 1}, 1, 4);
  const v1::RankProgram stage0 = BuildPipeDreamProgram(o, 0, 0);
  ASSERT_EQ(stage0.phases_size(), 3);  // warm-up, steady state, cool-down
  EXPECT_EQ(stage0.phases(1).steps(), 2);
  std::vector<v1::Action> steady(stage0.phases(1).cycle(0).actions().begin(),
                                 stage0.phases(1).cycle(0).actions().end());
  EXPECT_EQ(ActionsToString(steady),
            "0F1 0SEND_ACT1 0RECV_GRAD0 0USE_WEIGHTS@-1 0B0 0RESTORE_WEIGHTS 0DROP_WEIGHTS@0 "
            "0STASH_WEIGHTS 0STEP");
  const v1::RankProgram stage1 = ExpandRun(BuildPipeDreamProgram(o, 1, 0), 1);
  for (const v1::Action& a : stage1.actions()) {
    EXPECT_FALSE(IsWeightAction(a.kind())) << ActionToString(a);
  }
}

// Vertical sync: every stage's forward of a micro-batch uses stage 0's version, which stage 1
// (run later) must swap in.
TEST(PipeDreamProgramTest, VerticalSyncUsesStageZerosVersion) {
  const v1::RankProgram stage1 =
      ExpandRun(BuildPipeDreamProgram(Options({1, 1, 1}, 1, 6, true), 1, 0), 1);
  const std::string run =
      ActionsToString(std::vector<v1::Action>(stage1.actions().begin(), stage1.actions().end()));
  EXPECT_THAT(run, HasSubstr("1USE_WEIGHTS@-1 1F"));
}

// A resumed run starts at its first step: the same steady state, versions relative to the step.
TEST(PipeDreamProgramTest, ResumedRunHasTheSameSteadyState) {
  const v1::RankProgram fresh = BuildPipeDreamProgram(Options({1, 1, 1}, 2, 10), 0, 0);
  const v1::RankProgram resumed = BuildPipeDreamProgram(Options({1, 1, 1}, 2, 10, false, 7), 0, 0);
  ASSERT_EQ(fresh.phases_size(), resumed.phases_size());
  EXPECT_EQ(fresh.DebugString(), resumed.DebugString());
}

TEST(PipeDreamProgramTest, TheSimulatorProvesEveryRunDeadlockFree) {
  for (const std::vector<int>& replicas : std::vector<std::vector<int>>{
           {1}, {1, 1}, {1, 1, 1, 1}, {2}, {2, 1}, {1, 2}, {2, 2}, {1, 3}, {2, 1, 2}}) {
    for (int m : {3, 4, 8}) {
      for (bool vs : {false, true}) {
        EXPECT_TRUE(CheckPipeDreamRun(Options(replicas, m, 7, vs)).ok());
      }
    }
  }
}

// A long run is proven in time (the whole run is simulated: steps * M micro-batches).
TEST(PipeDreamProgramTest, ProvesALongRun) {
  EXPECT_TRUE(CheckPipeDreamRun(Options({1, 2, 1, 1}, 16, 5000)).ok());
}

// The grid of three steps of P = 3, M = 2 (forward 1, backward 2): no flush between steps.
TEST(PipeDreamProgramTest, ThreeStepsGrid) {
  const PipeDreamProgramOptions o = Options({1, 1, 1}, 2, 3);
  std::vector<v1::RankProgram> programs;
  for (int s = 0; s < 3; ++s) programs.push_back(ExpandRun(BuildPipeDreamProgram(o, s, 0), 2));
  const absl::StatusOr<SimulationResult> sim = Simulate(programs);
  ASSERT_TRUE(sim.ok()) << sim.status();
  EXPECT_TRUE(testing::MatchesGolden("pipedream_p3_m2_3steps.grid", sim->grid + "\n"));
}

// The coordinator's programs: one per rank, PipeDream's per replica, the others per stage.
TEST(JobProgramsTest, OneProgramPerRank) {
  v1::JobSpec spec;
  spec.mutable_model()->add_input_shape(4);
  for (int i = 0; i < 4; ++i) {
    v1::LayerSpec* l = spec.mutable_model()->add_layers();
    l->set_type("linear");
    l->mutable_linear()->set_out(4);
  }
  spec.mutable_training()->set_global_batch(8);
  spec.mutable_training()->set_micro_batch(2);
  spec.mutable_training()->set_max_steps(5);
  v1::ParallelPlanSummary plan;
  for (int s = 0; s < 2; ++s) {
    v1::PlanStageSummary* stage = plan.add_stages();
    stage->set_first_layer(2 * s);
    stage->set_last_layer(2 * s + 1);
    stage->set_replicas(s == 0 ? 2 : 1);
  }
  for (const char* schedule : {"dapple", "pipedream"}) {
    spec.mutable_parallel()->set_schedule(schedule);
    const absl::StatusOr<std::vector<v1::RankProgram>> programs = JobPrograms(spec, plan, 0);
    ASSERT_TRUE(programs.ok()) << programs.status();
    ASSERT_EQ(programs->size(), 3u);
    EXPECT_EQ((*programs)[1].replica(), 1);
    EXPECT_EQ((*programs)[2].stage(), 1);
    EXPECT_EQ((*programs)[0].phases().empty(), std::string(schedule) != "pipedream");
    const absl::StatusOr<v1::RankProgram> one = JobRankProgram(spec, plan, 0, 1, 0);
    ASSERT_TRUE(one.ok()) << one.status();
    EXPECT_EQ(one->DebugString(), (*programs)[1].DebugString());
  }
  EXPECT_EQ(JobRankProgram(spec, plan, 1, 1, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dapple::schedule
