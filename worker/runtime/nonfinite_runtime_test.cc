// Non-finite steps (gradient_exchange.h; docs/schedules.md, "Non-finite steps"): a NaN injected
// on one rank, step and micro-batch (nonfinite_injection.h) makes every rank of a synchronous
// schedule skip that step's update together; the run then equals the single-device reference
// with that step's update left out (per-step loss and final weights within 1e-5 relative; the
// weights after the skipped step bitwise those before it); more skipped steps in a row than
// training.max_consecutive_skipped_steps fail every rank with one message naming the first place.
// PipeDream and Pipe-SGD take no job-wide decision: the NaN shows in the step's loss (which the
// worker fails the job on) and nothing hangs. Every rank is a thread (testing/local_job.h).
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/time.h"
#include "common/schedule/ranks.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/runtime/nonfinite_injection.h"
#include "worker/runtime/reference_trainer.h"
#include "worker/runtime/stage_runtime.h"
#include "worker/runtime/testing/local_job.h"
#include "worker/runtime/testing/parity_testing.h"

namespace dapple::worker {
namespace {

using ::testing::HasSubstr;

constexpr int kSteps = 5;

// The parity MLP, 4 micro-batches of 16, a learning-rate warm-up over 3 updates (so that an
// update count advanced by a skipped step would change every later rate).
v1::JobSpec SkipSpec(const std::string& schedule, const std::string& optimizer, int64_t k) {
  parity::SpecOptions o;
  o.global_batch = 64;
  o.micro_batch = 16;
  o.optimizer = optimizer;
  v1::JobSpec spec = parity::ParitySpec(o);
  spec.mutable_parallel()->set_schedule(schedule);
  spec.mutable_training()->mutable_lr_schedule()->set_warmup_steps(3);
  spec.mutable_training()->set_max_consecutive_skipped_steps(k);
  return spec;
}

struct Case {
  std::string schedule;
  int stages;
  int replicas;
  NonFiniteInjection inject;  // one step
  std::string optimizer = "sgd";
  double max_grad_norm = 0;
  int chunks = 1;  // > 1: interleaved 1F1B with this many virtual stages per rank
};

std::string CaseName(const Case& c) {
  return absl::StrCat(absl::StrReplaceAll(c.schedule, {{"-", "_"}}), "_P", c.stages, "_D",
                      c.replicas, "_at_stage", c.inject.stage, "_replica", c.inject.replica, "_mb",
                      c.inject.micro_batch, "_", c.optimizer, c.max_grad_norm > 0 ? "_clipped" : "",
                      c.chunks > 1 ? absl::StrCat("_v", c.chunks) : "");
}

struct JobRun {
  std::unique_ptr<parity::LocalJob> job;
  std::vector<parity::LocalJob::RankRun> runs;
};

JobRun RunWithInjection(const v1::JobSpec& spec, const v1::ParallelPlanSummary& plan,
                        const NonFiniteInjection& inject, int steps) {
  JobRun r;
  absl::StatusOr<std::unique_ptr<parity::LocalJob>> job =
      parity::LocalJob::Create(spec, plan, &parity::TrainSet(), &parity::TestSet());
  EXPECT_TRUE(job.ok()) << job.status();
  if (!job.ok()) return r;
  r.job = *std::move(job);
  for (int rank = 0; rank < r.job->num_ranks(); ++rank)
    r.job->runtime(rank).InjectNonFinite(inject);
  r.runs = r.job->Run(0, steps, /*evaluate=*/false);
  return r;
}

class NonFiniteSkipTest : public ::testing::TestWithParam<Case> {};

TEST_P(NonFiniteSkipTest, EqualsTheReferenceWithTheStepsUpdateLeftOut) {
  const Case c = GetParam();
  v1::JobSpec spec = SkipSpec(c.schedule, c.optimizer, /*k=*/1);
  spec.mutable_training()->set_max_grad_norm(c.max_grad_norm);
  if (c.chunks > 1) spec.mutable_parallel()->set_interleave(c.chunks);
  const v1::ParallelPlanSummary plan =
      c.chunks > 1
          ? parity::InterleavedPlan(spec.model().layers_size(), c.stages, c.chunks, c.replicas)
          : parity::WithReplicas(parity::UniformPlan(spec.model().layers_size(), c.stages),
                                 std::vector<int>(static_cast<size_t>(c.stages), c.replicas));
  const JobRun r = RunWithInjection(spec, plan, c.inject, kSteps);
  ASSERT_NE(r.job, nullptr);
  const int skipped = static_cast<int>(c.inject.first_step) - 1;  // 0-based
  for (int rank = 0; rank < r.job->num_ranks(); ++rank) {
    ASSERT_TRUE(r.runs[rank].status.ok()) << "rank " << rank << ": " << r.runs[rank].status;
    ASSERT_EQ(r.runs[rank].steps.size(), static_cast<size_t>(kSteps));
    for (int step = 0; step < kSteps; ++step) {
      EXPECT_EQ(r.runs[rank].steps[step].stats.skipped(), step == skipped)
          << "rank " << rank << " step " << step + 1;
    }
    // The skipped update changed nothing: bitwise the weights after the step before.
    const auto& before = r.runs[rank].params_after_step[skipped - 1];
    const auto& after = r.runs[rank].params_after_step[skipped];
    ASSERT_EQ(before.size(), after.size());
    for (size_t i = 0; i < before.size(); ++i) {
      EXPECT_EQ(before[i].value.data, after[i].value.data)
          << "rank " << rank << " " << before[i].name;
    }
  }
  // Where: the rank and micro-batch injected into (a loss names its micro-batch).
  const std::string& reason = r.runs[0].steps[skipped].skip_reason;
  const bool loss = c.inject.stage == c.stages - 1;
  EXPECT_EQ(reason, absl::StrCat(loss ? "loss" : "gradient", " (NaN) at stage ", c.inject.stage,
                                 " replica ", c.inject.replica, " ",
                                 loss ? absl::StrCat("micro-batch ", c.inject.micro_batch)
                                      : "(micro-batch not tracked: the step's accumulated "
                                        "gradient)"));

  auto ref = ReferenceTrainer::Create(spec, &parity::TrainSet()).value();
  ref->SkipUpdateOf(skipped);
  const int last = schedule::RankIndex(plan, c.stages - 1, 0);
  for (int step = 0; step < kSteps; ++step) {
    const double want = ref->Step(step);
    const double got = r.runs[last].steps[step].loss;
    if (step == skipped && loss) {
      EXPECT_TRUE(std::isnan(got)) << got;  // the injected loss is the step's
      continue;
    }
    EXPECT_NEAR(got, want, 1e-5 * std::fabs(want)) << "step " << step + 1;
  }
  std::map<std::string, std::vector<float>> want;
  for (const kernels::Param* p : ref->Params()) want[p->name] = p->value.data;
  for (int s = 0; s < c.stages; ++s) {
    for (const kernels::Param& p :
         r.runs[schedule::RankIndex(plan, s, 0)].params_after_step.back()) {
      ASSERT_TRUE(want.count(p.name)) << p.name;
      EXPECT_LE(parity::RelativeL2(p.value.data, want[p.name]), 1e-5) << p.name;
    }
  }
}

NonFiniteInjection At(int stage, int replica, int64_t step, int micro_batch) {
  NonFiniteInjection inj;
  inj.stage = stage;
  inj.replica = replica;
  inj.first_step = inj.last_step = step;
  inj.micro_batch = micro_batch;
  return inj;
}

INSTANTIATE_TEST_SUITE_P(
    Synchronous, NonFiniteSkipTest,
    ::testing::Values(
        // The loss of one replica of the last stage, and a gradient of the first stage.
        Case{"dapple", 2, 2, At(1, 1, 3, 2)}, Case{"dapple", 2, 2, At(0, 1, 3, 1)},
        Case{"gpipe", 2, 2, At(1, 1, 3, 2)}, Case{"gpipe", 2, 2, At(0, 1, 3, 1)},
        Case{"zb-h1", 2, 2, At(1, 1, 3, 2)}, Case{"zb-h1", 2, 2, At(0, 1, 3, 1)},
        Case{"zb-h2", 2, 2, At(0, 0, 2, 3)},
        // A non-zero replica of a middle stage (issue 17's case), under AdamW (bias correction
        // counts updates) and with clipping.
        Case{"dapple", 3, 2, At(1, 1, 3, 0), "adamw"},
        Case{"dapple", 3, 2, At(1, 1, 3, 0), "sgd", 0.5},
        // One rank: no job collective, the same decision.
        Case{"dapple", 1, 1, At(0, 0, 2, 1)},
        // Interleaved 1F1B (2 virtual stages per rank, replicated): a gradient of the first
        // rank and the loss of the rank holding the last virtual stage.
        Case{"interleaved", 2, 2, At(0, 1, 3, 1), "sgd", 0, 2},
        Case{"interleaved", 2, 1, At(1, 0, 3, 2), "adamw", 0.5, 2}),
    [](const ::testing::TestParamInfo<Case>& info) { return CaseName(info.param); });

// More non-finite steps in a row than allowed: every rank fails at the same step with the same
// message, naming the first place.
TEST(NonFiniteLimitTest, TooManyInARowFailEveryRankNamingTheFirstPlace) {
  const v1::JobSpec spec = SkipSpec("dapple", "sgd", /*k=*/2);
  const v1::ParallelPlanSummary plan =
      parity::WithReplicas(parity::UniformPlan(spec.model().layers_size(), 2), {2, 2});
  NonFiniteInjection inject = At(0, 1, 2, 1);
  inject.last_step = 4;  // steps 2, 3, 4
  const JobRun r = RunWithInjection(spec, plan, inject, kSteps);
  ASSERT_NE(r.job, nullptr);
  for (int rank = 0; rank < r.job->num_ranks(); ++rank) {
    const absl::Status& s = r.runs[rank].status;
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << "rank " << rank << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr(" step 4, the step's job-wide check of the gradients"));
    EXPECT_TRUE(absl::EndsWith(
        s.message(),
        "): training diverged: non-finite gradient (NaN) at stage 0 replica 1 (micro-batch "
        "not tracked: the step's accumulated gradient); 3 non-finite steps in a row, "
        "training.max_consecutive_skipped_steps allows 2 (try a lower training.optimizer.lr)"))
        << s;
    // Steps 1-3 done, 2 and 3 skipped.
    ASSERT_EQ(r.runs[rank].steps.size(), 3u) << "rank " << rank;
    EXPECT_FALSE(r.runs[rank].steps[0].stats.skipped());
    EXPECT_TRUE(r.runs[rank].steps[1].stats.skipped());
    EXPECT_TRUE(r.runs[rank].steps[2].stats.skipped());
  }
}

// K non-finite steps in a row are allowed; a finite step ends the streak.
TEST(NonFiniteLimitTest, AsManyAsAllowedInARowAreSkipped) {
  const v1::JobSpec spec = SkipSpec("gpipe", "sgd", /*k=*/2);
  const v1::ParallelPlanSummary plan =
      parity::WithReplicas(parity::UniformPlan(spec.model().layers_size(), 2), {2, 2});
  NonFiniteInjection inject = At(1, 0, 2, 3);
  inject.last_step = 3;
  const JobRun r = RunWithInjection(spec, plan, inject, kSteps);
  ASSERT_NE(r.job, nullptr);
  for (int rank = 0; rank < r.job->num_ranks(); ++rank) {
    ASSERT_TRUE(r.runs[rank].status.ok()) << "rank " << rank << ": " << r.runs[rank].status;
    for (int step = 0; step < kSteps; ++step) {
      EXPECT_EQ(r.runs[rank].steps[step].stats.skipped(), step == 1 || step == 2)
          << "rank " << rank << " step " << step + 1;
    }
  }
}

// The default (0): the first non-finite step fails the job, naming the loss's micro-batch.
TEST(NonFiniteLimitTest, ZeroFailsTheFirstNonFiniteStep) {
  const v1::JobSpec spec = SkipSpec("zb-h1", "sgd", /*k=*/0);
  const v1::ParallelPlanSummary plan =
      parity::WithReplicas(parity::UniformPlan(spec.model().layers_size(), 2), {2, 2});
  const JobRun r = RunWithInjection(spec, plan, At(1, 1, 2, 3), kSteps);
  ASSERT_NE(r.job, nullptr);
  for (int rank = 0; rank < r.job->num_ranks(); ++rank) {
    const absl::Status& s = r.runs[rank].status;
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << "rank " << rank << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr(" step 2, the step's job-wide check of the gradients"));
    EXPECT_TRUE(absl::EndsWith(s.message(),
                               "): training diverged: non-finite loss (NaN) at stage 1 "
                               "replica 1 micro-batch 3; training.max_consecutive_skipped_steps "
                               "is 0: a non-finite step fails the job (try a lower "
                               "training.optimizer.lr, or set max_consecutive_skipped_steps > 0 "
                               "to skip such steps)"))
        << s;
    EXPECT_EQ(r.runs[rank].steps.size(), 1u) << "rank " << rank;
  }
}

