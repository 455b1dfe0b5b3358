#include "worker/runtime/layer_profiler.h"

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

TEST(LayerProfilerTest, RejectsBadOptions) {
  ProfileOptions options;
  options.timed_runs = 0;
  absl::StatusOr<v1::ModelProfile> p = MeasureProfile(MlpSpec(), Cpu(), "cpu", options);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("timed_runs 0"), std::string::npos) << p.status();
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
