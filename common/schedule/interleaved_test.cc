// Megatron's interleaved 1F1B (generators.h GenerateInterleavedOps) through generators, lowering
// and the simulator: its order, the deadlock-freedom proofs over a grid of (P, v, M), the
// bubble and in-flight figures stated in generators.h, and the checked-in goldens.
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
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

LowerOptions Chunks(int v) {
  LowerOptions options;
  options.chunks = v;
  return options;
}

absl::StatusOr<std::vector<v1::RankProgram>> Build(int p, int v, int m) {
  return BuildPrograms(ScheduleKind::kInterleaved, p, m, Chunks(v));
}

TEST(InterleavedGeneratorTest, NameParsesBothWays) {
  EXPECT_EQ(ParseScheduleKind("interleaved").value(), ScheduleKind::kInterleaved);
  EXPECT_EQ(ScheduleKindName(ScheduleKind::kInterleaved), "interleaved");
}

TEST(InterleavedGeneratorTest, FourStagesTwoChunksEightMicroBatches) {
  // Rank 0: warm-up (P - 1) * 2 + (v - 1) * P = 10 chunk forwards, groups of P = 4 micro-batches
  // through chunk 0 (stage 0) then chunk 1 (stage 4); backwards chunk 1 first.
  EXPECT_EQ(ActionsToString(GenerateInterleaved(4, 2, 8, 0)),
            "0F0 0F1 0F2 0F3 4F0 4F1 4F2 4F3 0F4 0F5 0F6 4B0 0F7 4B1 4F4 4B2 4F5 4B3 4F6 0B0 "
            "4F7 0B1 0B2 0B3 4B4 4B5 4B6 4B7 0B4 0B5 0B6 0B7 0STEP");
  // Rank 3: warm-up (v - 1) * P = 4.
  EXPECT_EQ(ActionsToString(GenerateInterleaved(4, 2, 8, 3)),
            "3F0 3F1 3F2 3F3 7F0 7B0 7F1 7B1 7F2 7B2 7F3 7B3 3F4 3B0 3F5 3B1 3F6 3B2 3F7 3B3 "
            "7F4 7B4 7F5 7B5 7F6 7B6 7F7 7B7 3B4 3B5 3B6 3B7 3STEP");
}

TEST(InterleavedGeneratorTest, EveryChunkForwardsAndBackwardsEveryMicroBatchOnce) {
  for (int p : {2, 3, 4}) {
    for (int v : {2, 3}) {
      for (int m : {p, p + 1, 2 * p + 1, 8}) {
        for (int r = 0; r < p; ++r) {
          const OpProgram ops = GenerateInterleavedOps(p, v, m, r);
          ASSERT_EQ(ops.size(), 2u * v * m + 1);
          EXPECT_EQ(ops.back().kind, v1::OPTIMIZER_STEP);
          EXPECT_EQ(ops.back().stage, -1);
          for (int c = 0; c < v; ++c) {
            for (v1::ActionKind k : {v1::FORWARD, v1::BACKWARD}) {
              std::vector<int> mbs;
              for (const Op& op : ops) {
                if (op.kind == k && op.stage == c * p + r) mbs.push_back(op.micro_batch);
              }
              std::sort(mbs.begin(), mbs.end());
              ASSERT_EQ(static_cast<int>(mbs.size()), m);
              for (int j = 0; j < m; ++j) EXPECT_EQ(mbs[j], j);
            }
          }
        }
      }
    }
  }
}

// The proof the issue asks for, and more: every P in 2..8, v in 2..8, M in 1..4P + 1 builds
// (BuildPrograms simulates and refuses a deadlock), with the collectives a job adds too.
TEST(InterleavedSimulatorTest, DeadlockFreeForEveryM) {
  for (int p = 2; p <= 8; ++p) {
    for (int v = 2; v <= 8; ++v) {
      for (int m = 1; m <= 4 * p + 1; ++m) {
        LowerOptions options = Chunks(v);
        options.global_norm = (m % 2) == 0;
        options.allreduce_stages.assign(p, true);
        absl::StatusOr<std::vector<v1::RankProgram>> programs =
            BuildPrograms(ScheduleKind::kInterleaved, p, m, options);
        ASSERT_TRUE(programs.ok()) << programs.status();
        ASSERT_EQ(static_cast<int>(programs->size()), p);
      }
    }
  }
}

