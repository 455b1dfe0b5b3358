#include "common/schedule/simulator.h"

#include <cmath>
#include <iostream>
#include <limits>
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

// The grid above as intervals: F0 [0, 1) and B0 [4, 6) on stage 0, F0 [1, 2) and B0 [2, 4)
// on stage 1; none unless asked for.
TEST(SimulatorTest, KeepsComputeIntervalsWhenAsked) {
  SimulateOptions options;
  options.keep_compute_intervals = true;
  absl::StatusOr<SimulationResult> sim = Simulate(Build(ScheduleKind::kDapple, 2, 1), {}, options);
  ASSERT_TRUE(sim.ok()) << sim.status();
  ASSERT_EQ(sim->compute_intervals.size(), 2u);
  ASSERT_EQ(sim->compute_intervals[0].size(), 2u);
  ASSERT_EQ(sim->compute_intervals[1].size(), 2u);
  EXPECT_EQ(sim->compute_intervals[0][0].start, 0);
  EXPECT_EQ(sim->compute_intervals[0][0].end, 1);
  EXPECT_EQ(sim->compute_intervals[0][1].start, 4);
  EXPECT_EQ(sim->compute_intervals[0][1].end, 6);
  EXPECT_EQ(sim->compute_intervals[1][0].start, 1);
  EXPECT_EQ(sim->compute_intervals[1][1].start, 2);
  EXPECT_EQ(sim->compute_intervals[1][1].end, 4);
  sim = Simulate(Build(ScheduleKind::kDapple, 2, 1));
  ASSERT_TRUE(sim.ok());
  EXPECT_TRUE(sim->compute_intervals.empty());
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

// Activation recomputation: a recomputing stage's BACKWARD runs the forward again first.
TEST(SimulatorTest, RecomputationLengthensTheStagesBackwards) {
  ActionCosts costs;
  costs.forward_per_stage = {1, 3};
  costs.backward_per_stage = {2, 2};
  costs.recompute_per_stage = {1, 0};  // stage 0 recomputes its forward (1)
  costs.optimizer_step = 0.5;
  absl::StatusOr<SimulationResult> sim = Simulate(Build(ScheduleKind::kDapple, 2, 1), costs);
  ASSERT_TRUE(sim.ok()) << sim.status();
  // As PerStageCostsOverrideScalars, but stage 0's B0 takes 1 + 2: [6,9), STEP to 9.5.
  EXPECT_DOUBLE_EQ(sim->step_time, 9.5);
  EXPECT_DOUBLE_EQ(sim->busy_time[0], 4.5);
  EXPECT_DOUBLE_EQ(sim->busy_time[1], 5.5);
  costs.recompute_per_stage = {1};
  EXPECT_THAT(std::string(Simulate(Build(ScheduleKind::kDapple, 2, 1), costs).status().message()),
              HasSubstr("costs.recompute_per_stage has 1 entries for 2 stages"));
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
           // Of 2 ranks: stage 1 is not one of rank 0's (virtual) stages 0, 2, 4, ...
           {{foreign_action, Program(1, "1F0 1B0")},
            "1B0 (stage 0 action 1) names stage 1 in stage 0's program"},
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

// Lowered programs as Ops, for the Op entry point.
// Pipe-SGD's program simulates as one synchronous step (the simulator knows no staleness; the
// planner's timing model, coordinator/planner/pipesgd_model.h, prices the overlap): M forwards
// and backwards, then the asynchronous AllReduce (charged in full), then the stale update.
TEST(SimulatorTest, RunsThePipeSgdProgram) {
  absl::StatusOr<std::vector<v1::RankProgram>> programs =
      BuildPrograms(ScheduleKind::kPipeSgd, 1, 4, LowerOptions{{true}});
  ASSERT_TRUE(programs.ok()) << programs.status();
  ActionCosts costs;
  costs.forward = 1.0;
  costs.backward = 2.0;
  costs.allreduce = 5.0;
  costs.optimizer_step = 0.5;
  absl::StatusOr<SimulationResult> sim = Simulate(*programs, costs);
  ASSERT_TRUE(sim.ok()) << sim.status();
  EXPECT_DOUBLE_EQ(sim->step_time, 4 * (1.0 + 2.0) + 5.0 + 0.5);
  EXPECT_EQ(sim->peak_in_flight[0], 1);
}

std::vector<OpProgram> BuildOps(ScheduleKind kind, int p, int m, const LowerOptions& options = {}) {
  std::vector<OpProgram> ops;
  for (int s = 0; s < p; ++s) ops.push_back(LowerOps(GenerateOps(kind, p, m, s), p, s, options));
  return ops;
}

TEST(SimulatorTransferTest, SlowLinkLengthensTheStepByBothTransfers) {
  ActionCosts costs;  // forward 1, backward 2
  costs.act_transfer_per_boundary = {5};
  costs.grad_transfer_per_boundary = {3};
  for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::kDapple}) {
    absl::StatusOr<SimulationResult> sim = Simulate(Build(kind, 2, 1), costs);
    ASSERT_TRUE(sim.ok()) << sim.status();
    // Stage 0: F0 [0,1), activation on the link [1,6). Stage 1: F0 [6,7), B0 [7,9), gradient
    // on the link [9,12). Stage 0: B0 [12,14). Free links give 3 * (1 + 2 - 1) = 6.
    EXPECT_DOUBLE_EQ(sim->step_time, 6.0 + 5.0 + 3.0);
    EXPECT_EQ(sim->comm_time, (std::vector<double>{8.0, 8.0}));
    EXPECT_EQ(sim->busy_time, (std::vector<double>{3.0, 3.0}));
    EXPECT_EQ(sim->idle_time, (std::vector<double>{11.0, 11.0}));
    EXPECT_EQ(sim->allreduce_time, (std::vector<double>{0.0, 0.0}));
  }
}

