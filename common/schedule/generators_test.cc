#include "common/schedule/generators.h"

#include <algorithm>
#include <string>
#include <vector>

#include "common/schedule/action.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::schedule {
namespace {

using ::testing::HasSubstr;

TEST(GeneratorsTest, ParsesScheduleNames) {
  EXPECT_EQ(ParseScheduleKind("gpipe").value(), ScheduleKind::kGPipe);
  EXPECT_EQ(ParseScheduleKind("dapple").value(), ScheduleKind::kDapple);
  EXPECT_EQ(ParseScheduleKind("pipedream").value(), ScheduleKind::kPipeDream);
  EXPECT_EQ(ParseScheduleKind("pipesgd").value(), ScheduleKind::kPipeSgd);
  EXPECT_EQ(ParseScheduleKind("zb-h1").value(), ScheduleKind::kZbH1);
  EXPECT_EQ(ParseScheduleKind("zb-h2").value(), ScheduleKind::kZbH2);
  for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::kDapple, ScheduleKind::kPipeDream,
                            ScheduleKind::kPipeSgd, ScheduleKind::kZbH1, ScheduleKind::kZbH2}) {
    EXPECT_EQ(ParseScheduleKind(ScheduleKindName(kind)).value(), kind);
  }
}

TEST(GeneratorsTest, UnknownScheduleNamesValueAndKnownNames) {
  for (const char* name : {"", "GPipe", "PipeDream", "1f1b", "zb_h1", "ZB-H2", "zbh1"}) {
    absl::StatusOr<ScheduleKind> kind = ParseScheduleKind(name);
    ASSERT_FALSE(kind.ok()) << name;
    EXPECT_EQ(kind.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(kind.status().message()), HasSubstr(std::string("\"") + name + "\""));
    EXPECT_THAT(std::string(kind.status().message()),
                HasSubstr("gpipe, dapple, pipedream, pipesgd, zb-h1, zb-h2"));
  }
}

TEST(GeneratorsTest, GPipeAllForwardsThenReversedBackwards) {
  EXPECT_EQ(ActionsToString(GenerateGPipe(3, 4, 1)), "1F0 1F1 1F2 1F3 1B3 1B2 1B1 1B0 1STEP");
  EXPECT_EQ(ActionsToString(GenerateGPipe(1, 1, 0)), "0F0 0B0 0STEP");
}

TEST(GeneratorsTest, DappleMatchesThePaperForFourStagesEightMicroBatches) {
  EXPECT_EQ(ActionsToString(GenerateDapple(4, 8, 0)),
            "0F0 0F1 0F2 0F3 0B0 0F4 0B1 0F5 0B2 0F6 0B3 0F7 0B4 0B5 0B6 0B7 0STEP");
  EXPECT_EQ(ActionsToString(GenerateDapple(4, 8, 1)),
            "1F0 1F1 1F2 1B0 1F3 1B1 1F4 1B2 1F5 1B3 1F6 1B4 1F7 1B5 1B6 1B7 1STEP");
  EXPECT_EQ(ActionsToString(GenerateDapple(4, 8, 2)),
            "2F0 2F1 2B0 2F2 2B1 2F3 2B2 2F4 2B3 2F5 2B4 2F6 2B5 2F7 2B6 2B7 2STEP");
  EXPECT_EQ(ActionsToString(GenerateDapple(4, 8, 3)),
            "3F0 3B0 3F1 3B1 3F2 3B2 3F3 3B3 3F4 3B4 3F5 3B5 3F6 3B6 3F7 3B7 3STEP");
}

TEST(GeneratorsTest, DappleWarmUpIsCappedByMicroBatches) {
  // K_0 = min(4 - 0, 2) = 2: no steady phase at all.
  EXPECT_EQ(ActionsToString(GenerateDapple(4, 2, 0)), "0F0 0F1 0B0 0B1 0STEP");
  EXPECT_EQ(ActionsToString(GenerateDapple(4, 1, 3)), "3F0 3B0 3STEP");
  // With M <= P - i, DAPPLE on stage i degenerates to forwards then in-order backwards.
  EXPECT_EQ(ActionsToString(GenerateDapple(8, 3, 2)), "2F0 2F1 2F2 2B0 2B1 2B2 2STEP");
}

