// ValidateJobSpec: every rule of the model, data and training sections, its message and its bounds
// (also as ParseJobSpec reports them); the parallel section's in
// job_spec_validate_parallel_test.cc.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/job_spec_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple {
namespace {

using ::dapple::testing::Edit;
using ::dapple::testing::Example;
using ::dapple::testing::ExpectInvalid;
using ::dapple::testing::ExpectParseError;
using ::dapple::testing::kExample;
using ::dapple::testing::Manual;

// ---------------------------------------------------------------------------------- validation

TEST(ValidateJobSpecTest, ExampleAndVariantsAreValid) {
  v1::JobSpec spec = Example();
  EXPECT_TRUE(ValidateJobSpec(spec).ok());
  spec.mutable_parallel()->set_schedule("gpipe");
  spec.mutable_parallel()->set_planner("uniform");
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  spec.mutable_parallel()->set_stages(0);
  spec.mutable_parallel()->set_devices(4);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  spec.mutable_model()->clear_input_shape();
  spec.mutable_model()->add_input_shape(28);
  spec.mutable_model()->add_input_shape(28);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  spec.mutable_training()->set_global_batch(60000);
  spec.mutable_training()->set_micro_batch(1);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
}

// A learning-rate schedule that would not do what it says is refused: what only the cosine
// decay reads, set without it; a warm-up or decay longer than the job.
TEST(ValidateJobSpecTest, LrScheduleSettingsMustTakeEffect) {
  v1::JobSpec spec = Example();
  spec.mutable_training()->set_max_steps(0);
  spec.mutable_training()->set_epochs(2);  // 2 x 234 steps of 256 Fashion-MNIST samples
  v1::LrSchedule* l = spec.mutable_training()->mutable_lr_schedule();
  l->set_warmup_steps(10);
  l->set_decay("none");
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  l->set_decay_steps(100);
  ExpectInvalid(ValidateJobSpec(spec), {"training.lr_schedule.decay_steps 100 has no effect with "
                                        "training.lr_schedule.decay none",
                                        "add decay: cosine, or remove decay_steps"});
  l->set_decay("cosine");
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  l->set_decay_steps(469);
  ExpectInvalid(ValidateJobSpec(spec),
                {"training.lr_schedule.decay_steps 469 is more than the job's 468 steps "
                 "(training.epochs 2 x 234 steps per epoch)",
                 "set decay_steps to at most 468 (or 0 for the job's total steps)"});
  l->set_decay_steps(468);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  l->set_decay_steps(0);
  l->set_warmup_steps(468);
  ExpectInvalid(ValidateJobSpec(spec),
                {"training.lr_schedule.warmup_steps 468 is not less than the job's 468 steps",
                 "set warmup_steps to at most 467"});
  spec.mutable_training()->set_max_steps(400);  // ends the job first: it is the length
  ExpectInvalid(ValidateJobSpec(spec),
                {"training.lr_schedule.warmup_steps 468 is not less than the job's 400 steps "
                 "(training.max_steps)"});
  l->set_warmup_steps(399);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
}

// A setting counting steps that the job ends before reaching does nothing: refused, naming the
// job's length (a fresh user's max_steps 1000, eval_every_steps 1000 and checkpoint_every_steps
// 100000 on a 234-step job were all accepted; the last one left a restart policy nothing to
// resume from).
TEST(ValidateJobSpecTest, StepCountsMustFallWithinTheJob) {
  v1::JobSpec spec = Example();
  spec.mutable_training()->set_max_steps(0);
  spec.mutable_training()->set_epochs(1);  // 234 steps of 256 Fashion-MNIST samples
  spec.mutable_training()->set_max_steps(234);
  spec.mutable_training()->set_checkpoint_every_steps(234);
  spec.mutable_training()->set_eval_every_steps(234);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  spec.mutable_training()->set_max_steps(1000);
  ExpectInvalid(ValidateJobSpec(spec),
                {"training.max_steps 1000 is more than the job's 234 steps (training.epochs 1 x "
                 "234 steps per epoch): training stops when its epochs end; raise "
                 "training.epochs to 5, or set max_steps to at most 234"});
  spec.mutable_training()->set_epochs(5);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  spec.mutable_training()->set_max_steps(100);
  ExpectInvalid(ValidateJobSpec(spec),
                {"training.checkpoint_every_steps 234 is more than the job's 100 steps "
                 "(training.max_steps): no checkpoint would be taken (a restart would resume "
                 "from step 0); set checkpoint_every_steps to at most 100 (0: only on demand)"});
  spec.mutable_training()->set_checkpoint_every_steps(50);
  ExpectInvalid(ValidateJobSpec(spec),
                {"training.eval_every_steps 234 is more than the job's 100 steps "
                 "(training.max_steps): the job evaluates after its last step anyway, and never "
                 "before; set eval_every_steps to at most 100 (0: after every epoch)"});
  spec.mutable_training()->set_eval_every_steps(0);
  spec.mutable_training()->set_max_steps(0);
  spec.mutable_training()->set_checkpoint_every_steps(100000);
  ExpectInvalid(ValidateJobSpec(spec), {"training.checkpoint_every_steps 100000 is more than the "
                                        "job's 1170 steps (training.epochs 5 x 234 steps per "
                                        "epoch)"});
}

// Fashion-MNIST's 784 pixels come as [1, 28, 28], [28, 28] or [784]; another shape of as many
// elements is named as a layout, not as a size that "does not fit".
TEST(ValidateJobSpecTest, FashionMnistInputShapes) {
  for (const char* shape : {"[784, 1]", "[28, 28, 1]", "[2, 392]"}) {
    ExpectParseError(
        Edit(kExample, "input_shape: [1, 28, 28]", std::string("input_shape: ") + shape),
        std::string("job.yaml:3:16: model.input_shape ") + shape +
            " holds fashion-mnist's 784 pixels in a layout the dataset does not give: "
            "use [1, 28, 28] (for image layers), [28, 28] or [784]");
  }
  ExpectParseError(Edit(kExample, "input_shape: [1, 28, 28]", "input_shape: [1, 28, 27]"),
                   "job.yaml:3:16: model.input_shape [1, 28, 27] (756 elements) does not fit "
                   "fashion-mnist's 28x28 images (784 elements): use [1, 28, 28], [28, 28] or "
                   "[784]");
}

TEST(ValidateJobSpecTest, Name) {
  v1::JobSpec spec = Example();
  spec.set_name("");
  ExpectInvalid(ValidateJobSpec(spec), {"name must not be empty"});
  spec.set_name(std::string(64, 'a'));
  ExpectInvalid(ValidateJobSpec(spec), {"name '", "has 64 characters", "at most 63"});
  spec.set_name(std::string(63, 'a'));
  EXPECT_TRUE(ValidateJobSpec(spec).ok());
  spec.set_name("Fmnist");
  ExpectInvalid(ValidateJobSpec(spec), {"name 'Fmnist'", "'F' at position 0", "lowercase"});
  spec.set_name("my job");
  ExpectInvalid(ValidateJobSpec(spec), {"name 'my job'", "' ' at position 2"});
  spec.set_name("a-b_c.9");
  EXPECT_TRUE(ValidateJobSpec(spec).ok());
  spec.set_name("two\nlines");  // the message stays on one line
  ExpectInvalid(ValidateJobSpec(spec), {"name 'two\\x0alines'", "'\\x0a' at position 3"});
  ExpectInvalid(
      ParseJobSpec(Edit(kExample, "name: fmnist-mlp", "name: \"a\\tb\""), "job.yaml").status(),
      {"job.yaml:1:7: name 'a\\x09b' has the character '\\x09' at position 1"});
}

TEST(ValidateJobSpecTest, ModelLayersGoThroughInferLayers) {
  v1::JobSpec spec = Example();
  spec.mutable_model()->mutable_layers(1)->set_type("conv9");
  ExpectInvalid(ValidateJobSpec(spec), {"model.layers[1]", "unknown layer type 'conv9'"});
  spec = Example();
  spec.mutable_model()->clear_layers();
  ExpectInvalid(ValidateJobSpec(spec), {"model.layers", "empty"});
}

TEST(ValidateJobSpecTest, ModelMustFitFashionMnist) {
  v1::JobSpec spec = Example();
  spec.mutable_model()->clear_input_shape();
  for (int d : {3, 32, 32}) spec.mutable_model()->add_input_shape(d);
  ExpectInvalid(ValidateJobSpec(spec), {"model.input_shape [3, 32, 32]", "3072 elements", "784",
                                        "[1, 28, 28], [28, 28] or [784]"});
  spec = Example();
  spec.mutable_model()->mutable_layers(3)->mutable_linear()->set_out(12);
  ExpectInvalid(ValidateJobSpec(spec),
                {"model.layers[3] (linear), the model's output, has 12 features but "
                 "data.dataset fashion-mnist has 10 classes: the last layer must output [10]"});
  spec.mutable_model()->mutable_layers(3)->mutable_linear()->set_out(1);
  ExpectInvalid(ValidateJobSpec(spec),
                {"model.layers[3] (linear), the model's output, has 1 feature but "
                 "data.dataset fashion-mnist has 10 classes"});
  spec = Example();
  spec.mutable_model()->mutable_layers()->RemoveLast();
  spec.mutable_model()->mutable_layers()->RemoveLast();
  spec.mutable_model()->mutable_layers()->RemoveLast();  // only flatten: output [784]
  spec.mutable_parallel()->set_stages(1);
  spec.mutable_parallel()->set_devices(1);
  ExpectInvalid(ValidateJobSpec(spec),
                {"model.layers[0] (flatten), the model's output, has 784 features", "10 classes"});
}

TEST(ValidateJobSpecTest, Loss) {
  v1::JobSpec spec = Example();
  spec.mutable_model()->set_loss("mse");
  ExpectInvalid(ValidateJobSpec(spec),
                {"model.loss 'mse'", "not supported", "supported: softmax_cross_entropy"});
}

TEST(ValidateJobSpecTest, Data) {
  v1::JobSpec spec = Example();
  spec.mutable_data()->set_dataset("cifar10");
  ExpectInvalid(ValidateJobSpec(spec),
                {"data.dataset 'cifar10' is unknown", "known datasets: fashion-mnist"});
  spec = Example();
  spec.mutable_data()->set_path("");
  ExpectInvalid(ValidateJobSpec(spec), {"data.path", "must not be empty"});
}

TEST(ValidateJobSpecTest, Batches) {
  v1::JobSpec spec = Example();
  spec.mutable_training()->set_global_batch(0);
  ExpectInvalid(ValidateJobSpec(spec), {"training.global_batch 0 must be >= 1"});
  spec.mutable_training()->set_global_batch(60001);
  spec.mutable_training()->set_micro_batch(1);
  ExpectInvalid(ValidateJobSpec(spec),
                {"training.global_batch 60001 must be <= 60000, the number of training samples "
                 "of data.dataset fashion-mnist: a step takes global_batch distinct samples: use "
                 "a global_batch of at most 60000"});
  spec = Example();
  spec.mutable_training()->set_micro_batch(0);
  ExpectInvalid(ValidateJobSpec(spec), {"training.micro_batch 0 must be >= 1"});
  spec.mutable_training()->set_micro_batch(512);
  ExpectInvalid(ValidateJobSpec(spec),
                {"training.micro_batch 512 must be <= training.global_batch 256: a step splits "
                 "its global_batch samples into micro-batches: use a micro_batch that divides 256 "
                 "(1, 2, 4, 8, 16, 32, 64, 128, 256)"});
  spec.mutable_training()->set_micro_batch(48);
  ExpectInvalid(ValidateJobSpec(spec),
                {"training.global_batch 256 is not divisible by training.micro_batch 48: use a "
                 "micro_batch that divides 256 (1, 2, 4, 8, 16, 32, 64, 128, 256)"});
  // A global batch with many divisors lists those nearest to the micro_batch asked for.
  spec.mutable_training()->set_global_batch(720);
  spec.mutable_training()->set_micro_batch(7);
  ExpectInvalid(ValidateJobSpec(spec),
                {"training.global_batch 720 is not divisible by training.micro_batch 7: use a "
                 "micro_batch that divides 720 (1, ..., 4, 5, 6, 8, 9, 10, ..., 720)"});
}

TEST(ValidateJobSpecTest, EpochsAndMaxSteps) {
  v1::JobSpec spec = Example();
  spec.mutable_training()->set_epochs(0);
  ExpectInvalid(ValidateJobSpec(spec), {"training.epochs 0 must be >= 1"});
  spec = Example();
  spec.mutable_training()->set_max_steps(-1);
  ExpectInvalid(ValidateJobSpec(spec), {"training.max_steps -1 must be >= 0"});
  spec.mutable_training()->set_max_steps(5);
  EXPECT_TRUE(ValidateJobSpec(spec).ok());
}

TEST(ValidateJobSpecTest, CheckpointEverySteps) {
  v1::JobSpec spec = Example();
  spec.mutable_training()->set_checkpoint_every_steps(-2);
  ExpectInvalid(ValidateJobSpec(spec),
                {"training.checkpoint_every_steps -2 must be >= 0 (0 = only on demand)"});
  spec.mutable_training()->set_checkpoint_every_steps(50);
  EXPECT_TRUE(ValidateJobSpec(spec).ok());
  absl::StatusOr<v1::JobSpec> parsed = ParseJobSpec(
      Edit(kExample, "max_steps: 0", "max_steps: 0\n  checkpoint_every_steps: 7"), "job.yaml");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->training().checkpoint_every_steps(), 7);
}

