// GradientExchange on a hand-made backend whose gradients are known: stage 0 (two replicas)
// owns a tied table, stage 1 holds its copy; every rank is a thread with LocalCollective groups.
#include "worker/runtime/gradient_exchange.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/comm/testing/local_collective.h"

namespace dapple::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Only the gradient calls and HostParams work; nothing here computes.
class GradientsOnlyBackend : public StageBackend {
 public:
  explicit GradientsOnlyBackend(std::vector<kernels::Param> params) : store_(std::move(params)) {
    for (kernels::Param& p : store_) params_.push_back(&p);
  }
  std::string device() const override { return "test"; }
  bool device_memory() const override { return false; }
  absl::StatusOr<void*> Input(int, int64_t) override { return Unused(); }
  absl::Status LoadInput(int, const float*, int64_t) override { return Unused(); }
  absl::Status Forward(int, int64_t, const kernels::ForwardContext&) override { return Unused(); }
  absl::StatusOr<double> Loss(int, const int32_t*, int64_t, float, bool, int64_t*) override {
    return Unused();
  }
  absl::StatusOr<const void*> OutputForSend(int, int, int64_t) override { return Unused(); }
  absl::StatusOr<void*> GradInput(int, int64_t) override { return Unused(); }
  absl::Status Backward(int, int, int64_t, bool, bool) override { return Unused(); }
  const void* GradForSend(int) const override { return nullptr; }
  absl::Status OptimizerStep() override { return Unused(); }
  int64_t OptimizerUpdates() const override { return 0; }
  absl::Status ScaleGradients(float factor) override {
    for (kernels::Param* p : params_) {
      for (float& g : p->grad.data) g *= factor;
    }
    return absl::OkStatus();
  }
  absl::Status ReadOutput(int, int64_t, int64_t, float*) override { return Unused(); }
  absl::StatusOr<void*> MessageBuffer(int64_t) override { return Unused(); }
  absl::Status WriteMessage(const void*, int64_t) override { return Unused(); }
  absl::Status ReadMessage(void*, int64_t) override { return Unused(); }
  absl::Status Synchronize() override { return absl::OkStatus(); }
  absl::StatusOr<StageState> ExportState() override { return Unused(); }
  absl::Status ImportState(const StageState&) override { return Unused(); }
  absl::StatusOr<std::vector<kernels::Param*>> HostParams() override { return params_; }

  absl::StatusOr<double> GradientSquaredNorm() override {
    double sum = 0;
    for (const kernels::Param* p : params_) {
      if (!p->tied_to.empty()) continue;
      for (float g : p->grad.data) sum += static_cast<double>(g) * g;
    }
    return sum;
  }
  absl::Status ReadGradientsOf(const std::vector<int>& params, float* host) override {
    for (int i : params) {
      const std::vector<float>& g = params_[i]->grad.data;
      std::memcpy(host, g.data(), g.size() * sizeof(float));
      host += g.size();
    }
    return absl::OkStatus();
  }
  absl::Status WriteGradientsOf(const std::vector<int>& params, const float* host) override {
    for (int i : params) {
      std::vector<float>& g = params_[i]->grad.data;
      std::memcpy(g.data(), host, g.size() * sizeof(float));
      host += g.size();
    }
    return absl::OkStatus();
  }

  // Step statistics: what the test sets, and every ApplyStepStatistics' argument.
  int64_t StepStatisticsSize() const override { return static_cast<int64_t>(stats.size()); }
  absl::Status ReadStepStatistics(double* host) override {
    std::copy(stats.begin(), stats.end(), host);
    return absl::OkStatus();
  }
  absl::Status ApplyStepStatistics(const double* summed) override {
    applied.emplace_back(summed, summed + stats.size());
    std::fill(stats.begin(), stats.end(), 0.0);
    return absl::OkStatus();
  }

  std::vector<float> grad(int i) const { return params_[i]->grad.data; }
  std::vector<float>& mutable_grad(int i) { return params_[i]->grad.data; }
  std::vector<double> stats;
  std::vector<std::vector<double>> applied;

 private:
  static absl::Status Unused() { return absl::UnimplementedError("not in this test"); }
  std::vector<kernels::Param> store_;
  std::vector<kernels::Param*> params_;
};

