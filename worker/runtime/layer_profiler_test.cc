#include "worker/runtime/layer_profiler.h"

#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "common/model_info.h"
#include "common/profile/model_profile.h"
#include "gtest/gtest.h"

namespace dapple::worker {
namespace {

v1::JobSpec MlpSpec() {
  v1::JobSpec spec;
  v1::ModelSpec* m = spec.mutable_model();
  m->add_input_shape(1);
  m->add_input_shape(28);
  m->add_input_shape(28);
  m->add_layers()->set_type("flatten");
  v1::LayerSpec* l = m->add_layers();
  l->set_type("linear");
  l->mutable_linear()->set_out(256);
  m->add_layers()->set_type("relu");
  l = m->add_layers();
  l->set_type("linear");
  l->mutable_linear()->set_out(10);
  m->set_loss("softmax_cross_entropy");
  spec.mutable_training()->mutable_optimizer()->set_type("sgd");
  spec.mutable_training()->mutable_optimizer()->set_lr(0.1);
  return spec;
}

BackendFactory Cpu() {
  return [](const v1::JobSpec& spec, int first, int last) {
    return MakeCpuStageBackend(spec, first, last);
  };
}

TEST(LayerProfilerTest, MeasuresEveryLayerOfTheModel) {
  const v1::JobSpec spec = MlpSpec();
  ProfileOptions options;
  options.batch_size = 16;
  options.warmup_runs = 1;
  options.timed_runs = 3;
  absl::StatusOr<v1::ModelProfile> p = MeasureProfile(spec, Cpu(), "cpu", options);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->layers_size(), 4);
  EXPECT_EQ(p->batch_size(), 16);
  EXPECT_EQ(p->device_kind(), "cpu");
  EXPECT_EQ(p->source(), "measured on cpu");
  EXPECT_EQ(p->model_fingerprint(), profile::ModelFingerprint(spec.model()));
  EXPECT_EQ(p->edges_size(), 0);
  // The planner's check accepts the profile for the model it measured.
  EXPECT_TRUE(profile::CheckProfileMatchesModel(*p, spec.model()).ok());
  const int64_t kFloat = 4;
  EXPECT_EQ(p->layers(0).activation_bytes(), 784 * 16 * kFloat);
  EXPECT_EQ(p->layers(1).parameter_bytes(), (784 * 256 + 256) * kFloat);
  EXPECT_EQ(p->layers(1).activation_bytes(), 256 * 16 * kFloat);
  EXPECT_EQ(p->layers(3).parameter_bytes(), (256 * 10 + 10) * kFloat);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(p->layers(i).id(), "layers[" + std::to_string(i) + "]");
    EXPECT_GE(p->layers(i).forward_ms(), 0);
    EXPECT_GE(p->layers(i).backward_ms(), 0);
  }
  // 784x256 GEMMs dominate elementwise layers: a measurement, not a constant.
  EXPECT_GT(p->layers(1).forward_ms(), 0);
  EXPECT_GT(p->layers(1).backward_ms(), 0);
  EXPECT_GT(p->layers(1).optimizer_ms(), 0);  // 200k weights with momentum
  EXPECT_EQ(p->layers(0).name(), "flatten");
  EXPECT_EQ(p->layers(1).name(), "linear");
  // Beyond the layers: the copy of a batch into stage 0's input and the last layer's loss.
  EXPECT_GT(p->input_ms_per_sample(), 0);
  EXPECT_GT(p->loss_ms_per_sample(), 0);
  EXPECT_EQ(p->action_ms(), 0);  // not measured by the profiler
}

