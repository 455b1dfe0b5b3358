// The zero-bubble schedules (ZB-H1, ZB-H2) through generators, lowering and the simulator: their
// orders, the deadlock-freedom proofs of the issue's grid, the formulas stated in generators.h
// and the checks of BACKWARD_INPUT / BACKWARD_WEIGHT.
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/schedule/action.h"
#include "common/schedule/generators.h"
#include "common/schedule/golden_test_util.h"
#include "common/schedule/lowering.h"
#include "common/schedule/simulator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::schedule {
namespace {

using ::testing::HasSubstr;

// T_F = T_B = T_W = 1: the default forward 1 and backward 2, split half/half.
ActionCosts EqualCosts() {
  ActionCosts c;
  c.forward = 1.0;
  c.backward = 2.0;
  c.backward_weight_fraction = 0.5;
  return c;
}

std::vector<v1::RankProgram> BuildOrDie(ScheduleKind kind, int p, int m,
                                        const LowerOptions& options = {}) {
  absl::StatusOr<std::vector<v1::RankProgram>> programs = BuildPrograms(kind, p, m, options);
  EXPECT_TRUE(programs.ok()) << programs.status();
  return programs.ok() ? *programs : std::vector<v1::RankProgram>{};
}

TEST(ZeroBubbleGeneratorsTest, ZbH1OrderForFourStagesEightMicroBatches) {
  // Warm-up P - i, W lagging B by i micro-batches, the deferred W at the end.
  EXPECT_EQ(ActionsToString(GenerateZbH1(4, 8, 0)),
            "0F0 0F1 0F2 0F3 0BI0 0BW0 0F4 0BI1 0BW1 0F5 0BI2 0BW2 0F6 0BI3 0BW3 0F7 0BI4 0BW4 "
            "0BI5 0BW5 0BI6 0BW6 0BI7 0BW7 0STEP");
  EXPECT_EQ(ActionsToString(GenerateZbH1(4, 8, 3)),
            "3F0 3BI0 3F1 3BI1 3F2 3BI2 3F3 3BI3 3BW0 3F4 3BI4 3BW1 3F5 3BI5 3BW2 3F6 3BI6 3BW3 "
            "3F7 3BI7 3BW4 3BW5 3BW6 3BW7 3STEP");
}

TEST(ZeroBubbleGeneratorsTest, ZbH2OrderForFourStagesNineMicroBatches) {
  // Warm-up 2P - 1 - 2i, W lagging B by 2i micro-batches.
  EXPECT_EQ(ActionsToString(GenerateZbH2(4, 9, 0)),
            "0F0 0F1 0F2 0F3 0F4 0F5 0F6 0BI0 0BW0 0F7 0BI1 0BW1 0F8 0BI2 0BW2 0BI3 0BW3 0BI4 "
            "0BW4 0BI5 0BW5 0BI6 0BW6 0BI7 0BW7 0BI8 0BW8 0STEP");
  EXPECT_EQ(ActionsToString(GenerateZbH2(4, 9, 3)),
            "3F0 3BI0 3F1 3BI1 3F2 3BI2 3F3 3BI3 3F4 3BI4 3F5 3BI5 3F6 3BI6 3BW0 3F7 3BI7 3BW1 "
            "3F8 3BI8 3BW2 3BW3 3BW4 3BW5 3BW6 3BW7 3BW8 3STEP");
}

TEST(ZeroBubbleGeneratorsTest, EveryMicroBatchSplitOnceThenOneStep) {
  for (ScheduleKind kind : {ScheduleKind::kZbH1, ScheduleKind::kZbH2}) {
    for (int p : {1, 2, 3, 4, 7}) {
      for (int m : {1, 2, 3, 5, 8, 13}) {
        for (int s = 0; s < p; ++s) {
          const OpProgram ops = GenerateOps(kind, p, m, s);
          ASSERT_EQ(ops.size(), 3u * m + 1) << ScheduleKindName(kind) << " P=" << p << " M=" << m;
          EXPECT_EQ(ops.back().kind, v1::OPTIMIZER_STEP);
          for (v1::ActionKind k : {v1::FORWARD, v1::BACKWARD_INPUT, v1::BACKWARD_WEIGHT}) {
            EXPECT_EQ(
                std::count_if(ops.begin(), ops.end(), [k](const Op& o) { return o.kind == k; }), m);
          }
        }
      }
    }
  }
}

TEST(ZeroBubbleLoweringTest, GradientLeavesRightAfterTheInputPart) {
  const std::vector<v1::RankProgram> programs = BuildOrDie(ScheduleKind::kZbH1, 2, 2);
  ASSERT_EQ(programs.size(), 2u);
  EXPECT_EQ(ProgramToString(programs[0]),
            "stage 0 replica 0: 0F0 0SEND_ACT0 0F1 0SEND_ACT1 0RECV_GRAD0 0BI0 0BW0 0RECV_GRAD1 "
            "0BI1 0BW1 0STEP");
  EXPECT_EQ(ProgramToString(programs[1]),
            "stage 1 replica 0: 1RECV_ACT0 1F0 1BI0 1SEND_GRAD0 1RECV_ACT1 1F1 1BI1 1SEND_GRAD1 "
            "1BW0 1BW1 1STEP");
}

TEST(ZeroBubbleLoweringTest, CollectivesComeAfterTheLastWeightPart) {
  LowerOptions options;
  options.allreduce_stages = {true, true};
  options.tied_stages = {true, true};
  options.global_norm = true;
  const std::vector<v1::RankProgram> programs = BuildOrDie(ScheduleKind::kZbH2, 2, 3, options);
  ASSERT_EQ(programs.size(), 2u);
  EXPECT_THAT(ProgramToString(programs[1]),
              HasSubstr("1BW2 1TIED_ALLREDUCE 1ALLREDUCE 1GLOBAL_NORM 1STEP"));
}

// The simulator's proof for the issue's grid: every program set runs to its end (BuildPrograms
// simulates; a deadlock is kFailedPrecondition), with and without the collectives.
TEST(ZeroBubbleSimulatorTest, DeadlockFreeOnTheIssuesGrid) {
  LowerOptions collectives;
  collectives.global_norm = true;
  for (ScheduleKind kind : {ScheduleKind::kZbH1, ScheduleKind::kZbH2}) {
    for (int p : {2, 4}) {
      collectives.allreduce_stages.assign(p, true);
      collectives.tied_stages.assign(p, false);
      collectives.tied_stages[0] = collectives.tied_stages[p - 1] = true;
      for (int m : {p, 2 * p + 1, 8}) {
        for (const LowerOptions& options : {LowerOptions{}, collectives}) {
          absl::StatusOr<std::vector<v1::RankProgram>> programs =
              BuildPrograms(kind, p, m, options);
          ASSERT_TRUE(programs.ok()) << programs.status();
          absl::StatusOr<SimulationResult> sim = Simulate(*programs, EqualCosts());
          ASSERT_TRUE(sim.ok()) << ScheduleKindName(kind) << " P=" << p << " M=" << m << ": "
                                << sim.status();
        }
      }
    }
  }
}

// generators.h's figures with T_F = T_B = T_W = 1, against 1F1B's 3(P - 1) bubble.
TEST(ZeroBubbleSimulatorTest, StepBubbleAndPeakMatchTheStatedFormulas) {
  for (int p : {2, 3, 4, 6}) {
    for (int m : {p, 2 * p + 1, 8, 16}) {
      absl::StatusOr<SimulationResult> one_f_one_b =
          Simulate(BuildOrDie(ScheduleKind::kDapple, p, m), EqualCosts());
      absl::StatusOr<SimulationResult> h1 =
          Simulate(BuildOrDie(ScheduleKind::kZbH1, p, m), EqualCosts());
      absl::StatusOr<SimulationResult> h2 =
          Simulate(BuildOrDie(ScheduleKind::kZbH2, p, m), EqualCosts());
      ASSERT_TRUE(one_f_one_b.ok() && h1.ok() && h2.ok());
      const std::string where = absl::StrCat("P=", p, " M=", m);
      EXPECT_DOUBLE_EQ(one_f_one_b->step_time, 3.0 * m + 3.0 * (p - 1)) << where;
      // ZB-H1: (P - 1)(T_F + T_B - T_W) on every stage, at 1F1B's peak of P in flight.
      EXPECT_DOUBLE_EQ(h1->step_time, 3.0 * m + (p - 1)) << where;
      for (int s = 0; s < p; ++s) {
        EXPECT_DOUBLE_EQ(h1->idle_time[s], p - 1.0) << where << " stage " << s;
        EXPECT_EQ(h1->peak_in_flight[s], std::min(p, m)) << where << " stage " << s;
      }
      EXPECT_EQ(
          *std::max_element(h1->peak_in_flight.begin(), h1->peak_in_flight.end()),
          *std::max_element(one_f_one_b->peak_in_flight.begin(), one_f_one_b->peak_in_flight.end()))
          << where;
      // The issue's bar, in time: a third of 1F1B's idle time per stage (stage 0 idles most).
      EXPECT_LE(h1->idle_time[0], 0.4 * one_f_one_b->idle_time[0]) << where;
      // ZB-H2 once M fills its warm-up: one flushed step is M(T_F+T_B+T_W) + (P - 1)T_F, the
      // first forward's trip to the last stage; 2P - 1 in flight.
      if (m >= 2 * p - 1) {
        EXPECT_DOUBLE_EQ(h2->step_time, 3.0 * m + (p - 1)) << where;
        for (int s = 0; s < p; ++s) {
          EXPECT_EQ(h2->peak_in_flight[s], 2 * p - 1) << where << " stage " << s;
        }
      }
    }
  }
}

// With T_F = T_B = T_W every ZB-H2 stage computes without a gap from its first forward to its
// last W (the paper's parallelogram): zero bubble inside each stage's own span.
TEST(ZeroBubbleSimulatorTest, ZbH2StagesNeverIdleBetweenFirstAndLastAction) {
  for (int p : {2, 4}) {
    for (int m : {2 * p - 1, 2 * p + 1, 8, 16}) {
      SimulateOptions options;
      options.keep_compute_intervals = true;
      absl::StatusOr<SimulationResult> sim =
          Simulate(BuildOrDie(ScheduleKind::kZbH2, p, m), EqualCosts(), options);
      ASSERT_TRUE(sim.ok()) << sim.status();
      for (int s = 0; s < p; ++s) {
        const std::vector<ComputeInterval>& iv = sim->compute_intervals[s];
        ASSERT_EQ(iv.size(), 3u * m);  // the optimizer step costs 0 here
        EXPECT_DOUBLE_EQ(iv.back().end - iv.front().start, 3.0 * m)
            << "P=" << p << " M=" << m << " stage " << s;
      }
    }
  }
}

TEST(ZeroBubbleSimulatorTest, WeightFractionSplitsTheBackwardCost) {
  ActionCosts c;
  c.forward = 1.0;
  c.backward = 4.0;
  c.backward_weight_fraction = 0.25;  // T_B = 3, T_W = 1
  absl::StatusOr<SimulationResult> sim = Simulate(BuildOrDie(ScheduleKind::kZbH1, 1, 2), c);
  ASSERT_TRUE(sim.ok()) << sim.status();
  EXPECT_DOUBLE_EQ(sim->step_time, 2 * (1.0 + 4.0));
  EXPECT_DOUBLE_EQ(sim->busy_time[0], 10.0);
  // Per stage: stage 1's W is free, so its gradient still leaves after T_B = 3.
  c.backward_weight_fraction_per_stage = {0.5, 1.0};
  sim = Simulate(BuildOrDie(ScheduleKind::kZbH1, 2, 1), c);
  ASSERT_TRUE(sim.ok()) << sim.status();
  // Stage 0: F 0..1; stage 1: F 1..2, B 2..2 (T_B = 0), W 2..6; stage 0: B 2..4, W 4..6.
  EXPECT_DOUBLE_EQ(sim->step_time, 6.0);
}

TEST(ZeroBubbleSimulatorTest, RejectsFractionsOutsideZeroToOne) {
  for (double f : {-0.1, 1.5}) {
    ActionCosts c;
    c.backward_weight_fraction = f;
    absl::Status status = Simulate(BuildOrDie(ScheduleKind::kZbH1, 2, 2), c).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(status.message()), HasSubstr("backward_weight_fraction"));
  }
  ActionCosts c;
  c.backward_weight_fraction_per_stage = {0.5, 2.0};
  absl::Status status = Simulate(BuildOrDie(ScheduleKind::kZbH1, 2, 2), c).status();
  EXPECT_THAT(std::string(status.message()), HasSubstr("backward_weight_fraction_per_stage[1]"));
}