kernels::Param WithGrad(const std::string& name, const std::string& tied_to,
                        std::vector<float> grad) {
  kernels::Param p;
  p.name = name;
  p.tied_to = tied_to;
  p.value.shape = {static_cast<int64_t>(grad.size())};
  p.value.data.assign(grad.size(), 0.0f);
  p.grad.shape = p.value.shape;
  p.grad.data = std::move(grad);
  return p;
}

// Stage 0: layers [0, 0] on 2 replicas (ranks 0, 1); stage 1: layer [1, 1] (rank 2).
v1::StageAssignment Rank(int stage, int replica) {
  v1::StageAssignment a;
  for (int s = 0; s < 2; ++s) {
    v1::PlanStageSummary* st = a.mutable_plan()->add_stages();
    st->set_first_layer(s);
    st->set_last_layer(s);
    st->set_replicas(s == 0 ? 2 : 1);
  }
  a.set_stage(stage);
  a.set_replica(replica);
  a.set_num_stages(2);
  return a;
}

schedule::LowerOptions Lower() {
  schedule::LowerOptions o;
  o.allreduce_stages = {true, false};
  o.tied_stages = {true, true};
  o.global_norm = true;
  return o;
}

std::vector<schedule::TiedWeight> Split() {
  schedule::TiedWeight w;
  w.owner = "layer0.token_embedding";
  w.owner_layer = 0;
  w.copy = "layer1.weight";
  w.copy_layer = 1;
  w.shape = {4};
  return {w};
}

struct Ranks {
  testing::LocalCollectiveGroup replicas{2}, tied{3}, job{3};
  std::vector<std::unique_ptr<testing::LocalCollective>> members;
  std::vector<StageCollectives> collectives = std::vector<StageCollectives>(3);
  Ranks() {
    for (int r = 0; r < 3; ++r) {
      if (r < 2) {
        members.push_back(std::make_unique<testing::LocalCollective>(&replicas, r));
        collectives[r].replicas = members.back().get();
      }
      members.push_back(std::make_unique<testing::LocalCollective>(&tied, r));
      collectives[r].tied = members.back().get();
      members.push_back(std::make_unique<testing::LocalCollective>(&job, r));
      collectives[r].job = members.back().get();
    }
  }
};

TEST(GradientExchangeTest, TiedPartialsAreSummedOnceAndTheNormCountsEachParameterOnce) {
  std::vector<std::unique_ptr<GradientsOnlyBackend>> backends;
  backends.push_back(std::make_unique<GradientsOnlyBackend>(
      std::vector<kernels::Param>{WithGrad("layer0.token_embedding", "", {1, 2, 3, 4}),
                                  WithGrad("layer0.position_embedding", "", {10, 20, 30})}));
  backends.push_back(std::make_unique<GradientsOnlyBackend>(
      std::vector<kernels::Param>{WithGrad("layer0.token_embedding", "", {5, 6, 7, 8}),
                                  WithGrad("layer0.position_embedding", "", {1, 1, 1})}));
  backends.push_back(std::make_unique<GradientsOnlyBackend>(std::vector<kernels::Param>{
      WithGrad("layer1.weight", "layer0.token_embedding", {100, 200, 300, 400})}));
  Ranks ranks;
  const int stage_of[] = {0, 0, 1};
  const int replica_of[] = {0, 1, 0};
  std::vector<double> loss = {3.0, 4.0, 0.0};
  std::vector<double> total(3, -1), stage_sq_norm(3, -1);
  std::vector<absl::Status> status(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      auto ex = GradientExchange::Create(Rank(stage_of[r], replica_of[r]), Lower(), Split(),
                                         backends[r].get(), ranks.collectives[r]);
      if (!ex.ok()) {
        status[r] = ex.status();
        return;
      }
      if (status[r] = (*ex)->AllReduceTied(); !status[r].ok()) return;
      if (status[r] = (*ex)->AllReduceReplicas(stage_of[r] == 0 ? &loss[r] : nullptr);
          !status[r].ok()) {
        return;
      }
      absl::StatusOr<GlobalNormResult> norm = (*ex)->GlobalNorm();
      if (!norm.ok()) {
        status[r] = norm.status();
        return;
      }
      total[r] = norm->total_sq_norm;
      absl::StatusOr<UpdateDecision> stage_norm = (*ex)->PrepareUpdate();
      if (!stage_norm.ok()) {
        status[r] = stage_norm.status();
        return;
      }
      stage_sq_norm[r] = stage_norm->sq_norm;
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];

  // Every copy holds the sum of the three partials (the replicas' AllReduce left it alone), then
  // clipped: max_grad_norm 0 here, so unscaled.
  for (int r = 0; r < 3; ++r) EXPECT_THAT(backends[r]->grad(0), ElementsAre(106, 208, 310, 412));
  EXPECT_THAT(backends[0]->grad(1), ElementsAre(11, 21, 31));
  EXPECT_THAT(backends[1]->grad(1), ElementsAre(11, 21, 31));
  EXPECT_EQ(loss[0], 7.0);
  EXPECT_EQ(loss[1], 7.0);
  // Replica 0 of stage 0 counts the table and the positions; its other replica and the copy do
  // not; every rank holds the same total.
  const double want =
      106.0 * 106 + 208.0 * 208 + 310.0 * 310 + 412.0 * 412 + 11 * 11 + 21 * 21 + 31 * 31;
  for (int r = 0; r < 3; ++r) EXPECT_EQ(total[r], want) << "rank " << r;
  // Each stage's own norm (StageStepStats.gradient_sq_norm): the copy counts nothing.
  EXPECT_EQ(stage_sq_norm[0], want);
  EXPECT_EQ(stage_sq_norm[1], want);
  EXPECT_EQ(stage_sq_norm[2], 0.0);
  EXPECT_EQ(ranks.tied.calls(), 1);
  EXPECT_EQ(ranks.replicas.calls(), 1);
  EXPECT_EQ(ranks.job.calls(), 1);
}

