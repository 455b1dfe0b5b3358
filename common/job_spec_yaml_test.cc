// JobSpecToYaml: the canonical form, and that ParseJobSpec reads it back unchanged.
#include <limits>
#include <string>

#include "absl/status/statusor.h"
#include "common/job_spec.h"
#include "common/job_spec_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple {
namespace {

using ::dapple::testing::Edit;
using ::dapple::testing::Example;
using ::dapple::testing::ExpectRoundTrip;
using ::dapple::testing::kExample;
using ::dapple::testing::kMinimal;
using ::dapple::testing::Manual;
using ::testing::HasSubstr;

TEST(JobSpecToYamlTest, CanonicalFormOfTheExample) {
  EXPECT_EQ(JobSpecToYaml(Example()), R"(name: fmnist-mlp
model:
  input_shape: [1, 28, 28]
  input_type: float
  layers:
    - {type: flatten}
    - {type: linear, out: 1024}
    - {type: relu}
    - {type: linear, out: 10}
  loss: softmax_cross_entropy
data:
  dataset: fashion-mnist
  path: /usr/share/datasets/fashion-mnist
training:
  global_batch: 256
  micro_batch: 32
  epochs: 3
  optimizer: {type: sgd, lr: 0.05, momentum: 0.9, weight_decay: 0}
  seed: 42
  max_steps: 0
  checkpoint_every_steps: 0
parallel:
  schedule: dapple
  planner: balanced
  stages: 2
  devices: 2
  device_type: any
)");
}

TEST(JobSpecToYamlTest, RoundTrips) {
  ExpectRoundTrip(Example());
  absl::StatusOr<v1::JobSpec> minimal = ParseJobSpec(kMinimal, "job.yaml");
  ASSERT_TRUE(minimal.ok()) << minimal.status();
  ExpectRoundTrip(*minimal);  // stages auto

  v1::JobSpec spec = Manual({{0, 0}, {1, 2}, {3, 3}});
  v1::OptimizerSpec& opt = *spec.mutable_training()->mutable_optimizer();
  opt.set_type("adamw");
  opt.set_momentum(0);    // what ParseJobSpec gives adamw: YAML refuses momentum for it
  opt.set_lr(0.1 + 0.2);  // not a short decimal: must survive exactly
  opt.set_weight_decay(1.0 / 3.0);
  opt.set_eps(1e-12);
  spec.mutable_training()->set_seed(std::numeric_limits<uint64_t>::max());
  spec.mutable_training()->set_max_steps(100);
  spec.mutable_training()->set_checkpoint_every_steps(25);
  spec.mutable_training()->set_max_consecutive_skipped_steps(4);
  spec.mutable_model()->mutable_layers(2)->set_type("gelu");
  spec.mutable_data()->set_path("/data/fashion mnist: \"v2\" #1\\x\t");
  ASSERT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  ExpectRoundTrip(spec);

  spec.mutable_data()->set_path("null");
  ExpectRoundTrip(spec);
  spec.mutable_data()->set_path("-rel/path");
  ExpectRoundTrip(spec);
  spec.set_name("123");
  ExpectRoundTrip(spec);
  spec.mutable_parallel()->set_device_type("cuda");
  for (const char* precision : {"fp32", "bf16"}) {
    spec.mutable_training()->set_precision(precision);
    ASSERT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
    ExpectRoundTrip(spec);
  }
  spec.mutable_parallel()->set_device_type("cpu");
  spec.mutable_training()->set_precision("");
  for (const char* recompute : {"none", "all", "auto"}) {
    spec.mutable_training()->set_recompute(recompute);
    ASSERT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
    ExpectRoundTrip(spec);
  }
}

// ------------------------------------------------------------------------ keys that don't apply

TEST(InapplicableKeysTest, CanonicalYamlHasOnlyTheKeysOfTheTypeAndRoundTrips) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(
      Edit(kExample, "{type: sgd, lr: 0.05, momentum: 0.9}", "{type: adamw, lr: 0.001}"),
      "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(JobSpecToYaml(*spec), HasSubstr("optimizer: {type: adamw, lr: 0.001, weight_decay: "
                                              "0, beta1: 0.9, beta2: 0.999, eps: 1e-08}\n"));
  ExpectRoundTrip(*spec);
}

}  // namespace
}  // namespace dapple
