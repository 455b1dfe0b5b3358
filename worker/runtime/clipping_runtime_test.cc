// The learning-rate schedule and global-norm gradient clipping under pipelining: every
// synchronous (schedule, P, D) trains the MLP exactly like the single-device reference (per-step
// loss and final weights within 1e-5 relative), the global norm every rank agrees on is the
// reference's, and every rank reports the rate of its update. Every rank is a thread
// (testing/local_job.h: in-memory transport, LocalCollective groups).
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/lr_schedule.h"
#include "common/schedule/lowering.h"
#include "common/schedule/ranks.h"
#include "common/steps.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/runtime/reference_trainer.h"
#include "worker/runtime/stage_runtime.h"
#include "worker/runtime/testing/local_job.h"
#include "worker/runtime/testing/parity_testing.h"

namespace dapple::worker {
namespace {

using ::testing::HasSubstr;

constexpr int kSteps = 7;
constexpr double kMaxGradNorm = 0.5;

// The parity MLP with a warm-up of 2 updates, a cosine decay over updates [2, 6) and clipping.
v1::JobSpec ScheduledSpec(const std::string& schedule, int64_t micro_batch,
                          const std::string& optimizer = "sgd") {
  parity::SpecOptions o;
  o.global_batch = 64;
  o.micro_batch = micro_batch;
  o.optimizer = optimizer;
  v1::JobSpec spec = parity::ParitySpec(o);
  spec.mutable_parallel()->set_schedule(schedule);
  v1::TrainingSpec* t = spec.mutable_training();
  t->set_max_grad_norm(kMaxGradNorm);
  t->mutable_lr_schedule()->set_warmup_steps(2);
  t->mutable_lr_schedule()->set_decay("cosine");
  t->mutable_lr_schedule()->set_min_lr(t->optimizer().lr() / 10);
  t->mutable_lr_schedule()->set_decay_steps(6);
  return spec;
}

struct Case {
  std::string schedule;
  int stages;    // P
  int replicas;  // D on every stage
  int micro_batches = 4;
  std::string optimizer = "sgd";
};

std::string CaseName(const Case& c) {
  // gtest names take no '-': "zb-h2" becomes "zb_h2".
  return absl::StrCat(absl::StrReplaceAll(c.schedule, {{"-", "_"}}), "_P", c.stages, "_D",
                      c.replicas, "_M", c.micro_batches, "_", c.optimizer);
}

class ClippingParityTest : public ::testing::TestWithParam<Case> {};

TEST_P(ClippingParityTest, MatchesTheReferenceWithScheduleAndClipping) {
  const Case c = GetParam();
  const v1::JobSpec spec = ScheduledSpec(c.schedule, 64 / c.micro_batches, c.optimizer);
  const v1::ParallelPlanSummary plan =
      parity::WithReplicas(parity::UniformPlan(spec.model().layers_size(), c.stages),
                           std::vector<int>(c.stages, c.replicas));
  absl::StatusOr<std::unique_ptr<parity::LocalJob>> job =
      parity::LocalJob::Create(spec, plan, &parity::TrainSet(), &parity::TestSet());
  ASSERT_TRUE(job.ok()) << job.status();
  const std::vector<parity::LocalJob::RankRun> runs = (*job)->Run(0, kSteps, /*evaluate=*/true);
  for (int rank = 0; rank < (*job)->num_ranks(); ++rank) {
    ASSERT_TRUE(runs[rank].status.ok()) << "rank " << rank << ": " << runs[rank].status;
  }

  // The reference's norm before clipping, step by step; clipping must have acted.
  auto ref = ReferenceTrainer::Create(spec, &parity::TrainSet()).value();
  std::vector<double> ref_sq_norms;
  bool clipped = false;
  for (int step = 0; step < kSteps; ++step) {
    ref->Step(step);
    ref_sq_norms.push_back(ref->last_gradient_sq_norm());
    clipped = clipped || std::sqrt(ref_sq_norms.back()) > kMaxGradNorm;
  }
  EXPECT_TRUE(clipped) << "no step's gradient norm exceeded " << kMaxGradNorm;

  for (int step = 0; step < kSteps; ++step) {
    // The stages' norms (replica 0 each) add up to the reference's global norm.
    double total = 0;
    for (int s = 0; s < c.stages; ++s) {
      total += runs[schedule::RankIndex(plan, s, 0)].steps[step].stats.gradient_sq_norm();
    }
    EXPECT_NEAR(total, ref_sq_norms[step], 1e-5 * ref_sq_norms[step]) << "step " << step + 1;
    // Every rank updated with the schedule's rate of that update.
    const double lr = LearningRate(spec.training(), step, TotalSteps(spec));
    for (int rank = 0; rank < (*job)->num_ranks(); ++rank) {
      EXPECT_DOUBLE_EQ(runs[rank].steps[step].stats.learning_rate(), lr)
          << "rank " << rank << " step " << step + 1;
    }
  }

  parity::PipelineRun run;
  const int last0 = schedule::RankIndex(plan, c.stages - 1, 0);
  for (const StepResult& r : runs[last0].steps) run.losses.push_back(r.loss);
  run.eval_accuracy = runs[last0].eval.accuracy;
  run.status.assign(c.stages, absl::OkStatus());
  std::vector<std::unique_ptr<StageRuntime>> firsts;
  for (int s = 0; s < c.stages; ++s) {
    firsts.push_back((*job)->TakeRuntime(schedule::RankIndex(plan, s, 0)));
  }
  parity::ExpectMatchesReference(spec, kSteps, firsts, run);
}

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (const char* schedule : {"gpipe", "dapple"}) {
    for (int p : {1, 2, 3}) {
      for (int d : {1, 2}) cases.push_back({schedule, p, d});
    }
  }
  cases.push_back({"dapple", 2, 2, 4, "adamw"});
  // ZB-H2's OPTIMIZER_STEP comes after every BACKWARD_WEIGHT, so its GLOBAL_NORM sees the
  // whole step's gradients: clipping is exact without post-validation.
  cases.push_back({"zb-h1", 2, 1, 4});
  cases.push_back({"zb-h2", 2, 2, 4});
  cases.push_back({"zb-h2", 3, 1, 8});
  // PipeDream with one unreplicated stage is synchronous (warm-up 1): exact as well.
  cases.push_back({"pipedream", 1, 1});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(All, ClippingParityTest, ::testing::ValuesIn(AllCases()),
                         [](const auto& info) { return CaseName(info.param); });

// Asynchronous PipeDream with clipping over 2 x 2 ranks (1F1B-RR): it runs, one norm per step
// reaches every rank, and the replicas of each stage stay bitwise equal.
TEST(ClippingPipeDreamTest, ReplicatedPipelineRunsWithIdenticalReplicas) {
  const v1::JobSpec spec = ScheduledSpec("pipedream", 16);
  const v1::ParallelPlanSummary plan =
      parity::WithReplicas(parity::UniformPlan(spec.model().layers_size(), 2), {2, 2});
  absl::StatusOr<std::unique_ptr<parity::LocalJob>> job =
      parity::LocalJob::Create(spec, plan, &parity::TrainSet(), &parity::TestSet());
  ASSERT_TRUE(job.ok()) << job.status();
  const std::vector<parity::LocalJob::RankRun> runs = (*job)->Run(0, 4, /*evaluate=*/false);
  for (int rank = 0; rank < 4; ++rank) {
    ASSERT_TRUE(runs[rank].status.ok()) << "rank " << rank << ": " << runs[rank].status;
    for (int step = 0; step < 4; ++step) {
      const std::vector<kernels::Param>& mine = runs[rank].params_after_step[step];
      const int first = schedule::RankIndex(plan, rank < 2 ? 0 : 1, 0);
      const std::vector<kernels::Param>& theirs = runs[first].params_after_step[step];
      ASSERT_EQ(mine.size(), theirs.size());
      for (size_t i = 0; i < mine.size(); ++i) {
        EXPECT_EQ(mine[i].value.data, theirs[i].value.data)
            << mine[i].name << " rank " << rank << " step " << step + 1;
      }
    }
  }
  // The job group met once per step: one GLOBAL_NORM per step on every rank.
  EXPECT_EQ((*job)->groups().back()->calls(), 4);
}

// A program without the GLOBAL_NORM its clipping job needs is refused at Create.
TEST(ClippingCreateTest, RefusesAProgramWithoutGlobalNorm) {
  const v1::JobSpec spec = ScheduledSpec("dapple", 16);
  const v1::ParallelPlanSummary plan = parity::UniformPlan(spec.model().layers_size(), 1);
  const v1::RankProgram program =
      schedule::BuildPrograms(schedule::ScheduleKind::kDapple, 1, 4).value()[0];
  absl::Status s = StageRuntime::Create(parity::Assignment(spec, plan, 0, program),
                                        &parity::TrainSet(), &parity::TestSet(), nullptr)
                       .status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("stage 0's program has no GLOBAL_NORM before OPTIMIZER_STEP"));
}

// Clipping over several ranks needs the job-wide collective.
TEST(ClippingCreateTest, RefusesClippingOverRanksWithoutAJobCollective) {
  const v1::JobSpec spec = ScheduledSpec("dapple", 16);
  const v1::ParallelPlanSummary plan = parity::UniformPlan(spec.model().layers_size(), 2);
  schedule::LowerOptions lower;
  lower.global_norm = true;
  const std::vector<v1::RankProgram> programs =
      schedule::BuildPrograms(schedule::ScheduleKind::kDapple, 2, 4, lower).value();
  parity::Mailbox box;
  parity::LocalTransport transport(&box, 0);
  absl::Status s = StageRuntime::Create(parity::Assignment(spec, plan, 0, programs[0]),
                                        &parity::TrainSet(), &parity::TestSet(), &transport)
                       .status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("over all 2 ranks of the job"));
}

}  // namespace
}  // namespace dapple::worker
