#include "common/schedule/simulator.h"

#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "common/schedule/action.h"
#include "common/schedule/golden_test_util.h"
#include "common/schedule/lowering.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::schedule {
namespace {

using ::testing::HasSubstr;

// Builds a program from text like "1RECV_ACT0 1F0 1B0 1SEND_GRAD0 1STEP".
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

std::vector<v1::RankProgram> Build(ScheduleKind kind, int p, int m) {
  absl::StatusOr<std::vector<v1::RankProgram>> programs = BuildPrograms(kind, p, m);
  EXPECT_TRUE(programs.ok()) << programs.status();
  return programs.ok() ? *programs : std::vector<v1::RankProgram>{};
}

absl::Status SimulateStatus(const std::vector<v1::RankProgram>& programs) {
  return Simulate(programs).status();
}

TEST(SimulatorPropertyTest, BothSchedulesMatchTheClosedForms) {
  // Default costs: forward 1, backward 2, communication and optimizer step free.
  const ActionCosts costs;
  ASSERT_EQ(costs.forward, 1.0);
  ASSERT_EQ(costs.backward, 2.0);
  ASSERT_EQ(costs.send, 0.0);
  ASSERT_EQ(costs.recv, 0.0);
  ASSERT_EQ(costs.optimizer_step, 0.0);
  for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::kDapple}) {
    for (int p = 1; p <= 8; ++p) {
      for (int m = 1; m <= 16; ++m) {
        SCOPED_TRACE(::testing::Message() << ScheduleKindName(kind) << " P=" << p << " M=" << m);
        absl::StatusOr<SimulationResult> sim = Simulate(Build(kind, p, m), costs);
        ASSERT_TRUE(sim.ok()) << sim.status();
        EXPECT_NEAR(sim->step_time, 3.0 * (m + p - 1), 1e-9);
        EXPECT_NEAR(sim->bubble_fraction, static_cast<double>(p - 1) / (m + p - 1), 1e-9);
        ASSERT_EQ(sim->busy_time.size(), static_cast<size_t>(p));
        ASSERT_EQ(sim->idle_time.size(), static_cast<size_t>(p));
        ASSERT_EQ(sim->peak_in_flight.size(), static_cast<size_t>(p));
        for (int s = 0; s < p; ++s) {
          EXPECT_NEAR(sim->busy_time[s], 3.0 * m, 1e-9);
          EXPECT_NEAR(sim->idle_time[s], 3.0 * (p - 1), 1e-9);
          const int expected_peak = kind == ScheduleKind::kDapple ? std::min(p - s, m) : m;
          EXPECT_EQ(sim->peak_in_flight[s], expected_peak) << "stage " << s;
        }
      }
    }
  }
}

TEST(SimulatorTest, SmallGridIsExact) {
  absl::StatusOr<SimulationResult> sim = Simulate(Build(ScheduleKind::kDapple, 2, 1));
  ASSERT_TRUE(sim.ok()) << sim.status();
  EXPECT_EQ(sim->grid,
            "one column = 1 time unit\n"
            "      t | 0  1  2  3  4  5\n"
            "stage 0 | F0 .  .  .  B0 B0\n"
            "stage 1 | .  F0 B0 B0 .  .");
}

TEST(SimulatorTest, CommunicationCostsDelayTheReceiver) {
  ActionCosts costs;
  costs.send = 0.5;
  costs.recv = 0.25;
  absl::StatusOr<SimulationResult> sim = Simulate(Build(ScheduleKind::kGPipe, 2, 1), costs);
  ASSERT_TRUE(sim.ok()) << sim.status();
  // Stage 0: F0 [0,1), send [1,1.5). Stage 1: recv ends 1.75, F0 to 2.75, B0 to 4.75, send to
  // 5.25. Stage 0: recv ends 5.5, B0 to 7.5.
  EXPECT_DOUBLE_EQ(sim->step_time, 7.5);
  EXPECT_DOUBLE_EQ(sim->busy_time[0], 3.0);
  EXPECT_DOUBLE_EQ(sim->idle_time[0], 4.5);
  EXPECT_DOUBLE_EQ(sim->idle_time[1], 4.5);
  EXPECT_DOUBLE_EQ(sim->bubble_fraction, 9.0 / 15.0);
}