// zb-h2 without clipping and at the default 0 defers the decision (GLOBAL_NORM_ASYNC: no
// barrier between steps). The ranks that would apply the non-finite gradient (here both
// replicas of stage 0: replica 1's NaN reaches replica 0 through their AllReduce) wait for it at
// once and fail before updating, naming the same first place and the step; the others have
// gone on to the next step and fail when their neighbour is gone (a real job: the coordinator
// fails it on the first report). No rank keeps weights made of the non-finite update.
TEST(NonFiniteDeferredTest, TheRanksThatWouldApplyItFailAtOnceNamingTheFirstPlace) {
  v1::JobSpec spec = SkipSpec("zb-h2", "sgd", /*k=*/0);
  const v1::ParallelPlanSummary plan =
      parity::WithReplicas(parity::UniformPlan(spec.model().layers_size(), 2), {2, 2});
  auto job = parity::LocalJob::Create(spec, plan, &parity::TrainSet(), &parity::TestSet(),
                                      /*recv_timeout=*/absl::Seconds(2));
  ASSERT_TRUE(job.ok()) << job.status();
  for (int rank = 0; rank < (*job)->num_ranks(); ++rank) {
    (*job)->runtime(rank).InjectNonFinite(At(0, 1, 2, 1));
  }
  const std::vector<parity::LocalJob::RankRun> runs = (*job)->Run(0, kSteps, false);
  for (int r = 0; r < 2; ++r) {
    const int rank = schedule::RankIndex(plan, 0, r);
    const absl::Status& s = runs[rank].status;
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << "replica " << r << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr(" step 2, the step's job-wide non-finite check"));
    EXPECT_TRUE(absl::EndsWith(
        s.message(),
        "): training diverged at step 2: non-finite gradient (NaN) at stage 0 replica 1 "
        "(micro-batch not tracked: the step's accumulated gradient); "
        "training.max_consecutive_skipped_steps is 0: a non-finite step fails the job (try a "
        "lower training.optimizer.lr, or set max_consecutive_skipped_steps > 0 to skip such "
        "steps)"))
        << s;
    EXPECT_EQ(runs[rank].steps.size(), 1u) << "replica " << r;
  }
  for (int r = 0; r < 2; ++r) {
    const int rank = schedule::RankIndex(plan, 1, r);
    EXPECT_FALSE(runs[rank].status.ok()) << "stage 1 replica " << r;
    for (const auto& params : runs[rank].params_after_step) {
      for (const kernels::Param& p : params) {
        for (float v : p.value.data) ASSERT_TRUE(std::isfinite(v)) << p.name;
      }
    }
  }
}

