// The simulator's barriers (TIED_ALLREDUCE among the tied stages, GLOBAL_NORM among all): the
// programs every schedule lowers with them still complete, their time is accounted, and a
// program set a barrier would deadlock is refused with what waits for what.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/schedule/action.h"
#include "common/schedule/generators.h"
#include "common/schedule/lowering.h"
#include "common/schedule/pipedream_steps.h"
#include "common/schedule/simulator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::schedule {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

v1::RankProgram Program(int stage, const std::string& text) {
  v1::RankProgram program;
  program.set_stage(stage);
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    absl::StatusOr<v1::Action> a = ParseAction(word);
    EXPECT_TRUE(a.ok()) << a.status();
    if (a.ok()) *program.add_actions() = *a;
  }
  return program;
}

// The options of a GPT whose embedding is on stage 0 and whose tied head is on stage P - 1,
// with clipping.
LowerOptions TiedAndClipped(int p) {
  LowerOptions o;
  o.tied_stages.assign(p, false);
  if (p > 1) o.tied_stages.front() = o.tied_stages.back() = true;
  o.allreduce_stages.assign(p, false);
  o.global_norm = true;
  return o;
}

int Count(const OpProgram& program, v1::ActionKind kind) {
  int n = 0;
  for (const Op& op : program) n += op.kind == kind;
  return n;
}

TEST(SimulatorBarrierTest, SynchronousSchedulesWithTiedStagesAndClippingComplete) {
  for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::kDapple}) {
    for (int p : {1, 2, 3, 4}) {
      for (int m : {1, 3, 8}) {
        SCOPED_TRACE(absl::StrCat(ScheduleKindName(kind), " P=", p, " M=", m));
        // BuildPrograms simulates (and refuses a deadlock).
        absl::StatusOr<std::vector<v1::RankProgram>> programs =
            BuildPrograms(kind, p, m, TiedAndClipped(p));
        ASSERT_TRUE(programs.ok()) << programs.status();
        for (int s = 0; s < p; ++s) {
          const OpProgram ops =
              ToOps({(*programs)[s].actions().begin(), (*programs)[s].actions().end()});
          EXPECT_EQ(Count(ops, v1::GLOBAL_NORM), 1);
          EXPECT_EQ(Count(ops, v1::TIED_ALLREDUCE), p > 1 && (s == 0 || s == p - 1) ? 1 : 0);
        }
      }
    }
  }
}

// PipeDream never flushes: a run of several updates, cut into steps as the runtime runs it,
// with the barriers before every update. Concatenated with global micro-batch indices, the
// steps of every stage simulate to completion.
TEST(SimulatorBarrierTest, PipeDreamRunsWithTiedStagesAndClippingComplete) {
  for (int p : {2, 3, 4}) {
    for (int m : {1, 3, 8}) {
      SCOPED_TRACE(absl::StrCat("pipedream P=", p, " M=", m));
      PipeDreamLayout layout;
      layout.replicas.assign(p, 1);
      layout.num_micro_batches = m;
      layout.num_steps = 4;
      std::vector<OpProgram> programs(p);
      for (int s = 0; s < p; ++s) {
        for (int64_t t = 0; t < layout.num_steps; ++t) {
          for (Op op :
               LowerOps(GeneratePipeDreamStepOps(layout, s, 0, t), p, s, TiedAndClipped(p))) {
            if (KindHasMicroBatch(op.kind)) op.micro_batch += static_cast<int>(t * m);
            programs[s].push_back(op);
          }
        }
        EXPECT_EQ(Count(programs[s], v1::GLOBAL_NORM), layout.num_steps);
      }
      absl::StatusOr<SimulationResult> sim = SimulateOps(programs);
      ASSERT_TRUE(sim.ok()) << sim.status();
      // The continuous generator lowered the same way completes too.
      std::vector<OpProgram> continuous(p);
      for (int s = 0; s < p; ++s) {
        continuous[s] = LowerOps(GeneratePipeDreamOps(p, 4 * m, s, m), p, s, TiedAndClipped(p));
      }
      EXPECT_TRUE(SimulateOps(continuous).ok()) << SimulateOps(continuous).status();
    }
  }
}

// Stage 1 reaches its GLOBAL_NORM at 4 (F0 [1, 2), B0 [2, 4)), stage 0 at 6 (its B0 waits for
// the gradient); the norm costs 0.5 and ends on both at 6.5; the wait is idle, the cost is
// collective time.
TEST(SimulatorBarrierTest, ABarrierEndsOnEveryMemberAfterTheLastArrival) {
  const std::vector<v1::RankProgram> programs = {
      Program(0, "0F0 0SEND_ACT0 0RECV_GRAD0 0B0 0GLOBAL_NORM 0STEP"),
      Program(1, "1RECV_ACT0 1F0 1B0 1SEND_GRAD0 1GLOBAL_NORM 1STEP")};
  ActionCosts costs;
  costs.global_norm = 0.5;
  costs.optimizer_step = 0.5;
  absl::StatusOr<SimulationResult> sim = Simulate(programs, costs);
  ASSERT_TRUE(sim.ok()) << sim.status();
  EXPECT_DOUBLE_EQ(sim->step_time, 7.0);
  EXPECT_THAT(sim->optimizer_step_end, ElementsAre(ElementsAre(7.0), ElementsAre(7.0)));
  EXPECT_THAT(sim->allreduce_time, ElementsAre(0.5, 0.5));
  EXPECT_THAT(sim->idle_time, ElementsAre(7.0 - 3.5 - 0.5, 7.0 - 3.5 - 0.5));
  EXPECT_THAT(sim->grid, HasSubstr("GN"));
}