TEST(GeneratorsTest, GenerateDispatchesOnKind) {
  EXPECT_EQ(ActionsToString(Generate(ScheduleKind::kGPipe, 4, 8, 2)),
            ActionsToString(GenerateGPipe(4, 8, 2)));
  EXPECT_EQ(ActionsToString(Generate(ScheduleKind::kDapple, 4, 8, 2)),
            ActionsToString(GenerateDapple(4, 8, 2)));
}

TEST(GeneratorsTest, PipeSgdIsTheOneStageProgram) {
  EXPECT_EQ(ActionsToString(GeneratePipeSgd(1, 3, 0)),
            "0F0 0B0 0F1 0B1 0F2 0B2 0ALLREDUCE_ASYNC 0STALE_STEP");
  EXPECT_EQ(ActionsToString(Generate(ScheduleKind::kPipeSgd, 1, 1, 0)),
            "0F0 0B0 0ALLREDUCE_ASYNC 0STALE_STEP");
}

TEST(GeneratorsTest, PipeDreamRunsOneFOneBWithoutFlushAndUpdatesEveryN) {
  // P=3, a run of 6 micro-batches, an update after every second backward: the 1F1B order of the
  // whole run (no flush between updates) with a STEP after micro-batches 1, 3 and 5.
  EXPECT_EQ(ActionsToString(GeneratePipeDream(3, 6, 0, 2)),
            "0F0 0F1 0F2 0B0 0F3 0B1 0STEP 0F4 0B2 0F5 0B3 0STEP 0B4 0B5 0STEP");
  EXPECT_EQ(ActionsToString(GeneratePipeDream(3, 6, 2, 2)),
            "2F0 2B0 2F1 2B1 2STEP 2F2 2B2 2F3 2B3 2STEP 2F4 2B4 2F5 2B5 2STEP");
  // PipeDream's own runtime: an update after every backward.
  EXPECT_EQ(ActionsToString(GeneratePipeDream(2, 3, 1, 1)),
            "1F0 1B0 1STEP 1F1 1B1 1STEP 1F2 1B2 1STEP");
  // A run that is not a whole number of updates still ends with one.
  EXPECT_EQ(ActionsToString(GeneratePipeDream(2, 3, 0, 2)), "0F0 0F1 0B0 0F2 0B1 0STEP 0B2 0STEP");
}

TEST(GeneratorsTest, PipeDreamOneUpdateIsDappleAndGenerateDispatchesToIt) {
  for (int p = 1; p <= 5; ++p) {
    for (int m = 1; m <= 9; ++m) {
      for (int s = 0; s < p; ++s) {
        SCOPED_TRACE(::testing::Message() << "P=" << p << " M=" << m << " stage " << s);
        EXPECT_EQ(ActionsToString(Generate(ScheduleKind::kPipeDream, p, m, s)),
                  ActionsToString(GenerateDapple(p, m, s)));
        EXPECT_EQ(ActionsToString(GeneratePipeDream(p, m, s, m)),
                  ActionsToString(GenerateDapple(p, m, s)));
      }
    }
  }
}

TEST(GeneratorsTest, PipeDreamHoldsMinOfStagesLeftAndRunLengthInFlight) {
  for (int p = 1; p <= 6; ++p) {
    for (int n : {1, 3, 8, 20}) {
      for (int every : {1, 2, 4}) {
        for (int s = 0; s < p; ++s) {
          SCOPED_TRACE(::testing::Message()
                       << "P=" << p << " N=" << n << " every " << every << " stage " << s);
          const std::vector<v1::Action> run = GeneratePipeDream(p, n, s, every);
          int in_flight = 0, peak = 0, steps = 0, backwards = 0, next_backward = 0;
          for (const v1::Action& a : run) {
            EXPECT_EQ(a.stage(), s);
            if (a.kind() == v1::FORWARD) peak = std::max(peak, ++in_flight);
            if (a.kind() == v1::BACKWARD) {
              --in_flight;
              ++backwards;
              EXPECT_EQ(a.micro_batch(), next_backward++);
            }
            if (a.kind() == v1::OPTIMIZER_STEP) {
              ++steps;
              // Each update follows the backward that completes its group of `every`.
              EXPECT_TRUE(backwards % every == 0 || backwards == n) << backwards;
            }
          }
          EXPECT_EQ(peak, std::min(p - s, n));
          EXPECT_EQ(steps, (n + every - 1) / every);
          EXPECT_EQ(run.back().kind(), v1::OPTIMIZER_STEP);
        }
      }
    }
  }
}