TEST(SimulatorTest, PerStageCostsOverrideScalars) {
  ActionCosts costs;
  costs.forward = 100;  // ignored: per-stage values win
  costs.forward_per_stage = {1, 3};
  costs.backward_per_stage = {2, 2};
  costs.optimizer_step = 0.5;
  absl::StatusOr<SimulationResult> sim = Simulate(Build(ScheduleKind::kDapple, 2, 1), costs);
  ASSERT_TRUE(sim.ok()) << sim.status();
  // Stage 1: F0 [1,4), B0 [4,6), STEP to 6.5. Stage 0: B0 [6,8), STEP to 8.5.
  EXPECT_DOUBLE_EQ(sim->step_time, 8.5);
  EXPECT_DOUBLE_EQ(sim->busy_time[0], 3.5);
  EXPECT_DOUBLE_EQ(sim->busy_time[1], 5.5);
}

TEST(SimulatorTest, RejectsBadCosts) {
  const std::vector<v1::RankProgram> programs = Build(ScheduleKind::kDapple, 2, 2);
  ActionCosts costs;
  costs.forward_per_stage = {1, 1, 1};
  EXPECT_THAT(Simulate(programs, costs).status().message(),
              HasSubstr("costs.forward_per_stage has 3 entries for 2 stages"));
  costs = ActionCosts{};
  costs.recv = -1;
  EXPECT_EQ(Simulate(programs, costs).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(Simulate(programs, costs).status().message()), HasSubstr("costs.recv"));
  costs = ActionCosts{};
  costs.backward_per_stage = {1, std::nan("")};
  EXPECT_THAT(std::string(Simulate(programs, costs).status().message()),
              HasSubstr("costs.backward_per_stage[1]"));
}

TEST(SimulatorTest, DeadlockNamesBothWaitingActions) {
  // Each stage first waits for something only the other sends later.
  const std::vector<v1::RankProgram> programs = {
      Program(0, "0RECV_GRAD0 0F0 0SEND_ACT0 0B0 0STEP"),
      Program(1, "1RECV_ACT0 1F0 1B0 1SEND_GRAD0 1STEP")};
  absl::StatusOr<SimulationResult> sim = Simulate(programs);
  ASSERT_FALSE(sim.ok());
  EXPECT_EQ(sim.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string message(sim.status().message());
  EXPECT_THAT(message, HasSubstr("deadlock: "));
  EXPECT_THAT(message, HasSubstr("stage 0 waits on 0RECV_GRAD0 (action 0) for 1SEND_GRAD0"));
  EXPECT_THAT(message, HasSubstr("stage 1 waits on 1RECV_ACT0 (action 0) for 0SEND_ACT0"));
  EXPECT_THAT(message, HasSubstr("stage 0 |  <- waits on 0RECV_GRAD0"));
  EXPECT_THAT(message, HasSubstr("stage 1 |  <- waits on 1RECV_ACT0"));
}

TEST(SimulatorTest, DeadlockGridShowsWhatRan) {
  // Stage 0 runs two forwards, then waits for a gradient stage 1 only sends after a forward it
  // cannot start: its activation is sent after the gradient arrives.
  const std::vector<v1::RankProgram> programs = {
      Program(0, "0F0 0F1 0SEND_ACT1 0RECV_GRAD0 0SEND_ACT0 0B0 0RECV_GRAD1 0B1"),
      Program(1, "1RECV_ACT0 1F0 1B0 1SEND_GRAD0 1RECV_ACT1 1F1 1B1 1SEND_GRAD1")};
  absl::Status status = SimulateStatus(programs);
  ASSERT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("stage 0 | F0 F1  <- waits on 0RECV_GRAD0"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("stage 1 | .  .  <- waits on 1RECV_ACT0"));
}

TEST(SimulatorTest, ThreeStageDeadlockNamesEveryWaitingRank) {
  // Stages 0 and 1 wait on each other; stage 2 waits on stage 1 behind them.
  const std::vector<v1::RankProgram> programs = {
      Program(0, "0F0 0RECV_GRAD0 0SEND_ACT0 0B0"),
      Program(1, "1RECV_ACT0 1F0 1SEND_ACT0 1RECV_GRAD0 1B0 1SEND_GRAD0"),
      Program(2, "2RECV_ACT0 2F0 2B0 2SEND_GRAD0")};
  absl::Status status = SimulateStatus(programs);
  ASSERT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("deadlock: stage 0 waits on 0RECV_GRAD0 (action 1) for 1SEND_GRAD0; "
                        "stage 1 waits on 1RECV_ACT0 (action 0) for 0SEND_ACT0; "
                        "stage 2 waits on 2RECV_ACT0 (action 0) for 1SEND_ACT0; what ran:"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("stage 0 | F0  <- waits on 0RECV_GRAD0"));
}

TEST(SimulatorValidationTest, UnpairedSend) {
  const std::vector<v1::RankProgram> programs = {Program(0, "0F0 0SEND_ACT0 0RECV_GRAD0 0B0 0STEP"),
                                                 Program(1, "1F0 1B0 1SEND_GRAD0 1STEP")};
  absl::Status status = SimulateStatus(programs);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("unpaired send: 0SEND_ACT0 has no matching 1RECV_ACT0"));
}