// The job's last step waits for its own decision on every rank: a rank whose own values were
// finite fails too, with the same message (nothing after it would learn of the failure).
TEST(NonFiniteDeferredTest, TheLastStepWaitsForItsDecisionOnEveryRank) {
  v1::JobSpec spec = SkipSpec("zb-h2", "sgd", /*k=*/0);
  spec.mutable_training()->set_max_steps(3);
  const v1::ParallelPlanSummary plan = parity::UniformPlan(spec.model().layers_size(), 2);
  const JobRun r = RunWithInjection(spec, plan, At(0, 0, 3, 2), 3);
  ASSERT_NE(r.job, nullptr);
  for (int rank = 0; rank < r.job->num_ranks(); ++rank) {
    const absl::Status& s = r.runs[rank].status;
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << "rank " << rank << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr(" step 3, the step's job-wide non-finite check"));
    EXPECT_THAT(s.message(), HasSubstr("): training diverged at step 3: non-finite gradient "
                                       "(NaN) at stage 0 replica 0 (micro-batch not tracked"));
    EXPECT_EQ(r.runs[rank].steps.size(), 2u) << "rank " << rank;
  }
}

// PipeDream and Pipe-SGD take no job-wide decision (their updates are asynchronous): the NaN
// shows in the step's loss, nothing is skipped, and every rank finishes its steps (the worker
// then fails the job on the loss: worker_daemon.cc).
TEST(NonFiniteAsynchronousTest, PipeDreamAndPipeSgdReportTheLossAndDoNotHang) {
  struct Async {
    std::string schedule;
    int stages, replicas;
  };
  for (const Async& a : {Async{"pipedream", 2, 1}, Async{"pipesgd", 1, 2}}) {
    SCOPED_TRACE(a.schedule);
    const v1::JobSpec spec = SkipSpec(a.schedule, "sgd", /*k=*/0);
    const v1::ParallelPlanSummary plan =
        parity::WithReplicas(parity::UniformPlan(spec.model().layers_size(), a.stages),
                             std::vector<int>(static_cast<size_t>(a.stages), a.replicas));
    const JobRun r = RunWithInjection(spec, plan, At(a.stages - 1, 0, 2, 1), 3);
    ASSERT_NE(r.job, nullptr);
    for (int rank = 0; rank < r.job->num_ranks(); ++rank) {
      ASSERT_TRUE(r.runs[rank].status.ok()) << "rank " << rank << ": " << r.runs[rank].status;
      ASSERT_EQ(r.runs[rank].steps.size(), 3u);
      for (const StepResult& step : r.runs[rank].steps) EXPECT_FALSE(step.stats.skipped());
    }
    const StepResult& step2 = r.runs[schedule::RankIndex(plan, a.stages - 1, 0)].steps[1];
    EXPECT_TRUE(std::isnan(step2.loss)) << step2.loss;
  }
}