// One rank, clipping: the update scales every gradient by max_norm / (norm + 1e-6) (norm 5
// here, max 1), and breaks in the action order are internal errors.
TEST(GradientExchangeTest, ClipsAtTheUpdateAndKeepsTheOrder) {
  v1::StageAssignment a;
  v1::PlanStageSummary* st = a.mutable_plan()->add_stages();
  st->set_first_layer(0);
  st->set_last_layer(0);
  a.set_num_stages(1);
  a.mutable_spec()->mutable_training()->set_max_grad_norm(1.0);
  schedule::LowerOptions lower;
  lower.global_norm = true;
  GradientsOnlyBackend b({WithGrad("layer0.weight", "", {3, 4})});
  auto ex = GradientExchange::Create(a, lower, {}, &b, StageCollectives{}).value();
  EXPECT_THAT(ex->PrepareUpdate().status().message(),
              HasSubstr("OPTIMIZER_STEP before its GLOBAL_NORM"));
  EXPECT_EQ(ex->TakeNormNanos(), 0);
  ASSERT_EQ(ex->GlobalNorm()->total_sq_norm, 25.0);
  // The squared norm's compute is timed (the step's optimizer time holds it), once.
  EXPECT_GT(ex->TakeNormNanos(), 0);
  EXPECT_EQ(ex->TakeNormNanos(), 0);
  EXPECT_THAT(ex->GlobalNorm().status().message(), HasSubstr("a second GLOBAL_NORM"));
  EXPECT_THAT(ex->AllReduceReplicas(nullptr).message(), HasSubstr("one after GLOBAL_NORM"));
  ASSERT_EQ(ex->PrepareUpdate().value().sq_norm, 25.0);
  const float f = static_cast<float>(1.0 / 5.000001);
  EXPECT_THAT(b.grad(0), ElementsAre(3 * f, 4 * f));
  // The next update's round starts afresh.
  ASSERT_TRUE(ex->AllReduceReplicas(nullptr).ok());
  EXPECT_THAT(ex->AllReduceReplicas(nullptr).message(), HasSubstr("a second ALLREDUCE"));
}