TEST(ValidateJobSpecTest, CheckpointEveryMinutes) {
  v1::JobSpec spec = Example();
  spec.mutable_training()->set_checkpoint_every_minutes(-0.5);
  ExpectInvalid(ValidateJobSpec(spec),
                {"training.checkpoint_every_minutes -0.5 must be >= 0 and at most 10080 (a week; "
                 "0 = no time-based checkpoints)"});
  spec.mutable_training()->set_checkpoint_every_minutes(std::nan(""));
  ExpectInvalid(ValidateJobSpec(spec), {"training.checkpoint_every_minutes nan must be >= 0"});
  spec.mutable_training()->set_checkpoint_every_minutes(20000);
  ExpectInvalid(ValidateJobSpec(spec), {"training.checkpoint_every_minutes 20000 must be >= 0"});
  spec.mutable_training()->set_checkpoint_every_minutes(0.25);
  EXPECT_TRUE(ValidateJobSpec(spec).ok());
  absl::StatusOr<v1::JobSpec> parsed = ParseJobSpec(
      Edit(kExample, "max_steps: 0", "max_steps: 0\n  checkpoint_every_minutes: 1.5"), "job.yaml");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->training().checkpoint_every_minutes(), 1.5);
}

TEST(ValidateJobSpecTest, Optimizer) {
  const auto with = [](auto mutate) {
    v1::JobSpec spec = Example();
    mutate(*spec.mutable_training()->mutable_optimizer());
    return ValidateJobSpec(spec);
  };
  ExpectInvalid(with([](v1::OptimizerSpec& o) { o.set_type("adam"); }),
                {"training.optimizer.type 'adam' is unknown", "known: sgd, adamw"});
  for (double lr : {0.0, -0.1, std::numeric_limits<double>::infinity(), std::nan("")}) {
    ExpectInvalid(with([lr](v1::OptimizerSpec& o) { o.set_lr(lr); }),
                  {"training.optimizer.lr", "must be > 0 and finite"});
  }
  ExpectInvalid(with([](v1::OptimizerSpec& o) { o.set_lr(-0.1); }),
                {"training.optimizer.lr -0.1 must be > 0 and finite"});
  ExpectInvalid(with([](v1::OptimizerSpec& o) { o.set_lr(std::nan("")); }),
                {"training.optimizer.lr nan must be"});
  ExpectInvalid(with([](v1::OptimizerSpec& o) { o.set_momentum(1); }),
                {"training.optimizer.momentum 1 must be in [0, 1)"});
  ExpectInvalid(with([](v1::OptimizerSpec& o) { o.set_momentum(-0.5); }),
                {"training.optimizer.momentum -0.5 must be in [0, 1)"});
  ExpectInvalid(with([](v1::OptimizerSpec& o) { o.set_weight_decay(-0.01); }),
                {"training.optimizer.weight_decay -0.01 must be >= 0"});
  ExpectInvalid(with([](v1::OptimizerSpec& o) { o.set_beta1(1); }),
                {"training.optimizer.beta1 1 must be in [0, 1)"});
  ExpectInvalid(with([](v1::OptimizerSpec& o) { o.set_beta2(1.5); }),
                {"training.optimizer.beta2 1.5 must be in [0, 1)"});
  ExpectInvalid(with([](v1::OptimizerSpec& o) {
                  o.set_type("adamw");
                  o.set_eps(0);
                }),
                {"training.optimizer.eps 0 must be > 0"});
  ExpectInvalid(with([](v1::OptimizerSpec& o) { o.set_eps(-1e-8); }),
                {"training.optimizer.eps -1e-08 must be > 0"});
  EXPECT_TRUE(with([](v1::OptimizerSpec& o) { o.set_type("adamw"); }).ok());
  // A hand-built sgd spec need not set AdamW's eps.
  EXPECT_TRUE(with([](v1::OptimizerSpec& o) { o.set_eps(0); }).ok());
}

