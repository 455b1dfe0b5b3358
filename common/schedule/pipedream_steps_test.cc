#include "common/schedule/pipedream_steps.h"

#include "common/schedule/generators.h"
#include "gtest/gtest.h"

namespace dapple::schedule {
namespace {

// The steps, concatenated with global micro-batch indices, are the continuous run.
TEST(PipeDreamStepsTest, StepsConcatenateToTheContinuousRun) {
  for (int p : {1, 2, 3, 4, 5}) {
    for (int m : {1, 2, 3, 4, 8}) {
      for (int64_t steps : {1, 2, 3, 5}) {
        for (int s = 0; s < p; ++s) {
          const OpProgram run =
              GeneratePipeDreamOps(p, static_cast<int>(steps * m), s, /*per_update=*/m);
          OpProgram joined;
          for (int64_t t = 0; t < steps; ++t) {
            for (Op op : GeneratePipeDreamStepOps(p, m, s, t, steps)) {
              if (op.kind != v1::OPTIMIZER_STEP) {
                EXPECT_GE(op.micro_batch, 0);
                EXPECT_LT(op.micro_batch, m + PipeDreamWarmUp(p, m, s, steps) - 1);
                op.micro_batch += static_cast<int>(t * m);
              }
              joined.push_back(op);
            }
          }
          ASSERT_EQ(joined.size(), run.size()) << "P=" << p << " M=" << m << " steps=" << steps;
          for (size_t i = 0; i < run.size(); ++i) {
            EXPECT_EQ(joined[i].kind, run[i].kind) << i;
            EXPECT_EQ(joined[i].micro_batch, run[i].micro_batch) << i;
          }
        }
      }
    }
  }
}

TEST(PipeDreamStepsTest, EveryStepEndsWithItsOwnUpdateAfterItsLastBackward) {
  const int p = 4, m = 8;
  for (int s = 0; s < p; ++s) {
    for (int64_t t = 0; t < 3; ++t) {
      const OpProgram ops = GeneratePipeDreamStepOps(p, m, s, t, 3);
      ASSERT_GE(ops.size(), 2u);
      EXPECT_EQ(ops.back().kind, v1::OPTIMIZER_STEP);
      EXPECT_EQ(ops[ops.size() - 2].kind, v1::BACKWARD);
      EXPECT_EQ(ops[ops.size() - 2].micro_batch, m - 1);
      int backwards = 0;
      for (const Op& op : ops) backwards += op.kind == v1::BACKWARD;
      EXPECT_EQ(backwards, m) << "every step trains on its own M micro-batches";
    }
  }
}

TEST(PipeDreamStepsTest, WarmUpIsPMinusStage) {
  EXPECT_EQ(PipeDreamWarmUp(4, 8, 0, 10), 4);
  EXPECT_EQ(PipeDreamWarmUp(4, 8, 3, 10), 1);
  EXPECT_EQ(PipeDreamWarmUp(4, 1, 0, 2), 2);  // fewer micro-batches in the whole run than P
}

}  // namespace
}  // namespace dapple::schedule
