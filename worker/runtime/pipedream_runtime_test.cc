// PipeDream's asynchronous 1F1B with weight stashing in the runtime (schedule pipedream): every
// stage a thread, stages talking through the in-memory transport. The weight uses the runtime
// records (version and a hash of the weights actually in the backend) prove that each backward
// computed with exactly its forward's weights and that stage i never held more than P - i
// versions; with stage replicas (1F1B-RR), ceil(K_s / D_s) on one replica, and that 1F1B-RR
// trains exactly like an unreplicated pipeline with the same warm-ups. Every rank runs the
// program the coordinator would send it (schedule::JobRankProgram).
#include <limits>
#include <map>
#include <thread>
#include <utility>

#include "absl/strings/str_join.h"
#include "common/schedule/job_programs.h"
#include "common/schedule/lowering.h"
#include "common/schedule/pipedream_steps.h"
#include "common/schedule/ranks.h"
#include "gtest/gtest.h"
#include "worker/comm/testing/local_collective.h"
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
  EvalResult mid_eval;         // after step 2 (forwards of step 3 in flight)
  int64_t predicted_peak = 0;  // the memory model's (StageRuntime::predicted_memory)
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
      auto rt = StageRuntime::Create(
          parity::Assignment(spec, plan, s, schedule::JobRankProgram(spec, plan, s, 0, 0).value()),
          &parity::TrainSet(), &parity::TestSet(), P > 1 ? transports[s].get() : nullptr);
      if (!rt.ok()) {
        out[s].status = rt.status();
        return;
      }
      (*rt)->RecordWeightUses(true);
      out[s].predicted_peak = (*rt)->predicted_memory().PeakBytes();
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

// Weight stashing over one rank's steps: every forward once, every backward after its forward
// with the same version and the same weight bytes, never more than `max_versions` held.
struct Stashing {
  std::map<int64_t, WeightUse> forwards;  // by global micro-batch
  int backwards = 0;
  int most_versions = 0;
};

Stashing CheckStashing(const std::vector<StepResult>& steps, int64_t max_versions) {
  Stashing out;
  for (const StepResult& r : steps) {
    EXPECT_LE(r.stats.weight_versions(), max_versions);
    EXPECT_GE(r.stats.weight_versions(), 1);
    for (const WeightUse& u : r.weight_uses) {
      out.most_versions = std::max(out.most_versions, u.versions_held);
      EXPECT_LE(u.versions_held, max_versions);
      if (u.kind == v1::FORWARD) {
        EXPECT_TRUE(out.forwards.emplace(u.micro_batch, u).second) << "forward twice";
        continue;
      }
      ++out.backwards;
      auto it = out.forwards.find(u.micro_batch);
      if (it == out.forwards.end()) {
        ADD_FAILURE() << "backward of " << u.micro_batch << " before its forward";
        continue;
      }
      EXPECT_EQ(u.version, it->second.version) << "micro-batch " << u.micro_batch;
      EXPECT_EQ(u.weights_hash, it->second.weights_hash) << "micro-batch " << u.micro_batch;
    }
  }
  return out;
}