// A language model's first layer reads token ids: the profiler feeds it valid ones (the
// embedding kernel aborts on anything else, which took the worker down).
TEST(LayerProfilerTest, MeasuresATokenModel) {
  v1::JobSpec spec;
  v1::ModelSpec* m = spec.mutable_model();
  m->add_input_shape(16);
  m->set_input_type("tokens");
  v1::LayerSpec* e = m->add_layers();
  e->set_type("embedding");
  e->mutable_embedding()->set_vocab(256);
  e->mutable_embedding()->set_dim(8);
  v1::LayerSpec* head = m->add_layers();
  head->set_type("lm_head");
  head->mutable_lm_head()->set_vocab(256);
  m->set_loss("softmax_cross_entropy");
  spec.mutable_training()->mutable_optimizer()->set_type("sgd");
  spec.mutable_training()->mutable_optimizer()->set_lr(0.1);
  ProfileOptions options;
  options.batch_size = 4;
  options.warmup_runs = 1;
  options.timed_runs = 1;
  absl::StatusOr<v1::ModelProfile> p = MeasureProfile(spec, Cpu(), "cpu", options);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->layers_size(), 2);
  EXPECT_EQ(p->layers(0).name(), "embedding");
  EXPECT_EQ(p->layers(0).activation_bytes(), 16 * 8 * 4 * 4);
}

// examples/gpt_kjv.yaml's layer types, small: embedding 32 x 8 on 16 tokens, a transformer
// block of 2 heads, layernorm, lm_head tied to the embedding.
v1::JobSpec GptSpec() {
  v1::JobSpec spec;
  v1::ModelSpec* m = spec.mutable_model();
  m->add_input_shape(16);
  m->set_input_type("tokens");
  v1::LayerSpec* l = m->add_layers();
  l->set_type("embedding");
  l->mutable_embedding()->set_vocab(32);
  l->mutable_embedding()->set_dim(8);
  l = m->add_layers();
  l->set_type("transformer_block");
  l->mutable_transformer_block()->set_heads(2);
  m->add_layers()->set_type("layernorm");
  l = m->add_layers();
  l->set_type("lm_head");
  l->mutable_lm_head()->set_tied(true);
  m->set_loss("softmax_cross_entropy");
  spec.mutable_training()->mutable_optimizer()->set_type("adamw");
  spec.mutable_training()->mutable_optimizer()->set_lr(1e-3);
  return spec;
}

// What the profiler fed one layer's backend: its input and whether it asked for dL/dx.
struct Fed {
  std::vector<float> input;
  std::vector<bool> need_dx;
  int forwards = 0;
  // The first `slow_forwards` forwards wait `slow_ms` (a slow moment of the host).
  int slow_forwards = 0;
  double slow_ms = 0;
  // When set: "+<layer>" when its backend is made, "F", "B", "U" and the layer for each
  // forward, backward and update, "-<layer>" when the backend is destroyed.
  std::vector<std::string>* log = nullptr;
  int layer = -1;
  std::vector<int64_t> rows;  // of each LoadInput
};

