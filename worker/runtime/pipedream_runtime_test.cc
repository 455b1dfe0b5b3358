// PipeDream's asynchronous 1F1B with weight stashing in the runtime (schedule pipedream): every
// stage a thread, stages talking through the in-memory transport. The weight uses the runtime
// records (version and a hash of the weights actually in the backend) prove that each backward
// computed with exactly its forward's weights and that stage i never held more than P - i
// versions.
#include <map>
#include <thread>
#include <utility>

#include "common/schedule/lowering.h"
#include "gtest/gtest.h"
#include "worker/runtime/stage_runtime.h"
#include "worker/runtime/testing/local_transport.h"
#include "worker/runtime/testing/parity_testing.h"

namespace dapple::worker {
namespace {

using parity::LocalTransport;
using parity::Mailbox;

v1::JobSpec PipeDreamSpec(int global_batch, int micro_batch, int steps) {
  parity::SpecOptions o;
  o.global_batch = global_batch;
  o.micro_batch = micro_batch;
  v1::JobSpec spec = parity::ParitySpec(o);
  spec.mutable_parallel()->set_schedule("pipedream");
  spec.mutable_training()->set_max_steps(steps);
  return spec;
}

struct StageRun {
  absl::Status status;
  std::vector<StepResult> steps;
  EvalResult mid_eval;  // after step 2 (forwards of step 3 in flight)
};

std::vector<StageRun> RunPipeDream(const v1::JobSpec& spec, int P, int steps) {
  const v1::ParallelPlanSummary plan = parity::UniformPlan(spec.model().layers_size(), P);
  Mailbox box;
  std::vector<std::unique_ptr<LocalTransport>> transports;
  for (int s = 0; s < P; ++s) transports.push_back(std::make_unique<LocalTransport>(&box, s));
  std::vector<StageRun> out(P);
  std::vector<std::thread> threads;
  for (int s = 0; s < P; ++s) {
    threads.emplace_back([&, s] {
      auto rt = StageRuntime::Create(parity::Assignment(spec, plan, s, v1::RankProgram()),
                                     &parity::TrainSet(), &parity::TestSet(),
                                     P > 1 ? transports[s].get() : nullptr);
      if (!rt.ok()) {
        out[s].status = rt.status();
        return;
      }
      (*rt)->RecordWeightUses(true);
      for (int step = 0; step < steps; ++step) {
        auto r = (*rt)->RunStep(step);
        if (!r.ok()) {
          out[s].status = r.status();
          return;
        }
        out[s].steps.push_back(std::move(*r));
        if (step == 1) {
          auto e = (*rt)->Evaluate(step);
          if (!e.ok()) {
            out[s].status = e.status();
            return;
          }
          out[s].mid_eval = *e;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

TEST(PipeDreamRuntimeTest, EveryBackwardUsesItsForwardsWeightsAndStagesHoldAtMostPMinusIVersions) {
  for (int P : {2, 3, 4}) {
    for (int M : {1, 2, 4}) {
      const int steps = 5;
      const v1::JobSpec spec = PipeDreamSpec(64, 64 / M, steps);
      std::vector<StageRun> runs = RunPipeDream(spec, P, steps);
      for (int s = 0; s < P; ++s) {
        SCOPED_TRACE(testing::Message() << "P=" << P << " M=" << M << " stage " << s);
        ASSERT_TRUE(runs[s].status.ok()) << runs[s].status;
        std::map<int64_t, WeightUse> forward;
        int backwards = 0, most_versions = 0;
        for (const StepResult& r : runs[s].steps) {
          EXPECT_LE(r.stats.weight_versions(), P - s);
          EXPECT_GE(r.stats.weight_versions(), 1);
          for (const WeightUse& u : r.weight_uses) {
            most_versions = std::max(most_versions, u.versions_held);
            EXPECT_LE(u.versions_held, P - s);
            if (u.kind == v1::FORWARD) {
              EXPECT_TRUE(forward.emplace(u.micro_batch, u).second) << "forward twice";
              continue;
            }
            ++backwards;
            auto it = forward.find(u.micro_batch);
            ASSERT_NE(it, forward.end()) << "backward of " << u.micro_batch << " before forward";
            EXPECT_EQ(u.version, it->second.version) << "micro-batch " << u.micro_batch;
            EXPECT_EQ(u.weights_hash, it->second.weights_hash) << "micro-batch " << u.micro_batch;
          }
        }
        EXPECT_EQ(backwards, steps * M) << "every micro-batch trained once";
        EXPECT_EQ(forward.size(), static_cast<size_t>(steps * M));
        // Stashing is needed (more than one version) exactly where forwards of a later step
        // run before this step's update: on every stage but the last.
        if (s < P - 1) {
          EXPECT_GT(most_versions, 1) << "in-flight forwards of the next update";
        } else {
          EXPECT_EQ(most_versions, 1);
        }
      }
      // Mid-run evaluation with forwards in flight still works and gives a real accuracy.
      EXPECT_TRUE(runs[P - 1].mid_eval.has_metrics);
      EXPECT_EQ(runs[P - 1].mid_eval.samples, parity::TestSet().size);
      EXPECT_GT(runs[P - 1].mid_eval.accuracy, 0.12);  // above chance after two updates
      // Losses are finite and training makes progress over the 5 steps.
      ASSERT_EQ(runs[P - 1].steps.size(), static_cast<size_t>(steps));
      EXPECT_LT(runs[P - 1].steps.back().loss, runs[P - 1].steps.front().loss);
    }
  }
}

// Vertical sync: every stage computes micro-batch g with the weight version stage 0 used for
// it, forward and backward.
TEST(PipeDreamRuntimeTest, VerticalSyncUsesStageZerosVersionEverywhere) {
  for (int P : {2, 3, 4}) {
    for (int M : {1, 2, 4}) {
      const int steps = 5;
      v1::JobSpec spec = PipeDreamSpec(64, 64 / M, steps);
      spec.mutable_parallel()->mutable_pipedream()->set_vertical_sync(true);
      std::vector<StageRun> runs = RunPipeDream(spec, P, steps);
      std::map<int64_t, int64_t> stage0;  // micro-batch -> stage 0's forward version
      for (int s = 0; s < P; ++s) {
        SCOPED_TRACE(testing::Message() << "P=" << P << " M=" << M << " stage " << s);
        ASSERT_TRUE(runs[s].status.ok()) << runs[s].status;
        std::map<int64_t, WeightUse> forward;
        for (const StepResult& r : runs[s].steps) {
          for (const WeightUse& u : r.weight_uses) {
            if (u.kind == v1::FORWARD) {
              forward[u.micro_batch] = u;
              if (s == 0) {
                stage0[u.micro_batch] = u.version;
              } else {
                ASSERT_EQ(stage0.count(u.micro_batch), 1u);
                EXPECT_EQ(u.version, stage0[u.micro_batch]) << "micro-batch " << u.micro_batch;
              }
            } else {
              ASSERT_EQ(forward.count(u.micro_batch), 1u);
              EXPECT_EQ(u.version, forward[u.micro_batch].version);
              EXPECT_EQ(u.weights_hash, forward[u.micro_batch].weights_hash);
            }
          }
        }
        EXPECT_EQ(forward.size(), static_cast<size_t>(steps * M));
      }
    }
  }
}

// With one stage there is nothing in flight across an update: PipeDream is synchronous
// training, equal to the single-device reference.
TEST(PipeDreamRuntimeTest, OneStageMatchesTheReference) {
  const int steps = 3;
  const v1::JobSpec spec = PipeDreamSpec(64, 16, steps);
  const v1::ParallelPlanSummary plan = parity::UniformPlan(spec.model().layers_size(), 1);
  std::vector<std::unique_ptr<StageRuntime>> runtimes;
  runtimes.push_back(StageRuntime::Create(parity::Assignment(spec, plan, 0, v1::RankProgram()),
                                          &parity::TrainSet(), &parity::TestSet(), nullptr)
                         .value());
  const parity::PipelineRun run = parity::RunPipeline(runtimes, steps);
  parity::ExpectMatchesReference(spec, steps, runtimes, run);
}

TEST(PipeDreamRuntimeTest, RefusesReplicas) {
  const v1::JobSpec spec = PipeDreamSpec(64, 16, 2);
  v1::ParallelPlanSummary plan = parity::UniformPlan(spec.model().layers_size(), 2);
  plan.mutable_stages(0)->set_replicas(2);
  Mailbox box;
  LocalTransport t(&box, 0);
  auto rt = StageRuntime::Create(parity::Assignment(spec, plan, 0, v1::RankProgram()),
                                 &parity::TrainSet(), &parity::TestSet(), &t);
  ASSERT_FALSE(rt.ok());
  EXPECT_NE(rt.status().message().find("1F1B-RR"), std::string::npos) << rt.status();
}

}  // namespace
}  // namespace dapple::worker
