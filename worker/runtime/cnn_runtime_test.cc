// Batch-normalised image models through the pipeline runtime (docs/layers.md, "Batch
// normalisation"): a small VGG-style net (conv-BN-ReLU, maxpool, conv-BN-ReLU, linear) and a small
// ResNet-style net (stem conv-BN-ReLU, an identity residual block, a stride-2 projection block,
// global average pooling, linear) on tiny synthetic images.
//   - gpipe and dapple, every P in {1, 2, 3}, D in {1, 2}, M in {1, 4}: per-step loss, final
//     weights and final running statistics within 1e-5 relative of the single-process
//     reference normalising over the same row groups, the evaluation (with the running
//     statistics) too, and every replica of a stage holds bitwise the same weights and buffers.
//   - pipedream and pipesgd train both nets: the loss falls and the replicas stay identical.
// Every rank is a thread (testing/local_job.h).
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/schedule/ranks.h"
#include "gtest/gtest.h"
#include "worker/data/dataset.h"
#include "worker/runtime/reference_trainer.h"
#include "worker/runtime/stage_runtime.h"
#include "worker/runtime/testing/local_job.h"
#include "worker/runtime/testing/parity_testing.h"

namespace dapple::worker {
namespace {

constexpr int64_t kSide = 8;  // images [1, 8, 8]
constexpr int64_t kClasses = 4;
constexpr int64_t kGlobalBatch = 16;
constexpr int kSteps = 4;

// Images whose class is the brightest quadrant, over uniform noise: learnable in a few steps.
// Deterministic (an LCG per sample), immutable, thread-safe.
class SyntheticImages : public Dataset {
 public:
  SyntheticImages(int64_t samples, uint64_t seed) : samples_(samples) {
    pixels_.resize(static_cast<size_t>(samples * kSide * kSide));
    labels_.resize(static_cast<size_t>(samples));
    uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
    auto uniform = [&state] {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      return static_cast<float>(state >> 40) / static_cast<float>(1 << 24);
    };
    for (int64_t i = 0; i < samples; ++i) {
      const int label = static_cast<int>(uniform() * kClasses) % kClasses;
      labels_[i] = label;
      float* p = &pixels_[i * kSide * kSide];
      for (int64_t y = 0; y < kSide; ++y) {
        for (int64_t x = 0; x < kSide; ++x) {
          const int quadrant = static_cast<int>((y >= kSide / 2) * 2 + (x >= kSide / 2));
          p[y * kSide + x] = uniform() + (quadrant == label ? 0.8f : 0.0f);
        }
      }
    }
  }
  int64_t size() const override { return samples_; }
  const std::vector<int64_t>& sample_shape() const override { return shape_; }
  int64_t targets_per_sample() const override { return 1; }
  int64_t num_classes() const override { return kClasses; }
  bool token_inputs() const override { return false; }
  void Gather(const int64_t* indices, int64_t count, float* inputs,
              int32_t* targets) const override {
    const int64_t n = kSide * kSide;
    for (int64_t i = 0; i < count; ++i) {
      if (inputs != nullptr) std::memcpy(inputs + i * n, &pixels_[indices[i] * n], n * 4);
      if (targets != nullptr) targets[i] = labels_[indices[i]];
    }
  }