// A backend of host buffers that computes nothing and records what it is given: the profiler's
// side of the contract, whatever layer kernels exist.
class RecordingBackend : public StageBackend {
 public:
  RecordingBackend(int64_t in_floats, int64_t out_floats, Fed* fed)
      : in_floats_(in_floats), out_floats_(out_floats), fed_(fed) {
    Log("+");
  }
  ~RecordingBackend() override { Log("-"); }
  std::string device() const override { return "cpu"; }
  bool device_memory() const override { return false; }
  absl::StatusOr<void*> Input(int, int64_t rows) override {
    input_.resize(rows * in_floats_);
    return input_.data();
  }
  absl::Status LoadInput(int, const float* host, int64_t rows) override {
    fed_->input.assign(host, host + rows * in_floats_);
    fed_->rows.push_back(rows);
    return absl::OkStatus();
  }
  absl::Status Forward(int, int64_t, const kernels::ForwardContext&) override {
    Log("F");
    if (fed_->forwards++ < fed_->slow_forwards) {
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(fed_->slow_ms));
    }
    return absl::OkStatus();
  }
  absl::StatusOr<double> Loss(int, const int32_t*, int64_t, float, bool, int64_t*) override {
    return 0.0;
  }
  absl::StatusOr<const void*> OutputForSend(int, int, int64_t rows) override {
    output_.resize(rows * out_floats_);
    return output_.data();
  }
  absl::StatusOr<void*> GradInput(int, int64_t rows) override {
    dy_.resize(rows * out_floats_);
    return dy_.data();
  }
  absl::Status Backward(int, int, int64_t, bool, bool need_dx) override {
    fed_->need_dx.push_back(need_dx);
    Log("B");
    return absl::OkStatus();
  }
  const void* GradForSend(int) const override { return input_.data(); }
  absl::Status OptimizerStep() override {
    Log("U");
    return absl::OkStatus();
  }
  // The profiler never reads outputs or exchanges messages.
  absl::Status ReadOutput(int, int64_t, int64_t, float*) override {
    return absl::UnimplementedError("not used by the profiler");
  }
  absl::StatusOr<void*> MessageBuffer(int64_t) override {
    return absl::UnimplementedError("not used by the profiler");
  }
  absl::Status WriteMessage(const void*, int64_t) override {
    return absl::UnimplementedError("not used by the profiler");
  }
  absl::Status ReadMessage(void*, int64_t) override {
    return absl::UnimplementedError("not used by the profiler");
  }
  absl::Status Synchronize() override { return absl::OkStatus(); }
  absl::StatusOr<std::vector<kernels::Param*>> HostParams() override {
    return std::vector<kernels::Param*>{};
  }
  absl::StatusOr<StageState> ExportState() override { return StageState{}; }
  absl::Status ImportState(const StageState&) override { return absl::OkStatus(); }

 private:
  void Log(const char* what) {
    if (fed_->log != nullptr) fed_->log->push_back(what + std::to_string(fed_->layer));
  }

  int64_t in_floats_, out_floats_;
  Fed* fed_;
  std::vector<float> input_, output_, dy_;
};

// A factory of one-layer RecordingBackends of `infos` (one Fed per layer), appending each
// layer whose backend it makes to `made` when given.
BackendFactory Recording(const std::vector<LayerInfo>& infos, std::vector<Fed>* fed,
                         std::vector<int>* made = nullptr) {
  return [&infos, fed, made](const v1::JobSpec&, int first,
                             int last) -> absl::StatusOr<std::unique_ptr<StageBackend>> {
    EXPECT_EQ(first, last);
    if (made != nullptr) made->push_back(first);
    return std::make_unique<RecordingBackend>(NumElements(infos[first].input_shape),
                                              NumElements(infos[first].output_shape),
                                              &(*fed)[first]);
  };
}

// Options of one pass without warm-up: each backend sees exactly `timed_runs` runs.
ProfileOptions OnePass(int64_t batch_size, int timed_runs) {
  ProfileOptions options;
  options.batch_size = batch_size;
  options.warmup_runs = 0;
  options.timed_runs = timed_runs;
  options.passes = 1;
  options.max_passes = 1;
  options.half_batch = false;
  return options;
}

