#include "common/steps.h"

#include <vector>

#include "gtest/gtest.h"

namespace dapple {
namespace {

// fashion-mnist: 60000 samples; global batch 10000 gives 6 steps per epoch.
v1::JobSpec Spec(int64_t epochs, int64_t eval_every_steps, int64_t max_steps = 0) {
  v1::JobSpec spec;
  spec.mutable_data()->set_dataset("fashion-mnist");
  spec.mutable_training()->set_global_batch(10000);
  spec.mutable_training()->set_epochs(epochs);
  spec.mutable_training()->set_eval_every_steps(eval_every_steps);
  spec.mutable_training()->set_max_steps(max_steps);
  return spec;
}

// The steps (1-based) after which the job evaluates.
std::vector<int64_t> EvalSteps(const v1::JobSpec& spec) {
  std::vector<int64_t> steps;
  for (int64_t step = 0; step < TotalSteps(spec); ++step) {
    if (EvaluatesAfterStep(spec, step)) steps.push_back(step + 1);
  }
  return steps;
}

TEST(EvaluatesAfterStepTest, ZeroEvaluatesAfterEveryEpoch) {
  EXPECT_EQ(EvalSteps(Spec(3, 0)), (std::vector<int64_t>{6, 12, 18}));
}

TEST(EvaluatesAfterStepTest, EveryNStepsAndAtTheEnd) {
  EXPECT_EQ(EvalSteps(Spec(3, 4)), (std::vector<int64_t>{4, 8, 12, 16, 18}));
  EXPECT_EQ(EvalSteps(Spec(3, 6)), (std::vector<int64_t>{6, 12, 18}));
  EXPECT_EQ(EvalSteps(Spec(1, 1)), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  // Longer than the job: only at the end.
  EXPECT_EQ(EvalSteps(Spec(2, 100)), (std::vector<int64_t>{12}));
}

TEST(EvaluatesAfterStepTest, MaxStepsEndsTheJobWithAnEvaluation) {
  EXPECT_EQ(EvalSteps(Spec(3, 0, /*max_steps=*/8)), (std::vector<int64_t>{6, 8}));
  EXPECT_EQ(EvalSteps(Spec(3, 5, /*max_steps=*/8)), (std::vector<int64_t>{5, 8}));
}

TEST(EvaluatesAfterStepTest, TextDatasetCountsItsOwnSteps) {
  v1::JobSpec spec = Spec(1, 0);
  spec.mutable_data()->set_dataset("text");
  spec.mutable_data()->set_train_samples(35000);  // 3 steps of 10000, the remainder dropped
  EXPECT_EQ(EvalSteps(spec), (std::vector<int64_t>{3}));
  spec.mutable_training()->set_eval_every_steps(2);
  EXPECT_EQ(EvalSteps(spec), (std::vector<int64_t>{2, 3}));
}

// Whether some evaluation comes before the last step: the same steps as EvalSteps.
TEST(EvaluatesBetweenStepsTest, AnEvaluationBeforeTheLastStep) {
  for (const v1::JobSpec& spec : {Spec(3, 0), Spec(3, 4), Spec(2, 100), Spec(1, 0), Spec(1, 6),
                                  Spec(1, 5), Spec(3, 0, 8), Spec(3, 0, 6), Spec(3, 0, 5)}) {
    const std::vector<int64_t> steps = EvalSteps(spec);
    EXPECT_EQ(EvaluatesBetweenSteps(spec), steps.size() > 1) << spec.DebugString();
  }
}

TEST(EvaluatesAfterStepTest, NoStepsNoEvaluation) {
  v1::JobSpec spec = Spec(1, 0);
  spec.mutable_training()->set_global_batch(0);
  EXPECT_FALSE(EvaluatesAfterStep(spec, 0));
  EXPECT_FALSE(EvaluatesAfterStep(spec, 5));
}

TEST(EpochOfStepTest, StepsOfAnEpochShareItsNumber) {
  const v1::JobSpec spec = Spec(3, 0);  // 6 steps per epoch
  EXPECT_EQ(EpochOfStep(spec, 0), 1);   // nothing done yet: the first epoch
  EXPECT_EQ(EpochOfStep(spec, 1), 1);
  EXPECT_EQ(EpochOfStep(spec, 6), 1);
  EXPECT_EQ(EpochOfStep(spec, 7), 2);
  EXPECT_EQ(EpochOfStep(spec, 18), 3);
  EXPECT_EQ(EpochOfStep(v1::JobSpec{}, 5), 1);  // no steps per epoch
}

}  // namespace
}  // namespace dapple