TEST(NonFiniteInjectionTest, Parses) {
  absl::StatusOr<NonFiniteInjection> one = ParseNonFiniteInjection("1/1@3:0");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->stage, 1);
  EXPECT_EQ(one->replica, 1);
  EXPECT_EQ(one->first_step, 3);
  EXPECT_EQ(one->last_step, 3);
  EXPECT_EQ(one->micro_batch, 0);
  EXPECT_TRUE(one->Hits(2, 0));
  EXPECT_FALSE(one->Hits(3, 0));
  EXPECT_FALSE(one->Hits(2, 1));
  absl::StatusOr<NonFiniteInjection> range = ParseNonFiniteInjection("2/0@4-6:1");
  ASSERT_TRUE(range.ok()) << range.status();
  EXPECT_EQ(range->first_step, 4);
  EXPECT_EQ(range->last_step, 6);
  for (const char* bad : {"", "1/1", "1@3:0", "1/1@3", "1/1@0:0", "1/1@5-4:0", "1/1@3:-1",
                          "a/1@3:0", "1/1@3-4-5:0"}) {
    absl::StatusOr<NonFiniteInjection> r = ParseNonFiniteInjection(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("DAPPLE_TEST_INJECT_NONFINITE")) << bad;
  }
}

}  // namespace
}  // namespace dapple::worker
