// Loading checkpoints: a bitwise round trip through shards, manifest and a backend's
// ImportState; resharding (saved with P = 2, loaded with P = 1 and P = 3 by layer ranges); and
// clear errors for a truncated, corrupt or missing shard and for another model.
#include "worker/checkpoint/checkpoint_loader.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/checkpoint_files.h"
#include "common/schedule/lowering.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/checkpoint/shard_writer.h"
#include "worker/runtime/stage_backend.h"
#include "worker/runtime/stage_runtime.h"
#include "worker/runtime/testing/parity_testing.h"

namespace dapple::worker {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

v1::JobSpec Spec(const std::string& optimizer) {
  parity::SpecOptions o;
  o.global_batch = 64;
  o.micro_batch = 64;
  o.optimizer = optimizer;
  o.hidden1 = 24;
  o.hidden2 = 12;
  o.seed = 9;
  v1::JobSpec spec = parity::ParitySpec(o);
  // A warm-up over the first updates: a resumed stage must take the rate of its imported update
  // count (common/lr_schedule.h), not restart the schedule.
  spec.mutable_training()->mutable_lr_schedule()->set_warmup_steps(4);
  spec.mutable_training()->mutable_lr_schedule()->set_decay("cosine");
  return spec;
}

// The tensors of `state` whose layer is in [first, last].
StageState Slice(const StageState& state, int first, int last) {
  StageState out;
  auto in = [&](const NamedTensor& t) {
    const int l = LayerOfTensor(t.name);
    return l >= first && l <= last;
  };
  for (const NamedTensor& t : state.params)
    if (in(t)) out.params.push_back(t);
  for (const NamedTensor& t : state.optimizer_state)
    if (in(t)) out.optimizer_state.push_back(t);
  for (const NamedTensor& t : state.buffers)
    if (in(t)) out.buffers.push_back(t);
  out.optimizer_steps = state.optimizer_steps;
  return out;
}

// The same tensors, bit for bit, in any order (shards list them by stage).
void ExpectBitwise(std::vector<NamedTensor> got, std::vector<NamedTensor> want) {
  auto by_name = [](const NamedTensor& a, const NamedTensor& b) { return a.name < b.name; };
  std::sort(got.begin(), got.end(), by_name);
  std::sort(want.begin(), want.end(), by_name);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].name, want[i].name);
    EXPECT_EQ(got[i].shape, want[i].shape) << got[i].name;
    ASSERT_EQ(got[i].data.size(), want[i].data.size()) << got[i].name;
    EXPECT_EQ(
        std::memcmp(got[i].data.data(), want[i].data.data(), got[i].data.size() * sizeof(float)), 0)
        << got[i].name << " differs";
  }
}

class CheckpointLoaderTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ckpt-loader-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    spec_ = Spec(GetParam());
    layers_ = spec_.model().layers_size();
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A P = 1 CPU runtime after `steps` steps of real training.
  std::unique_ptr<StageRuntime> Trained(int steps) {
    const v1::ParallelPlanSummary plan = parity::UniformPlan(layers_, 1);
    auto programs = schedule::BuildPrograms(schedule::ScheduleKind::kDapple, 1, 1).value();
    auto rt = StageRuntime::Create(parity::Assignment(spec_, plan, 0, programs[0]),
                                   &parity::TrainSet(), &parity::TestSet(), nullptr);
    EXPECT_TRUE(rt.ok()) << rt.status();
    for (int s = 0; s < steps; ++s) EXPECT_TRUE((*rt)->RunStep(s).ok());
    return std::move(*rt);
  }

  // Saves `full` (the whole model's state) as a checkpoint of step `step` laid out as `plan`'s
  // stages, with the manifest the coordinator writes; returns the manifest's path.
  std::string Save(const StageState& full, int64_t step, const v1::ParallelPlanSummary& plan) {
    const std::string job_dir = dir_ + "/job-1";
    v1::CheckpointManifest m;
    m.set_format_version(kCheckpointFormatVersion);
    m.set_job_id("job-1");
    m.set_step(step);
    *m.mutable_spec() = spec_;
    *m.mutable_plan() = plan;
    for (int s = 0; s < plan.stages_size(); ++s) {
      const int first = plan.stages(s).first_layer(), last = plan.stages(s).last_layer();
      absl::StatusOr<WrittenShard> w =
          WriteShard(job_dir, "job-1", step, {s, 0, first, last}, Slice(full, first, last));
      EXPECT_TRUE(w.ok()) << w.status();
      v1::CheckpointShardEntry* e = m.add_shards();
      e->set_stage(s);
      e->set_first_layer(first);
      e->set_last_layer(last);
      e->set_file(w->file);
      e->set_bytes(w->bytes);
    }
    const std::string partial = job_dir + "/" + PartialCheckpointDirName(step);
    EXPECT_TRUE(WriteFileAtomically(partial + "/manifest.pb", m.SerializeAsString()).ok());
    const std::string published = job_dir + "/" + CheckpointDirName(step);
    fs::rename(partial, published);
    return published + "/manifest.pb";
  }

  std::string dir_;
  v1::JobSpec spec_;
  int layers_ = 0;
};

