// Stage replicas in the runtime (DAPPLE's split-concat + gradient AllReduce), in one process:
// every rank (stage, replica) runs on its own thread, ranks talk through the in-memory transport
// keyed by schedule::RankIndex, and the replicas of a stage sum their gradients with a real
// GlooCollective (TCP on 127.0.0.1, rendezvous through an in-process HashStore per stage).
// tests/integration runs the same across processes.
#include <gloo/rendezvous/hash_store.h>

#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/schedule/lowering.h"
#include "common/schedule/ranks.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/comm/gloo_collective.h"
#include "worker/runtime/stage_runtime.h"
#include "worker/runtime/testing/local_transport.h"
#include "worker/runtime/testing/parity_testing.h"

namespace dapple::worker {
namespace {

using parity::LocalTransport;
using parity::Mailbox;
using parity::TestSet;
using parity::TrainSet;
using ::testing::HasSubstr;

// Counts the calls that reach the real collective (one AllReduce per stage per step).
class CountingCollective : public Collective {
 public:
  explicit CountingCollective(std::unique_ptr<Collective> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  absl::Status AllReduceSum(float* data, size_t count) override {
    ++allreduce_calls;
    return inner_->AllReduceSum(data, count);
  }
  absl::Status AllGather(const void* in, size_t bytes, void* out) override {
    ++allgather_calls;
    return inner_->AllGather(in, bytes, out);
  }
  int allreduce_calls = 0;  // read after the rank's thread joined
  int allgather_calls = 0;

 private:
  std::unique_ptr<Collective> inner_;
};

v1::ParallelPlanSummary ReplicatedPlan(int layers, const std::vector<int>& replicas) {
  v1::ParallelPlanSummary plan = parity::UniformPlan(layers, static_cast<int>(replicas.size()));
  for (size_t s = 0; s < replicas.size(); ++s) plan.mutable_stages(s)->set_replicas(replicas[s]);
  return plan;
}

// The ranks of one hybrid job: runtimes, transports and collectives, indexed by RankIndex.
struct Job {
  v1::JobSpec spec;
  v1::ParallelPlanSummary plan;
  std::vector<std::unique_ptr<gloo::rendezvous::HashStore>> stores;  // per stage
  std::vector<std::unique_ptr<CountingCollective>> collectives;      // per rank; null for D == 1
  std::vector<std::unique_ptr<LocalTransport>> transports;           // per rank
  std::vector<std::unique_ptr<StageRuntime>> runtimes;               // per rank
  std::vector<int> stage_of, replica_of;                             // per rank
};

// Builds every rank of `spec` on `plan` with `programs` (one per stage). The replicas of each
// stage with D > 1 meet in a Gloo mesh first (Create blocks until all members joined, so they
// are made on threads).
void MakeJob(Job* job, Mailbox* box, const std::vector<v1::RankProgram>& programs) {
  const v1::ParallelPlanSummary& plan = job->plan;
  const int ranks = schedule::NumRanks(plan);
  const int stages = plan.stages_size();
  job->collectives.resize(ranks);
  job->transports.resize(ranks);
  job->runtimes.resize(ranks);
  job->stage_of.resize(ranks);
  job->replica_of.resize(ranks);
  job->stores.resize(stages);
  std::vector<std::thread> threads;
  for (int s = 0; s < stages; ++s) {
    const int d = schedule::StageReplicas(plan, s);
    job->stores[s] = std::make_unique<gloo::rendezvous::HashStore>();
    for (int r = 0; r < d; ++r) {
      const int rank = schedule::RankIndex(plan, s, r);
      job->stage_of[rank] = s;
      job->replica_of[rank] = r;
      job->transports[rank] = std::make_unique<LocalTransport>(box, rank);
      if (d == 1) continue;
      threads.emplace_back([job, s, r, d, rank] {
        auto c = GlooCollective::Create(r, d, *job->stores[s], absl::StrCat("stage-", s),
                                        "127.0.0.1", absl::Seconds(60), absl::StrCat("stage ", s));
        ASSERT_TRUE(c.ok()) << c.status();
        job->collectives[rank] = std::make_unique<CountingCollective>(*std::move(c));
      });
    }
  }
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < ranks; ++rank) {
    const int s = job->stage_of[rank];
    v1::RankProgram program = programs[s];
    program.set_replica(job->replica_of[rank]);
    v1::StageAssignment a = parity::Assignment(job->spec, plan, s, program);
    a.set_replica(job->replica_of[rank]);
    auto rt = StageRuntime::Create(a, &TrainSet(), &TestSet(), job->transports[rank].get(), nullptr,
                                   job->collectives[rank].get());
    ASSERT_TRUE(rt.ok()) << "rank " << rank << ": " << rt.status();
    job->runtimes[rank] = *std::move(rt);
  }
}

// What one rank saw: per-step results, its flat parameters after every step, evaluation.
struct RankRun {
  absl::Status status;
  std::vector<StepResult> steps;
  std::vector<std::vector<float>> params_after_step;
  EvalResult eval;
};

std::vector<RankRun> RunRanks(Job* job, int steps) {
  const int ranks = static_cast<int>(job->runtimes.size());
  std::vector<RankRun> runs(ranks);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < ranks; ++rank) {
    threads.emplace_back([&, rank] {
      StageRuntime& rt = *job->runtimes[rank];
      RankRun& run = runs[rank];
      for (int step = 0; step < steps; ++step) {
        absl::StatusOr<StepResult> r = rt.RunStep(step);
        if (!r.ok()) {
          run.status = r.status();
          return;
        }
        run.steps.push_back(*r);
        absl::StatusOr<std::vector<kernels::Param*>> params = rt.Params();
        if (!params.ok()) {
          run.status = params.status();
          return;
        }
        std::vector<float> flat;
        for (const kernels::Param* p : *params) {
          flat.insert(flat.end(), p->value.data.begin(), p->value.data.end());
        }
        run.params_after_step.push_back(std::move(flat));
      }
      absl::StatusOr<EvalResult> e = rt.Evaluate(1);
      if (!e.ok()) {
        run.status = e.status();
        return;
      }
      run.eval = *e;
    });
  }
  for (auto& t : threads) t.join();
  return runs;
}

struct Case {
  schedule::ScheduleKind kind;
  std::vector<int> replicas;  // D per stage
  int micro_batches;          // M
  int64_t global_batch;
  std::string optimizer = "sgd";
  bool recompute = false;  // every stage recomputes its activations (layer_recompute.h)
};

std::string CaseName(const Case& c) {
  // gtest names take no '-': "zb-h1" becomes "zb_h1".
  return absl::StrCat(absl::StrReplaceAll(schedule::ScheduleKindName(c.kind), {{"-", "_"}}), "_D",
                      absl::StrJoin(c.replicas, "_"), "_M", c.micro_batches, "_B", c.global_batch,
                      "_", c.optimizer, c.recompute ? "_recompute" : "");
}

class ReplicaParityTest : public ::testing::TestWithParam<Case> {};

TEST_P(ReplicaParityTest, MatchesSingleDeviceWithIdenticalReplicas) {
  const Case c = GetParam();
  const int kSteps = 3;
  const int stages = static_cast<int>(c.replicas.size());
  parity::SpecOptions o;
  o.global_batch = c.global_batch;
  o.micro_batch = c.global_batch / c.micro_batches;
  o.optimizer = c.optimizer;
  Job job;
  job.spec = parity::ParitySpec(o);
  job.plan = ReplicatedPlan(job.spec.model().layers_size(), c.replicas);
  for (v1::PlanStageSummary& stage : *job.plan.mutable_stages()) stage.set_recompute(c.recompute);
  schedule::LowerOptions lower;
  for (int d : c.replicas) lower.allreduce_stages.push_back(d > 1);
  auto programs = schedule::BuildPrograms(c.kind, stages, c.micro_batches, lower);
  ASSERT_TRUE(programs.ok()) << programs.status();
  Mailbox box;
  MakeJob(&job, &box, *programs);
  if (HasFatalFailure()) return;
  std::vector<RankRun> runs = RunRanks(&job, kSteps);
  const int ranks = static_cast<int>(runs.size());
  for (int rank = 0; rank < ranks; ++rank) {
    ASSERT_TRUE(runs[rank].status.ok()) << "rank " << rank << ": " << runs[rank].status;
  }

  // Replica 0 of every stage against the single device: per-step loss, final weights, test
  // accuracy (parity harness, 1e-5 relative).
  std::vector<std::unique_ptr<StageRuntime>> firsts;
  parity::PipelineRun run;
  const int last0 = schedule::RankIndex(job.plan, stages - 1, 0);
  for (const StepResult& r : runs[last0].steps) {
    ASSERT_TRUE(r.has_loss);
    run.losses.push_back(r.loss);
  }
  ASSERT_TRUE(runs[last0].eval.has_metrics);
  run.eval_accuracy = runs[last0].eval.accuracy;
  run.status.assign(stages, absl::OkStatus());
  for (int s = 0; s < stages; ++s) {
    firsts.push_back(std::move(job.runtimes[schedule::RankIndex(job.plan, s, 0)]));
  }
  parity::ExpectMatchesReference(job.spec, kSteps, firsts, run);

  for (int rank = 0; rank < ranks; ++rank) {
    const int s = job.stage_of[rank];
    const int r = job.replica_of[rank];
    const int d = c.replicas[s];
    const RankRun& first = runs[schedule::RankIndex(job.plan, s, 0)];
    const RankRun& mine = runs[rank];
    SCOPED_TRACE(absl::StrCat("stage ", s, " replica ", r));
    ASSERT_EQ(mine.params_after_step.size(), static_cast<size_t>(kSteps));
    for (int step = 0; step < kSteps; ++step) {
      // After every step the replicas of a stage hold bitwise-identical weights.
      const std::vector<float>& a = mine.params_after_step[step];
      const std::vector<float>& b = first.params_after_step[step];
      ASSERT_EQ(a.size(), b.size());
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
          << "weights differ from replica 0 after step " << step + 1;
      const StepResult& st = mine.steps[step];
      // Every last-stage replica reports the same global loss.
      if (s == stages - 1) {
        ASSERT_TRUE(st.has_loss);
        EXPECT_EQ(st.loss, first.steps[step].loss) << "step " << step + 1;
      }
      const int64_t rows = schedule::SplitRows(o.micro_batch, d, r).size();
      EXPECT_EQ(st.stats.samples(), rows * c.micro_batches);
      if (d > 1) {
        EXPECT_GT(st.stats.allreduce_seconds(), 0);
      } else {
        EXPECT_EQ(st.stats.allreduce_seconds(), 0);
      }
    }
    // Exactly one collective call per stage per step.
    if (d > 1) {
      EXPECT_EQ(job.collectives[rank]->allreduce_calls, kSteps);
      EXPECT_EQ(job.collectives[rank]->allgather_calls, 0);
    } else {
      EXPECT_EQ(job.collectives[rank], nullptr);
    }
    // Only replica 0 evaluates; on the last stage it reports the metrics.
    if (r != 0) {
      EXPECT_FALSE(mine.eval.has_metrics);
      EXPECT_EQ(mine.eval.samples, 0);
    }
  }
}

std::vector<Case> AllCases() {
  using schedule::ScheduleKind;
  std::vector<Case> cases;
  for (auto kind : {ScheduleKind::kDapple, ScheduleKind::kGPipe}) {
    cases.push_back({kind, {2, 2}, 4, 64});  // P = 2, D = 2: 4 ranks
    cases.push_back({kind, {2}, 2, 64});     // pure data parallelism
    cases.push_back({kind, {2, 1}, 4, 64});  // uneven replicas
    cases.push_back({kind, {1, 3}, 4, 64});  // micro-batch 16 over 3 replicas: 6, 5, 5 rows
  }
  cases.push_back({ScheduleKind::kDapple, {2, 2}, 4, 60});  // micro-batch 15 over 2: 8, 7
  cases.push_back({ScheduleKind::kDapple, {3, 2}, 2, 64, "adamw"});
  cases.push_back({ScheduleKind::kDapple, {2, 3, 1}, 4, 64});  // P = 3, 6 ranks
  // The zero-bubble schedules: the AllReduce after the last BACKWARD_WEIGHT.
  cases.push_back({ScheduleKind::kZbH1, {2, 2}, 4, 64});
  cases.push_back({ScheduleKind::kZbH2, {2, 2}, 5, 60});
  cases.push_back({ScheduleKind::kZbH2, {2, 1, 2}, 4, 64});
  // Activation recomputation on every stage, P in {2, 4} and M in {P, 2P + 1, 8}, with replicas:
  // the recomputed forwards give exactly the activations the backward would have kept.
  cases.push_back({ScheduleKind::kDapple, {2, 2}, 2, 64, "sgd", true});
  cases.push_back({ScheduleKind::kDapple, {2, 1}, 5, 60, "adamw", true});
  cases.push_back({ScheduleKind::kDapple, {1, 2}, 8, 64, "sgd", true});
  cases.push_back({ScheduleKind::kGPipe, {2, 2}, 8, 64, "sgd", true});
  cases.push_back({ScheduleKind::kDapple, {1, 2, 1, 1}, 4, 64, "sgd", true});
  cases.push_back({ScheduleKind::kDapple, {1, 1, 1, 2}, 9, 72, "sgd", true});
  cases.push_back({ScheduleKind::kGPipe, {1, 1, 2, 1}, 8, 64, "adamw", true});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(All, ReplicaParityTest, ::testing::ValuesIn(AllCases()),
                         [](const auto& info) { return CaseName(info.param); });

// Create's contract for replicated stages.
class ReplicaCreateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    parity::SpecOptions o;
    o.global_batch = 64;
    o.micro_batch = 16;
    spec_ = parity::ParitySpec(o);
    plan_ = ReplicatedPlan(spec_.model().layers_size(), {2});
    with_allreduce_ = schedule::BuildPrograms(schedule::ScheduleKind::kDapple, 1, 4,
                                              schedule::LowerOptions{{true}})
                          .value()[0];
    without_allreduce_ = schedule::BuildPrograms(schedule::ScheduleKind::kDapple, 1, 4).value()[0];
  }
  absl::Status Create(const v1::ParallelPlanSummary& plan, const v1::RankProgram& program,
                      int replica, Collective* collective) {
    v1::StageAssignment a = parity::Assignment(spec_, plan, 0, program);
    a.set_replica(replica);
    return StageRuntime::Create(a, &TrainSet(), &TestSet(), nullptr, nullptr, collective).status();
  }