TEST(SimulatorTransferTest, SendAndReceiveCostsAddToTheTransfer) {
  ActionCosts costs;
  costs.send = 0.5;
  costs.recv = 0.25;
  costs.act_transfer_per_boundary = {2};
  costs.grad_transfer_per_boundary = {1};
  absl::StatusOr<SimulationResult> sim = Simulate(Build(ScheduleKind::kGPipe, 2, 1), costs);
  ASSERT_TRUE(sim.ok()) << sim.status();
  // Stage 0: F0 [0,1), send [1,1.5), link [1.5,3.5). Stage 1: recv to 3.75, F0 to 4.75, B0 to
  // 6.75, send to 7.25, link [7.25,8.25). Stage 0: recv to 8.5, B0 to 10.5.
  EXPECT_DOUBLE_EQ(sim->step_time, 10.5);
  EXPECT_EQ(sim->comm_time, (std::vector<double>{3.0, 3.0}));
}

// A link through host memory: each send and receive across it also occupies its own rank for
// the boundary's copy, and message_time says how much of each rank's idle time they took.
TEST(SimulatorTransferTest, HostCopiesOccupyTheSendingAndReceivingRanks) {
  ActionCosts costs;  // forward 1, backward 2
  costs.send = 0.5;
  costs.recv = 0.25;
  costs.act_transfer_per_boundary = {0.1};
  costs.grad_transfer_per_boundary = {0.1};
  costs.host_copy_per_boundary = {1};
  absl::StatusOr<SimulationResult> sim = Simulate(Build(ScheduleKind::kGPipe, 2, 1), costs);
  ASSERT_TRUE(sim.ok()) << sim.status();
  // Stage 0: F0 [0,1), send [1,2.5), link [2.5,2.6). Stage 1: recv [2.6,3.85), F0 to 4.85, B0
  // to 6.85, send to 8.35, link to 8.45. Stage 0: recv [8.45,9.7), B0 to 11.7.
  EXPECT_DOUBLE_EQ(sim->step_time, 11.7);
  EXPECT_DOUBLE_EQ(sim->message_time[0], 1.5 + 1.25);
  EXPECT_DOUBLE_EQ(sim->message_time[1], 1.25 + 1.5);
  EXPECT_EQ(sim->busy_time, (std::vector<double>{3.0, 3.0}));
  // Without copies, only send / recv occupy the ranks.
  costs.host_copy_per_boundary.clear();
  sim = Simulate(Build(ScheduleKind::kGPipe, 2, 1), costs);
  ASSERT_TRUE(sim.ok()) << sim.status();
  EXPECT_DOUBLE_EQ(sim->step_time, 7.7);
  EXPECT_EQ(sim->message_time, (std::vector<double>{0.75, 0.75}));
}

