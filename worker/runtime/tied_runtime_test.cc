// Tied weights across stages on a small GPT (embedding -> 2 transformer blocks -> layernorm ->
// lm_head tied to the embedding) trained on text, with gradient clipping and a learning-rate
// schedule: under gpipe and dapple, every P in {1, 2, 4} (the embedding on the first stage, the
// tied head on the last), D in {1, 2} and M in {1, 3, 8}, the per-step loss and the final weights
// match the single-device reference within 1e-5 relative, and the embedding's table on the first
// stage and the head's copy on the last stay bitwise equal after every step, on every replica.
// The same matrix runs three ways: SGD; SGD with dropout live everywhere it can be (the
// embedding's, both blocks', and a dropout layer), whose masks are a pure function of (seed,
// step, sample, layer, element); and AdamW (weight decay) with dropout, compared on every loss
// and weight but the attention's key bias (parity::UncomparedSlice says why). PipeDream and
// Pipe-SGD train the same GPT. Every rank is a thread (testing/local_job.h).
#include <cmath>
#include <cstring>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/lr_schedule.h"
#include "common/schedule/ranks.h"
#include "common/steps.h"
#include "common/text_data.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/data/dataset.h"
#include "worker/runtime/reference_trainer.h"
#include "worker/runtime/stage_runtime.h"
#include "worker/runtime/testing/corpus_file.h"
#include "worker/runtime/testing/local_job.h"
#include "worker/runtime/testing/parity_testing.h"