// ------------------------------------------------------------------------------ integer bounds

TEST(BoundsTest, HugeIntegersAreRefusedWithTheMaximum) {
  ExpectParseError(Edit(kExample, "epochs: 3", "epochs: 9223372036854775807"),
                   "job.yaml:14:11: training.epochs 9223372036854775807 is more than the maximum "
                   "100000");
  ExpectParseError(Edit(kExample, "max_steps: 0 ", "max_steps: 1000000001 "),
                   "job.yaml:17:14: training.max_steps 1000000001 is more than the maximum "
                   "1000000000");
  ExpectParseError(Edit(kExample, "{type: linear, out: 1024}", "{type: linear, out: 100000000}"),
                   "job.yaml:6:27: model.layers[1].out 100000000 is more than the maximum 2^24 "
                   "(16777216) output elements per sample");
  ExpectParseError(Edit(kExample, "input_shape: [1, 28, 28]", "input_shape: [1, 28, 99999999999]"),
                   "job.yaml:3:16: model.input_shape [1, 28, 99999999999] has more than the "
                   "maximum 2^24 (16777216) elements per sample");
  ExpectParseError(Edit(kExample, "stages: 2 ", "stages: 2147483647 "),
                   "job.yaml:21:11: parallel.stages 2147483647 is more than the maximum 4096");
  ExpectParseError(
      Edit(Edit(kExample, "stages: 2 ", "stages: auto "), "devices: 2", "devices: 4097"),
      "job.yaml:22:12: parallel.devices 4097 is more than the maximum 4096");
}