TEST_P(CheckpointLoaderTest, RoundTripIsBitwiseAndResumesExactly) {
  std::unique_ptr<StageRuntime> original = Trained(2);
  absl::StatusOr<StageState> saved = original->backend().ExportState();
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->optimizer_steps, 2);
  const std::string manifest = Save(*saved, 2, parity::UniformPlan(layers_, 2));

  absl::StatusOr<LoadedCheckpoint> loaded =
      LoadCheckpointForLayers(manifest, spec_, 0, layers_ - 1);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->manifest.step(), 2);
  EXPECT_EQ(loaded->state.optimizer_steps, 2);
  ExpectBitwise(loaded->state.params, saved->params);
  ExpectBitwise(loaded->state.optimizer_state, saved->optimizer_state);

  // A fresh P = 1 stage resumed from it takes step 3 exactly as the uninterrupted one does.
  std::unique_ptr<StageRuntime> resumed = Trained(0);
  ASSERT_TRUE(resumed->backend().ImportState(loaded->state).ok());
  absl::StatusOr<StepResult> a = original->RunStep(2);
  absl::StatusOr<StepResult> b = resumed->RunStep(2);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->loss, b->loss);
  absl::StatusOr<StageState> after_a = original->backend().ExportState();
  absl::StatusOr<StageState> after_b = resumed->backend().ExportState();
  ExpectBitwise(after_b->params, after_a->params);
  ExpectBitwise(after_b->optimizer_state, after_a->optimizer_state);
  EXPECT_EQ(after_b->optimizer_steps, 3);
}

TEST_P(CheckpointLoaderTest, ReshardsTwoStagesIntoThree) {
  std::unique_ptr<StageRuntime> original = Trained(1);
  absl::StatusOr<StageState> saved = original->backend().ExportState();
  ASSERT_TRUE(saved.ok());
  const std::string manifest = Save(*saved, 1, parity::UniformPlan(layers_, 2));
  const v1::ParallelPlanSummary three = parity::UniformPlan(layers_, 3);
  for (int s = 0; s < 3; ++s) {
    const int first = three.stages(s).first_layer(), last = three.stages(s).last_layer();
    absl::StatusOr<LoadedCheckpoint> loaded = LoadCheckpointForLayers(manifest, spec_, first, last);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    const StageState want = Slice(*saved, first, last);
    ExpectBitwise(loaded->state.params, want.params);
    ExpectBitwise(loaded->state.optimizer_state, want.optimizer_state);
    // The stage's backend takes exactly these tensors.
    auto backend = MakeCpuStageBackend(spec_, first, last);
    ASSERT_TRUE(backend.ok());
    EXPECT_TRUE((*backend)->ImportState(loaded->state).ok()) << "stage " << s;
    absl::StatusOr<StageState> back = (*backend)->ExportState();
    ExpectBitwise(back->params, want.params);
  }
}

INSTANTIATE_TEST_SUITE_P(Optimizers, CheckpointLoaderTest, ::testing::Values("sgd", "adamw"));

// A batch-normalised CNN: 0 conv2d 4 (stride 2), 1 batchnorm2d, 2 relu, 3 residual_block 4
// (three more batch norms), 4 global_avgpool, 5 linear 10. Its running statistics are buffers.
class BatchNormCheckpointTest : public CheckpointLoaderTest {
 protected:
  void SetUp() override {
    CheckpointLoaderTest::SetUp();
    v1::ModelSpec* m = spec_.mutable_model();
    m->clear_layers();
    v1::LayerSpec* conv = m->add_layers();
    conv->set_type("conv2d");
    conv->mutable_conv2d()->set_out_channels(4);
    conv->mutable_conv2d()->set_kernel(3);
    conv->mutable_conv2d()->set_stride(2);
    conv->mutable_conv2d()->set_padding(1);
    m->add_layers()->set_type("batchnorm2d");
    m->add_layers()->set_type("relu");
    v1::LayerSpec* block = m->add_layers();
    block->set_type("residual_block");
    block->mutable_residual_block()->set_out_channels(4);
    m->add_layers()->set_type("global_avgpool");
    v1::LayerSpec* linear = m->add_layers();
    linear->set_type("linear");
    linear->mutable_linear()->set_out(10);
    layers_ = m->layers_size();
  }
};