  // A stand-in with the right shape; Create never calls it.
  class Shape : public Collective {
   public:
    Shape(int rank, int size) : rank_(rank), size_(size) {}
    int rank() const override { return rank_; }
    int size() const override { return size_; }
    absl::Status AllReduceSum(float*, size_t) override {
      return absl::InternalError("not for calling");
    }
    absl::Status AllGather(const void*, size_t, void*) override {
      return absl::InternalError("not for calling");
    }

   private:
    int rank_, size_;
  };

  v1::JobSpec spec_;
  v1::ParallelPlanSummary plan_;
  v1::RankProgram with_allreduce_, without_allreduce_;
};

TEST_F(ReplicaCreateTest, AcceptsAWellFormedReplica) {
  Shape c(1, 2);
  EXPECT_TRUE(Create(plan_, with_allreduce_, 1, &c).ok());
}

TEST_F(ReplicaCreateTest, RefusesAReplicatedStageWithoutACollective) {
  absl::Status s = Create(plan_, with_allreduce_, 0, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("stage 0 has 2 replicas but no collective"));
}

TEST_F(ReplicaCreateTest, RefusesAProgramWithoutAllReduce) {
  Shape c(0, 2);
  absl::Status s = Create(plan_, without_allreduce_, 0, &c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("no ALLREDUCE"));
}