TEST(BoundsTest, TheMaximaThemselvesAreValidAndTheirProductsFit) {
  v1::JobSpec spec = Example();
  spec.mutable_training()->set_epochs(100000);
  spec.mutable_training()->set_max_steps(1000000000);
  spec.mutable_training()->set_global_batch(1);
  spec.mutable_training()->set_micro_batch(1);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  // What the coordinator derives: total steps (epochs * steps per epoch) and the epoch counter.
  const int64_t total_steps = spec.training().epochs() * (60000 / spec.training().global_batch());
  EXPECT_EQ(total_steps, 6000000000);
  EXPECT_LE(spec.training().epochs(), std::numeric_limits<int32_t>::max());
  spec.mutable_training()->set_epochs(100001);
  ExpectInvalid(ValidateJobSpec(spec), {"training.epochs 100001 is more than the maximum 100000"});
  spec.mutable_training()->set_epochs(std::numeric_limits<int64_t>::max());
  ExpectInvalid(ValidateJobSpec(spec), {"training.epochs 9223372036854775807 is more than the "
                                        "maximum 100000"});
  spec = Example();
  spec.mutable_training()->set_max_steps(std::numeric_limits<int64_t>::max());
  ExpectInvalid(ValidateJobSpec(spec), {"training.max_steps 9223372036854775807 is more than the "
                                        "maximum 1000000000"});
  spec = Example();
  spec.mutable_parallel()->set_stages(4097);
  spec.mutable_parallel()->set_devices(4097);
  ExpectInvalid(ValidateJobSpec(spec), {"parallel.stages 4097 is more than the maximum 4096"});
  spec.mutable_parallel()->set_stages(0);
  ExpectInvalid(ValidateJobSpec(spec), {"parallel.devices 4097 is more than the maximum 4096"});
}