TEST(SimulatorTransferTest, ALinkCarriesOneTransferAtATimeInSendOrder) {
  ActionCosts costs;  // forward 1, backward 2
  costs.act_transfer_per_boundary = {4};
  absl::StatusOr<SimulationResult> sim = Simulate(Build(ScheduleKind::kGPipe, 2, 3), costs);
  ASSERT_TRUE(sim.ok()) << sim.status();
  // Activations sent at 1, 2, 3 leave the link at 5, 9, 13 (not 5, 6, 7). Stage 1: F2 [13,14),
  // B2 B1 B0 to 20; gradients free; stage 0: B2 B1 B0 [16,22).
  EXPECT_DOUBLE_EQ(sim->step_time, 22.0);
  EXPECT_EQ(sim->comm_time, (std::vector<double>{12.0, 12.0}));
  // The gradient link is another direction: a slow activation link does not delay it.
  costs.grad_transfer_per_boundary = {0.5};
  sim = Simulate(Build(ScheduleKind::kGPipe, 2, 3), costs);
  ASSERT_TRUE(sim.ok()) << sim.status();
  // Stage 1 sends gradients at 16, 18, 20: they arrive at 16.5, 18.5, 20.5; stage 0 ends 22.5.
  EXPECT_DOUBLE_EQ(sim->step_time, 22.5);
}

// A link's latency delays each message but does not hold the link: messages in flight overlap
// (LogP's L). Before, three activations of a latency-only link arrived 4, 8 and 12 after their
// sends; a gpipe job of a tiny model on loopback TCP ran at half its prediction.
TEST(SimulatorTransferTest, MessagesInFlightOverlapTheirLatency) {
  ActionCosts costs;  // forward 1, backward 2
  costs.act_transfer_per_boundary = {4};
  costs.grad_transfer_per_boundary = {4};
  costs.link_latency_per_boundary = {4};
  absl::StatusOr<SimulationResult> sim = Simulate(Build(ScheduleKind::kGPipe, 2, 3), costs);
  ASSERT_TRUE(sim.ok()) << sim.status();
  // Activations sent at 1, 2, 3 arrive at 5, 6, 7. Stage 1: F0 F1 F2 [5,8), B2 B1 B0 [8,14),
  // their gradients arriving at 14, 16, 18; stage 0: B2 B1 B0 [14,20). (One message at a time
  // on the link: 30.)
  EXPECT_DOUBLE_EQ(sim->step_time, 20.0);
  EXPECT_EQ(sim->comm_time, (std::vector<double>{24.0, 24.0}));
  // Transfers of 4 of which 1 is latency: the bytes take 3 each, one message at a time, and
  // each arrives 1 after its bytes are out. Activations at 5, 8, 11; stage 1: F2 [11,12), B2 B1
  // B0 [12,18), gradients on the link [14,17), [17,20), [20,23), arriving at 18, 21, 24;
  // stage 0: B2 [18,20), B1 [21,23), B0 [24,26).
  costs.link_latency_per_boundary = {1};
  sim = Simulate(Build(ScheduleKind::kGPipe, 2, 3), costs);
  ASSERT_TRUE(sim.ok()) << sim.status();
  EXPECT_DOUBLE_EQ(sim->step_time, 26.0);
  // The latency is a part of each transfer across its boundary, never more.
  costs.grad_transfer_per_boundary = {0.5};
  EXPECT_THAT(Simulate(Build(ScheduleKind::kGPipe, 2, 3), costs).status().message(),
              HasSubstr("costs.link_latency_per_boundary[0] = 1 exceeds the boundary's transfer "
                        "(activation 4, gradient 0.5)"));
}