// The running statistics are saved, load bitwise, travel with their layer into another layout,
// and a resumed stage continues exactly as the uninterrupted one, statistics included.
TEST_P(BatchNormCheckpointTest, BuffersRoundTripReshardAndResumeExactly) {
  std::unique_ptr<StageRuntime> original = Trained(2);
  absl::StatusOr<StageState> saved = original->backend().ExportState();
  ASSERT_TRUE(saved.ok()) << saved.status();
  // layer1's mean and variance, and the block's bn1, bn2 (identity shortcut: no third).
  ASSERT_EQ(saved->buffers.size(), 6u);
  EXPECT_EQ(saved->buffers[0].name, "layer1.running_mean");
  EXPECT_EQ(saved->buffers[2].name, "layer3.bn1.running_mean");
  const std::string manifest = Save(*saved, 2, parity::UniformPlan(layers_, 2));

  const v1::ParallelPlanSummary three = parity::UniformPlan(layers_, 3);
  for (int s = 0; s < 3; ++s) {
    const int first = three.stages(s).first_layer(), last = three.stages(s).last_layer();
    absl::StatusOr<LoadedCheckpoint> loaded = LoadCheckpointForLayers(manifest, spec_, first, last);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    const StageState want = Slice(*saved, first, last);
    ExpectBitwise(loaded->state.buffers, want.buffers);
    auto backend = MakeCpuStageBackend(spec_, first, last);
    ASSERT_TRUE(backend.ok());
    ASSERT_TRUE((*backend)->ImportState(loaded->state).ok()) << "stage " << s;
    absl::StatusOr<StageState> back = (*backend)->ExportState();
    ExpectBitwise(back->buffers, want.buffers);
  }

  absl::StatusOr<LoadedCheckpoint> whole = LoadCheckpointForLayers(manifest, spec_, 0, layers_ - 1);
  ASSERT_TRUE(whole.ok()) << whole.status();
  std::unique_ptr<StageRuntime> resumed = Trained(0);
  ASSERT_TRUE(resumed->backend().ImportState(whole->state).ok());
  absl::StatusOr<StepResult> a = original->RunStep(2);
  absl::StatusOr<StepResult> b = resumed->RunStep(2);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->loss, b->loss);
  absl::StatusOr<StageState> after_a = original->backend().ExportState();
  absl::StatusOr<StageState> after_b = resumed->backend().ExportState();
  ExpectBitwise(after_b->params, after_a->params);
  ExpectBitwise(after_b->buffers, after_a->buffers);
  // The statistics moved with step 3 (the comparison is not of untouched initial values).
  EXPECT_NE(after_a->buffers[1].data, saved->buffers[1].data);
}

INSTANTIATE_TEST_SUITE_P(Optimizers, BatchNormCheckpointTest, ::testing::Values("sgd"));

class CheckpointLoaderErrorTest : public CheckpointLoaderTest {
 protected:
  void SetUp() override {
    CheckpointLoaderTest::SetUp();
    auto backend = MakeCpuStageBackend(spec_, 0, layers_ - 1);
    ASSERT_TRUE(backend.ok());
    absl::StatusOr<StageState> state = (*backend)->ExportState();
    ASSERT_TRUE(state.ok());
    manifest_ = Save(*state, 3, parity::UniformPlan(layers_, 2));
    shard1_ = dir_ + "/job-1/step-3/stage1.replica0.shard";
  }
  std::string manifest_;
  std::string shard1_;
};

TEST_P(CheckpointLoaderErrorTest, TruncatedShardNamesTheFile) {
  fs::resize_file(shard1_, fs::file_size(shard1_) - 7);
  absl::StatusOr<LoadedCheckpoint> got = LoadCheckpointForLayers(manifest_, spec_, 0, layers_ - 1);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(got.status().message(), HasSubstr(shard1_));
  EXPECT_THAT(got.status().message(), HasSubstr("truncated or corrupt"));
  // Layers held only by the intact shard still load.
  const int first1 = parity::UniformPlan(layers_, 2).stages(1).first_layer();
  EXPECT_TRUE(LoadCheckpointForLayers(manifest_, spec_, 0, first1 - 1).ok());
}

