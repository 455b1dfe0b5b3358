#include "common/schedule/lowering.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/schedule/action.h"
#include "common/schedule/generators.h"
#include "common/schedule/golden_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::schedule {
namespace {

using ::testing::HasSubstr;

TEST(LowerTest, MiddleStageReceivesAndSendsBothWays) {
  const v1::RankProgram program = Lower(GenerateDapple(3, 2, 1), 3, 1);
  EXPECT_EQ(program.stage(), 1);
  EXPECT_EQ(program.replica(), 0);
  EXPECT_EQ(ProgramToString(program),
            "stage 1 replica 0: 1RECV_ACT0 1F0 1SEND_ACT0 1RECV_ACT1 1F1 1SEND_ACT1 "
            "1RECV_GRAD0 1B0 1SEND_GRAD0 1RECV_GRAD1 1B1 1SEND_GRAD1 1STEP");
}

TEST(LowerTest, FirstAndLastStagesTalkOnlyInward) {
  EXPECT_EQ(
      ProgramToString(Lower(GenerateGPipe(2, 2, 0), 2, 0)),
      "stage 0 replica 0: 0F0 0SEND_ACT0 0F1 0SEND_ACT1 0RECV_GRAD1 0B1 0RECV_GRAD0 0B0 0STEP");
  EXPECT_EQ(ProgramToString(Lower(GenerateGPipe(2, 2, 1), 2, 1)),
            "stage 1 replica 0: 1RECV_ACT0 1F0 1RECV_ACT1 1F1 1B1 1SEND_GRAD1 1B0 1SEND_GRAD0 "
            "1STEP");
}

TEST(LowerTest, SingleStageHasNoCommunication) {
  EXPECT_EQ(ProgramToString(Lower(GenerateDapple(1, 3, 0), 1, 0)),
            "stage 0 replica 0: 0F0 0B0 0F1 0B1 0F2 0B2 0STEP");
}

TEST(LowerTest, KeepsOtherActionsInPlace) {
  const std::vector<v1::Action> compute = {
      MakeAction(1, v1::FORWARD, 0), MakeAction(1, v1::BACKWARD, 0), MakeAction(1, v1::ALLREDUCE),
      MakeAction(1, v1::OPTIMIZER_STEP)};
  EXPECT_EQ(ProgramToString(Lower(compute, 3, 1)),
            "stage 1 replica 0: 1RECV_ACT0 1F0 1SEND_ACT0 1RECV_GRAD0 1B0 1SEND_GRAD0 "
            "1ALLREDUCE 1STEP");
}

TEST(BuildProgramsTest, RejectsBadSizesNamingTheValue) {
  for (const auto& [p, m, field] :
       {std::tuple{0, 4, "num_stages 0"}, std::tuple{-3, 4, "num_stages -3"},
        std::tuple{2, 0, "num_micro_batches 0"}, std::tuple{2, -1, "num_micro_batches -1"}}) {
    absl::StatusOr<std::vector<v1::RankProgram>> programs =
        BuildPrograms(ScheduleKind::kDapple, p, m);
    ASSERT_FALSE(programs.ok());
    EXPECT_EQ(programs.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(programs.status().message()), HasSubstr(field));
  }
}

TEST(BuildProgramsTest, OneProgramPerStageInStageOrder) {
  absl::StatusOr<std::vector<v1::RankProgram>> programs = BuildPrograms(ScheduleKind::kGPipe, 5, 3);
  ASSERT_TRUE(programs.ok()) << programs.status();
  ASSERT_EQ(programs->size(), 5u);
  for (int s = 0; s < 5; ++s) {
    EXPECT_EQ((*programs)[s].stage(), s);
    EXPECT_EQ((*programs)[s].replica(), 0);
    EXPECT_EQ(ProgramToString((*programs)[s]),
              ProgramToString(Lower(GenerateGPipe(5, 3, s), 5, s)));
  }
}

TEST(LowerTest, AllReduceGoesBeforeEachStepOfTheChosenStages) {
  LowerOptions options;
  options.allreduce_stages = {false, true};
  EXPECT_EQ(ProgramToString(Lower(GenerateDapple(2, 1, 1), 2, 1, options)),
            "stage 1 replica 0: 1RECV_ACT0 1F0 1B0 1SEND_GRAD0 1ALLREDUCE 1STEP");
  EXPECT_EQ(ProgramToString(Lower(GenerateDapple(2, 1, 0), 2, 0, options)),
            "stage 0 replica 0: 0F0 0SEND_ACT0 0RECV_GRAD0 0B0 0STEP");
  // One AllReduce per update in a PipeDream run.
  EXPECT_EQ(ActionsToString(ToActions(
                0, LowerOps(GeneratePipeDreamOps(1, 4, 0, 2), 1, 0, LowerOptions{{true}}))),
            "0F0 0B0 0F1 0B1 0ALLREDUCE 0STEP 0F2 0B2 0F3 0B3 0ALLREDUCE 0STEP");
  // The default (and a vector shorter than the stage) adds none.
  EXPECT_EQ(ProgramToString(Lower(GenerateGPipe(1, 1, 0), 1, 0)),
            "stage 0 replica 0: 0F0 0B0 0STEP");
  EXPECT_EQ(ProgramToString(Lower(GenerateGPipe(3, 1, 2), 3, 2, LowerOptions{{true}})),
            "stage 2 replica 0: 2RECV_ACT0 2F0 2B0 2SEND_GRAD0 2STEP");
}

// The collectives before an update, in their one order: the tied weights' sum, the replicas'
// AllReduce (which then leaves the tied tensors out), the global norm of the final gradients.
TEST(LowerTest, CollectivesGoBeforeEachStepInOrder) {
  LowerOptions options;
  options.allreduce_stages = {true, false};
  options.tied_stages = {true, true};
  options.global_norm = true;
  EXPECT_EQ(ProgramToString(Lower(GenerateDapple(2, 1, 0), 2, 0, options)),
            "stage 0 replica 0: 0F0 0SEND_ACT0 0RECV_GRAD0 0B0 0TIED_ALLREDUCE 0ALLREDUCE "
            "0GLOBAL_NORM 0STEP");
  EXPECT_EQ(ProgramToString(Lower(GenerateDapple(2, 1, 1), 2, 1, options)),
            "stage 1 replica 0: 1RECV_ACT0 1F0 1B0 1SEND_GRAD0 1TIED_ALLREDUCE 1GLOBAL_NORM 1STEP");
  // Once per update in a PipeDream run.
  LowerOptions norm_only;
  norm_only.global_norm = true;
  EXPECT_EQ(
      ActionsToString(ToActions(0, LowerOps(GeneratePipeDreamOps(1, 4, 0, 2), 1, 0, norm_only))),
      "0F0 0B0 0F1 0B1 0GLOBAL_NORM 0STEP 0F2 0B2 0F3 0B3 0GLOBAL_NORM 0STEP");
}

TEST(BuildProgramsTest, TiedStagesMustNameEveryStage) {
  LowerOptions options;
  options.tied_stages = {true, true};
  absl::StatusOr<std::vector<v1::RankProgram>> programs =
      BuildPrograms(ScheduleKind::kDapple, 3, 2, options);
  ASSERT_FALSE(programs.ok());
  EXPECT_EQ(programs.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(programs.status().message()),
              HasSubstr("options.tied_stages has 2 entries for 3 stages"));
}

TEST(LowerTest, OpFormMatchesTheActionForm) {
  const LowerOptions options{{true, false, true}};
  for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::kDapple}) {
    for (int s = 0; s < 3; ++s) {
      const v1::RankProgram program = Lower(Generate(kind, 3, 4, s), 3, s, options);
      EXPECT_EQ(
          ToRankProgram(s, LowerOps(GenerateOps(kind, 3, 4, s), 3, s, options)).SerializeAsString(),
          program.SerializeAsString())
          << ProgramToString(program);
    }
  }
}