absl::Status SimulateText(const std::vector<std::string>& per_stage) {
  std::vector<v1::RankProgram> programs;
  for (size_t s = 0; s < per_stage.size(); ++s) {
    v1::RankProgram& prog = programs.emplace_back();
    prog.set_stage(static_cast<int>(s));
    for (absl::string_view text : absl::StrSplit(per_stage[s], ' ')) {
      absl::StatusOr<v1::Action> a = ParseAction(text);
      if (!a.ok()) return a.status();
      *prog.add_actions() = *a;
    }
  }
  return Simulate(programs).status();
}

TEST(ZeroBubbleValidationTest, WeightPartFollowsItsInputPartExactlyOnce) {
  EXPECT_TRUE(SimulateText({"0F0 0BI0 0BW0 0STEP"}).ok());
  absl::Status before = SimulateText({"0F0 0BW0 0BI0 0STEP"});
  EXPECT_EQ(before.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(before.message()),
              HasSubstr("0BW0 (stage 0 action 1) comes before 0BI0"));
  absl::Status twice = SimulateText({"0F0 0BI0 0BW0 0BW0 0STEP"});
  EXPECT_THAT(std::string(twice.message()), HasSubstr("0BW0 (stage 0 action 3) appears twice"));
  absl::Status missing = SimulateText({"0F0 0BI0 0F1 0BI1 0BW1 0STEP"});
  EXPECT_THAT(std::string(missing.message()), HasSubstr("never runs 0BW0 after 0BI0"));
  // A whole BACKWARD has no weight part to add.
  absl::Status after_whole = SimulateText({"0F0 0B0 0BW0 0STEP"});
  EXPECT_THAT(std::string(after_whole.message()), HasSubstr("comes before 0BI0"));
  // BACKWARD and BACKWARD_INPUT of one micro-batch: backwarded twice.
  absl::Status both = SimulateText({"0F0 0B0 0BI0 0BW0 0STEP"});
  EXPECT_THAT(std::string(both.message()), HasSubstr("backwards micro-batch 0 more than once"));
  // The gradient leaves after the input part, not before.
  absl::Status early = SimulateText(
      {"0F0 0SEND_ACT0 0RECV_GRAD0 0BI0 0BW0 0STEP", "1RECV_ACT0 1F0 1SEND_GRAD0 1BI0 1BW0 1STEP"});
  EXPECT_THAT(std::string(early.message()),
              HasSubstr("1SEND_GRAD0 (stage 1 action 2) comes before"));
}

// The grids of docs/schedules.md: P = 4, M = 8, T_F = T_B = T_W = 1.
TEST(ZeroBubbleSimulatorTest, FourStagesEightMicroBatchesGrids) {
  for (ScheduleKind kind : {ScheduleKind::kZbH1, ScheduleKind::kZbH2}) {
    absl::StatusOr<SimulationResult> sim = Simulate(BuildOrDie(kind, 4, 8), EqualCosts());
    ASSERT_TRUE(sim.ok()) << sim.status();
    std::cout << ScheduleKindName(kind) << "\n" << sim->grid << "\n";
    const std::string name = kind == ScheduleKind::kZbH1 ? "zb_h1_p4_m8.grid" : "zb_h2_p4_m8.grid";
    EXPECT_TRUE(testing::MatchesGolden(name, sim->grid + "\n"));
  }
}

}  // namespace
}  // namespace dapple::schedule
