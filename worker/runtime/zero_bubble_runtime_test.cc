// The zero-bubble schedules (ZB-H1, ZB-H2: BACKWARD_INPUT / BACKWARD_WEIGHT) in the runtime, in
// one process (one thread per stage, the in-memory transport): per-step loss and final weights
// match the single-device reference within 1e-5 relative for P in {2, 4}, M in {P, 2P + 1, 8},
// and each stage stashes what the schedule says (a micro-batch until its BACKWARD_WEIGHT).
// Replicas and clipping under these schedules: replica_runtime_test, clipping_runtime_test.
#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/schedule/generators.h"
#include "common/schedule/lowering.h"
#include "gtest/gtest.h"
#include "worker/runtime/stage_runtime.h"
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

}  // namespace
}  // namespace dapple::worker