namespace dapple::worker {
namespace {

constexpr int64_t kT = 8;
constexpr int kSteps = 4;
constexpr int64_t kGlobalBatch = 24;
constexpr char kTable[] = "layer0.token_embedding";

struct Options {
  std::string schedule = "dapple";
  int64_t micro_batch = kGlobalBatch;
  double max_grad_norm = 1.0;
  std::string optimizer = "sgd";  // sgd (lr 0.1, momentum 0.9) or adamw (lr 0.01, decay 0.01)
  double dropout = 0;             // the embedding's, each block's and a dropout layer's p
};

// Layers: 0 embedding (256 x 16), 1-2 transformer_block, 3 layernorm, 4 lm_head tied to layer
// 0; with dropout, a dropout layer between the blocks and the layernorm (layers 3-5 then).
v1::JobSpec TiedGptSpec(const std::string& path, const Options& o) {
  v1::JobSpec spec;
  spec.set_name("tied-gpt");
  v1::ModelSpec* m = spec.mutable_model();
  m->add_input_shape(kT);
  m->set_input_type("tokens");
  v1::LayerSpec* e = m->add_layers();
  e->set_type("embedding");
  e->mutable_embedding()->set_vocab(kTextVocab);
  e->mutable_embedding()->set_dim(16);
  if (o.dropout > 0) e->mutable_embedding()->set_dropout(o.dropout);
  for (int b = 0; b < 2; ++b) {
    v1::LayerSpec* block = m->add_layers();
    block->set_type("transformer_block");
    block->mutable_transformer_block()->set_heads(2);
    if (o.dropout > 0) block->mutable_transformer_block()->set_dropout(o.dropout);
  }
  if (o.dropout > 0) {
    v1::LayerSpec* dropout = m->add_layers();
    dropout->set_type("dropout");
    dropout->mutable_dropout()->set_p(o.dropout);
  }
  m->add_layers()->set_type("layernorm");
  v1::LayerSpec* head = m->add_layers();
  head->set_type("lm_head");
  head->mutable_lm_head()->set_tied(true);
  m->set_loss("softmax_cross_entropy");
  v1::DataSpec* d = spec.mutable_data();
  d->set_dataset("text");
  d->set_path(path);
  d->set_seq_len(kT);
  d->set_validation_fraction(0.1);
  EXPECT_TRUE(ResolveTextData(d).ok());
  v1::TrainingSpec* t = spec.mutable_training();
  t->set_global_batch(kGlobalBatch);
  t->set_micro_batch(o.micro_batch);
  t->set_epochs(1);
  t->set_seed(11);
  const bool sgd = o.optimizer == "sgd";
  t->mutable_optimizer()->set_type(o.optimizer);
  t->mutable_optimizer()->set_lr(sgd ? 0.1 : 0.01);
  if (sgd) t->mutable_optimizer()->set_momentum(0.9);
  if (!sgd) t->mutable_optimizer()->set_weight_decay(0.01);
  t->set_max_grad_norm(o.max_grad_norm);
  t->mutable_lr_schedule()->set_warmup_steps(2);
  t->mutable_lr_schedule()->set_decay("cosine");
  t->mutable_lr_schedule()->set_min_lr(sgd ? 0.01 : 0.001);
  t->mutable_lr_schedule()->set_decay_steps(4);
  spec.mutable_parallel()->set_schedule(o.schedule);
  return spec;
}

struct Case {
  std::string schedule;
  int stages;    // P
  int replicas;  // D on every stage
  int micro_batches;
  double max_grad_norm = 1.0;
  std::string optimizer = "sgd";
  double dropout = 0;
};

std::string CaseName(const Case& c) {
  return absl::StrCat(c.schedule, "_P", c.stages, "_D", c.replicas, "_M", c.micro_batches,
                      c.max_grad_norm > 0 ? "_clip" : "_noclip", "_", c.optimizer,
                      c.dropout > 0 ? "_dropout" : "");
}

// gtest prints a failing case by its name rather than its bytes.
void PrintTo(const Case& c, std::ostream* os) { *os << CaseName(c); }

class TiedGptParityTest : public ::testing::TestWithParam<Case> {};

TEST_P(TiedGptParityTest, MatchesTheReferenceWithBitwiseEqualCopies) {
  const Case c = GetParam();
  parity::CorpusFile file;
  const v1::JobSpec spec = TiedGptSpec(file.path(), {.schedule = c.schedule,
                                                     .micro_batch = kGlobalBatch / c.micro_batches,
                                                     .max_grad_norm = c.max_grad_norm,
                                                     .optimizer = c.optimizer,
                                                     .dropout = c.dropout});
  absl::StatusOr<Datasets> data = LoadDatasets(spec.data());
  ASSERT_TRUE(data.ok()) << data.status();
  const v1::ParallelPlanSummary plan =
      parity::WithReplicas(parity::UniformPlan(spec.model().layers_size(), c.stages),
                           std::vector<int>(c.stages, c.replicas));
  absl::StatusOr<std::unique_ptr<parity::LocalJob>> job =
      parity::LocalJob::Create(spec, plan, data->train.get(), data->eval.get());
  ASSERT_TRUE(job.ok()) << job.status();
  const std::vector<parity::LocalJob::RankRun> runs = (*job)->Run(0, kSteps, /*evaluate=*/true);
  for (int rank = 0; rank < (*job)->num_ranks(); ++rank) {
    ASSERT_TRUE(runs[rank].status.ok()) << "rank " << rank << ": " << runs[rank].status;
  }

  // After every step every rank's copy of the table (the embedding's on stage 0, the head's on
  // the last stage, or the one shared parameter when P = 1) is bitwise the same.
  for (int step = 0; step < kSteps; ++step) {
    const std::vector<float>* first = nullptr;
    int holders = 0;
    for (int rank = 0; rank < (*job)->num_ranks(); ++rank) {
      for (const kernels::Param& p : runs[rank].params_after_step[step]) {
        if (p.name != kTable && p.tied_to != kTable) continue;
        ++holders;
        if (first == nullptr) first = &p.value.data;
        ASSERT_EQ(p.value.data.size(), first->size());
        EXPECT_EQ(std::memcmp(p.value.data.data(), first->data(), first->size() * sizeof(float)), 0)
            << p.name << " on rank " << rank << " differs after step " << step + 1;
      }
    }
    // The owner's stage and the head's, every replica.
    EXPECT_EQ(holders, (c.stages > 1 ? 2 : 1) * c.replicas);
  }

  // Clipping acted (or, without it, the rates alone); every rank used the schedule's rate.
  auto ref = ReferenceTrainer::Create(spec, data->train.get()).value();
  bool clipped = false;
  for (int step = 0; step < kSteps; ++step) {
    ref->Step(step);
    clipped = clipped || std::sqrt(ref->last_gradient_sq_norm()) > c.max_grad_norm;
    for (int rank = 0; rank < (*job)->num_ranks(); ++rank) {
      EXPECT_DOUBLE_EQ(runs[rank].steps[step].stats.learning_rate(),
                       LearningRate(spec.training(), step, TotalSteps(spec)));
    }
  }
  if (c.max_grad_norm > 0) {
    EXPECT_TRUE(clipped) << "no step's norm exceeded max_grad_norm";
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
  parity::ExpectMatchesReference(spec, kSteps, firsts, run, *data->train, *data->eval);
}

// Every (schedule, P, D, M) with SGD, with SGD and dropout, and with AdamW and dropout.
std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (const char* schedule : {"dapple", "gpipe"}) {
    for (int p : {1, 2, 4}) {
      for (int d : {1, 2}) {
        for (int m : {1, 3, 8}) {
          cases.push_back({schedule, p, d, m});
          cases.push_back({schedule, p, d, m, 1.0, "sgd", /*dropout=*/0.1});
          cases.push_back({schedule, p, d, m, 1.0, "adamw", /*dropout=*/0.1});
        }
      }
    }
  }
  cases.push_back({"dapple", 4, 2, 3, /*max_grad_norm=*/0});  // tied weights alone
  return cases;
}

INSTANTIATE_TEST_SUITE_P(All, TiedGptParityTest, ::testing::ValuesIn(AllCases()),
                         [](const auto& info) { return CaseName(info.param); });

// PipeDream (asynchronous, weight stashing) with the tied head on another stage and clipping:
// it runs, the copies stay bitwise equal after every update on every replica (1F1B-RR), and the
// tied group meets once per step.
TEST(TiedGptPipeDreamTest, CopiesStayBitwiseEqual) {
  parity::CorpusFile file;
  const v1::JobSpec spec = TiedGptSpec(file.path(), {.schedule = "pipedream", .micro_batch = 6});
  absl::StatusOr<Datasets> data = LoadDatasets(spec.data());
  ASSERT_TRUE(data.ok()) << data.status();
  for (const std::vector<int>& replicas : {std::vector<int>{1, 1, 1}, std::vector<int>{2, 1, 2}}) {
    SCOPED_TRACE(absl::StrCat("replicas ", replicas[0], ",", replicas[1], ",", replicas[2]));
    const v1::ParallelPlanSummary plan =
        parity::WithReplicas(parity::UniformPlan(spec.model().layers_size(), 3), replicas);
    absl::StatusOr<std::unique_ptr<parity::LocalJob>> job =
        parity::LocalJob::Create(spec, plan, data->train.get(), data->eval.get());
    ASSERT_TRUE(job.ok()) << job.status();
    // An evaluation half way, with forwards of the next step in flight, then the rest.
    std::vector<parity::LocalJob::RankRun> runs = (*job)->Run(0, kSteps / 2, /*evaluate=*/true);
    std::vector<parity::LocalJob::RankRun> rest =
        (*job)->Run(kSteps / 2, kSteps - kSteps / 2, /*evaluate=*/false);
    for (int rank = 0; rank < (*job)->num_ranks(); ++rank) {
      ASSERT_TRUE(runs[rank].status.ok()) << "rank " << rank << ": " << runs[rank].status;
      ASSERT_TRUE(rest[rank].status.ok()) << "rank " << rank << ": " << rest[rank].status;
      for (auto& params : rest[rank].params_after_step) {
        runs[rank].params_after_step.push_back(std::move(params));
      }
    }
    for (int step = 0; step < kSteps; ++step) {
      const std::vector<float>* first = nullptr;
      for (int rank = 0; rank < (*job)->num_ranks(); ++rank) {
        for (const kernels::Param& p : runs[rank].params_after_step[step]) {
          if (p.name != kTable && p.tied_to != kTable) continue;
          if (first == nullptr) first = &p.value.data;
          EXPECT_EQ(p.value.data, *first) << p.name << " rank " << rank << " step " << step + 1;
        }
      }
    }
  }
}

// Pipe-SGD is one stage: the head shares the embedding's parameter, and clipping happens in the
// updater. It trains, and its replicas stay bitwise equal.
TEST(TiedGptPipeSgdTest, OneSharedTableAndIdenticalReplicas) {
  parity::CorpusFile file;
  v1::JobSpec spec = TiedGptSpec(file.path(), {.schedule = "pipesgd", .micro_batch = 12});
  spec.mutable_parallel()->mutable_pipesgd()->set_warmup_steps(1);
  absl::StatusOr<Datasets> data = LoadDatasets(spec.data());
  ASSERT_TRUE(data.ok()) << data.status();
  const v1::ParallelPlanSummary plan =
      parity::WithReplicas(parity::UniformPlan(spec.model().layers_size(), 1), {2});
  absl::StatusOr<std::unique_ptr<parity::LocalJob>> job =
      parity::LocalJob::Create(spec, plan, data->train.get(), data->eval.get());
  ASSERT_TRUE(job.ok()) << job.status();
  const std::vector<parity::LocalJob::RankRun> runs = (*job)->Run(0, kSteps, false);
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(runs[rank].status.ok()) << "rank " << rank << ": " << runs[rank].status;
  }
  for (int step = 0; step < kSteps; ++step) {
    const std::vector<kernels::Param>& a = runs[0].params_after_step[step];
    const std::vector<kernels::Param>& b = runs[1].params_after_step[step];
    ASSERT_EQ(a.size(), b.size());
    int tables = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].value.data, b[i].value.data) << a[i].name << " step " << step + 1;
      tables += a[i].name == kTable || a[i].tied_to == kTable;
    }
    EXPECT_EQ(tables, 1) << "one stage: the head computes with the embedding's table";
  }
  EXPECT_TRUE(std::isfinite(runs[0].steps.back().loss));
}

}  // namespace
}  // namespace dapple::worker
