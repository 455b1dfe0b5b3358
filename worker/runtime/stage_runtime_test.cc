// Parity of the pipeline runtime against the single-device reference, in one process: every
// stage runs on its own thread and stages talk through an in-memory transport (a fake used only
// here; tests/integration runs the same check across real processes over UCX).
#include "worker/runtime/stage_runtime.h"

#include <cmath>
#include <map>
#include <thread>
#include <tuple>

#include "absl/synchronization/mutex.h"
#include "common/schedule/lowering.h"
#include "gtest/gtest.h"
#include "kernels/cpu/model.h"
#include "worker/runtime/testing/parity_testing.h"

namespace dapple::worker {
namespace {

// Messages are copied at Send, so sends complete at once; Recv waits (with a deadline).
class Mailbox {
 public:
  void Put(int src, int dst, uint64_t tag, const void* data, size_t bytes) {
    absl::MutexLock l(&mu_);
    auto& q = box_[{src, dst, tag}];
    q.assign(static_cast<const char*>(data), static_cast<const char*>(data) + bytes);
  }
  absl::Status Take(int src, int dst, uint64_t tag, void* data, size_t bytes) {
    absl::MutexLock l(&mu_);
    auto key = std::make_tuple(src, dst, tag);
    auto present = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return box_.count(key) > 0; };
    if (!mu_.AwaitWithTimeout(absl::Condition(&present), absl::Seconds(30))) {
      return absl::DeadlineExceededError("no message");
    }
    auto& v = box_[key];
    if (v.size() != bytes) return absl::InternalError("size mismatch");
    std::copy(v.begin(), v.end(), static_cast<char*>(data));
    box_.erase(key);
    return absl::OkStatus();
  }

 private:
  absl::Mutex mu_;
  std::map<std::tuple<int, int, uint64_t>, std::vector<char>> box_ ABSL_GUARDED_BY(mu_);
};

class LocalTransport : public Transport {
 public:
  LocalTransport(Mailbox* box, int rank) : box_(box), rank_(rank) {}
  absl::Status Send(int peer, uint64_t tag, const void* data, size_t bytes) override {
    box_->Put(rank_, peer, tag, data, bytes);
    return absl::OkStatus();
  }
  absl::Status Recv(int peer, uint64_t tag, void* data, size_t bytes) override {
    return box_->Take(peer, rank_, tag, data, bytes);
  }
  absl::Status WaitSends() override { return absl::OkStatus(); }

 private:
  Mailbox* box_;
  int rank_;
};

using parity::ParitySpec;
using parity::SpecOptions;
using parity::TestSet;
using parity::TrainSet;

v1::JobSpec SmallSpec(int global_batch, int micro_batch, const std::string& optimizer) {
  SpecOptions o;
  o.global_batch = global_batch;
  o.micro_batch = micro_batch;
  o.optimizer = optimizer;
  return ParitySpec(o);
}

struct Case {
  schedule::ScheduleKind kind;
  int stages;
  int micro_batches;
  std::string optimizer;
};

class StageRuntimeParityTest : public ::testing::TestWithParam<Case> {};

TEST_P(StageRuntimeParityTest, MatchesSingleDevice) {
  const Case c = GetParam();
  const int kGlobalBatch = 64, kSteps = 4;
  v1::JobSpec spec = SmallSpec(kGlobalBatch, kGlobalBatch / c.micro_batches, c.optimizer);
  auto programs = schedule::BuildPrograms(c.kind, c.stages, c.micro_batches).value();
  v1::ParallelPlanSummary plan = parity::UniformPlan(spec.model().layers_size(), c.stages);
  Mailbox box;
  std::vector<std::unique_ptr<LocalTransport>> transports(c.stages);
  std::vector<std::unique_ptr<StageRuntime>> runtimes(c.stages);
  for (int s = 0; s < c.stages; ++s) {
    transports[s] = std::make_unique<LocalTransport>(&box, s);
    runtimes[s] = StageRuntime::Create(parity::Assignment(spec, plan, s, programs[s]), &TrainSet(),
                                       &TestSet(), transports[s].get())
                      .value();
  }
  parity::PipelineRun run = parity::RunPipeline(runtimes, kSteps);
  parity::ExpectMatchesReference(spec, kSteps, runtimes, run);
}

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (auto kind : {schedule::ScheduleKind::kGPipe, schedule::ScheduleKind::kDapple}) {
    for (int p : {1, 2, 3}) {
      for (int m : {1, 2, 4, 8}) cases.push_back({kind, p, m, "sgd"});
    }
  }
  cases.push_back({schedule::ScheduleKind::kDapple, 3, 4, "adamw"});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(All, StageRuntimeParityTest, ::testing::ValuesIn(AllCases()),
                         [](const auto& info) {
                           const Case& c = info.param;
                           return std::string(schedule::ScheduleKindName(c.kind)) + "_P" +
                                  std::to_string(c.stages) + "_M" +
                                  std::to_string(c.micro_batches) + "_" + c.optimizer;
                         });

TEST(StageRuntimeTest, PeakInFlightFollowsTheSchedule) {
  // 6 layers on P = 3, M = 8: dapple stashes min(P - i, M) micro-batches on stage i, gpipe M.
  for (auto kind : {schedule::ScheduleKind::kGPipe, schedule::ScheduleKind::kDapple}) {
    const int P = 3, M = 8;
    v1::JobSpec spec = SmallSpec(64, 8, "sgd");
    auto programs = schedule::BuildPrograms(kind, P, M).value();
    v1::ParallelPlanSummary plan;
    for (int s = 0; s < P; ++s) {
      auto* st = plan.add_stages();
      st->set_first_layer(2 * s);
      st->set_last_layer(2 * s + 1);
    }
    Mailbox box;
    std::vector<int> peak(P);
    std::vector<std::thread> threads;
    std::vector<std::unique_ptr<LocalTransport>> transports;
    for (int s = 0; s < P; ++s) transports.push_back(std::make_unique<LocalTransport>(&box, s));
    for (int s = 0; s < P; ++s) {
      threads.emplace_back([&, s] {
        v1::StageAssignment a;
        *a.mutable_spec() = spec;
        *a.mutable_plan() = plan;
        a.set_stage(s);
        a.set_num_stages(P);
        *a.mutable_program() = programs[s];
        auto rt = StageRuntime::Create(a, &TrainSet(), &TestSet(), transports[s].get()).value();
        peak[s] = rt->RunStep(0).value().peak_in_flight;
      });
    }
    for (auto& t : threads) t.join();
    for (int s = 0; s < P; ++s) {
      EXPECT_EQ(peak[s], kind == schedule::ScheduleKind::kDapple ? std::min(P - s, M) : M)
          << schedule::ScheduleKindName(kind) << " stage " << s;
    }
  }
}

}  // namespace
}  // namespace dapple::worker