TEST(InterleavedGeneratorTest, GroupsSpreadTheRemainderOverTheFirstGroups) {
  EXPECT_EQ(InterleavedGroups(4, 8), std::vector<int>({4, 4}));
  EXPECT_EQ(InterleavedGroups(4, 9), std::vector<int>({5, 4}));
  EXPECT_EQ(InterleavedGroups(4, 11), std::vector<int>({6, 5}));
  EXPECT_EQ(InterleavedGroups(4, 13), std::vector<int>({5, 4, 4}));
  EXPECT_EQ(InterleavedGroups(4, 3), std::vector<int>({3}));
  EXPECT_EQ(InterleavedGroups(2, 5), std::vector<int>({3, 2}));
}

TEST(InterleavedSimulatorTest, ChunksNeedTheInterleavedSchedule) {
  absl::StatusOr<std::vector<v1::RankProgram>> programs =
      BuildPrograms(ScheduleKind::kDapple, 2, 4, Chunks(2));
  EXPECT_EQ(programs.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(programs.status().message()), HasSubstr("needs schedule interleaved"));
  EXPECT_EQ(Build(2, 0, 4).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(InterleavedLoweringTest, MessagesCrossFromTheLastRankToTheFirstOfTheNextChunk) {
  absl::StatusOr<std::vector<v1::RankProgram>> programs = Build(2, 2, 2);
  ASSERT_TRUE(programs.ok()) << programs.status();
  // Rank 1 holds virtual stages 1 and 3: stage 1 sends its activations on to stage 2 (rank 0).
  EXPECT_EQ(ProgramToString((*programs)[0]),
            "stage 0 replica 0: 0F0 0SEND_ACT0 0F1 0SEND_ACT1 2RECV_ACT0 2F0 2SEND_ACT0 "
            "2RECV_ACT1 2F1 2SEND_ACT1 2RECV_GRAD0 2B0 2SEND_GRAD0 2RECV_GRAD1 2B1 2SEND_GRAD1 "
            "0RECV_GRAD0 0B0 0RECV_GRAD1 0B1 0STEP");
  EXPECT_EQ(ProgramToString((*programs)[1]),
            "stage 1 replica 0: 1RECV_ACT0 1F0 1SEND_ACT0 1RECV_ACT1 1F1 1SEND_ACT1 3RECV_ACT0 "
            "3F0 3B0 3SEND_GRAD0 3RECV_ACT1 3F1 3B1 3SEND_GRAD1 1RECV_GRAD0 1B0 1SEND_GRAD0 "
            "1RECV_GRAD1 1B1 1SEND_GRAD1 1STEP");
}

// Equal chunks (t_f = 1, t_b = 2 per chunk, so a rank's T_F = v, T_B = 2v): for every M >= P
// (a multiple of P or not), the step is vM(t_f + t_b) + (P - 1)(t_f + t_b) and every rank idles (P
// - 1)(t_f + t_b) = (P - 1)(T_F + T_B) / v: 1F1B's bubble divided by v (generators.h).
TEST(InterleavedSimulatorTest, BubbleIsOneFOneBsDividedByV) {
  for (int p : {2, 3, 4, 8}) {
    for (int v : {2, 3, 4}) {
      for (int m = p; m <= 3 * p; ++m) {
        absl::StatusOr<std::vector<v1::RankProgram>> programs = Build(p, v, m);
        ASSERT_TRUE(programs.ok()) << programs.status();
        absl::StatusOr<SimulationResult> sim = Simulate(*programs);
        ASSERT_TRUE(sim.ok()) << sim.status();
        const std::string where = absl::StrCat("P=", p, " v=", v, " M=", m);
        EXPECT_DOUBLE_EQ(sim->step_time, 3.0 * v * m + 3.0 * (p - 1)) << where;
        for (int r = 0; r < p; ++r) {
          EXPECT_DOUBLE_EQ(sim->idle_time[r], 3.0 * (p - 1)) << where << " rank " << r;
          EXPECT_EQ(sim->peak_in_flight[r], InterleavedInFlight(p, v, m, r)) << where;
        }
        EXPECT_NEAR(sim->bubble_fraction, (p - 1.0) / (v * m + p - 1.0), 1e-12) << where;
      }
    }
  }
}

TEST(InterleavedSimulatorTest, WarmUpIsMegatrons) {
  EXPECT_EQ(InterleavedWarmUp(4, 2, 8, 0), 10);
  EXPECT_EQ(InterleavedWarmUp(4, 2, 8, 3), 4);
  EXPECT_EQ(InterleavedWarmUp(4, 3, 8, 1), 12);
  EXPECT_EQ(InterleavedWarmUp(4, 2, 4, 3), 4);
  EXPECT_EQ(InterleavedWarmUp(4, 2, 11, 3), 6);  // first group of 6
  EXPECT_EQ(InterleavedWarmUp(2, 2, 2, 1), 2);
  EXPECT_EQ(InterleavedInFlight(4, 2, 8, 0), 11);
  // Per chunk: rank 0 of P = 2, v = 2, M = 4 runs chunk 0's 4 forwards before chunk 1's first
  // backward frees anything of chunk 0, chunk 1 holds 2: 6 slots for 5 at once.
  EXPECT_EQ(InterleavedChunkSlots(2, 2, 4, 0), (std::vector<int>{4, 2}));
  for (int p : {2, 3, 4}) {
    for (int v : {2, 3}) {
      for (int m = p; m <= 3 * p; ++m) {
        for (int r = 0; r < p; ++r) {
          const std::vector<int> slots = InterleavedChunkSlots(p, v, m, r);
          int sum = 0;
          for (int k : slots) {
            EXPECT_GE(k, 1);
            EXPECT_LE(k, m);
            sum += k;
          }
          EXPECT_GE(sum, InterleavedInFlight(p, v, m, r)) << p << " " << v << " " << m << " " << r;
        }
      }
    }
  }
  EXPECT_EQ(InterleavedInFlight(4, 2, 4, 0), 8);
}

TEST(InterleavedSimulatorTest, ActionOnAStageOfAnotherRankIsRefused) {
  absl::StatusOr<std::vector<v1::RankProgram>> programs = Build(2, 2, 2);
  ASSERT_TRUE(programs.ok()) << programs.status();
  (*programs)[0].mutable_actions(0)->set_stage(1);
  absl::Status status = Simulate(*programs).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("names stage 1 in stage 0's program"));
}

TEST(InterleavedSimulatorTest, OpOnAStageOfAnotherRankIsRefused) {
  OpProgram rank0 = GenerateInterleavedOps(2, 2, 2, 0);
  rank0[0].stage = 3;  // rank 1's second chunk (lowering receives its input first)
  absl::Status status = SimulateOps({LowerOps(rank0, 2, 0, Chunks(2)),
                                     LowerOps(GenerateInterleavedOps(2, 2, 2, 1), 2, 1, Chunks(2))})
                            .status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      std::string(status.message()),
      HasSubstr("3RECV_ACT0 (stage 0 action 0) names stage 3 in stage 0's program (rank 0 of 2 "
                "runs stages 0, 2, ..."));
}

