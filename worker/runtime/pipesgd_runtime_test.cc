// Pipe-SGD in the runtime (schedule pipesgd, P = 1, D replicas as threads): the replicas keep
// bitwise-identical weights, a warm-up covering every step is synchronous training (equal to
// the single-device reference), and staleness changes the trajectory. The exact staleness-1 rule
// is checked in pipesgd_updater_test.cc.
#include <algorithm>
#include <cstring>
#include <thread>

#include "common/schedule/job_programs.h"
#include "gtest/gtest.h"
#include "worker/comm/testing/local_collective.h"
#include "worker/runtime/reference_trainer.h"
#include "worker/runtime/stage_runtime.h"
#include "worker/runtime/testing/parity_testing.h"

namespace dapple::worker {
namespace {

struct ReplicaRun {
  absl::Status status;
  std::vector<double> losses;
  std::vector<std::vector<float>> weights;  // after each step
  int64_t peak_memory = 0;                  // the most of the steps' measured peaks
  int64_t predicted_memory = 0;             // the memory model's peak for the replica
};

std::vector<ReplicaRun> RunPipeSgd(const v1::JobSpec& spec, int D, int steps) {
  v1::ParallelPlanSummary plan = parity::UniformPlan(spec.model().layers_size(), 1);
  plan.mutable_stages(0)->set_replicas(D);
  // The coordinator's program: ALLREDUCE_ASYNC and STALE_OPTIMIZER_STEP end every step.
  const v1::RankProgram program = schedule::JobRankProgram(spec, plan, 0, 0, 0).value();
  testing::LocalCollectiveGroup group(D);
  std::vector<ReplicaRun> out(D);
  std::vector<std::thread> threads;
  for (int r = 0; r < D; ++r) {
    threads.emplace_back([&, r] {
      testing::LocalCollective collective(&group, r);
      v1::StageAssignment a = parity::Assignment(spec, plan, 0, program);
      a.set_replica(r);
      auto rt = StageRuntime::Create(a, &parity::TrainSet(), &parity::TestSet(), nullptr, nullptr,
                                     &collective);
      if (!rt.ok()) {
        out[r].status = rt.status();
        group.Break(rt.status());
        return;
      }
      for (int step = 0; step < steps; ++step) {
        auto res = (*rt)->RunStep(step);
        if (!res.ok()) {
          out[r].status = res.status();
          group.Break(res.status());
          return;
        }
        out[r].losses.push_back(res->loss);
        out[r].peak_memory = std::max(out[r].peak_memory, res->stats.peak_memory_bytes());
        out[r].predicted_memory = (*rt)->predicted_memory().PeakBytes();
        std::vector<float> w((*rt)->backend().WeightFloats());
        out[r].status = (*rt)->backend().ReadWeights(w.data());
        out[r].weights.push_back(std::move(w));
      }
      out[r].status = absl::OkStatus();
      rt->reset();  // joins the updater's thread while the collective lives
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

v1::JobSpec PipeSgdSpec(int warmup, int steps) {
  parity::SpecOptions o;
  o.global_batch = 64;
  o.micro_batch = 16;
  o.optimizer = "sgd";
  v1::JobSpec spec = parity::ParitySpec(o);
  spec.mutable_parallel()->set_schedule("pipesgd");
  spec.mutable_parallel()->mutable_pipesgd()->set_warmup_steps(warmup);
  spec.mutable_training()->set_max_steps(steps);
  return spec;
}

std::vector<float> Flat(const std::vector<kernels::Param*>& params) {
  std::vector<float> out;
  for (const kernels::Param* p : params) {
    out.insert(out.end(), p->value.data.begin(), p->value.data.end());
  }
  return out;
}

// The measured peak counts the updater's two flat gradient buffers, as the memory model does
// (common/memory_model.h gradient_buffers): equal to the byte. (A user saw 0.61 of the
// prediction when the measure left them out.)
TEST(PipeSgdRuntimeTest, MeasuredPeakMemoryEqualsThePrediction) {
  const int steps = 4;
  const std::vector<ReplicaRun> runs = RunPipeSgd(PipeSgdSpec(/*warmup=*/1, steps), 2, steps);
  for (const ReplicaRun& r : runs) {
    ASSERT_TRUE(r.status.ok()) << r.status;
    EXPECT_GT(r.predicted_memory, 0);
    EXPECT_EQ(r.peak_memory, r.predicted_memory);
  }
}

TEST(PipeSgdRuntimeTest, ReplicasStayBitwiseIdentical) {
  const int steps = 5;
  const std::vector<ReplicaRun> runs = RunPipeSgd(PipeSgdSpec(/*warmup=*/1, steps), 2, steps);
  for (const ReplicaRun& r : runs) ASSERT_TRUE(r.status.ok()) << r.status;
  for (int t = 0; t < steps; ++t) {
    ASSERT_EQ(runs[0].weights[t].size(), runs[1].weights[t].size());
    EXPECT_EQ(std::memcmp(runs[0].weights[t].data(), runs[1].weights[t].data(),
                          runs[0].weights[t].size() * sizeof(float)),
              0)
        << "step " << t;
  }
}

// With every step in the warm-up, Pipe-SGD is synchronous data parallelism: the final weights
// equal the single-device reference on the global batch; with no warm-up they do not (one
// update is skipped to fill the pipeline and the others are one step stale).
TEST(PipeSgdRuntimeTest, SynchronousWarmUpMatchesTheReferenceAndStalenessDoesNot) {
  const int steps = 3;
  for (int warmup : {steps, 0}) {
    const v1::JobSpec spec = PipeSgdSpec(warmup, steps);
    const std::vector<ReplicaRun> runs = RunPipeSgd(spec, 2, steps);
    for (const ReplicaRun& r : runs) ASSERT_TRUE(r.status.ok()) << r.status;
    auto ref = ReferenceTrainer::Create(spec, &parity::TrainSet()).value();
    for (int t = 0; t < steps; ++t) ref->Step(t);
    const std::vector<float> want = Flat(ref->Params());
    const double diff = parity::RelativeL2(runs[0].weights.back(), want);
    if (warmup == steps) {
      EXPECT_LT(diff, 1e-5) << "synchronous warm-up";
    } else {
      EXPECT_GT(diff, 1e-3) << "stale updates must change the trajectory";
    }
  }
}

}  // namespace
}  // namespace dapple::worker