TEST_P(CheckpointLoaderErrorTest, CorruptShardNamesTheFile) {
  const auto size = fs::file_size(shard1_);
  {
    std::ofstream out(shard1_, std::ios::binary | std::ios::trunc);
    out << std::string(size, '\xff');
  }
  absl::StatusOr<LoadedCheckpoint> got = LoadCheckpointForLayers(manifest_, spec_, 0, layers_ - 1);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(got.status().message(), HasSubstr(shard1_));
}

TEST_P(CheckpointLoaderErrorTest, MissingShardNamesTheFile) {
  fs::remove(shard1_);
  absl::StatusOr<LoadedCheckpoint> got = LoadCheckpointForLayers(manifest_, spec_, 0, layers_ - 1);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(got.status().message(), HasSubstr(shard1_ + "' is missing"));
}

TEST_P(CheckpointLoaderErrorTest, MissingManifest) {
  absl::StatusOr<LoadedCheckpoint> got =
      LoadCheckpointForLayers(dir_ + "/none/manifest.pb", spec_, 0, layers_ - 1);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(got.status().message(), HasSubstr(dir_ + "/none/manifest.pb"));
}

TEST_P(CheckpointLoaderErrorTest, AnotherModelNamesTheDifference) {
  v1::JobSpec other = spec_;
  other.mutable_model()->mutable_layers(1)->mutable_linear()->set_out(25);
  absl::StatusOr<LoadedCheckpoint> got = LoadCheckpointForLayers(manifest_, other, 0, layers_ - 1);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(got.status().message(),
              HasSubstr("model.layers[1].out differs: checkpoint 24, job 25"));
}

TEST_P(CheckpointLoaderErrorTest, ImportRefusesAStageOfAnotherRange) {
  // Tensors of the whole model into a backend of the first layers only: the extra ones are
  // named.
  absl::StatusOr<LoadedCheckpoint> got = LoadCheckpointForLayers(manifest_, spec_, 0, layers_ - 1);
  ASSERT_TRUE(got.ok());
  auto backend = MakeCpuStageBackend(spec_, 0, 2);
  ASSERT_TRUE(backend.ok());
  absl::Status s = (*backend)->ImportState(got->state);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("is not a tensor of this stage"));
}

INSTANTIATE_TEST_SUITE_P(Optimizers, CheckpointLoaderErrorTest, ::testing::Values("sgd"));

// A GPT whose lm_head is tied to its embedding: layer 0 embedding, 1 transformer_block,
// 2 layernorm, 3 lm_head (tied). Checkpoints hold the table once, at its owner (layer 0); a
// stage holding the head without the embedding takes the owner's tensors. The tensors here are
// stand-ins with the right names (the loader reads names and layers, not the model's math).
class CheckpointLoaderTiedTest : public CheckpointLoaderTest {
 protected:
  void SetUp() override {
    CheckpointLoaderTest::SetUp();
    v1::ModelSpec* m = spec_.mutable_model();
    m->Clear();
    m->add_input_shape(8);
    m->set_input_type("tokens");
    m->set_loss("softmax_cross_entropy");
    v1::LayerSpec* e = m->add_layers();
    e->set_type("embedding");
    e->mutable_embedding()->set_vocab(16);
    e->mutable_embedding()->set_dim(8);
    v1::LayerSpec* t = m->add_layers();
    t->set_type("transformer_block");
    t->mutable_transformer_block()->set_heads(2);
    m->add_layers()->set_type("layernorm");
    v1::LayerSpec* head = m->add_layers();
    head->set_type("lm_head");
    head->mutable_lm_head()->set_tied(true);
    layers_ = 4;
    auto add = [&](const std::string& name, std::vector<int64_t> shape, float v) {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      full_.params.push_back({name, shape, std::vector<float>(n, v)});
      full_.optimizer_state.push_back({name + ".momentum", shape, std::vector<float>(n, -v)});
    };
    add("layer0.token_embedding", {16, 8}, 1);
    add("layer0.position_embedding", {8, 8}, 2);
    add("layer1.ln1.weight", {8}, 3);
    add("layer2.weight", {8}, 4);
    add("layer2.bias", {8}, 5);
    full_.optimizer_steps = 6;
  }
  // `names`' tensors of full_, parameters and their momentum.
  StageState Only(const std::vector<std::string>& names) const {
    StageState out;
    for (const NamedTensor& t : full_.params) {
      if (std::find(names.begin(), names.end(), t.name) != names.end()) out.params.push_back(t);
    }
    for (const NamedTensor& t : full_.optimizer_state) {
      if (std::find(names.begin(), names.end(), t.name.substr(0, t.name.rfind('.'))) !=
          names.end()) {
        out.optimizer_state.push_back(t);
      }
    }
    return out;
  }
  v1::ParallelPlanSummary Plan(const std::vector<std::pair<int, int>>& ranges) {
    v1::ParallelPlanSummary plan;
    for (const auto& [first, last] : ranges) {
      v1::PlanStageSummary* s = plan.add_stages();
      s->set_first_layer(first);
      s->set_last_layer(last);
      s->set_replicas(1);
    }
    return plan;
  }
  StageState full_;  // the whole model's tensors, the head's copy not among them
};