TEST(BuildProgramsTest, AllReduceStagesMustNameEveryStage) {
  absl::StatusOr<std::vector<v1::RankProgram>> programs =
      BuildPrograms(ScheduleKind::kDapple, 3, 2, LowerOptions{{true, false}});
  ASSERT_FALSE(programs.ok());
  EXPECT_EQ(programs.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(programs.status().message()),
              HasSubstr("options.allreduce_stages has 2 entries for 3 stages"));

  programs = BuildPrograms(ScheduleKind::kDapple, 3, 2, LowerOptions{{false, true, false}});
  ASSERT_TRUE(programs.ok()) << programs.status();
  EXPECT_EQ(ProgramToString((*programs)[1]),
            "stage 1 replica 0: 1RECV_ACT0 1F0 1SEND_ACT0 1RECV_ACT1 1F1 1SEND_ACT1 1RECV_GRAD0 "
            "1B0 1SEND_GRAD0 1RECV_GRAD1 1B1 1SEND_GRAD1 1ALLREDUCE 1STEP");
}

TEST(BuildProgramsTest, PipeSgdIsOneReplicatedStage) {
  absl::StatusOr<std::vector<v1::RankProgram>> programs =
      BuildPrograms(ScheduleKind::kPipeSgd, 1, 3, LowerOptions{{true}});
  ASSERT_TRUE(programs.ok()) << programs.status();
  ASSERT_EQ(programs->size(), 1u);
  EXPECT_EQ(ProgramToString((*programs)[0]),
            "stage 0 replica 0: 0F0 0B0 0F1 0B1 0F2 0B2 0ALLREDUCE_ASYNC 0STALE_STEP");
  for (int p : {2, 4}) {
    programs = BuildPrograms(ScheduleKind::kPipeSgd, p, 3);
    ASSERT_FALSE(programs.ok()) << p;
    EXPECT_EQ(programs.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(programs.status().message()),
                HasSubstr(absl::StrCat("pipesgd is data parallelism over one stage, got "
                                       "num_stages ",
                                       p)));
  }
}