TEST(GeneratorsTest, OpFormsMatchTheActionForms) {
  for (ScheduleKind kind :
       {ScheduleKind::kGPipe, ScheduleKind::kDapple, ScheduleKind::kPipeDream}) {
    for (int s = 0; s < 4; ++s) {
      EXPECT_EQ(ActionsToString(ToActions(s, GenerateOps(kind, 4, 6, s))),
                ActionsToString(Generate(kind, 4, 6, s)));
    }
  }
  EXPECT_EQ(ActionsToString(ToActions(1, GeneratePipeDreamOps(3, 7, 1, 3))),
            ActionsToString(GeneratePipeDream(3, 7, 1, 3)));
  EXPECT_EQ(ToOps(GenerateGPipe(2, 2, 1)), GenerateGPipeOps(2, 2, 1));
  EXPECT_EQ(ToOps(GenerateDapple(2, 2, 1)), GenerateDappleOps(2, 2, 1));
}

// Walks one stage's compute program: each micro-batch forwarded and backwarded once, backward
// after forward, one final STEP; returns the peak of forwards whose backward has not run.
int CheckComputeProgram(const std::vector<v1::Action>& actions, int m, int stage) {
  std::vector<int> forwards(m, 0), backwards(m, 0);
  int in_flight = 0, peak = 0;
  for (size_t i = 0; i < actions.size(); ++i) {
    const v1::Action& a = actions[i];
    EXPECT_EQ(a.stage(), stage);
    if (i + 1 == actions.size()) {
      EXPECT_EQ(a.kind(), v1::OPTIMIZER_STEP);
      EXPECT_EQ(a.micro_batch(), -1);
      continue;
    }
    EXPECT_GE(a.micro_batch(), 0);
    EXPECT_LT(a.micro_batch(), m);
    if (a.micro_batch() < 0 || a.micro_batch() >= m) continue;
    if (a.kind() == v1::FORWARD) {
      ++forwards[a.micro_batch()];
      peak = std::max(peak, ++in_flight);
    } else {
      EXPECT_EQ(a.kind(), v1::BACKWARD);
      EXPECT_EQ(forwards[a.micro_batch()], 1) << "backward before forward: " << ActionToString(a);
      ++backwards[a.micro_batch()];
      --in_flight;
    }
  }
  for (int mb = 0; mb < m; ++mb) {
    EXPECT_EQ(forwards[mb], 1) << "micro-batch " << mb;
    EXPECT_EQ(backwards[mb], 1) << "micro-batch " << mb;
  }
  return peak;
}

TEST(GeneratorsTest, EveryStageComputesEachMicroBatchOnceWithTheDocumentedMemoryBound) {
  for (int p = 1; p <= 8; ++p) {
    for (int m = 1; m <= 16; ++m) {
      for (int s = 0; s < p; ++s) {
        SCOPED_TRACE(::testing::Message() << "P=" << p << " M=" << m << " stage " << s);
        const std::vector<v1::Action> gpipe = GenerateGPipe(p, m, s);
        ASSERT_EQ(gpipe.size(), 2u * m + 1);
        EXPECT_EQ(CheckComputeProgram(gpipe, m, s), m);

        const std::vector<v1::Action> dapple = GenerateDapple(p, m, s);
        ASSERT_EQ(dapple.size(), 2u * m + 1);
        const int k = std::min(p - s, m);
        EXPECT_EQ(CheckComputeProgram(dapple, m, s), k);
        // Warm-up: exactly K forwards before the first backward, and backwards in order.
        for (int i = 0; i < k; ++i) EXPECT_EQ(dapple[i].kind(), v1::FORWARD);
        EXPECT_EQ(dapple[k].kind(), v1::BACKWARD);
        int next_backward = 0;
        for (const v1::Action& a : dapple) {
          if (a.kind() == v1::BACKWARD) {
            EXPECT_EQ(a.micro_batch(), next_backward++);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace dapple::schedule