TEST(PipeDreamRuntimeTest, EveryBackwardUsesItsForwardsWeightsAndStagesHoldAtMostPMinusIVersions) {
  for (int P : {2, 3, 4}) {
    for (int M : {1, 2, 4}) {
      const int steps = 5;
      const v1::JobSpec spec = PipeDreamSpec(64, 64 / M, steps);
      std::vector<StageRun> runs = RunPipeDream(spec, P, steps);
      for (int s = 0; s < P; ++s) {
        SCOPED_TRACE(::testing::Message() << "P=" << P << " M=" << M << " stage " << s);
        ASSERT_TRUE(runs[s].status.ok()) << runs[s].status;
        const Stashing st = CheckStashing(runs[s].steps, P - s);
        const std::map<int64_t, WeightUse>& forward = st.forwards;
        const int backwards = st.backwards, most_versions = st.most_versions;
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
      EXPECT_EQ(runs[P - 1].mid_eval.samples, parity::TestSet().size());
      EXPECT_GT(runs[P - 1].mid_eval.accuracy, 0.12);  // above chance after two updates
      // Losses are finite and training makes progress over the 5 steps.
      ASSERT_EQ(runs[P - 1].steps.size(), static_cast<size_t>(steps));
      EXPECT_LT(runs[P - 1].steps.back().loss, runs[P - 1].steps.front().loss);
    }
  }
}

// Vertical sync: every stage computes micro-batch g with the weight version stage 0 used for
// it, forward and backward.
// An evaluation between steps (forwards of the next step in flight) keeps kEvalSendsInFlight
// pieces' sends out, not the whole evaluation split's (a user's CNN under pipedream measured
// 257 MB on stage 0 against 5.3 MB predicted), and the memory model counts what it holds: every
// rank's measured peak is its prediction.
TEST(PipeDreamRuntimeTest, AnEvaluationBetweenStepsHoldsWhatTheModelPredicts) {
  for (int P : {2, 3}) {
    for (int M : {1, 2}) {
      const int steps = 8;  // a run long enough to use every training id (CommunicationBufferIds)
      v1::JobSpec spec = PipeDreamSpec(64, 64 / M, steps);
      spec.mutable_training()->set_eval_every_steps(2);  // after step 1 (RunPipeDream)
      std::vector<StageRun> runs = RunPipeDream(spec, P, steps);
      for (int s = 0; s < P; ++s) {
        SCOPED_TRACE(::testing::Message() << "P=" << P << " M=" << M << " stage " << s);
        ASSERT_TRUE(runs[s].status.ok()) << runs[s].status;
        int64_t measured = 0;
        for (const StepResult& r : runs[s].steps) {
          measured = std::max(measured, r.stats.peak_memory_bytes());
        }
        EXPECT_EQ(measured, runs[s].predicted_peak);
      }
      EXPECT_EQ(runs[P - 1].mid_eval.samples, parity::TestSet().size());
    }
  }
}

TEST(PipeDreamRuntimeTest, VerticalSyncUsesStageZerosVersionEverywhere) {
  for (int P : {2, 3, 4}) {
    for (int M : {1, 2, 4}) {
      const int steps = 5;
      v1::JobSpec spec = PipeDreamSpec(64, 64 / M, steps);
      spec.mutable_parallel()->mutable_pipedream()->set_vertical_sync(true);
      std::vector<StageRun> runs = RunPipeDream(spec, P, steps);
      std::map<int64_t, int64_t> stage0;  // micro-batch -> stage 0's forward version
      for (int s = 0; s < P; ++s) {
        SCOPED_TRACE(::testing::Message() << "P=" << P << " M=" << M << " stage " << s);
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
  runtimes.push_back(
      StageRuntime::Create(
          parity::Assignment(spec, plan, 0, schedule::JobRankProgram(spec, plan, 0, 0, 0).value()),
          &parity::TrainSet(), &parity::TestSet(), nullptr)
          .value());
  const parity::PipelineRun run = parity::RunPipeline(runtimes, steps);
  parity::ExpectMatchesReference(spec, steps, runtimes, run);
}

// ---- 1F1B-RR: whole micro-batches round-robin over a stage's replicas ----

v1::ParallelPlanSummary ReplicatedPlan(int layers, const std::vector<int>& replicas) {
  v1::ParallelPlanSummary plan = parity::UniformPlan(layers, static_cast<int>(replicas.size()));
  for (size_t s = 0; s < replicas.size(); ++s) plan.mutable_stages(s)->set_replicas(replicas[s]);
  return plan;
}

uint64_t WeightsHash(StageRuntime& rt) {
  std::vector<float> w(static_cast<size_t>(rt.backend().WeightFloats()));
  EXPECT_TRUE(rt.backend().ReadWeights(w.data()).ok());
  uint64_t h = 1469598103934665603ull;
  const auto* bytes = reinterpret_cast<const unsigned char*>(w.data());
  for (size_t i = 0; i < w.size() * sizeof(float); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  return h;
}

struct RankRun {
  int stage = 0;
  int replica = 0;
  absl::Status status;
  std::vector<StepResult> steps;
  std::vector<uint64_t> weights_after_step;  // WeightsHash after every step
  std::vector<float> final_weights;          // ReadWeights after the last step
  EvalResult final_eval;
};

// Every rank of `replicas` (one entry per stage) a thread; the replicas of a stage share a
// LocalCollectiveGroup. `warm_ups`: when not empty, the programs are generated with these
// warm-ups (schedule::PipeDreamLayout::warm_ups) instead of the replicas' K_s.
std::vector<RankRun> RunReplicated(const v1::JobSpec& spec, const std::vector<int>& replicas,
                                   int steps, const std::vector<int64_t>& warm_ups = {}) {
  const int P = static_cast<int>(replicas.size());
  const v1::ParallelPlanSummary plan = ReplicatedPlan(spec.model().layers_size(), replicas);
  const int ranks = schedule::NumRanks(plan);
  Mailbox box;
  std::vector<std::unique_ptr<LocalTransport>> transports;
  for (int i = 0; i < ranks; ++i) transports.push_back(std::make_unique<LocalTransport>(&box, i));
  std::vector<std::unique_ptr<testing::LocalCollectiveGroup>> groups;
  for (int s = 0; s < P; ++s) {
    groups.push_back(std::make_unique<testing::LocalCollectiveGroup>(replicas[s]));
  }
  std::vector<RankRun> out(ranks);
  std::vector<std::thread> threads;
  for (int s = 0; s < P; ++s) {
    for (int r = 0; r < replicas[s]; ++r) {
      const int rank = schedule::RankIndex(plan, s, r);
      out[rank].stage = s;
      out[rank].replica = r;
      threads.emplace_back([&, s, r, rank] {
        RankRun& me = out[rank];
        testing::LocalCollective collective(groups[s].get(), r);
        schedule::PipeDreamProgramOptions options =
            schedule::PipeDreamOptionsFor(spec, plan, /*first_step=*/0).value();
        if (!warm_ups.empty()) options.layout.warm_ups = warm_ups;
        v1::StageAssignment a =
            parity::Assignment(spec, plan, s, schedule::BuildPipeDreamProgram(options, s, r));
        a.set_replica(r);
        auto rt = StageRuntime::Create(a, &parity::TrainSet(), &parity::TestSet(),
                                       ranks > 1 ? transports[rank].get() : nullptr, nullptr,
                                       replicas[s] > 1 ? &collective : nullptr);
        if (!rt.ok()) {
          me.status = rt.status();
          groups[s]->Break(me.status);
          return;
        }
        (*rt)->RecordWeightUses(true);
        for (int step = 0; step < steps && me.status.ok(); ++step) {
          auto result = (*rt)->RunStep(step);
          if (!result.ok()) {
            me.status = result.status();
            break;
          }
          me.steps.push_back(std::move(*result));
          me.weights_after_step.push_back(WeightsHash(**rt));
        }
        if (me.status.ok()) {
          auto e = (*rt)->Evaluate(steps);
          if (e.ok()) {
            me.final_eval = *e;
          } else {
            me.status = e.status();
          }
        }
        if (!me.status.ok()) {
          groups[s]->Break(me.status);
          return;
        }
        me.final_weights.resize(static_cast<size_t>((*rt)->backend().WeightFloats()));
        me.status = (*rt)->backend().ReadWeights(me.final_weights.data());
      });
    }
  }
  for (auto& t : threads) t.join();
  return out;
}

schedule::PipeDreamLayout LayoutOf(const std::vector<int>& replicas, int M, int steps) {
  schedule::PipeDreamLayout layout;
  layout.replicas = replicas;
  layout.num_micro_batches = M;
  layout.num_steps = steps;
  return layout;
}

const std::vector<std::vector<int>>& RoundRobinLayouts() {
  static const auto* layouts =
      new std::vector<std::vector<int>>{{2}, {2, 1}, {1, 2}, {2, 2}, {1, 3}, {2, 1, 2}};
  return *layouts;
}

// Each rank runs exactly its round-robin share (g % D_s == r), every backward computes with
// its forward's weights (version and weight bytes), a replica never holds more than
// ceil(K_s / D_s) micro-batches and ceil((K_s - 1) / D_s) + 1 versions (both P - s without
// replicas), and after every step the replicas of a
// stage hold bitwise-identical weights; with and without vertical sync.
TEST(PipeDreamRoundRobinTest, StashingRoundRobinAndIdenticalReplicas) {
  const int M = 4, steps = 4;
  for (bool vertical_sync : {false, true}) {
    for (const std::vector<int>& replicas : RoundRobinLayouts()) {
      v1::JobSpec spec = PipeDreamSpec(64, 64 / M, steps);
      spec.mutable_parallel()->mutable_pipedream()->set_vertical_sync(vertical_sync);
      const std::vector<RankRun> runs = RunReplicated(spec, replicas, steps);
      const schedule::PipeDreamLayout layout = LayoutOf(replicas, M, steps);
      std::map<std::pair<int, int64_t>, int64_t> stage_versions;  // (stage, g) -> forward version
      for (const RankRun& run : runs) {
        SCOPED_TRACE(::testing::Message()
                     << "D={" << absl::StrJoin(replicas, ",") << "} vertical_sync=" << vertical_sync
                     << " stage " << run.stage << " replica " << run.replica);
        ASSERT_TRUE(run.status.ok()) << run.status;
        const int d = replicas[run.stage];
        const int64_t in_flight = schedule::PipeDreamReplicaInFlight(layout, run.stage);
        // Vertical sync keeps stage 0's (older) versions longer: no bound is claimed for it.
        const int64_t bound = vertical_sync ? std::numeric_limits<int64_t>::max()
                                            : schedule::PipeDreamReplicaVersions(layout, run.stage);
        for (const StepResult& r : run.steps) EXPECT_LE(r.peak_in_flight, in_flight);
        const Stashing st = CheckStashing(run.steps, bound);
        const std::map<int64_t, WeightUse>& forward = st.forwards;
        const int backwards = st.backwards;
        for (const auto& [g, use] : forward) {
          EXPECT_EQ(g % d, run.replica) << "micro-batch " << g;
          stage_versions[{run.stage, g}] = use.version;
        }
        int own = 0;
        for (int g = 0; g < M * steps; ++g) own += g % d == run.replica;
        EXPECT_EQ(backwards, own);
        EXPECT_EQ(forward.size(), static_cast<size_t>(own));
        const RankRun& first = runs[schedule::RankIndex(
            ReplicatedPlan(spec.model().layers_size(), replicas), run.stage, 0)];
        EXPECT_EQ(run.weights_after_step, first.weights_after_step) << "replicas diverged";
      }
      if (vertical_sync) {
        for (const auto& [key, version] : stage_versions) {
          EXPECT_EQ(version, stage_versions.at({0, key.second}))
              << "stage " << key.first << " micro-batch " << key.second;
        }
      }
      // Stage 0 holds more than one version: forwards of the next step run before the update.
      int most = 0;
      for (const RankRun& run : runs) {
        if (run.stage != 0) continue;
        for (const StepResult& r : run.steps) most = std::max(most, r.stats.weight_versions());
      }
      if (replicas.size() > 1 || replicas[0] > 1) {
        EXPECT_GT(most, 1);
      }
    }
  }
}

// Replicas change who computes, not what: 1F1B-RR trains exactly like an unreplicated pipeline
// whose stages run the replicated stages' warm-ups K_s (the same forwards and backwards between
// the same updates), up to the order of the AllReduce's sums: per-step loss and final weights
// within 1e-5 relative, the same test accuracy within 1e-3.
TEST(PipeDreamRoundRobinTest, TrainsLikeAnUnreplicatedPipelineWithTheSameWarmUps) {
  const int M = 4, steps = 4;
  for (const std::vector<int>& replicas : RoundRobinLayouts()) {
    const v1::JobSpec spec = PipeDreamSpec(64, 64 / M, steps);
    SCOPED_TRACE(::testing::Message() << "D={" << absl::StrJoin(replicas, ",") << "}");
    const int P = static_cast<int>(replicas.size());
    const schedule::PipeDreamLayout layout = LayoutOf(replicas, M, steps);
    std::vector<int64_t> warm_ups;
    for (int s = 0; s < P; ++s) warm_ups.push_back(schedule::PipeDreamWarmUp(layout, s));
    const std::vector<RankRun> rr = RunReplicated(spec, replicas, steps);
    const std::vector<RankRun> flat = RunReplicated(spec, std::vector<int>(P, 1), steps, warm_ups);
    const v1::ParallelPlanSummary plan = ReplicatedPlan(spec.model().layers_size(), replicas);
    for (const RankRun& run : rr) ASSERT_TRUE(run.status.ok()) << run.status;
    for (const RankRun& run : flat) ASSERT_TRUE(run.status.ok()) << run.status;
    const RankRun& last = rr[schedule::RankIndex(plan, P - 1, 0)];
    for (int t = 0; t < steps; ++t) {
      ASSERT_TRUE(last.steps[t].has_loss);
      const double want = flat[P - 1].steps[t].loss;
      EXPECT_NEAR(last.steps[t].loss, want, 1e-5 * std::abs(want)) << "step " << t + 1;
    }
    for (int s = 0; s < P; ++s) {
      for (int r = 0; r < replicas[s]; ++r) {
        const RankRun& run = rr[schedule::RankIndex(plan, s, r)];
        EXPECT_LE(parity::RelativeL2(run.final_weights, flat[s].final_weights), 1e-5)
            << "stage " << s << " replica " << r;
      }
    }
    EXPECT_TRUE(last.final_eval.has_metrics);
    EXPECT_NEAR(last.final_eval.accuracy, flat[P - 1].final_eval.accuracy, 1e-3);
  }
}

// The coordinator's program covers the run: a step outside it is refused, naming the run.
TEST(PipeDreamRuntimeTest, RefusesAStepOutsideTheProgramsRun) {
  const v1::JobSpec spec = PipeDreamSpec(64, 32, 2);
  const v1::ParallelPlanSummary plan = parity::UniformPlan(spec.model().layers_size(), 1);
  auto rt = StageRuntime::Create(
      parity::Assignment(spec, plan, 0, schedule::JobRankProgram(spec, plan, 0, 0, 0).value()),
      &parity::TrainSet(), &parity::TestSet(), nullptr);
  ASSERT_TRUE(rt.ok()) << rt.status();
  const absl::StatusOr<StepResult> r = (*rt)->RunStep(2);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "step 3 outside the program's run: steps 1 to 2");
}

TEST(PipeDreamRoundRobinTest, RefusesMoreReplicasThanMicroBatchesPerStep) {
  const v1::JobSpec spec = PipeDreamSpec(64, 32, 2);  // M = 2
  const v1::ParallelPlanSummary plan = ReplicatedPlan(spec.model().layers_size(), {3, 1});
  Mailbox box;
  LocalTransport t(&box, 0);
  testing::LocalCollectiveGroup group(3);
  testing::LocalCollective collective(&group, 0);
  auto rt = StageRuntime::Create(
      parity::Assignment(spec, plan, 0, schedule::JobRankProgram(spec, plan, 0, 0, 0).value()),
      &parity::TrainSet(), &parity::TestSet(), &t, nullptr, &collective);
  ASSERT_FALSE(rt.ok());
  EXPECT_EQ(rt.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rt.status().message(),
            "stage 0 has 3 replicas but training.global_batch 64 / training.micro_batch 32 = 2 "
            "micro-batches per step: parallel.schedule pipedream gives every replica at least "
            "one whole micro-batch per step: use a micro_batch of 16 or less (dividing 64), or "
            "fewer parallel.devices")
      << rt.status();
}

}  // namespace
}  // namespace dapple::worker