TEST(SimulatorValidationTest, UnpairedReceive) {
  const std::vector<v1::RankProgram> programs = {Program(0, "0F0 0SEND_ACT0 0RECV_GRAD0 0B0 0STEP"),
                                                 Program(1, "1RECV_ACT0 1F0 1B0 1STEP")};
  absl::Status status = SimulateStatus(programs);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("unpaired receive: 0RECV_GRAD0 has no matching 1SEND_GRAD0"));
}

TEST(SimulatorValidationTest, BackwardBeforeForward) {
  absl::Status status = SimulateStatus({Program(0, "0F1 0B0 0F0 0B1 0STEP")});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("0B0 (stage 0 action 1) comes before 0F0 (backward before forward)"));

  std::vector<v1::RankProgram> programs = Build(ScheduleKind::kDapple, 2, 1);
  programs[1] = Program(1, "1RECV_ACT0 1B0 1F0 1SEND_GRAD0 1STEP");
  status = SimulateStatus(programs);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("1B0 (stage 1 action 1) comes before 1F0"));
}

TEST(SimulatorValidationTest, EachMicroBatchExactlyOncePerStage) {
  struct Case {
    std::string program;
    std::string message;
  };
  for (const Case& c :
       std::vector<Case>{{"0F0 0B0 0F2 0B2",
                          "stage 0 never forwards micro-batch 1 (0F1 missing; the step has M=3)"},
                         {"0F0 0F1 0B1", "stage 0 never backwards micro-batch 0"},
                         {"0F0 0F0 0B0", "stage 0 forwards micro-batch 0 more than once (0F0)"},
                         {"0F0 0F1 0F1 0B0 0B1", "stage 0 forwards micro-batch 1 more than once"},
                         {"0F0 0B0 0B0", "stage 0 backwards micro-batch 0 more than once"}}) {
    absl::Status status = SimulateStatus({Program(0, c.program)});
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.program;
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.message)) << c.program;
  }
  // Stage 1 misses micro-batch 1 that stage 0 computes.
  absl::Status status =
      SimulateStatus({Program(0, "0F0 0F1 0B0 0B1"), Program(1, "1RECV_ACT0 1F0 1B0 1SEND_GRAD0")});
  EXPECT_THAT(std::string(status.message()), HasSubstr("stage 1 never forwards micro-batch 1"));
}

TEST(SimulatorValidationTest, StructuralErrorsNameTheAction) {
  struct Case {
    std::vector<v1::RankProgram> programs;
    std::string message;
  };
  v1::RankProgram wrong_stage = Program(0, "0F0 0B0");
  wrong_stage.set_stage(3);
  v1::RankProgram foreign_action = Program(0, "0F0 0B0");
  foreign_action.mutable_actions(1)->set_stage(1);
  v1::RankProgram unspecified = Program(0, "0F0 0B0");
  *unspecified.add_actions() = MakeAction(0, v1::ACTION_KIND_UNSPECIFIED, 0);
  v1::RankProgram negative = Program(0, "0F0 0B0");
  negative.mutable_actions(0)->set_micro_batch(-2);
  for (const Case& c : std::vector<Case>{
           {{}, "no rank programs"},
           {{wrong_stage}, "programs[0] has stage 3"},
           {{foreign_action}, "1B0 (stage 0 action 1) names stage 1 in stage 0's program"},
           {{unspecified}, "0UNKNOWN(0)0 (stage 0 action 2) has no valid kind"},
           {{negative}, "0F-2 (stage 0 action 0) has negative micro-batch -2"},
           {{Program(0, "0F0 0SEND_ACT0 0B0")}, "0SEND_ACT0 (stage 0 action 1) has no peer"},
           {{Program(0, "0F0 0RECV_ACT0 0B0")}, "0RECV_ACT0 (stage 0 action 1) has no peer"},
           {{Program(0, "0F0 0SEND_ACT0 0RECV_GRAD0 0B0"),
             Program(1, "1RECV_ACT0 1F0 1B0 1SEND_GRAD0 1SEND_ACT0")},
            "1SEND_ACT0 (stage 1 action 4) has no peer: stage 1 is the last of 2 stages"},
           {{Program(0, "0F0 0SEND_ACT0 0SEND_ACT3 0RECV_GRAD0 0B0"),
             Program(1, "1RECV_ACT0 1F0 1B0 1SEND_GRAD0")},
            "0SEND_ACT3 (stage 0 action 2) names micro-batch 3 but the step forwards only 0..0"},
           {{Program(0, "0F0 0SEND_ACT0 0SEND_ACT0 0RECV_GRAD0 0B0"),
             Program(1, "1RECV_ACT0 1F0 1B0 1SEND_GRAD0")},
            "0SEND_ACT0 (stage 0 action 2) appears twice"},
           {{Program(0, "0F0 0RECV_GRAD0 0B0 0SEND_ACT0"),
             Program(1, "1F0 1RECV_ACT0 1B0 1SEND_GRAD0")},
            "1F0 (stage 1 action 0) comes before 1RECV_ACT0 (a forward needs its input "
            "activation)"},
           {{Program(0, "0F0 0SEND_ACT0 0B0 0RECV_GRAD0"),
             Program(1, "1RECV_ACT0 1F0 1B0 1SEND_GRAD0")},
            "0B0 (stage 0 action 2) comes before 0RECV_GRAD0 (a backward needs its output "
            "gradient)"},
           {{Program(0, "0SEND_ACT0 0F0 0RECV_GRAD0 0B0"),
             Program(1, "1RECV_ACT0 1F0 1B0 1SEND_GRAD0")},
            "0SEND_ACT0 (stage 0 action 0) comes before 0F0"},
           {{Program(0, "0F0 0SEND_ACT0 0RECV_GRAD0 0B0"),
             Program(1, "1RECV_ACT0 1F0 1SEND_GRAD0 1B0")},
            "1SEND_GRAD0 (stage 1 action 2) comes before 1B0"}}) {
    absl::Status status = SimulateStatus(c.programs);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.message));
  }
}