// TIED_ALLREDUCE waits only for the stages that hold one: stage 1 finishes on its own.
TEST(SimulatorBarrierTest, TiedAllReduceWaitsForTheTiedStagesOnly) {
  LowerOptions o;
  o.tied_stages = {true, false, true};
  absl::StatusOr<std::vector<v1::RankProgram>> programs =
      BuildPrograms(ScheduleKind::kDapple, 3, 2, o);
  ASSERT_TRUE(programs.ok()) << programs.status();
  ActionCosts costs;
  costs.tied_allreduce = 1;
  absl::StatusOr<SimulationResult> sim = Simulate(*programs, costs);
  ASSERT_TRUE(sim.ok()) << sim.status();
  EXPECT_THAT(sim->allreduce_time, ElementsAre(1.0, 0.0, 1.0));
  // Both tied stages end their TIED_ALLREDUCE together, stage 0 last to arrive.
  EXPECT_EQ(sim->optimizer_step_end[0], sim->optimizer_step_end[2]);
  EXPECT_LT(sim->optimizer_step_end[1][0], sim->optimizer_step_end[0][0]);
}

// A made-up program set: stage 1 waits at the norm before it sends the gradient stage 0 needs
// to reach it.
TEST(SimulatorBarrierTest, DetectsABarrierDeadlock) {
  const std::vector<v1::RankProgram> programs = {
      Program(0, "0F0 0SEND_ACT0 0RECV_GRAD0 0B0 0GLOBAL_NORM 0STEP"),
      Program(1, "1RECV_ACT0 1F0 1B0 1GLOBAL_NORM 1SEND_GRAD0 1STEP")};
  absl::StatusOr<SimulationResult> sim = Simulate(programs);
  ASSERT_FALSE(sim.ok());
  EXPECT_EQ(sim.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string message(sim.status().message());
  EXPECT_THAT(message, HasSubstr("stage 0 waits on 0RECV_GRAD0 (action 2) for 1SEND_GRAD0"));
  EXPECT_THAT(message, HasSubstr("stage 1 waits on 1GLOBAL_NORM (action 3) for stage 0 to reach "
                                 "GLOBAL_NORM"));
  EXPECT_THAT(message, HasSubstr("stage 1 | .  F0 B0 B0  <- waits on 1GLOBAL_NORM"));

  // The same among the tied stages of three: stage 2 sums the tied weights before it sends the
  // gradient stage 0 (its tied partner) needs, through stage 1.
  const std::vector<v1::RankProgram> tied = {
      Program(0, "0F0 0SEND_ACT0 0RECV_GRAD0 0B0 0TIED_ALLREDUCE 0STEP"),
      Program(1, "1RECV_ACT0 1F0 1SEND_ACT0 1RECV_GRAD0 1B0 1SEND_GRAD0 1STEP"),
      Program(2, "2RECV_ACT0 2F0 2B0 2TIED_ALLREDUCE 2SEND_GRAD0 2STEP")};
  sim = Simulate(tied);
  ASSERT_FALSE(sim.ok());
  EXPECT_THAT(std::string(sim.status().message()),
              HasSubstr("stage 2 waits on 2TIED_ALLREDUCE (action 3) for stage 0 to reach "
                        "TIED_ALLREDUCE"));
  EXPECT_THAT(std::string(sim.status().message()),
              HasSubstr("stage 1 waits on 1RECV_GRAD0 (action 3) for 2SEND_GRAD0"));
}

TEST(SimulatorBarrierTest, MembersMustRunABarrierEquallyOften) {
  absl::StatusOr<SimulationResult> sim =
      Simulate({Program(0, "0F0 0SEND_ACT0 0RECV_GRAD0 0B0 0GLOBAL_NORM 0GLOBAL_NORM 0STEP"),
                Program(1, "1RECV_ACT0 1F0 1B0 1SEND_GRAD0 1GLOBAL_NORM 1STEP")});
  ASSERT_FALSE(sim.ok());
  EXPECT_EQ(sim.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(sim.status().message()),
              HasSubstr("stage 1 runs 1 GLOBAL_NORM but stage 0 runs 2: a GLOBAL_NORM waits for "
                        "every stage, so each must run as many"));
  // A stage without any GLOBAL_NORM is a member too.
  sim = Simulate({Program(0, "0F0 0SEND_ACT0 0RECV_GRAD0 0B0 0GLOBAL_NORM 0STEP"),
                  Program(1, "1RECV_ACT0 1F0 1B0 1SEND_GRAD0 1STEP")});
  ASSERT_FALSE(sim.ok());
  EXPECT_THAT(std::string(sim.status().message()), HasSubstr("stage 1 runs 0 GLOBAL_NORM"));
}

}  // namespace
}  // namespace dapple::schedule