// ------------------------------------------------------------------------------- model size

TEST(ModelSizeTest, ParametersAndActivationsAreBounded) {
  ExpectParseError(Edit(kExample, "{type: linear, out: 1024}", "{type: linear, out: 1000000}"),
                   "job.yaml:6:7: model.layers[1] (linear 784 -> 1000000) has 785000000 "
                   "parameters, bringing the model to 785000000 (2.92 GiB of fp32 weights), more "
                   "than the maximum 2^28 (268435456, 1 GiB)");
  // 131866 activation floats per sample: fine for 256 samples a step, not for 60000.
  const std::string wide =
      Edit(kExample, "{type: linear, out: 1024}", "{type: linear, out: 65536}");
  EXPECT_TRUE(ParseJobSpec(wide, "job.yaml").ok()) << ParseJobSpec(wide, "job.yaml").status();
  ExpectParseError(Edit(Edit(wide, "global_batch: 256", "global_batch: 60000"), "micro_batch: 32",
                        "micro_batch: 600"),
                   "job.yaml:12:17: training.global_batch 60000 times the model's 131866 "
                   "activation floats per sample (outputs and what backward keeps) is 7911960000 "
                   "floats (29.47 GiB of fp32) per step, more than the maximum 2^30 (4 GiB): use "
                   "a smaller global_batch or narrower layers");
}

