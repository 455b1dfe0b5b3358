// The zero-bubble schedules (ZB-H1, ZB-H2: BACKWARD_INPUT / BACKWARD_WEIGHT) in the runtime, in
// one process (one thread per stage, the in-memory transport): per-step loss and final weights
// match the single-device reference within 1e-5 relative for P in {2, 4}, M in {P, 2P + 1, 8},
// and each stage stashes what the schedule says (a micro-batch until its BACKWARD_WEIGHT).
// Replicas and clipping under these schedules: replica_runtime_test, clipping_runtime_test; the
// coordinator's zb-h2 programs with their deferred non-finite check: below.
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/schedule/generators.h"
#include "common/schedule/job_lowering.h"
#include "common/schedule/job_programs.h"
#include "common/schedule/lowering.h"
#include "common/schedule/ranks.h"
#include "gtest/gtest.h"
#include "worker/runtime/reference_trainer.h"
#include "worker/runtime/stage_runtime.h"
#include "worker/runtime/testing/local_job.h"
#include "worker/runtime/testing/local_transport.h"
#include "worker/runtime/testing/parity_testing.h"

namespace dapple::worker {
namespace {

using parity::LocalTransport;
using parity::Mailbox;

struct Case {
  schedule::ScheduleKind kind;
  int stages;
  int micro_batches;
};

class ZeroBubbleParityTest : public ::testing::TestWithParam<Case> {};

TEST_P(ZeroBubbleParityTest, MatchesSingleDevice) {
  const Case c = GetParam();
  const int kMicroBatch = 6, kSteps = 3;
  parity::SpecOptions o;
  o.global_batch = kMicroBatch * c.micro_batches;
  o.micro_batch = kMicroBatch;
  const v1::JobSpec spec = parity::ParitySpec(o);
  auto programs = schedule::BuildPrograms(c.kind, c.stages, c.micro_batches).value();
  const v1::ParallelPlanSummary plan = parity::UniformPlan(spec.model().layers_size(), c.stages);
  Mailbox box;
  std::vector<std::unique_ptr<LocalTransport>> transports(c.stages);
  std::vector<std::unique_ptr<StageRuntime>> runtimes(c.stages);
  for (int s = 0; s < c.stages; ++s) {
    transports[s] = std::make_unique<LocalTransport>(&box, s);
    runtimes[s] = StageRuntime::Create(parity::Assignment(spec, plan, s, programs[s]),
                                       &parity::TrainSet(), &parity::TestSet(), transports[s].get())
                      .value();
  }
  parity::PipelineRun run = parity::RunPipeline(runtimes, kSteps);
  parity::ExpectMatchesReference(spec, kSteps, runtimes, run);
}

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (auto kind : {schedule::ScheduleKind::kZbH1, schedule::ScheduleKind::kZbH2}) {
    for (int p : {2, 4}) {
      for (int m : {p, 2 * p + 1, 8}) cases.push_back({kind, p, m});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(
    All, ZeroBubbleParityTest, ::testing::ValuesIn(AllCases()), [](const auto& info) {
      const Case& c = info.param;
      // gtest names take no '-': "zb-h1" becomes "zb_h1".
      return absl::StrCat(absl::StrReplaceAll(schedule::ScheduleKindName(c.kind), {{"-", "_"}}),
                          "_P", c.stages, "_M", c.micro_batches);
    });

// generators.h: min(P, M) in flight on every stage under ZB-H1, min(2P - 1, M) under ZB-H2.
TEST(ZeroBubbleRuntimeTest, PeakInFlightFollowsTheSchedule) {
  const int P = 3;
  for (auto kind : {schedule::ScheduleKind::kZbH1, schedule::ScheduleKind::kZbH2}) {
    for (int M : {2, 8}) {
      parity::SpecOptions o;
      o.global_batch = 4 * M;
      o.micro_batch = 4;
      const v1::JobSpec spec = parity::ParitySpec(o);
      auto programs = schedule::BuildPrograms(kind, P, M).value();
      const v1::ParallelPlanSummary plan = parity::UniformPlan(spec.model().layers_size(), P);
      Mailbox box;
      std::vector<int> peak(P);
      std::vector<std::unique_ptr<LocalTransport>> transports;
      for (int s = 0; s < P; ++s) transports.push_back(std::make_unique<LocalTransport>(&box, s));
      std::vector<std::thread> threads;
      for (int s = 0; s < P; ++s) {
        threads.emplace_back([&, s] {
          auto rt =
              StageRuntime::Create(parity::Assignment(spec, plan, s, programs[s]),
                                   &parity::TrainSet(), &parity::TestSet(), transports[s].get())
                  .value();
          peak[s] = rt->RunStep(0).value().peak_in_flight;
        });
      }
      for (auto& t : threads) t.join();
      const int expected = std::min(kind == schedule::ScheduleKind::kZbH1 ? P : 2 * P - 1, M);
      for (int s = 0; s < P; ++s) {
        EXPECT_EQ(peak[s], expected)
            << schedule::ScheduleKindName(kind) << " M=" << M << " stage " << s;
      }
    }
  }
}

// The coordinator's zb-h2 programs (schedule::JobPrograms) of a job without clipping: the
// deferred check (GLOBAL_NORM_ASYNC, plan.proto) in place of the barrier, so a stage updates
// before the others finish the step. Training is unchanged: per-step loss and every stage's
// weights after every step within 1e-5 relative of the single device, with replicas too, and
// the job group met once per step.
TEST(ZeroBubbleRuntimeTest, ZbH2WithTheDeferredCheckMatchesSingleDevice) {
  struct Layout {
    std::vector<int> replicas;
    int micro_batches;
  };
  for (const Layout& l : {Layout{{2, 2}, 4}, Layout{{1, 1, 1, 1}, 9}}) {
    const int stages = static_cast<int>(l.replicas.size());
    SCOPED_TRACE(absl::StrCat("P=", stages, " M=", l.micro_batches));
    parity::SpecOptions o;
    o.micro_batch = 4;
    o.global_batch = 4 * l.micro_batches * l.replicas[0];
    v1::JobSpec spec = parity::ParitySpec(o);
    spec.mutable_parallel()->set_schedule("zb-h2");
    // The job's last step waits for its own decision, so every AllGather has completed at the end.
    spec.mutable_training()->set_max_steps(4);
    const v1::ParallelPlanSummary plan =
        parity::WithReplicas(parity::UniformPlan(spec.model().layers_size(), stages), l.replicas);
    const std::vector<v1::RankProgram> programs = schedule::JobPrograms(spec, plan, 0).value();
    for (const v1::RankProgram& program : programs) {
      ASSERT_EQ(schedule::CountActions(program, v1::GLOBAL_NORM), 0);
      ASSERT_EQ(schedule::CountActions(program, v1::GLOBAL_NORM_ASYNC), 1);
    }
    auto job = parity::LocalJob::Create(spec, plan, &parity::TrainSet(), &parity::TestSet());
    ASSERT_TRUE(job.ok()) << job.status();
    constexpr int kSteps = 4;  // training.max_steps
    const std::vector<parity::LocalJob::RankRun> runs = (*job)->Run(0, kSteps, false);
    for (int rank = 0; rank < (*job)->num_ranks(); ++rank) {
      ASSERT_TRUE(runs[rank].status.ok()) << "rank " << rank << ": " << runs[rank].status;
    }
    EXPECT_EQ((*job)->groups().back()->calls(), kSteps);
    auto ref = ReferenceTrainer::Create(spec, &parity::TrainSet()).value();
    const int last = schedule::RankIndex(plan, stages - 1, 0);
    for (int step = 0; step < kSteps; ++step) {
      const double want = ref->Step(step);
      EXPECT_NEAR(runs[last].steps[step].loss, want, 1e-5 * std::fabs(want)) << "step " << step + 1;
      std::map<std::string, std::vector<float>> weights;
      for (const kernels::Param* p : ref->Params()) weights[p->name] = p->value.data;
      for (int rank = 0; rank < (*job)->num_ranks(); ++rank) {
        for (const kernels::Param& p : runs[rank].params_after_step[step]) {
          ASSERT_TRUE(weights.count(p.name)) << p.name;
          EXPECT_LE(parity::RelativeL2(p.value.data, weights[p.name]), 1e-5)
              << p.name << " rank " << rank << " step " << step + 1;
        }
      }
    }
  }
}

}  // namespace
}  // namespace dapple::worker