TEST(BuildProgramsTest, PipeDreamBuildsOneUpdateLikeDapple) {
  absl::StatusOr<std::vector<v1::RankProgram>> pipedream =
      BuildPrograms(ScheduleKind::kPipeDream, 3, 4);
  absl::StatusOr<std::vector<v1::RankProgram>> dapple = BuildPrograms(ScheduleKind::kDapple, 3, 4);
  ASSERT_TRUE(pipedream.ok()) << pipedream.status();
  ASSERT_TRUE(dapple.ok()) << dapple.status();
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(ProgramToString((*pipedream)[s]), ProgramToString((*dapple)[s]));
  }
}

// All (P, M) cases of one schedule as text: a "== <schedule> P=<p> M=<m>" header line per case,
// then one ProgramToString line per stage.
std::string GoldenText(ScheduleKind kind, const std::vector<int>& micro_batches = {1, 2, 3, 4, 8}) {
  std::string out = absl::StrCat("# Lowered rank programs of the ", ScheduleKindName(kind),
                                 " schedule, one line per stage.\n"
                                 "# Written by common/schedule/lowering_test.cc with "
                                 "DAPPLE_UPDATE_GOLDEN=1;\n"
                                 "# reviewed by hand against generators.h and lowering.h.\n");
  for (int p : {1, 2, 3, 4}) {
    for (int m : micro_batches) {
      absl::StrAppend(&out, "== ", ScheduleKindName(kind), " P=", p, " M=", m, "\n");
      absl::StatusOr<std::vector<v1::RankProgram>> programs = BuildPrograms(kind, p, m);
      EXPECT_TRUE(programs.ok()) << programs.status();
      if (!programs.ok()) continue;
      for (const v1::RankProgram& program : *programs) {
        absl::StrAppend(&out, ProgramToString(program), "\n");
      }
    }
  }
  return out;
}

TEST(GoldenTest, GPipePrograms) {
  EXPECT_TRUE(testing::MatchesGolden("gpipe.golden", GoldenText(ScheduleKind::kGPipe)));
}

TEST(GoldenTest, DapplePrograms) {
  EXPECT_TRUE(testing::MatchesGolden("dapple.golden", GoldenText(ScheduleKind::kDapple)));
}

// The zero-bubble schedules also at M = P and 2P + 1 for P in {2, 4} (ZB-H2's warm-up is
// 2P - 1, so M = 9 is the first M where stage 0 of P = 4 has a steady phase).
TEST(GoldenTest, ZbH1Programs) {
  EXPECT_TRUE(testing::MatchesGolden("zb_h1.golden",
                                     GoldenText(ScheduleKind::kZbH1, {1, 2, 3, 4, 5, 8, 9})));
}

TEST(GoldenTest, ZbH2Programs) {
  EXPECT_TRUE(testing::MatchesGolden("zb_h2.golden",
                                     GoldenText(ScheduleKind::kZbH2, {1, 2, 3, 4, 5, 8, 9})));
}

}  // namespace
}  // namespace dapple::schedule