// Found by a fresh user: batchnorm2d over one value per channel (a 28x28 kernel, micro_batch 1)
// passes only its bias on, and the job "trained" to 10.9%.
TEST(ModelSizeTest, BatchNormNeedsMoreThanOneValuePerChannel) {
  const std::string cnn =
      Edit(Edit(kExample, "    - {type: flatten}\n",
                "    - {type: conv2d, out_channels: 4, kernel: 28}\n    - {type: batchnorm2d}\n"
                "    - {type: flatten}\n"),
           "micro_batch: 32", "micro_batch: 1");
  ExpectParseError(Edit(cnn, "global_batch: 256", "global_batch: 2"),
                   "job.yaml:15:16: model.layers[1] (batchnorm2d) normalises each channel over "
                   "training.micro_batch 1 x 1 x 1 = 1 value, so its output is its bias whatever "
                   "the input: use a micro_batch of at least 2 (or a larger image at that layer)");
  const std::string two =
      Edit(Edit(cnn, "global_batch: 256", "global_batch: 4"), "micro_batch: 1", "micro_batch: 2");
  EXPECT_TRUE(ParseJobSpec(two, "job.yaml").ok()) << ParseJobSpec(two, "job.yaml").status();
  // A stage's replicas split each micro-batch: 2 replicas of a micro-batch of 2 normalise one
  // row each, the same one value per channel.
  ExpectParseError(Edit(two, "  devices: 2", "  devices: 4"),
                   "job.yaml:24:12: parallel.devices 4 with parallel.stages 2 gives 2 replicas "
                   "per stage, each computing 1 row of every micro-batch (training.micro_batch "
                   "2), so model.layers[1] (batchnorm2d) normalises each channel over 1 x 1 x 1 = "
                   "1 value on a replica and its output is its bias whatever the input: set "
                   "devices to at most 2 (1 replica per stage) or use a larger micro_batch");
  // Each replica with 2 rows: fine.
  const std::string four =
      Edit(Edit(Edit(two, "  devices: 2", "  devices: 4"), "micro_batch: 2", "micro_batch: 4"),
           "global_batch: 4", "global_batch: 8");
  EXPECT_TRUE(ParseJobSpec(four, "job.yaml").ok()) << ParseJobSpec(four, "job.yaml").status();
}