TEST(SimulatorTest, PeakInFlightFollowsProgramOrder) {
  absl::StatusOr<SimulationResult> sim =
      Simulate({Program(0, "0F0 0F1 0B0 0F2 0F3 0B1 0B2 0B3 0ALLREDUCE 0STEP")});
  ASSERT_TRUE(sim.ok()) << sim.status();
  EXPECT_EQ(sim->peak_in_flight, std::vector<int>{3});
  EXPECT_DOUBLE_EQ(sim->step_time, 4 * 1.0 + 4 * 2.0);
  EXPECT_DOUBLE_EQ(sim->bubble_fraction, 0.0);
}

TEST(SimulatorTest, GridColumnIsTheSmallestComputeCostAndIsCapped) {
  ActionCosts costs;
  costs.forward = 0.5;
  costs.backward = 1.5;
  absl::StatusOr<SimulationResult> sim = Simulate(Build(ScheduleKind::kGPipe, 2, 2), costs);
  ASSERT_TRUE(sim.ok()) << sim.status();
  // Step time 2 * (2 + 2 - 1) = 6 -> 12 columns of 0.5.
  EXPECT_DOUBLE_EQ(sim->step_time, 6.0);
  std::vector<std::string> lines = absl::StrSplit(sim->grid, '\n');
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0], "one column = 0.5 time units");
  EXPECT_EQ(lines[2], "stage 0 | F0 F1 .  .  .  .  B1 B1 B1 B0 B0 B0");
  EXPECT_EQ(lines[3], "stage 1 | .  F0 F1 B1 B1 B1 B0 B0 B0 .  .  .");

  sim = Simulate(Build(ScheduleKind::kDapple, 8, 100));  // 3 * 107 = 321 time units
  ASSERT_TRUE(sim.ok()) << sim.status();
  lines = absl::StrSplit(sim->grid, '\n');
  ASSERT_EQ(lines.size(), 2u + 8u);
  EXPECT_EQ(lines[0], "one column = 1.3375 time units");
  const std::vector<std::string> header = absl::StrSplit(lines[1], ' ', absl::SkipEmpty());
  EXPECT_EQ(header.back(), "239");
}

// The grid of docs/schedules.md: DAPPLE, P=4, M=8, forward 1, backward 2, free communication.
// Printed so the docs can paste it from a real run.
TEST(SimulatorTest, DappleFourStagesEightMicroBatchesGrid) {
  absl::StatusOr<SimulationResult> sim = Simulate(Build(ScheduleKind::kDapple, 4, 8));
  ASSERT_TRUE(sim.ok()) << sim.status();
  std::cout << sim->grid << "\n";
  EXPECT_TRUE(testing::MatchesGolden("dapple_p4_m8.grid", sim->grid + "\n"));
  const std::vector<std::string> lines = absl::StrSplit(sim->grid, '\n');
  ASSERT_EQ(lines.size(), 2u + 4u);
  EXPECT_THAT(lines[2], ::testing::StartsWith("stage 0 | F0 F1 F2 F3 .  .  .  .  .  .  B0 B0 F4"));
}

}  // namespace
}  // namespace dapple::schedule
