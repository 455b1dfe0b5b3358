// The reference trainer's batch normalisation: the row groups it normalises over and the
// running statistics it applies once per step (docs/layers.md, "Batch normalisation"). Its
// arithmetic against PyTorch: tests/torch/cnn_oracle_test.py.
#include "worker/runtime/reference_trainer.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "worker/runtime/testing/parity_testing.h"

namespace dapple::worker {
namespace {

// conv2d 4 -> batchnorm2d -> relu -> maxpool2d 2 -> global_avgpool -> linear 10 (or without the
// batch norm), global batch 32.
v1::JobSpec SmallCnn(int64_t micro_batch, bool batchnorm) {
  parity::SpecOptions o;
  o.global_batch = 32;
  o.micro_batch = micro_batch;
  v1::JobSpec spec = parity::ParitySpec(o);
  v1::ModelSpec* m = spec.mutable_model();
  m->clear_layers();
  v1::Conv2dParams* conv = m->add_layers()->mutable_conv2d();
  m->mutable_layers(0)->set_type("conv2d");
  conv->set_out_channels(4);
  conv->set_kernel(3);
  conv->set_padding(1);
  if (batchnorm) m->add_layers()->set_type("batchnorm2d");
  m->add_layers()->set_type("relu");
  v1::LayerSpec* pool = m->add_layers();
  pool->set_type("maxpool2d");
  pool->mutable_maxpool2d()->set_kernel(2);
  m->add_layers()->set_type("global_avgpool");
  v1::LayerSpec* out = m->add_layers();
  out->set_type("linear");
  out->mutable_linear()->set_out(10);
  return spec;
}

struct Trained {
  std::vector<double> losses;
  std::vector<std::vector<float>> buffers;
};

Trained Train(const v1::JobSpec& spec, const ReferenceRowSplit& split, int steps) {
  auto t = ReferenceTrainer::Create(spec, &parity::TrainSet(), split);
  EXPECT_TRUE(t.ok()) << t.status();
  Trained run;
  if (!t.ok()) return run;
  for (int s = 0; s < steps; ++s) run.losses.push_back((*t)->Step(s));
  for (const kernels::Param* b : (*t)->Buffers()) run.buffers.push_back(b->value.data);
  return run;
}

TEST(ReferenceTrainerTest, BatchNormRunsOnEachReplicasShareOfEachMicroBatch) {
  // 2 replicas of 8-row micro-batches split them into rows of 4: the row groups of 4-row
  // micro-batches on one replica, so the two train bitwise alike.
  ReferenceRowSplit two;
  two.layer_replicas.assign(6, 2);
  const Trained replicas = Train(SmallCnn(8, true), two, 3);
  const Trained micro = Train(SmallCnn(4, true), {}, 3);
  EXPECT_EQ(replicas.losses, micro.losses);
  ASSERT_EQ(replicas.buffers.size(), 2u);
  EXPECT_EQ(replicas.buffers, micro.buffers);
  // The running statistics moved (once per step, from the whole batch); with 1F1B-RR's whole
  // micro-batches the groups are the micro-batches again.
  EXPECT_NE(micro.buffers[0], std::vector<float>(4, 0.0f));
  ReferenceRowSplit rr = two;
  rr.whole_micro_batches = true;
  EXPECT_EQ(Train(SmallCnn(8, true), rr, 3).losses, Train(SmallCnn(8, true), {}, 3).losses);
  // And the groups matter: 8-row micro-batches normalise differently.
  EXPECT_NE(Train(SmallCnn(8, true), {}, 1).losses.front(), micro.losses.front());
}

TEST(ReferenceTrainerTest, WithoutBatchNormTheSplitChangesNothing) {
  ReferenceRowSplit two;
  two.layer_replicas.assign(5, 2);
  const Trained split = Train(SmallCnn(8, false), two, 2);
  const Trained whole = Train(SmallCnn(32, false), {}, 2);
  EXPECT_EQ(split.losses, whole.losses);
  EXPECT_TRUE(whole.buffers.empty());
}

TEST(ReferenceTrainerTest, RefusesARowSplitOfTheWrongSize) {
  ReferenceRowSplit bad;
  bad.layer_replicas = {2, 2};
  auto t = ReferenceTrainer::Create(SmallCnn(8, true), &parity::TrainSet(), bad);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("the model has 6"), std::string::npos) << t.status();
}

}  // namespace
}  // namespace dapple::worker