TEST(SimulatorTransferTest, EachBoundaryHasItsOwnLink) {
  ActionCosts costs;
  costs.forward = 1;
  costs.backward = 1;
  costs.act_transfer_per_boundary = {0, 10};
  absl::StatusOr<SimulationResult> sim = Simulate(Build(ScheduleKind::kDapple, 3, 1), costs);
  ASSERT_TRUE(sim.ok()) << sim.status();
  // F0 on stages 0, 1 at [0,1), [1,2); the second link adds 10: stage 2 F0 [12,13), B0 [13,14);
  // B0 on stage 1 [14,15), stage 0 [15,16).
  EXPECT_DOUBLE_EQ(sim->step_time, 16.0);
  EXPECT_EQ(sim->comm_time, (std::vector<double>{0.0, 10.0, 10.0}));
}

TEST(SimulatorAllReduceTest, AllReduceOccupiesItsRankAndOverlapsOthers) {
  ActionCosts costs;  // forward 1, backward 2
  costs.allreduce_per_stage = {0, 4};
  const std::vector<v1::RankProgram> programs =
      BuildPrograms(ScheduleKind::kDapple, 2, 1, LowerOptions{{false, true}}).value();
  absl::StatusOr<SimulationResult> sim = Simulate(programs, costs);
  ASSERT_TRUE(sim.ok()) << sim.status();
  // Stage 1: F0 [1,2), B0 [2,4), AllReduce [4,8). Stage 0's B0 [4,6) runs meanwhile.
  EXPECT_DOUBLE_EQ(sim->step_time, 8.0);
  EXPECT_EQ(sim->allreduce_time, (std::vector<double>{0.0, 4.0}));
  EXPECT_EQ(sim->busy_time, (std::vector<double>{3.0, 3.0}));
  EXPECT_EQ(sim->idle_time, (std::vector<double>{5.0, 1.0}));
  EXPECT_DOUBLE_EQ(sim->bubble_fraction, 6.0 / 16.0);
  EXPECT_THAT(sim->grid, HasSubstr("stage 1 | .  F0 B0 B0 AR AR AR AR"));
  // The scalar applies to every ALLREDUCE action.
  costs = ActionCosts{};
  costs.allreduce = 1.5;
  sim = Simulate(programs, costs);
  ASSERT_TRUE(sim.ok()) << sim.status();
  EXPECT_EQ(sim->allreduce_time, (std::vector<double>{0.0, 1.5}));
  EXPECT_DOUBLE_EQ(sim->idle_time[1], 6.0 - 3.0 - 1.5);  // stage 0's B0 [4,6) ends the step
}

TEST(SimulatorTest, OptimizerStepEndsArePerStageInProgramOrder) {
  ActionCosts costs;
  costs.optimizer_step_per_stage = {0.5, 0.25};
  std::vector<OpProgram> ops;
  for (int s = 0; s < 2; ++s) ops.push_back(LowerOps(GeneratePipeDreamOps(2, 4, s, 2), 2, s));
  absl::StatusOr<SimulationResult> sim = SimulateOps(ops, costs);
  ASSERT_TRUE(sim.ok()) << sim.status();
  ASSERT_EQ(sim->optimizer_step_end.size(), 2u);
  ASSERT_EQ(sim->optimizer_step_end[0].size(), 2u);
  ASSERT_EQ(sim->optimizer_step_end[1].size(), 2u);
  // Stage 0: F0 F1 [0,2), B0 [4,6), F2 [6,7), B1 [7,9), STEP [9,9.5), F3 [9.5,10.5), ...
  // Stage 1: F0 [1,2), B0 [2,4), F1 [4,5), B1 [5,7), STEP [7,7.25), F2 [7.25,8.25),
  // B2 [8.25,10.25), F3 waits for stage 0: [10.5,11.5), B3 [11.5,13.5), STEP [13.5,13.75).
  EXPECT_DOUBLE_EQ(sim->optimizer_step_end[0][0], 9.5);
  EXPECT_DOUBLE_EQ(sim->optimizer_step_end[1][0], 7.25);
  EXPECT_DOUBLE_EQ(sim->optimizer_step_end[1][1], 13.75);
  EXPECT_DOUBLE_EQ(sim->busy_time[0], 4 * 3.0 + 2 * 0.5);
  EXPECT_DOUBLE_EQ(sim->step_time, sim->optimizer_step_end[0][1]);
}

