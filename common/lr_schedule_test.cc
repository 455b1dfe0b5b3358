#include "common/lr_schedule.h"

#include <cmath>

#include "gtest/gtest.h"

namespace dapple {
namespace {

v1::TrainingSpec Training(double lr) {
  v1::TrainingSpec t;
  t.mutable_optimizer()->set_type("sgd");
  t.mutable_optimizer()->set_lr(lr);
  return t;
}

TEST(LrScheduleTest, WithoutAScheduleEveryUpdateUsesTheOptimizersRate) {
  const v1::TrainingSpec t = Training(0.1);
  for (int64_t update : {0, 1, 7, 1000}) EXPECT_EQ(LearningRate(t, update, 10), 0.1);
}

TEST(LrScheduleTest, LinearWarmUpThenConstant) {
  v1::TrainingSpec t = Training(0.1);
  t.mutable_lr_schedule()->set_warmup_steps(4);
  t.mutable_lr_schedule()->set_decay("none");
  EXPECT_DOUBLE_EQ(LearningRate(t, 0, 100), 0.025);
  EXPECT_DOUBLE_EQ(LearningRate(t, 1, 100), 0.05);
  EXPECT_DOUBLE_EQ(LearningRate(t, 2, 100), 0.075);
  EXPECT_DOUBLE_EQ(LearningRate(t, 3, 100), 0.1);
  EXPECT_DOUBLE_EQ(LearningRate(t, 4, 100), 0.1);
  EXPECT_DOUBLE_EQ(LearningRate(t, 99, 100), 0.1);
  EXPECT_DOUBLE_EQ(LearningRate(t, 500, 100), 0.1);  // past the end: still constant
  // An empty decay is none.
  t.mutable_lr_schedule()->set_decay("");
  EXPECT_DOUBLE_EQ(LearningRate(t, 9, 100), 0.1);
}

// Hand-computed: lr 0.1, min_lr 0.01, warm-up 4, cosine to update 10.
TEST(LrScheduleTest, CosineDecayAfterWarmUp) {
  v1::TrainingSpec t = Training(0.1);
  v1::LrSchedule* s = t.mutable_lr_schedule();
  s->set_warmup_steps(4);
  s->set_decay("cosine");
  s->set_min_lr(0.01);
  s->set_decay_steps(10);
  EXPECT_DOUBLE_EQ(LearningRate(t, 0, 50), 0.025);
  EXPECT_DOUBLE_EQ(LearningRate(t, 3, 50), 0.1);
  EXPECT_DOUBLE_EQ(LearningRate(t, 4, 50), 0.1);  // cos(0): the decay starts at lr
  // (5 - 4) / 6: 0.01 + 0.09 * (1 + cos(pi / 6)) / 2 = 0.01 + 0.09 * 0.9330127018922193.
  EXPECT_NEAR(LearningRate(t, 5, 50), 0.093971143170299, 1e-15);
  EXPECT_NEAR(LearningRate(t, 7, 50), 0.055, 1e-15);  // half way: cos(pi / 2) = 0
  // (9 - 4) / 6: 0.01 + 0.09 * (1 + cos(5 pi / 6)) / 2 = 0.01 + 0.09 * 0.0669872981077807.
  EXPECT_NEAR(LearningRate(t, 9, 50), 0.016028856829700, 1e-15);
  EXPECT_DOUBLE_EQ(LearningRate(t, 10, 50), 0.01);  // decay_steps reached: min_lr after
  EXPECT_DOUBLE_EQ(LearningRate(t, 49, 50), 0.01);
}

TEST(LrScheduleTest, DecayStepsZeroMeansTheJobsTotalSteps) {
  v1::TrainingSpec t = Training(0.2);
  v1::LrSchedule* s = t.mutable_lr_schedule();
  s->set_warmup_steps(4);
  s->set_decay("cosine");
  // 14 steps: the decay runs over updates [4, 14), half way at 9; min_lr 0.
  EXPECT_NEAR(LearningRate(t, 9, 14), 0.1, 1e-15);
  EXPECT_NEAR(LearningRate(t, 13, 14), 0.2 * (1 + std::cos(M_PI * 9.0 / 10.0)) / 2, 1e-15);
  EXPECT_DOUBLE_EQ(LearningRate(t, 14, 14), 0.0);
  // Without a warm-up the decay starts at update 0 with lr.
  s->set_warmup_steps(0);
  EXPECT_DOUBLE_EQ(LearningRate(t, 0, 14), 0.2);
  EXPECT_NEAR(LearningRate(t, 7, 14), 0.1, 1e-15);
}

TEST(LrScheduleTest, AResumedJobGetsTheRateOfItsUpdateCount) {
  v1::TrainingSpec t = Training(0.1);
  v1::LrSchedule* s = t.mutable_lr_schedule();
  s->set_warmup_steps(2);
  s->set_decay("cosine");
  s->set_decay_steps(6);
  // A pure function of the update: the same value whoever asks, in any order.
  const double at4 = LearningRate(t, 4, 100);
  EXPECT_DOUBLE_EQ(LearningRate(t, 0, 100), 0.05);
  EXPECT_EQ(LearningRate(t, 4, 100), at4);
  EXPECT_DOUBLE_EQ(at4, 0.05);                       // (4 - 2) / 4 = half way from 0.1 to 0
  EXPECT_DOUBLE_EQ(LearningRate(t, -3, 100), 0.05);  // a negative update counts as 0
}

}  // namespace
}  // namespace dapple