// Golden rank programs (P in {2, 3, 4}, v in {2, 3}, M in {P, 2P + 1, 8}) and the grid of
// docs/schedules.md (P = 4, v = 2, M = 8, t_f = 1, t_b = 2 per chunk).
TEST(InterleavedGoldenTest, Programs) {
  std::string out =
      "# Lowered rank programs of the interleaved schedule, one line per rank (actions name\n"
      "# their virtual stage c * P + r). Written by common/schedule/interleaved_test.cc with\n"
      "# DAPPLE_UPDATE_GOLDEN=1; reviewed by hand against generators.h and lowering.h.\n";
  for (int p : {2, 3, 4}) {
    for (int v : {2, 3}) {
      for (int m : {p, 2 * p + 1, 8}) {
        absl::StrAppend(&out, "== interleaved P=", p, " v=", v, " M=", m, "\n");
        absl::StatusOr<std::vector<v1::RankProgram>> programs = Build(p, v, m);
        ASSERT_TRUE(programs.ok()) << programs.status();
        for (const v1::RankProgram& program : *programs) {
          absl::StrAppend(&out, ProgramToString(program), "\n");
        }
      }
    }
  }
  EXPECT_TRUE(testing::MatchesGolden("interleaved.golden", out));
}

TEST(InterleavedGoldenTest, FourStagesTwoChunksEightMicroBatchesGrid) {
  absl::StatusOr<std::vector<v1::RankProgram>> programs = Build(4, 2, 8);
  ASSERT_TRUE(programs.ok()) << programs.status();
  absl::StatusOr<SimulationResult> sim = Simulate(*programs);
  ASSERT_TRUE(sim.ok()) << sim.status();
  std::cout << sim->grid << "\n";
  EXPECT_TRUE(testing::MatchesGolden("interleaved_p4_v2_m8.grid", sim->grid + "\n"));
}

}  // namespace
}  // namespace dapple::schedule