TEST(SimulatorPipeDreamTest, SteadyStateOfEqualStagesHasNoBubble) {
  // Over a run of several updates, the time between consecutive updates on every stage settles
  // at M * (F + B): PipeDream without flushes keeps every stage busy.
  for (int p = 1; p <= 6; ++p) {
    for (int m : {1, 2, 4, 7}) {
      SCOPED_TRACE(::testing::Message() << "P=" << p << " M=" << m);
      const int updates = 2 * p + 4;
      std::vector<OpProgram> ops;
      for (int s = 0; s < p; ++s) {
        ops.push_back(LowerOps(GeneratePipeDreamOps(p, m * updates, s, m), p, s));
      }
      SimulateOptions options;
      options.render_grid = false;
      absl::StatusOr<SimulationResult> sim = SimulateOps(ops, ActionCosts{}, options);
      ASSERT_TRUE(sim.ok()) << sim.status();
      EXPECT_TRUE(sim->grid.empty());
      for (int s = 0; s < p; ++s) {
        ASSERT_EQ(sim->optimizer_step_end[s].size(), static_cast<size_t>(updates));
        EXPECT_EQ(sim->peak_in_flight[s], std::min(p - s, m * updates));
        // Past the warm-up (P micro-batches) and before the drain (the last update).
        for (int u = (p + m - 1) / m + 1; u + 1 < updates; ++u) {
          EXPECT_NEAR(sim->optimizer_step_end[s][u] - sim->optimizer_step_end[s][u - 1], 3.0 * m,
                      1e-9)
              << "stage " << s << " update " << u;
        }
      }
      // The whole run: M * updates micro-batches plus one fill and drain of the pipeline.
      EXPECT_NEAR(sim->step_time, 3.0 * (m * updates + p - 1), 1e-9);
    }
  }
}

TEST(SimulatorTest, OpsAndProtoFormsAgree) {
  ActionCosts costs;
  costs.forward_per_stage = {1, 2, 1.5};
  costs.backward_per_stage = {2, 3, 2.5};
  costs.act_transfer_per_boundary = {0.5, 1};
  costs.grad_transfer_per_boundary = {0.25, 0.75};
  costs.allreduce_per_stage = {1, 0, 2};
  const LowerOptions options{{true, false, true}};
  for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::kDapple}) {
    absl::StatusOr<SimulationResult> a =
        Simulate(BuildPrograms(kind, 3, 5, options).value(), costs);
    SimulateOptions no_grid;
    no_grid.render_grid = false;
    absl::StatusOr<SimulationResult> b = SimulateOps(BuildOps(kind, 3, 5, options), costs, no_grid);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(a->step_time, b->step_time);
    EXPECT_EQ(a->busy_time, b->busy_time);
    EXPECT_EQ(a->idle_time, b->idle_time);
    EXPECT_EQ(a->comm_time, b->comm_time);
    EXPECT_EQ(a->allreduce_time, b->allreduce_time);
    EXPECT_EQ(a->peak_in_flight, b->peak_in_flight);
    EXPECT_FALSE(a->grid.empty());
    EXPECT_TRUE(b->grid.empty());
  }
}