// ------------------------------------------------------------------------------- UTF-8 names

TEST(Utf8Test, NamesReportWholeCharactersAndCharacterPositions) {
  ExpectParseError(Edit(kExample, "name: fmnist-mlp", "name: fmnist-ü-😀"),
                   "job.yaml:1:7: name 'fmnist-ü-😀' has the character 'ü' at position 7; use "
                   "only lowercase letters, digits, '-', '_' and '.'");
  v1::JobSpec spec = Example();
  spec.set_name("ab😀");
  ExpectInvalid(ValidateJobSpec(spec), {"has the character '😀' at position 2;"});
  spec.set_name("日本語x");
  ExpectInvalid(ValidateJobSpec(spec), {"has the character '日' at position 0;"});
  // Bytes that are not UTF-8 are shown as \xNN and count as one character each.
  spec.set_name(
      "ab\xff\xfe"
      "c");
  ExpectInvalid(ValidateJobSpec(spec), {"name 'ab\\xff\\xfec' has the character '\\xff' at "
                                        "position 2"});
  // Invisible characters are named, not echoed: a zero-width space showed as '' and a
  // right-to-left override reversed the rest of the line.
  spec.set_name(
      "zw\xe2\x80\x8b"
      "sp");
  ExpectInvalid(ValidateJobSpec(spec), {"name 'zw\\u200bsp' has the character '\\u200b' at "
                                        "position 2"});
  spec.set_name(
      "a\xe2\x80\xae"
      "b");
  ExpectInvalid(ValidateJobSpec(spec), {"name 'a\\u202eb' has the character '\\u202e'"});
  spec.set_name("a\xc3");  // truncated 2-byte sequence
  ExpectInvalid(ValidateJobSpec(spec), {"'\\xc3' at position 1"});
  spec.set_name("a\xc0\xaf");  // overlong '/'
  ExpectInvalid(ValidateJobSpec(spec), {"'\\xc0' at position 1"});
  spec.set_name("a\xed\xa0\x80");  // a UTF-16 surrogate
  ExpectInvalid(ValidateJobSpec(spec), {"'\\xed' at position 1"});
  // C1 controls and Unicode line separators are escaped: the message stays one line.
  spec.set_name(
      "a\xc2\x85"
      "b");
  ExpectInvalid(ValidateJobSpec(spec), {"name 'a\\u0085b' has the character '\\u0085' at position "
                                        "1"});
  spec.set_name("a\xe2\x80\xa8");
  ExpectInvalid(ValidateJobSpec(spec), {"'\\u2028' at position 1"});
}

TEST(Utf8Test, EveryMessageIsValidUtf8) {
  v1::JobSpec spec = Example();
  spec.mutable_data()->set_dataset("mnist\xff");
  ExpectInvalid(ValidateJobSpec(spec), {"data.dataset 'mnist\\xff' is unknown"});
  ExpectParseError(Edit(kExample, "  epochs: 3", "  \xe9pochs: 3"),
                   "job.yaml:14:3: unknown field '\\xe9pochs' in training; known: global_batch, "
                   "micro_batch, epochs, optimizer, seed, max_steps, checkpoint_every_steps, "
                   "max_grad_norm, lr_schedule, eval_every_steps, precision, recompute, "
                   "max_consecutive_skipped_steps, restart, checkpoint_every_minutes; did you "
                   "mean 'epochs'?");
}

}  // namespace
}  // namespace dapple