TEST_F(ReplicaCreateTest, RefusesACollectiveOfAnotherShape) {
  Shape wrong_rank(1, 2), wrong_size(0, 3);
  absl::Status s = Create(plan_, with_allreduce_, 0, &wrong_rank);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("stage 0 replica 0 of 2 was given a collective of member 1"));
  EXPECT_EQ(Create(plan_, with_allreduce_, 0, &wrong_size).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ReplicaCreateTest, RefusesAReplicaOutsideTheStage) {
  Shape c(0, 2);
  absl::Status s = Create(plan_, with_allreduce_, 2, &c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("replica 2 outside [0, 2)"));
}

TEST_F(ReplicaCreateTest, RefusesMoreReplicasThanRows) {
  parity::SpecOptions o;
  o.global_batch = 8;
  o.micro_batch = 2;
  spec_ = parity::ParitySpec(o);
  v1::ParallelPlanSummary plan = ReplicatedPlan(spec_.model().layers_size(), {3});
  Shape c(0, 3);
  absl::Status s = Create(plan, with_allreduce_, 0, &c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("training.micro_batch 2 is smaller than the 3 replicas"));
}

TEST(ReplicaRunTest, ASecondAllReduceInAStepIsAnInternalError) {
  // Both replicas run the same bad program, so both stop at the same action without waiting on
  // each other.
  parity::SpecOptions o;
  o.global_batch = 32;
  o.micro_batch = 16;
  Job job;
  job.spec = parity::ParitySpec(o);
  job.plan = ReplicatedPlan(job.spec.model().layers_size(), {2});
  v1::RankProgram program =
      schedule::BuildPrograms(schedule::ScheduleKind::kDapple, 1, 2, schedule::LowerOptions{{true}})
          .value()[0];
  v1::RankProgram doubled;
  for (const v1::Action& a : program.actions()) {
    *doubled.add_actions() = a;
    if (a.kind() == v1::ALLREDUCE) *doubled.add_actions() = a;
  }
  Mailbox box;
  MakeJob(&job, &box, {doubled});
  if (HasFatalFailure()) return;
  std::vector<RankRun> runs = RunRanks(&job, 1);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(runs[r].status.code(), absl::StatusCode::kInternal) << runs[r].status;
    EXPECT_THAT(runs[r].status.message(),
                HasSubstr(absl::StrCat("stage 0 replica ", r, " step 1, ")));
    EXPECT_THAT(runs[r].status.message(), HasSubstr("a second ALLREDUCE"));
    EXPECT_EQ(job.collectives[r]->allreduce_calls, 1);
  }
}

}  // namespace
}  // namespace dapple::worker