TEST(SimulatorTest, RejectsBadTransferAndAllReduceCosts) {
  const std::vector<v1::RankProgram> programs = Build(ScheduleKind::kDapple, 3, 2);
  ActionCosts costs;
  costs.act_transfer_per_boundary = {1, 1, 1};
  EXPECT_THAT(std::string(Simulate(programs, costs).status().message()),
              HasSubstr("costs.act_transfer_per_boundary has 3 entries for 2 stage boundaries"));
  costs = ActionCosts{};
  costs.grad_transfer_per_boundary = {1, -1};
  EXPECT_EQ(Simulate(programs, costs).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(Simulate(programs, costs).status().message()),
              HasSubstr("costs.grad_transfer_per_boundary[1] -1 must be finite and >= 0"));
  costs = ActionCosts{};
  costs.host_copy_per_boundary = {1};
  EXPECT_THAT(std::string(Simulate(programs, costs).status().message()),
              HasSubstr("costs.host_copy_per_boundary has 1 entries for 2 stage boundaries"));
  costs.host_copy_per_boundary = {1, std::nan("")};
  EXPECT_THAT(std::string(Simulate(programs, costs).status().message()),
              HasSubstr("costs.host_copy_per_boundary[1] nan must be finite and >= 0"));
  costs = ActionCosts{};
  costs.allreduce_per_stage = {1, 1};
  EXPECT_THAT(std::string(Simulate(programs, costs).status().message()),
              HasSubstr("costs.allreduce_per_stage has 2 entries for 3 stages"));
  costs = ActionCosts{};
  costs.allreduce = std::numeric_limits<double>::infinity();
  EXPECT_THAT(std::string(Simulate(programs, costs).status().message()),
              HasSubstr("costs.allreduce inf"));
  costs = ActionCosts{};
  costs.optimizer_step_per_stage = {0, 0, -2};
  EXPECT_THAT(std::string(Simulate(programs, costs).status().message()),
              HasSubstr("costs.optimizer_step_per_stage[2]"));
}

TEST(SimulatorTest, DeadlockWithoutGridStillShowsWhatRan) {
  const std::vector<OpProgram> ops = {
      ToOps({MakeAction(0, v1::FORWARD, 0), MakeAction(0, v1::FORWARD, 1),
             MakeAction(0, v1::SEND_ACT, 1), MakeAction(0, v1::RECV_GRAD, 0),
             MakeAction(0, v1::SEND_ACT, 0), MakeAction(0, v1::BACKWARD, 0),
             MakeAction(0, v1::RECV_GRAD, 1), MakeAction(0, v1::BACKWARD, 1)}),
      ToOps({MakeAction(1, v1::RECV_ACT, 0), MakeAction(1, v1::FORWARD, 0),
             MakeAction(1, v1::BACKWARD, 0), MakeAction(1, v1::SEND_GRAD, 0),
             MakeAction(1, v1::RECV_ACT, 1), MakeAction(1, v1::FORWARD, 1),
             MakeAction(1, v1::BACKWARD, 1), MakeAction(1, v1::SEND_GRAD, 1)})};
  SimulateOptions options;
  options.render_grid = false;
  absl::Status status = SimulateOps(ops, ActionCosts{}, options).status();
  ASSERT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("stage 0 | F0 F1  <- waits on 0RECV_GRAD0"));
}

TEST(SimulatorTest, LargePipelineSimulatesEveryAction) {
  // 64 stages x 256 micro-batches (about 82k actions): the closed form still holds exactly.
  SimulateOptions options;
  options.render_grid = false;
  absl::StatusOr<SimulationResult> sim =
      SimulateOps(BuildOps(ScheduleKind::kDapple, 64, 256), ActionCosts{}, options);
  ASSERT_TRUE(sim.ok()) << sim.status();
  EXPECT_NEAR(sim->step_time, 3.0 * (256 + 64 - 1), 1e-6);
  EXPECT_EQ(sim->peak_in_flight[0], 64);
  EXPECT_EQ(sim->peak_in_flight[63], 1);
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