// Batch norm's step statistics: summed over the replicas (in double, before the gradients) and
// applied once per update on every replica; one replica applies its own at the update; Pipe-SGD's
// updater applies them itself.
TEST(GradientExchangeTest, StepStatisticsAreSummedOverReplicasAndAppliedOncePerUpdate) {
  schedule::LowerOptions plain;
  plain.allreduce_stages = {true, false};
  plain.tied_stages = {false, false};
  Ranks ranks;
  std::vector<std::unique_ptr<GradientsOnlyBackend>> replicas;
  for (int r = 0; r < 2; ++r) {
    replicas.push_back(std::make_unique<GradientsOnlyBackend>(
        std::vector<kernels::Param>{WithGrad("layer0.weight", "", {1.0f + r})}));
  }
  // Not representable in fp32: a sum through the gradients' AllReduce would round them.
  replicas[0]->stats = {0.1, 1e9 + 0.5};
  replicas[1]->stats = {0.2, 3.0};
  std::vector<absl::Status> status(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      StageCollectives c;
      c.replicas = ranks.collectives[r].replicas;
      auto ex = GradientExchange::Create(Rank(0, r), plain, {}, replicas[r].get(), c);
      if (!ex.ok()) {
        status[r] = ex.status();
        return;
      }
      if (status[r] = (*ex)->AllReduceReplicas(nullptr); !status[r].ok()) return;
      status[r] = (*ex)->PrepareUpdate().status();
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(status[r].ok()) << "replica " << r << ": " << status[r];
    ASSERT_EQ(replicas[r]->applied.size(), 1u) << "replica " << r;
    EXPECT_EQ(replicas[r]->applied[0], (std::vector<double>{0.1 + 0.2, 1e9 + 0.5 + 3.0}));
    EXPECT_THAT(replicas[r]->grad(0), ElementsAre(3.0f));
  }
  EXPECT_EQ(ranks.replicas.calls(), 2);  // the statistics' AllGather, the gradients' AllReduce

  // One replica: no ALLREDUCE action; the update applies its own statistics, once per update.
  GradientsOnlyBackend alone({WithGrad("layer1.weight", "", {1})});
  alone.stats = {2.5};
  auto ex = GradientExchange::Create(Rank(1, 0), plain, {}, &alone, StageCollectives{}).value();
  ASSERT_TRUE(ex->PrepareUpdate().ok());
  alone.stats = {4.0};
  ASSERT_TRUE(ex->PrepareUpdate().ok());
  EXPECT_EQ(alone.applied, (std::vector<std::vector<double>>{{2.5}, {4.0}}));
  // Pipe-SGD's updater applies them with its gradients: the exchange leaves them.
  ASSERT_TRUE(ex->ReplicasReducedElsewhere().ok());
  ASSERT_TRUE(ex->PrepareUpdate().ok());
  EXPECT_EQ(alone.applied.size(), 2u);
}

TEST(GradientExchangeTest, RefusesMissingOrMisshapenCollectives) {
  GradientsOnlyBackend copy_stage(
      {WithGrad("layer1.weight", "layer0.token_embedding", {1, 2, 3, 4})});
  Ranks ranks;
  StageCollectives c = ranks.collectives[2];
  c.tied = nullptr;
  absl::Status s = GradientExchange::Create(Rank(1, 0), Lower(), Split(), &copy_stage, c).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("stage 1 holds a tied weight whose other copy is on another "
                                     "stage, but no collective was given"));
  c = ranks.collectives[2];
  c.tied = ranks.collectives[0].tied;  // member 0, not 2
  s = GradientExchange::Create(Rank(1, 0), Lower(), Split(), &copy_stage, c).status();
  EXPECT_THAT(s.message(), HasSubstr("stage 1 replica 0 is member 2 of 3 of the tied weights' "
                                     "group but was given a collective of member 0 of 3"));
  c = ranks.collectives[2];
  c.job = nullptr;
  s = GradientExchange::Create(Rank(1, 0), Lower(), Split(), &copy_stage, c).status();
  EXPECT_THAT(s.message(), HasSubstr("over all 3 ranks of the job"));
  // Without clipping or ties nothing but the replicas' collective is needed.
  schedule::LowerOptions plain;
  plain.allreduce_stages = {true, false};
  plain.tied_stages = {false, false};
  GradientsOnlyBackend mlp({WithGrad("layer1.weight", "", {1})});
  EXPECT_TRUE(GradientExchange::Create(Rank(1, 0), plain, {}, &mlp, StageCollectives{}).ok());
}