TEST(LayerProfilerTest, FeedsAnEmbeddingTokenIdsAndCountsWhatGptLayersSave) {
  const v1::JobSpec spec = GptSpec();
  const std::vector<LayerInfo> infos = InferLayers(spec.model()).value();
  std::vector<Fed> fed(infos.size());
  const BackendFactory recording = Recording(infos, &fed);
  absl::StatusOr<v1::ModelProfile> p = MeasureProfile(spec, recording, "cpu", OnePass(3, 2));
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->layers_size(), 4);
  // The embedding reads 3 x 16 token ids, exact integers in [0, vocab), and its backward
  // computes no input gradient (ids have none), as on a job's stage 0.
  ASSERT_EQ(fed[0].input.size(), 3u * 16);
  for (float id : fed[0].input) {
    EXPECT_EQ(id, std::floor(id));
    EXPECT_GE(id, 0);
    EXPECT_LT(id, 32);
  }
  EXPECT_EQ(fed[0].need_dx, (std::vector<bool>{false, false}));
  // Later layers get values in [-1, 1) and send their input gradient back.
  for (size_t i = 1; i < infos.size(); ++i) {
    SCOPED_TRACE(i);
    ASSERT_EQ(fed[i].input.size(), 3u * NumElements(infos[i].input_shape));
    for (float v : fed[i].input) {
      EXPECT_GE(v, -1);
      EXPECT_LT(v, 1);
    }
    EXPECT_EQ(fed[i].need_dx, (std::vector<bool>{true, true}));
  }
  // Sizes are the model's: outputs cross stage boundaries, saved bytes stay on the stage.
  for (size_t i = 0; i < infos.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(p->layers(i).activation_bytes(), infos[i].output_bytes * 3);
    EXPECT_EQ(p->layers(i).saved_bytes(), infos[i].saved_bytes * 3);
    EXPECT_EQ(p->layers(i).parameter_bytes(), infos[i].param_count * 4);
  }
  EXPECT_GT(p->layers(1).saved_bytes(), 2 * 16 * 16 * 4 * 3);  // heads x T^2 probabilities
  EXPECT_EQ(p->layers(3).parameter_bytes(), 32 * 8 * 4);       // the tied head's copy
  EXPECT_EQ(p->model_fingerprint(), profile::ModelFingerprint(spec.model()));
  EXPECT_TRUE(profile::CheckProfileMatchesModel(*p, spec.model()).ok());
}

TEST(LayerProfilerTest, MeasuresAGptOnTheCpu) {
  const v1::JobSpec spec = GptSpec();
  const std::vector<LayerInfo> infos = InferLayers(spec.model()).value();
  ProfileOptions options;
  options.batch_size = 2;
  options.warmup_runs = 1;
  options.timed_runs = 1;
  absl::StatusOr<v1::ModelProfile> p = MeasureProfile(spec, Cpu(), "cpu", options);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->layers_size(), 4);
  EXPECT_TRUE(profile::CheckProfileMatchesModel(*p, spec.model()).ok());
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(p->layers(i).name(), infos[i].type);
    EXPECT_GE(p->layers(i).forward_ms(), 0);
    EXPECT_GE(p->layers(i).backward_ms(), 0);
    EXPECT_EQ(p->layers(i).saved_bytes(), infos[i].saved_bytes * 2);
  }
  // The block's GEMMs and softmax take measurable time.
  EXPECT_GT(p->layers(1).forward_ms(), 0);
  EXPECT_GT(p->layers(1).backward_ms(), 0);
  // The loss over every position's logits (one label per position).
  EXPECT_GT(p->loss_ms_per_sample(), 0);
}

// Stage 0 never computes its input gradient (stage_runtime.cc), and the layers up to the
// model's first with parameters always sit on stage 0: they are timed without it. The MLP's
// flatten and first linear: the linear's backward is its weight gradient only (the flatten's
// none at all, CpuStageBackend); every later layer sends dL/dx back.
TEST(LayerProfilerTest, TimesTheLayersUpToTheFirstWithParametersWithoutTheInputGradient) {
  const v1::JobSpec spec = MlpSpec();
  const std::vector<LayerInfo> infos = InferLayers(spec.model()).value();
  ASSERT_EQ(infos.size(), 4u);
  ASSERT_TRUE(infos[0].params.empty());   // flatten
  ASSERT_FALSE(infos[1].params.empty());  // linear
  std::vector<Fed> fed(infos.size());
  const BackendFactory recording = Recording(infos, &fed);
  ASSERT_TRUE(MeasureProfile(spec, recording, "cpu", OnePass(2, 1)).ok());
  EXPECT_EQ(fed[0].need_dx, (std::vector<bool>{false}));
  EXPECT_EQ(fed[1].need_dx, (std::vector<bool>{false}));
  EXPECT_EQ(fed[2].need_dx, (std::vector<bool>{true}));
  EXPECT_EQ(fed[3].need_dx, (std::vector<bool>{true}));
}