TEST_P(CheckpointLoaderTiedTest, AStageWithTheHeadTakesTheOwnersTable) {
  const std::string manifest = Save(full_, 6, Plan({{0, 1}, {2, 3}}));
  absl::StatusOr<LoadedCheckpoint> head = LoadCheckpointForLayers(manifest, spec_, 2, 3);
  ASSERT_TRUE(head.ok()) << head.status();
  const StageState want = Only({"layer2.weight", "layer2.bias", "layer0.token_embedding"});
  ExpectBitwise(head->state.params, want.params);
  ExpectBitwise(head->state.optimizer_state, want.optimizer_state);
  EXPECT_EQ(head->state.optimizer_steps, 6);
  // The embedding's stage takes its own tensors only.
  absl::StatusOr<LoadedCheckpoint> first = LoadCheckpointForLayers(manifest, spec_, 0, 1);
  ASSERT_TRUE(first.ok()) << first.status();
  ExpectBitwise(
      first->state.params,
      Only({"layer0.token_embedding", "layer0.position_embedding", "layer1.ln1.weight"}).params);
}

// P = 2 -> P = 1: the table once (the head shares it on one stage). P = 1 -> P = 3: the head's
// stage alone reads the table from the shard of layers [0, 3].
TEST_P(CheckpointLoaderTiedTest, ReshardsCountingTheTableOnce) {
  const std::string two = Save(full_, 6, Plan({{0, 1}, {2, 3}}));
  absl::StatusOr<LoadedCheckpoint> whole = LoadCheckpointForLayers(two, spec_, 0, 3);
  ASSERT_TRUE(whole.ok()) << whole.status();
  ExpectBitwise(whole->state.params, full_.params);
  ExpectBitwise(whole->state.optimizer_state, full_.optimizer_state);

  fs::remove_all(dir_ + "/job-1");
  const std::string one = Save(full_, 6, Plan({{0, 3}}));
  absl::StatusOr<LoadedCheckpoint> head = LoadCheckpointForLayers(one, spec_, 3, 3);
  ASSERT_TRUE(head.ok()) << head.status();
  ExpectBitwise(head->state.params, Only({"layer0.token_embedding"}).params);
  ExpectBitwise(head->state.optimizer_state, Only({"layer0.token_embedding"}).optimizer_state);
  absl::StatusOr<LoadedCheckpoint> middle = LoadCheckpointForLayers(one, spec_, 1, 2);
  ASSERT_TRUE(middle.ok()) << middle.status();
  ExpectBitwise(middle->state.params,
                Only({"layer1.ln1.weight", "layer2.weight", "layer2.bias"}).params);
}