// One rank: a non-finite gradient or loss skips the update (no clipping then), a finite step
// ends the streak, and the (K+1)-th non-finite step in a row fails.
TEST(GradientExchangeTest, SkipsNonFiniteStepsUpToTheLimit) {
  v1::StageAssignment a;
  v1::PlanStageSummary* st = a.mutable_plan()->add_stages();
  st->set_first_layer(0);
  st->set_last_layer(0);
  a.set_num_stages(1);
  a.mutable_spec()->mutable_training()->set_max_consecutive_skipped_steps(1);
  a.mutable_spec()->mutable_training()->set_max_grad_norm(1.0);
  schedule::LowerOptions lower;
  lower.global_norm = true;
  GradientsOnlyBackend b({WithGrad("layer0.weight", "", {3, 4})});
  auto ex = GradientExchange::Create(a, lower, {}, &b, StageCollectives{}).value();
  const float inf = std::numeric_limits<float>::infinity();
  // A gradient: no clipping applied to it, skip.
  b.mutable_grad(0)[1] = inf;
  GlobalNormResult norm = ex->GlobalNorm().value();
  EXPECT_TRUE(norm.skip);
  EXPECT_EQ(DescribeNonFinite(norm.first),
            "gradient (Inf) at stage 0 replica 0 (micro-batch not tracked: the step's "
            "accumulated gradient)");
  EXPECT_TRUE(ex->PrepareUpdate().value().skip);
  EXPECT_THAT(b.grad(0), ElementsAre(3, inf));
  EXPECT_EQ(ex->consecutive_skips(), 1);
  // A finite step ends the streak.
  b.mutable_grad(0) = {3, 4};
  EXPECT_FALSE(ex->GlobalNorm().value().skip);
  EXPECT_FALSE(ex->PrepareUpdate().value().skip);
  EXPECT_EQ(ex->consecutive_skips(), 0);
  // A loss (micro-batch 2's, the first non-finite one), then a second non-finite step in a row.
  ex->NoteLoss(0, 1.5);
  ex->NoteLoss(2, std::nan(""));
  ex->NoteLoss(3, inf);
  norm = ex->GlobalNorm().value();
  EXPECT_EQ(DescribeNonFinite(norm.first), "loss (NaN) at stage 0 replica 0 micro-batch 2");
  ASSERT_TRUE(ex->PrepareUpdate().ok());
  ex->NoteLoss(1, -inf);
  absl::StatusOr<GlobalNormResult> fail = ex->GlobalNorm();
  EXPECT_EQ(fail.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(fail.status().message(),
            "training diverged: non-finite loss (Inf) at stage 0 replica 0 micro-batch 1; 2 "
            "non-finite steps in a row, training.max_consecutive_skipped_steps allows 1 (try a "
            "lower training.optimizer.lr)");
  EXPECT_EQ(ex->skipped_updates(), 2);
}

NormRecord Found(NonFiniteKind kind, int micro_batch, bool nan) {
  NormRecord r;
  r.kind = static_cast<uint8_t>(kind);
  r.micro_batch = micro_batch;
  r.nan = nan ? 1 : 0;
  return r;
}

// The lowest micro-batch (a not tracked one last), then the highest stage, then the lowest
// replica; the same answer whatever the order of the records.
TEST(FirstNonFiniteTest, LowestMicroBatchThenHighestStageThenLowestReplica) {
  const std::vector<std::pair<int, int>> places = {{0, 0}, {0, 1}, {1, 0}, {1, 1}, {2, 0}};
  std::vector<NormRecord> records(places.size());
  EXPECT_EQ(FirstNonFinite(records, places).kind, NonFiniteKind::kNone);
  records[1] = Found(NonFiniteKind::kGradient, -1, false);
  records[3] = Found(NonFiniteKind::kGradient, -1, true);
  NonFinite first = FirstNonFinite(records, places);
  EXPECT_EQ(first.kind, NonFiniteKind::kGradient);
  EXPECT_EQ(first.stage, 1);  // the higher stage
  EXPECT_EQ(first.replica, 1);
  EXPECT_TRUE(first.nan);
  records[2] = Found(NonFiniteKind::kGradient, -1, false);
  first = FirstNonFinite(records, places);
  EXPECT_EQ(first.replica, 0);  // the lower replica of that stage
  EXPECT_EQ(DescribeNonFinite(first),
            "gradient (Inf) at stage 1 replica 0 (micro-batch not tracked: the step's "
            "accumulated gradient)");
  records[4] = Found(NonFiniteKind::kLoss, 3, false);
  records[0] = Found(NonFiniteKind::kLoss, 2, true);  // (not a real place for a loss: the order)
  first = FirstNonFinite(records, places);
  EXPECT_EQ(DescribeNonFinite(first), "loss (NaN) at stage 0 replica 0 micro-batch 2");
  std::reverse(records.begin(), records.end());
  std::vector<std::pair<int, int>> reversed(places.rbegin(), places.rend());
  EXPECT_EQ(DescribeNonFinite(FirstNonFinite(records, reversed)),
            "loss (NaN) at stage 0 replica 0 micro-batch 2");
}

}  // namespace
}  // namespace dapple::worker