// Passes over the whole model: a slow moment during one layer's runs of one pass (here every
// run of layer 1's first pass) is outvoted by the other passes' runs; with one pass it is the
// layer's time.
TEST(LayerProfilerTest, TimesEveryLayerInEachPassAndTakesTheMedianOverThePasses) {
  const v1::JobSpec spec = GptSpec();
  const std::vector<LayerInfo> infos = InferLayers(spec.model()).value();
  for (int passes : {1, 3}) {
    SCOPED_TRACE(passes);
    std::vector<Fed> fed(infos.size());
    fed[1].slow_forwards = 3;  // the warm-up and the 2 timed runs of the first pass
    fed[1].slow_ms = 40;
    std::vector<int> made;  // the layers whose backend was made, in order
    const BackendFactory recording = Recording(infos, &fed, &made);
    ProfileOptions options;
    options.batch_size = 2;
    options.warmup_runs = 1;
    options.timed_runs = 2;
    options.passes = passes;
    options.max_passes = passes;
    options.half_batch = false;
    absl::StatusOr<v1::ModelProfile> p = MeasureProfile(spec, recording, "cpu", options);
    ASSERT_TRUE(p.ok()) << p.status();
    std::vector<int> expected;
    for (int pass = 0; pass < passes; ++pass) {
      for (int i = 0; i < static_cast<int>(infos.size()); ++i) expected.push_back(i);
    }
    EXPECT_EQ(made, expected);  // one backend per layer and pass, pass after pass
    EXPECT_EQ(fed[1].forwards, passes * 3);
    if (passes == 1) {
      EXPECT_GE(p->layers(1).forward_ms(), 40);
    } else {
      // The median of 6 runs, 4 of them fast (a sleep-free forward takes microseconds).
      EXPECT_LT(p->layers(1).forward_ms(), 40);
    }
  }
}

// Each run goes through a window of layers as a step goes through a stage (every forward in
// order, every backward in reverse, every update), so that a layer finds the caches as its
// neighbours leave them; a window holds the layers whose footprints fit options.window_bytes,
// and a layer too large for it is a window of its own.
TEST(LayerProfilerTest, RunsAWindowOfLayersAsAStepRunsAStage) {
  const v1::JobSpec spec = MlpSpec();  // flatten, linear 256, relu, linear 10
  const std::vector<LayerInfo> infos = InferLayers(spec.model()).value();
  for (int64_t window_bytes : {int64_t{256} << 20, int64_t{1}}) {
    SCOPED_TRACE(window_bytes);
    std::vector<std::string> log;
    std::vector<Fed> fed(infos.size());
    for (size_t i = 0; i < fed.size(); ++i) {
      fed[i].log = &log;
      fed[i].layer = static_cast<int>(i);
    }
    ProfileOptions options = OnePass(2, 2);
    options.window_bytes = window_bytes;
    ASSERT_TRUE(MeasureProfile(spec, Recording(infos, &fed), "cpu", options).ok());
    const std::vector<std::string> whole = {"+0", "+1", "+2", "+3", "F0", "F1", "F2", "F3",
                                            "B3", "B2", "B1", "B0", "U0", "U1", "U2", "U3",
                                            "F0", "F1", "F2", "F3", "B3", "B2", "B1", "B0",
                                            "U0", "U1", "U2", "U3", "-0", "-1", "-2", "-3"};
    std::vector<std::string> alone;
    for (int i = 0; i < 4; ++i) {
      const std::string l = std::to_string(i);
      for (const char* e : {"+", "F", "B", "U", "F", "B", "U", "-"}) alone.push_back(e + l);
    }
    EXPECT_EQ(log, window_bytes == 1 ? alone : whole);
  }
}