TEST_P(CheckpointLoaderTiedTest, AMissingOwnerShardIsNamed) {
  const std::string manifest = Save(full_, 6, Plan({{0, 1}, {2, 3}}));
  v1::CheckpointManifest m;
  ASSERT_TRUE(m.ParseFromString(ReadWholeFile(manifest).value()));
  m.mutable_shards()->DeleteSubrange(0, 1);
  ASSERT_TRUE(WriteFileAtomically(manifest, m.SerializeAsString()).ok());
  absl::StatusOr<LoadedCheckpoint> head = LoadCheckpointForLayers(manifest, spec_, 2, 3);
  EXPECT_EQ(head.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(head.status().message(),
              HasSubstr("lists no shard holding layer 0 (layer0.token_embedding, which "
                        "layer3.weight is tied to)"));
}

// Real CPU stages of the tied GPT: a P = 1 state (trained-looking: every tensor distinct, the
// momentum non-zero) resharded into P = 3 (the head's stage imports the owner's table into its
// copy) and, through P = 2 shards, back into P = 1, bit for bit, the copy never written.
TEST_P(CheckpointLoaderTiedTest, CpuStagesReshardOneToThreeAndTwoToOne) {
  auto one = MakeCpuStageBackend(spec_, 0, 3).value();
  StageState state = one->ExportState().value();
  for (size_t i = 0; i < state.params.size(); ++i) {
    for (float& v : state.params[i].data) v += 0.01f * static_cast<float>(i + 1);
  }
  for (size_t k = 0; k < state.optimizer_state.size(); ++k) {
    std::vector<float>& d = state.optimizer_state[k].data;
    for (size_t j = 0; j < d.size(); ++j) d[j] = 0.001f * static_cast<float>(k + 1 + j % 7);
  }
  state.optimizer_steps = 3;
  ASSERT_TRUE(one->ImportState(state).ok());
  const StageState original = one->ExportState().value();
  for (const NamedTensor& t : original.params) EXPECT_NE(t.name, "layer3.weight");

  // P = 1 -> P = 3.
  const std::string manifest1 = Save(original, 3, Plan({{0, 3}}));
  const std::vector<std::pair<int, int>> three = {{0, 0}, {1, 2}, {3, 3}};
  StageState gathered;
  for (const auto& [first, last] : three) {
    absl::StatusOr<LoadedCheckpoint> loaded =
        LoadCheckpointForLayers(manifest1, spec_, first, last);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    auto backend = MakeCpuStageBackend(spec_, first, last).value();
    ASSERT_TRUE(backend->ImportState(loaded->state).ok()) << "layers " << first << ".." << last;
    StageState back = backend->ExportState().value();
    EXPECT_EQ(back.optimizer_steps, 3);
    if (first == 3) {
      // The head's copy holds the owner's table, and is not exported.
      std::vector<kernels::Param*> params = backend->HostParams().value();
      ASSERT_EQ(params.size(), 1u);
      EXPECT_EQ(params[0]->tied_to, "layer0.token_embedding");
      EXPECT_EQ(params[0]->value.data, original.params[0].data);
      EXPECT_TRUE(back.params.empty());
      EXPECT_TRUE(back.optimizer_state.empty());
    }
    for (NamedTensor& t : back.params) gathered.params.push_back(std::move(t));
    for (NamedTensor& t : back.optimizer_state) gathered.optimizer_state.push_back(std::move(t));
  }
  ExpectBitwise(gathered.params, original.params);
  ExpectBitwise(gathered.optimizer_state, original.optimizer_state);

  // P = 2 (embedding and head apart) -> P = 1: the two stages' exports hold the table once.
  StageState two;
  for (const auto& [first, last] : std::vector<std::pair<int, int>>{{0, 1}, {2, 3}}) {
    absl::StatusOr<LoadedCheckpoint> loaded =
        LoadCheckpointForLayers(manifest1, spec_, first, last);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    auto backend = MakeCpuStageBackend(spec_, first, last).value();
    ASSERT_TRUE(backend->ImportState(loaded->state).ok());
    StageState back = backend->ExportState().value();
    for (NamedTensor& t : back.params) two.params.push_back(std::move(t));
    for (NamedTensor& t : back.optimizer_state) two.optimizer_state.push_back(std::move(t));
  }
  two.optimizer_steps = 3;
  ExpectBitwise(two.params, original.params);
  fs::remove_all(dir_ + "/job-1");
  const std::string manifest2 = Save(two, 3, Plan({{0, 1}, {2, 3}}));
  absl::StatusOr<LoadedCheckpoint> whole = LoadCheckpointForLayers(manifest2, spec_, 0, 3);
  ASSERT_TRUE(whole.ok()) << whole.status();
  auto fresh = MakeCpuStageBackend(spec_, 0, 3).value();
  ASSERT_TRUE(fresh->ImportState(whole->state).ok());
  const StageState back = fresh->ExportState().value();
  ExpectBitwise(back.params, original.params);
  ExpectBitwise(back.optimizer_state, original.optimizer_state);
}

INSTANTIATE_TEST_SUITE_P(Optimizers, CheckpointLoaderTiedTest, ::testing::Values("sgd"));

}  // namespace
}  // namespace dapple::worker