 private:
  int64_t samples_;
  std::vector<int64_t> shape_{1, kSide, kSide};
  std::vector<float> pixels_;
  std::vector<int32_t> labels_;
};

const Dataset& Train() {
  static const Dataset* d = new SyntheticImages(kGlobalBatch * 16, 1);
  return *d;
}
const Dataset& Eval() {
  static const Dataset* d = new SyntheticImages(40, 2);
  return *d;
}

void AddConv(v1::ModelSpec* m, int64_t out, int64_t stride) {
  v1::LayerSpec* l = m->add_layers();
  l->set_type("conv2d");
  l->mutable_conv2d()->set_out_channels(out);
  l->mutable_conv2d()->set_kernel(3);
  l->mutable_conv2d()->set_stride(stride);
  l->mutable_conv2d()->set_padding(1);
  l->mutable_conv2d()->set_bias(false);
}

void AddLayer(v1::ModelSpec* m, const std::string& type) { m->add_layers()->set_type(type); }

void AddLinear(v1::ModelSpec* m, int64_t out) {
  v1::LayerSpec* l = m->add_layers();
  l->set_type("linear");
  l->mutable_linear()->set_out(out);
}

// 9 layers: 0 conv 8, 1 BN, 2 relu, 3 maxpool 2, 4 conv 8, 5 BN, 6 relu, 7 flatten, 8 linear.
void Vgg(v1::ModelSpec* m) {
  AddConv(m, 8, 1);
  AddLayer(m, "batchnorm2d");
  AddLayer(m, "relu");
  v1::LayerSpec* pool = m->add_layers();
  pool->set_type("maxpool2d");
  pool->mutable_maxpool2d()->set_kernel(2);
  AddConv(m, 8, 1);
  // Not PyTorch's default momentum, so that a wrong momentum shows.
  v1::LayerSpec* bn = m->add_layers();
  bn->set_type("batchnorm2d");
  bn->mutable_batchnorm2d()->set_momentum(0.3);
  AddLayer(m, "relu");
  AddLayer(m, "flatten");
  AddLinear(m, kClasses);
}

// 7 layers: 0 conv 8, 1 BN, 2 relu, 3 residual_block 8 (identity), 4 residual_block 16 stride 2
// (projection), 5 global_avgpool, 6 linear.
void ResNet(v1::ModelSpec* m) {
  AddConv(m, 8, 1);
  AddLayer(m, "batchnorm2d");
  AddLayer(m, "relu");
  v1::LayerSpec* identity = m->add_layers();
  identity->set_type("residual_block");
  identity->mutable_residual_block()->set_out_channels(8);
  v1::LayerSpec* projection = m->add_layers();
  projection->set_type("residual_block");
  projection->mutable_residual_block()->set_out_channels(16);
  projection->mutable_residual_block()->set_stride(2);
  AddLayer(m, "global_avgpool");
  AddLinear(m, kClasses);
}

v1::JobSpec CnnSpec(const std::string& net, const std::string& schedule, int64_t micro_batch) {
  v1::JobSpec spec;
  spec.set_name(net);
  v1::ModelSpec* m = spec.mutable_model();
  for (int64_t d : {int64_t{1}, kSide, kSide}) m->add_input_shape(d);
  if (net == "vgg") {
    Vgg(m);
  } else {
    ResNet(m);
  }
  m->set_loss("softmax_cross_entropy");
  spec.mutable_data()->set_dataset("fashion-mnist");
  spec.mutable_data()->set_train_samples(Train().size());
  v1::TrainingSpec* t = spec.mutable_training();
  t->set_global_batch(kGlobalBatch);
  t->set_micro_batch(micro_batch);
  t->set_epochs(1);
  t->set_seed(5);
  t->mutable_optimizer()->set_type("sgd");
  t->mutable_optimizer()->set_lr(0.05);
  t->mutable_optimizer()->set_momentum(0.9);
  spec.mutable_parallel()->set_schedule(schedule);
  return spec;
}

// The reference's row groups: each layer's stage's replicas (the pipeline splits every
// micro-batch among them), whole micro-batches under pipedream.
ReferenceRowSplit SplitOf(const v1::JobSpec& spec, const v1::ParallelPlanSummary& plan) {
  ReferenceRowSplit split;
  for (const v1::PlanStageSummary& s : plan.stages()) {
    for (int l = s.first_layer(); l <= s.last_layer(); ++l) {
      split.layer_replicas.push_back(s.replicas());
    }
  }
  split.whole_micro_batches = spec.parallel().schedule() == "pipedream";
  return split;
}

// name -> values of every parameter (or buffer) of the ranks `ranks`.
using Tensors = std::map<std::string, std::vector<float>>;

Tensors Collect(const std::vector<kernels::Param*>& params) {
  Tensors out;
  for (const kernels::Param* p : params) out[p->name] = p->value.data;
  return out;
}

Tensors RankParams(StageRuntime& rt) {
  absl::StatusOr<std::vector<kernels::Param*>> p = rt.backend().HostParams();
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? Collect(*p) : Tensors{};
}

Tensors RankBuffers(StageRuntime& rt) {
  absl::StatusOr<std::vector<kernels::Param*>> b = rt.backend().HostBuffers();
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? Collect(*b) : Tensors{};
}

// Every replica of every stage holds bitwise replica 0's tensors.
void ExpectReplicasIdentical(parity::LocalJob& job, const char* what,
                             Tensors (*read)(StageRuntime&)) {
  const v1::ParallelPlanSummary& plan = job.plan();
  for (int s = 0; s < plan.stages_size(); ++s) {
    const Tensors first = read(job.runtime(schedule::RankIndex(plan, s, 0)));
    for (int r = 1; r < schedule::StageReplicas(plan, s); ++r) {
      const Tensors other = read(job.runtime(schedule::RankIndex(plan, s, r)));
      ASSERT_EQ(other.size(), first.size());
      for (const auto& [name, values] : first) {
        ASSERT_EQ(other.at(name).size(), values.size());
        EXPECT_EQ(std::memcmp(other.at(name).data(), values.data(), values.size() * sizeof(float)),
                  0)
            << what << " " << name << " of stage " << s << " replica " << r << " differs";
      }
    }
  }
}

struct Case {
  std::string net;
  std::string schedule;
  int stages;    // P
  int replicas;  // D on every stage
  int micro_batches;
  // Every stage recomputes its activations (layer_recompute.h): batch norm must count each
  // micro-batch once in the step statistics, so the running statistics still match.
  bool recompute = false;
};

std::string CaseName(const Case& c) {
  return absl::StrCat(c.net, "_", c.schedule, "_P", c.stages, "_D", c.replicas, "_M",
                      c.micro_batches, c.recompute ? "_recompute" : "");
}

void PrintTo(const Case& c, std::ostream* os) { *os << CaseName(c); }

class CnnParityTest : public ::testing::TestWithParam<Case> {};

TEST_P(CnnParityTest, MatchesTheReferenceWithRunningStatistics) {
  const Case c = GetParam();
  const v1::JobSpec spec = CnnSpec(c.net, c.schedule, kGlobalBatch / c.micro_batches);
  v1::ParallelPlanSummary plan =
      parity::WithReplicas(parity::UniformPlan(spec.model().layers_size(), c.stages),
                           std::vector<int>(c.stages, c.replicas));
  for (v1::PlanStageSummary& stage : *plan.mutable_stages()) stage.set_recompute(c.recompute);
  absl::StatusOr<std::unique_ptr<parity::LocalJob>> job =
      parity::LocalJob::Create(spec, plan, &Train(), &Eval());
  ASSERT_TRUE(job.ok()) << job.status();
  const std::vector<parity::LocalJob::RankRun> runs = (*job)->Run(0, kSteps, /*evaluate=*/true);
  for (int rank = 0; rank < (*job)->num_ranks(); ++rank) {
    ASSERT_TRUE(runs[rank].status.ok()) << "rank " << rank << ": " << runs[rank].status;
  }
  ExpectReplicasIdentical(**job, "parameter", RankParams);
  ExpectReplicasIdentical(**job, "buffer", RankBuffers);

  absl::StatusOr<std::unique_ptr<ReferenceTrainer>> ref =
      ReferenceTrainer::Create(spec, &Train(), SplitOf(spec, plan));
  ASSERT_TRUE(ref.ok()) << ref.status();
  const parity::LocalJob::RankRun& last = runs[schedule::RankIndex(plan, c.stages - 1, 0)];
  for (int step = 0; step < kSteps; ++step) {
    const double want = (*ref)->Step(step);
    EXPECT_NEAR(last.steps[step].loss, want, 1e-5 * std::abs(want)) << "step " << step + 1;
  }
  Tensors params, buffers;
  for (int s = 0; s < c.stages; ++s) {
    StageRuntime& rt = (*job)->runtime(schedule::RankIndex(plan, s, 0));
    params.merge(RankParams(rt));
    buffers.merge(RankBuffers(rt));
  }
  const Tensors ref_params = Collect((*ref)->Params());
  const Tensors ref_buffers = Collect((*ref)->Buffers());
  ASSERT_EQ(params.size(), ref_params.size());
  for (const auto& [name, values] : ref_params) {
    EXPECT_LE(parity::RelativeL2(params[name], values), 1e-5) << name;
  }
  ASSERT_EQ(buffers.size(), ref_buffers.size());
  ASSERT_FALSE(buffers.empty());
  for (const auto& [name, values] : ref_buffers) {
    EXPECT_LE(parity::RelativeL2(buffers[name], values), 1e-5) << name;
  }
  // The running statistics moved from their initial values (mean 0, variance 1).
  const std::vector<float>& var = ref_buffers.begin()->second;
  EXPECT_GT(parity::RelativeL2(var, std::vector<float>(var.size(), 1.0f)), 1e-3);

  // Evaluation normalises with the running statistics, like the reference's.
  double ref_loss = 0, ref_accuracy = 0;
  (*ref)->Evaluate(Eval(), &ref_loss, &ref_accuracy);
  ASSERT_TRUE(last.eval.has_metrics);
  EXPECT_NEAR(last.eval.loss, ref_loss, 1e-5 * ref_loss);
  // A prediction whose two largest logits are within rounding of each other may flip: one sample.
  EXPECT_NEAR(last.eval.accuracy, ref_accuracy, 1.0 / static_cast<double>(Eval().size()) + 1e-12);
}

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (const char* net : {"vgg", "resnet"}) {
    for (const char* schedule : {"gpipe", "dapple"}) {
      for (int p : {1, 2, 3}) {
        for (int d : {1, 2}) {
          for (int m : {1, 4}) cases.push_back({net, schedule, p, d, m});
        }
      }
    }
    cases.push_back({net, "dapple", 2, 2, 4, true});
    cases.push_back({net, "gpipe", 3, 1, 4, true});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(All, CnnParityTest, ::testing::ValuesIn(AllCases()),
                         [](const auto& info) { return CaseName(info.param); });

// The asynchronous schedules have no single-device equivalent: they train (the loss of the
// last steps is below that of the first) and every replica of a stage ends with bitwise the
// same weights and running statistics (pipedream: the replicas' statistics are summed at each
// update's ALLREDUCE; pipesgd: with the gradient they came with, one step late).
struct AsyncCase {
  std::string net;
  std::string schedule;
  std::vector<int> replicas;  // per stage
};

std::string AsyncCaseName(const AsyncCase& c) {
  std::string name = absl::StrCat(c.net, "_", c.schedule);
  for (int d : c.replicas) absl::StrAppend(&name, "_", d);
  return name;
}

void PrintTo(const AsyncCase& c, std::ostream* os) { *os << AsyncCaseName(c); }

class CnnAsyncTest : public ::testing::TestWithParam<AsyncCase> {};

TEST_P(CnnAsyncTest, TrainsWithIdenticalReplicas) {
  const AsyncCase c = GetParam();
  constexpr int kAsyncSteps = 12;
  v1::JobSpec spec = CnnSpec(c.net, c.schedule, kGlobalBatch / 4);
  if (c.schedule == "pipesgd") spec.mutable_parallel()->mutable_pipesgd()->set_warmup_steps(2);
  const v1::ParallelPlanSummary plan = parity::WithReplicas(
      parity::UniformPlan(spec.model().layers_size(), static_cast<int>(c.replicas.size())),
      c.replicas);
  absl::StatusOr<std::unique_ptr<parity::LocalJob>> job =
      parity::LocalJob::Create(spec, plan, &Train(), &Eval());
  ASSERT_TRUE(job.ok()) << job.status();
  const std::vector<parity::LocalJob::RankRun> runs =
      (*job)->Run(0, kAsyncSteps, /*evaluate=*/true);
  for (int rank = 0; rank < (*job)->num_ranks(); ++rank) {
    ASSERT_TRUE(runs[rank].status.ok()) << "rank " << rank << ": " << runs[rank].status;
  }
  ExpectReplicasIdentical(**job, "parameter", RankParams);
  ExpectReplicasIdentical(**job, "buffer", RankBuffers);

  const int last_stage = plan.stages_size() - 1;
  const parity::LocalJob::RankRun& last = runs[schedule::RankIndex(plan, last_stage, 0)];
  double early = 0, late = 0;
  for (int s = 0; s < 4; ++s) {
    early += last.steps[s].loss;
    late += last.steps[kAsyncSteps - 1 - s].loss;
  }
  EXPECT_LT(late, early) << "the loss did not fall";
  // Every stage's running statistics moved (they were applied), and evaluation with them runs.
  for (int s = 0; s <= last_stage; ++s) {
    for (const auto& [name, values] :
         RankBuffers((*job)->runtime(schedule::RankIndex(plan, s, 0)))) {
      const float initial = name.find("running_var") != std::string::npos ? 1.0f : 0.0f;
      bool moved = false;
      for (float v : values) moved = moved || v != initial;
      EXPECT_TRUE(moved) << name << " never updated";
    }
  }
  ASSERT_TRUE(last.eval.has_metrics);
  EXPECT_TRUE(std::isfinite(last.eval.loss));
}

std::vector<AsyncCase> AsyncCases() {
  std::vector<AsyncCase> cases;
  for (const char* net : {"vgg", "resnet"}) {
    cases.push_back({net, "pipedream", {1, 1, 1}});
    cases.push_back({net, "pipedream", {2, 1, 2}});
    cases.push_back({net, "pipesgd", {2}});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(All, CnnAsyncTest, ::testing::ValuesIn(AsyncCases()),
                         [](const auto& info) { return AsyncCaseName(info.param); });

}  // namespace
}  // namespace dapple::worker