// Beyond options.passes, passes go on while they took less than min_seconds in all, up to
// max_passes: a small model's profile spans a moment long enough for a shared host's swings.
TEST(LayerProfilerTest, PassesGoOnForMinSecondsUpToMaxPasses) {
  const v1::JobSpec spec = MlpSpec();
  const std::vector<LayerInfo> infos = InferLayers(spec.model()).value();
  for (double min_seconds : {0.0, 60.0}) {
    SCOPED_TRACE(min_seconds);
    std::vector<Fed> fed(infos.size());
    std::vector<int> made;
    ProfileOptions options = OnePass(2, 1);
    options.passes = 2;
    options.max_passes = 5;
    options.min_seconds = min_seconds;
    ASSERT_TRUE(MeasureProfile(spec, Recording(infos, &fed, &made), "cpu", options).ok());
    // One backend per layer and pass.
    EXPECT_EQ(made.size(), infos.size() * (min_seconds > 0 ? 5 : 2));
  }
}

// Each pass times the layers at the batch and at half of it (rounded down), a whole window at a
// time each; the profile carries both (the planner's fixed and per-sample parts of each layer).
TEST(LayerProfilerTest, TimesEveryLayerAtTheBatchAndAtHalfOfIt) {
  const v1::JobSpec spec = MlpSpec();
  const std::vector<LayerInfo> infos = InferLayers(spec.model()).value();
  for (int64_t batch : {int64_t{5}, int64_t{1}}) {
    SCOPED_TRACE(batch);
    std::vector<Fed> fed(infos.size());
    ProfileOptions options = OnePass(batch, 1);
    options.half_batch = true;
    absl::StatusOr<v1::ModelProfile> p =
        MeasureProfile(spec, Recording(infos, &fed), "cpu", options);
    ASSERT_TRUE(p.ok()) << p.status();
    // Layer 0 loads its input before each forward: once when fed, once per run.
    EXPECT_EQ(fed[0].rows,
              batch == 5 ? (std::vector<int64_t>{5, 5, 2, 2}) : (std::vector<int64_t>{1, 1}));
    for (const v1::LayerProfile& layer : p->layers()) {
      // Recording backends take microseconds, not 0.
      EXPECT_EQ(layer.half_batch_forward_ms() > 0, batch == 5) << layer.id();
      EXPECT_EQ(layer.half_batch_backward_ms() > 0, batch == 5) << layer.id();
    }
  }
}

TEST(LayerProfilerTest, RejectsBadOptions) {
  ProfileOptions options;
  options.timed_runs = 0;
  absl::StatusOr<v1::ModelProfile> p = MeasureProfile(MlpSpec(), Cpu(), "cpu", options);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("timed_runs 0"), std::string::npos) << p.status();
  options.timed_runs = 1;
  options.passes = 0;
  p = MeasureProfile(MlpSpec(), Cpu(), "cpu", options);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("passes 0 >= 1"), std::string::npos) << p.status();
  options.passes = 4;
  options.max_passes = 3;
  p = MeasureProfile(MlpSpec(), Cpu(), "cpu", options);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("max_passes 3 >= passes"), std::string::npos) << p.status();
  options.passes = 1;
  options.window_bytes = 0;
  p = MeasureProfile(MlpSpec(), Cpu(), "cpu", options);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("window_bytes 0 > 0"), std::string::npos) << p.status();
}

TEST(LayerProfilerTest, NamesTheLayerWhoseBackendFails) {
  BackendFactory failing = [](const v1::JobSpec& spec, int first,
                              int last) -> absl::StatusOr<std::unique_ptr<StageBackend>> {
    if (first == 1) return absl::ResourceExhaustedError("cuda:0: out of memory");
    return MakeCpuStageBackend(spec, first, last);
  };
  ProfileOptions options;
  options.batch_size = 4;
  absl::StatusOr<v1::ModelProfile> p = MeasureProfile(MlpSpec(), failing, "cuda:X", options);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(p.status().message(), "model.layers[1] (linear): cuda:0: out of memory");
}

}  // namespace
}  // namespace dapple::worker
