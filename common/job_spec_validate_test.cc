// ValidateJobSpec: every rule, its message and its bounds (also as ParseJobSpec reports them).
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
  spec.mutable_training()->set_max_steps(1000);  // more than the epochs give: they decide
  ExpectInvalid(ValidateJobSpec(spec), {"the job's 468 steps (training.epochs 2 x 234"});
  l->set_warmup_steps(467);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
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

TEST(ValidateJobSpecTest, Schedule) {
  v1::JobSpec spec = Example();
  spec.mutable_parallel()->set_schedule("zerobubble");
  ExpectInvalid(ValidateJobSpec(spec), {"parallel.schedule 'zerobubble' is unknown; available: "
                                        "gpipe, dapple, pipedream, pipesgd, zb-h1, zb-h2, "
                                        "interleaved, auto"});
  // auto: the planner chooses; on cuda too (it then chooses among dapple and gpipe), with
  // recomputation where the device allows it.
  spec.mutable_parallel()->set_schedule("auto");
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  for (const char* recompute : {"none", "all", "auto"}) {
    v1::JobSpec with = spec;
    with.mutable_training()->set_recompute(recompute);
    EXPECT_TRUE(ValidateJobSpec(with).ok()) << recompute << ": " << ValidateJobSpec(with);
  }
  v1::JobSpec on_cuda = spec;
  on_cuda.mutable_parallel()->set_device_type("cuda");
  EXPECT_TRUE(ValidateJobSpec(on_cuda).ok()) << ValidateJobSpec(on_cuda);
  for (const char* zb : {"zb-h1", "zb-h2"}) {
    spec.mutable_parallel()->set_schedule(zb);
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << zb << ": " << ValidateJobSpec(spec);
    // With clipping too: the global norm comes after every BACKWARD_WEIGHT (generators.h).
    v1::JobSpec clipped = spec;
    clipped.mutable_training()->set_max_grad_norm(1.0);
    EXPECT_TRUE(ValidateJobSpec(clipped).ok()) << zb << ": " << ValidateJobSpec(clipped);
    // The CUDA backend splits its backward too (worker/runtime/cuda/cuda_stage_backend.h).
    v1::JobSpec cuda = spec;
    cuda.mutable_parallel()->set_device_type("cuda");
    EXPECT_TRUE(ValidateJobSpec(cuda).ok()) << zb << ": " << ValidateJobSpec(cuda);
  }
}

// training.max_consecutive_skipped_steps: >= 0; > 0 only under a synchronous schedule (the
// asynchronous ones cannot skip a step on every rank together).
TEST(ValidateJobSpecTest, MaxConsecutiveSkippedSteps) {
  v1::JobSpec spec = Example();
  spec.mutable_training()->set_max_consecutive_skipped_steps(-1);
  ExpectInvalid(ValidateJobSpec(spec),
                {"training.max_consecutive_skipped_steps -1 must be >= 0 (0 = the first step with "
                 "a non-finite loss or gradient fails the job)"});
  spec.mutable_training()->set_max_consecutive_skipped_steps(5);
  for (const char* sync : {"gpipe", "dapple", "zb-h1", "zb-h2"}) {
    spec.mutable_parallel()->set_schedule(sync);
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << sync << ": " << ValidateJobSpec(spec);
  }
  spec.mutable_parallel()->set_schedule("pipedream");
  ExpectInvalid(ValidateJobSpec(spec),
                {"training.max_consecutive_skipped_steps 5 needs a synchronous schedule (gpipe, "
                 "dapple, interleaved, zb-h1, zb-h2), got parallel.schedule pipedream: its "
                 "asynchronous "
                 "updates cannot skip a step on every rank together; use 0 (a non-finite step "
                 "fails the job)"});
  spec.mutable_training()->set_max_consecutive_skipped_steps(0);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
}

// training.restart: max_restarts in [0, 100], the seconds finite and in range, the cap at least
// the first backoff, at least 1 s of waiting for workers when restarts are on.
TEST(ValidateJobSpecTest, Restart) {
  v1::JobSpec spec = Example();
  v1::RestartSpec* r = spec.mutable_training()->mutable_restart();
  EXPECT_TRUE(ValidateJobSpec(spec).ok());  // all zero: no restarts
  r->set_max_restarts(3);
  r->set_backoff_seconds(1);
  r->set_max_backoff_seconds(30);
  r->set_wait_for_workers_seconds(60);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  r->set_max_restarts(101);
  ExpectInvalid(ValidateJobSpec(spec), {"training.restart.max_restarts 101 must be in [0, 100]"});
  r->set_max_restarts(3);
  r->set_max_backoff_seconds(0.5);
  ExpectInvalid(ValidateJobSpec(spec),
                {"training.restart.backoff_seconds 1 is more than "
                 "training.restart.max_backoff_seconds 0.5 (its cap, 30 unless given): lower "
                 "backoff_seconds or raise max_backoff_seconds"});
  r->set_max_backoff_seconds(30);
  r->set_wait_for_workers_seconds(0);
  ExpectInvalid(ValidateJobSpec(spec),
                {"training.restart.wait_for_workers_seconds 0 must be a number of seconds in [1, "
                 "86400]"});
}

// schedule interleaved (Megatron's interleaved 1F1B): parallel.interleave v in 2..8 with it and
// only with it, a fixed stage count P >= 2, P * v <= layers, M >= P (any M from P on, 2P + 1
// included), not on cuda, not with recomputation, tied weights, periodic checkpoints or a
// planner other than balanced and dapple; a spec that passes every rule is valid (runnable).
TEST(ValidateJobSpecTest, Interleaved) {
  v1::JobSpec spec = Example();  // 4 layers, 2 stages on 2 devices, global_batch 256 / 32: M = 8
  spec.mutable_parallel()->set_interleave(2);
  ExpectInvalid(ValidateJobSpec(spec),
                {"parallel.interleave applies only to parallel.schedule interleaved, got "
                 "parallel.schedule dapple"});
  spec.mutable_parallel()->set_schedule("interleaved");
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  v1::JobSpec with_dapple = spec;
  with_dapple.mutable_parallel()->set_planner("dapple");
  EXPECT_TRUE(ValidateJobSpec(with_dapple).ok()) << ValidateJobSpec(with_dapple);
  for (const char* planner : {"uniform", "pipedream"}) {
    v1::JobSpec other = spec;
    other.mutable_parallel()->set_planner(planner);
    ExpectInvalid(ValidateJobSpec(other),
                  {absl::StrCat("parallel.planner ", planner,
                                " with parallel.schedule interleaved is not supported"),
                   "4 virtual stages", "set planner: balanced (or dapple)"});
  }
  // Checkpoints of interleaved jobs: a rank's shard holds all its chunks
  // (worker/checkpoint/stage_checkpointer.h).
  v1::JobSpec periodic = spec;
  periodic.mutable_training()->set_checkpoint_every_steps(10);
  EXPECT_TRUE(ValidateJobSpec(periodic).ok()) << ValidateJobSpec(periodic);
  periodic.mutable_training()->set_checkpoint_every_steps(0);
  periodic.mutable_training()->set_checkpoint_every_minutes(5);
  EXPECT_TRUE(ValidateJobSpec(periodic).ok()) << ValidateJobSpec(periodic);
  for (int v : {0, 1, 9}) {
    v1::JobSpec bad = spec;
    bad.mutable_parallel()->set_interleave(v);
    ExpectInvalid(ValidateJobSpec(bad),
                  {v == 0 ? std::string("parallel.schedule interleaved needs parallel.interleave")
                          : absl::StrCat("parallel.interleave ", v, " must be in 2..8")});
  }
  v1::JobSpec deep = spec;
  deep.mutable_parallel()->set_interleave(3);
  ExpectInvalid(ValidateJobSpec(deep),
                {"parallel.interleave 3 with parallel.stages 2 makes 6 virtual stages, more than "
                 "the 4 layers of the model: each virtual stage needs at least one layer: set "
                 "interleave to at most 2"});
  v1::JobSpec cuda = spec;
  cuda.mutable_parallel()->set_device_type("cuda");
  ExpectInvalid(ValidateJobSpec(cuda), {"parallel.device_type cuda is not implemented"});
  v1::JobSpec auto_stages = spec;
  auto_stages.mutable_parallel()->set_stages(0);
  auto_stages.mutable_parallel()->set_planner("dapple");
  ExpectInvalid(ValidateJobSpec(auto_stages),
                {"needs parallel.stages as a count of at least 2", "got auto"});
  // M = 1 < P = 2: the message names the micro_batch values that give the nearest valid M.
  v1::JobSpec few = spec;
  few.mutable_training()->set_micro_batch(256);
  ExpectInvalid(ValidateJobSpec(few), {"training.micro_batch 256 makes M = 1 micro-batches",
                                       "fewer than "
                                       "parallel.stages 2",
                                       "needs M >= stages (any M from 2 on",
                                       "set micro_batch to 128 (M = 2) or 64 (M = 4)"});
  // M = P and M = 2P + 1 pass the schedule's rules.
  for (auto [global, micro] : {std::pair<int, int>{64, 32}, {160, 32}}) {
    v1::JobSpec m = spec;
    m.mutable_training()->set_global_batch(global);
    m.mutable_training()->set_micro_batch(micro);
    EXPECT_TRUE(ValidateJobSpec(m).ok()) << global / micro << ": " << ValidateJobSpec(m);
  }
  v1::JobSpec recompute = spec;
  recompute.mutable_training()->set_recompute("all");
  ExpectInvalid(ValidateJobSpec(recompute),
                {"training.recompute all with parallel.schedule interleaved is not supported"});
  // The field parses, round-trips and is refused where it does not apply, at its line.
  absl::StatusOr<v1::JobSpec> parsed =
      ParseJobSpec(Edit(kExample, "  devices: 2\n", "  devices: 2\n  interleave: 2\n"), "job.yaml");
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(std::string(parsed.status().message()),
              ::testing::HasSubstr("job.yaml:23:15: parallel.interleave applies only to"));
  // The canonical YAML writes it, and it reads back as the same spec.
  EXPECT_THAT(JobSpecToYaml(spec), ::testing::HasSubstr("\n  interleave: 2\n"));
  absl::StatusOr<v1::JobSpec> round_trip = ParseJobSpec(JobSpecToYaml(spec), "job.yaml");
  ASSERT_TRUE(round_trip.ok()) << round_trip.status();
  EXPECT_EQ(round_trip->parallel().interleave(), 2);
  EXPECT_EQ(round_trip->parallel().schedule(), "interleaved");
}

// schedule pipedream: stages may have replicas (1F1B-RR: whole micro-batches round-robin), at
// most M = global_batch / micro_batch per stage where the spec fixes them (devices / stages of
// balanced, uniform and manual); not with planner dp; an optional parallel.pipedream section
// {vertical_sync}; the section under another schedule is refused.
// A new user's parallel.devices 4096 on 2 stages met the planner's "micro_batch_size 32 is
// smaller than stage 0's 2048 replicas" without the spec's fields: split-concat replicas
// (every schedule but pipedream) need a sample of each micro-batch each, checked at submit where
// the spec fixes D.
TEST(ValidateJobSpecTest, SplitReplicasGetAtLeastOneSampleEach) {
  v1::JobSpec spec = Example();  // 2 stages on 2 devices, global_batch 256, micro_batch 32
  spec.mutable_parallel()->set_devices(64);  // 32 replicas per stage: one sample each
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  spec.mutable_parallel()->set_devices(4096);
  ExpectInvalid(ValidateJobSpec(spec),
                {"parallel.devices 4096 with parallel.stages 2 gives 2048 replicas per stage, but "
                 "a stage's replicas split each micro-batch of training.micro_batch 32 samples "
                 "among them: each replica needs at least one: set devices to at most 64 (32 "
                 "replicas per stage) or use a larger micro_batch"});
  // Planners that choose the replicas themselves are capped by the coordinator, not here.
  spec.mutable_parallel()->set_planner("dapple");
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
}

TEST(ValidateJobSpecTest, PipeDreamReplicasGetAtLeastOneMicroBatchEach) {
  v1::JobSpec spec = Example();  // 2 stages on 2 devices, global_batch 256, micro_batch 32
  spec.mutable_parallel()->set_schedule("pipedream");
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  // 4 devices on 2 stages: 2 replicas per stage, M = 8.
  spec.mutable_parallel()->set_devices(4);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  // M = 2: 2 replicas per stage still get one micro-batch each per step, 4 would not.
  spec.mutable_training()->set_micro_batch(128);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  spec.mutable_parallel()->set_devices(8);
  ExpectInvalid(ValidateJobSpec(spec),
                {"parallel.devices 8 with parallel.stages 2 gives 4 replicas per stage, but "
                 "parallel.schedule pipedream sends whole micro-batches round-robin to a stage's "
                 "replicas and training.global_batch 256 / training.micro_batch 128 = 2 "
                 "micro-batches per step: each replica needs at least one: set devices to at "
                 "most 4 (2 replicas per stage) or use a smaller micro_batch"});
  // Split-concat's micro_batch >= replicas does not apply: a micro-batch is never split.
  spec.mutable_training()->set_micro_batch(2);
  spec.mutable_parallel()->set_devices(8);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  // Planners that choose replicas themselves are capped at M by the coordinator, not here.
  spec.mutable_training()->set_micro_batch(256);
  for (const char* planner : {"pipedream", "dapple"}) {
    spec.mutable_parallel()->set_planner(planner);
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << planner << ": " << ValidateJobSpec(spec);
  }
  spec.mutable_parallel()->set_planner("uniform");
  ExpectInvalid(ValidateJobSpec(spec),
                {"parallel.devices 8 with parallel.stages 2 gives 4 replicas per stage",
                 "training.micro_batch 256 = 1 micro-batch per step",
                 "set devices to at most 2 (1 replica per stage)"});
  // Counts of 1 take the singular: 1 stage, 1 micro-batch.
  spec.mutable_parallel()->set_stages(1);
  ExpectInvalid(ValidateJobSpec(spec),
                {"parallel.devices 8 with parallel.stages 1 gives 8 replicas per stage, but "
                 "parallel.schedule pipedream sends whole micro-batches round-robin to a stage's "
                 "replicas and training.global_batch 256 / training.micro_batch 256 = 1 "
                 "micro-batch per step: each replica needs at least one: set devices to at most 1 "
                 "(1 replica per stage) or use a smaller micro_batch"});
  spec.mutable_parallel()->set_stages(2);
  spec.mutable_parallel()->set_devices(2);
  spec.mutable_parallel()->set_planner("dp");
  spec.mutable_parallel()->set_stages(0);
  ExpectInvalid(ValidateJobSpec(spec),
                {"parallel.planner dp with parallel.schedule pipedream", "schedule pipesgd"});
  spec = Example();
  spec.mutable_parallel()->mutable_pipedream()->set_vertical_sync(true);
  ExpectInvalid(ValidateJobSpec(spec),
                {"parallel.pipedream applies only to parallel.schedule pipedream, got "
                 "parallel.schedule dapple"});
}

// planner pipedream-code (PipeDream's planner as its code plans): it chooses the depth and any
// replica count, which only schedule pipedream's 1F1B-RR runs as planned.
TEST(ValidateJobSpecTest, PipeDreamCodePlannerNeedsSchedulePipeDreamAndStagesAuto) {
  v1::JobSpec spec = Example();
  spec.mutable_parallel()->set_planner("pipedream-code");
  spec.mutable_parallel()->set_stages(0);
  spec.mutable_parallel()->set_devices(8);
  ExpectInvalid(ValidateJobSpec(spec),
                {"parallel.planner pipedream-code with parallel.schedule dapple: PipeDream's "
                 "planner gives stages any replica count, which only its 1F1B-RR runs (whole "
                 "micro-batches round-robin); the synchronous schedules split each micro-batch "
                 "evenly over a stage's replicas: set schedule: pipedream, or use planner "
                 "dapple"});
  spec.mutable_parallel()->set_schedule("pipedream");
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  spec.mutable_parallel()->set_stages(2);
  ExpectInvalid(ValidateJobSpec(spec),
                {"parallel.stages 2 with parallel.planner pipedream-code: PipeDream's planner "
                 "chooses the pipeline depth itself: set stages: auto (or planner pipedream for a "
                 "fixed depth)"});
}

// schedule pipesgd: one stage (stages 1, or planner dp with stages auto), devices >= 2, and a
// parallel.pipesgd section with defaults warmup_steps 2 and compression none.
TEST(ValidateJobSpecTest, PipeSgdRules) {
  v1::JobSpec spec = Example();
  v1::ParallelSpec& p = *spec.mutable_parallel();
  p.set_schedule("pipesgd");
  p.set_planner("dp");
  p.set_stages(0);
  p.set_devices(4);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);  // no section: defaults
  p.set_planner("dapple");
  ExpectInvalid(ValidateJobSpec(spec), {"parallel.stages",
                                        "got parallel.stages auto with "
                                        "parallel.planner dapple: set stages to 1 (or auto with "
                                        "planner dp)"});
  p.set_stages(1);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  p.set_devices(1);
  ExpectInvalid(ValidateJobSpec(spec), {"parallel.devices 1 with parallel.schedule pipesgd: "
                                        "pipesgd is data parallelism: devices must be >= 2"});
  p.set_devices(2);
  for (int bad : {-1, 1001}) {
    p.mutable_pipesgd()->set_warmup_steps(bad);
    ExpectInvalid(ValidateJobSpec(spec), {absl::StrCat("parallel.pipesgd.warmup_steps ", bad,
                                                       " must be between 0 and 1000")});
  }
  p.mutable_pipesgd()->set_warmup_steps(1000);
  for (const char* ok : {"none", "fp16", "int8", ""}) {
    p.mutable_pipesgd()->set_compression(ok);
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ok;
  }
  p.mutable_pipesgd()->set_compression("bf16");
  ExpectInvalid(ValidateJobSpec(spec), {"parallel.pipesgd.compression 'bf16' is unknown; known: "
                                        "none, fp16, int8"});
  p.set_schedule("gpipe");
  ExpectInvalid(ValidateJobSpec(spec), {"parallel.pipesgd applies only to parallel.schedule "
                                        "pipesgd, got parallel.schedule gpipe"});
}

TEST(ValidateJobSpecTest, DeviceType) {
  v1::JobSpec spec = Example();
  for (const char* ok : {"any", "cpu", "cuda", ""}) {
    spec.mutable_parallel()->set_device_type(ok);
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ok;
  }
  spec.mutable_parallel()->set_device_type("gpu");
  ExpectInvalid(ValidateJobSpec(spec),
                {"parallel.device_type 'gpu' is unknown; known: any, cpu, cuda"});
}

// training.precision: fp32 anywhere, bf16 only on CUDA devices (a CPU worker cannot run it,
// and device_type any may hand a stage to one).
TEST(ValidateJobSpecTest, Precision) {
  v1::JobSpec spec = Example();
  EXPECT_FALSE(UsesBf16(spec.training()));
  for (const char* device_type : {"any", "cpu", "cuda", ""}) {
    spec.mutable_parallel()->set_device_type(device_type);
    for (const char* ok : {"", "fp32"}) {
      spec.mutable_training()->set_precision(ok);
      EXPECT_TRUE(ValidateJobSpec(spec).ok()) << device_type << " " << ok;
    }
  }
  spec.mutable_training()->set_precision("bf16");
  EXPECT_TRUE(UsesBf16(spec.training()));
  spec.mutable_parallel()->set_device_type("cuda");
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  for (const char* device_type : {"any", "cpu", "emulated"}) {
    spec.mutable_parallel()->set_device_type(device_type);
    if (std::string(device_type) == "emulated") {
      spec.mutable_parallel()->mutable_emulation()->set_profile("/tmp/profile.pb");
      spec.mutable_parallel()->mutable_emulation()->set_scale(1);
    }
    ExpectInvalid(
        ValidateJobSpec(spec),
        {absl::StrCat("training.precision bf16 needs every stage on a CUDA GPU, but "
                      "parallel.device_type is ",
                      device_type, ": set parallel.device_type: cuda (or precision: fp32)")});
  }
  spec.mutable_parallel()->set_device_type("cuda");
  spec.mutable_parallel()->clear_emulation();
  spec.mutable_training()->set_precision("fp16");
  ExpectInvalid(ValidateJobSpec(spec), {"training.precision 'fp16' is unknown; known: fp32, bf16"});
}

// training.recompute: none, all or auto on every device type; not with a zero-bubble schedule.
TEST(ValidateJobSpecTest, Recompute) {
  v1::JobSpec spec = Example();
  EXPECT_EQ(Recompute(spec.training()), RecomputeMode::kNone);
  for (const char* device_type : {"any", "cpu", ""}) {
    spec.mutable_parallel()->set_device_type(device_type);
    for (const char* ok : {"", "none", "all", "auto"}) {
      spec.mutable_training()->set_recompute(ok);
      EXPECT_TRUE(ValidateJobSpec(spec).ok()) << device_type << " " << ok;
    }
  }
  spec.mutable_training()->set_recompute("all");
  EXPECT_EQ(Recompute(spec.training()), RecomputeMode::kAll);
  spec.mutable_training()->set_recompute("auto");
  EXPECT_EQ(Recompute(spec.training()), RecomputeMode::kAuto);
  spec.mutable_parallel()->set_device_type("cuda");
  for (const char* ok : {"none", "all", "auto"}) {
    spec.mutable_training()->set_recompute(ok);
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << "cuda " << ok << ": " << ValidateJobSpec(spec);
  }
  spec.mutable_parallel()->set_device_type("cpu");
  spec.mutable_training()->set_recompute("selective");
  ExpectInvalid(ValidateJobSpec(spec),
                {"training.recompute 'selective' is unknown; known: none, all, auto"});
  spec.mutable_training()->set_recompute("all");
  spec.mutable_parallel()->set_schedule("zb-h2");
  ExpectInvalid(ValidateJobSpec(spec),
                {"training.recompute all with parallel.schedule zb-h2 is not supported: a "
                 "recomputing stage replays one micro-batch's forward right before its backward, "
                 "and zb-h2 splits that backward around other micro-batches' work: set recompute: "
                 "none (or schedule: dapple)"});
}

TEST(ValidateJobSpecTest, Planner) {
  v1::JobSpec spec = Example();
  for (const char* planner : {"balanced", "uniform", "dapple", "pipedream"}) {
    spec.mutable_parallel()->set_planner(planner);
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << planner << ": " << ValidateJobSpec(spec);
  }
  spec.mutable_parallel()->set_planner("greedy");
  ExpectInvalid(ValidateJobSpec(spec),
                {"parallel.planner 'greedy' is unknown; available: balanced, uniform, manual, "
                 "dapple, pipedream, pipedream-code, dp"});
  spec.mutable_parallel()->set_planner("manual");
  ExpectInvalid(ValidateJobSpec(spec),
                {"parallel.planner manual needs parallel.stages as a list", "got 2"});
}

TEST(ValidateJobSpecTest, PlannersThatChooseTheDepthTakeMoreDevicesThanLayers) {
  v1::JobSpec spec = Example();  // 4 layers
  spec.mutable_parallel()->set_stages(0);
  spec.mutable_parallel()->set_devices(8);
  for (const char* planner : {"dapple", "pipedream"}) {
    spec.mutable_parallel()->set_planner(planner);
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << planner << ": " << ValidateJobSpec(spec);
  }
  // balanced and uniform make one stage per device with stages auto.
  spec.mutable_parallel()->set_planner("uniform");
  ExpectInvalid(ValidateJobSpec(spec), {"parallel.devices 8 with parallel.stages auto"});
  // An explicit count takes a multiple of it: D = devices / stages replicas of each stage.
  spec.mutable_parallel()->set_planner("dapple");
  spec.mutable_parallel()->set_stages(2);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  spec.mutable_parallel()->set_stages(3);
  ExpectInvalid(ValidateJobSpec(spec), {"parallel.devices 8 is not a multiple of parallel.stages 3",
                                        "set devices to 6 or 9"});
}

TEST(ValidateJobSpecTest, DataParallelIsOneStageOnEveryDevice) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(
      Edit(Edit(Edit(kExample, "planner: balanced", "planner: dp"), "stages: 2 ", "stages: auto"),
           "devices: 2", "devices: 1"),
      "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->parallel().planner(), "dp");
  v1::JobSpec s = *spec;
  s.mutable_parallel()->set_stages(1);
  EXPECT_TRUE(ValidateJobSpec(s).ok()) << ValidateJobSpec(s);
  s.mutable_parallel()->set_stages(0);
  s.mutable_parallel()->set_devices(4);  // P = 1, D = 4
  EXPECT_TRUE(ValidateJobSpec(s).ok()) << ValidateJobSpec(s);
  s.mutable_parallel()->set_stages(2);
  s.mutable_parallel()->set_devices(2);
  ExpectInvalid(ValidateJobSpec(s), {"parallel.stages 2 with parallel.planner dp", "one stage"});
}

TEST(ValidateJobSpecTest, StageListNeedsManualPlanner) {
  absl::StatusOr<v1::JobSpec> spec =
      ParseJobSpec(Edit(kExample, "stages: 2 ", "stages: [[0, 1], [2, 3]]"), "job.yaml");
  ExpectInvalid(spec.status(), {"job.yaml:20:12: ", "parallel.stages is an explicit list",
                                "parallel.planner manual", "got parallel.planner balanced"});
}

TEST(ValidateJobSpecTest, StageCount) {
  v1::JobSpec spec = Example();
  spec.mutable_parallel()->set_stages(-1);
  ExpectInvalid(ValidateJobSpec(spec), {"parallel.stages -1 must be >= 0"});
  spec.mutable_parallel()->set_stages(8);
  spec.mutable_parallel()->set_devices(8);
  ExpectInvalid(ValidateJobSpec(spec),
                {"parallel.stages 8 is more than the 4 layers of the model: each stage needs at "
                 "least one layer: set stages to at most 4"});
  spec.mutable_parallel()->set_stages(0);
  ExpectInvalid(ValidateJobSpec(spec), {"parallel.devices 8 with parallel.stages auto", "8 stages",
                                        "more than the 4 layers"});
  spec.mutable_parallel()->set_stages(4);
  spec.mutable_parallel()->set_devices(4);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  spec = Manual({{0, 0}});
  spec.mutable_model()->mutable_layers()->DeleteSubrange(0, 3);  // only linear 784 -> 10
  spec.mutable_model()->clear_input_shape();
  spec.mutable_model()->add_input_shape(784);
  ASSERT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  spec.mutable_parallel()->set_planner("balanced");
  spec.mutable_parallel()->clear_stage_ranges();
  spec.mutable_parallel()->set_stages(2);
  ExpectInvalid(ValidateJobSpec(spec), {"parallel.stages 2 is more than the 1 layer of the model"});
}

TEST(ValidateJobSpecTest, StageRanges) {
  EXPECT_TRUE(ValidateJobSpec(Manual({{0, 3}})).ok());
  EXPECT_TRUE(ValidateJobSpec(Manual({{0, 0}, {1, 2}, {3, 3}})).ok());
  ExpectInvalid(ValidateJobSpec(Manual({{0, 1}, {3, 2}})),
                {"parallel.stages[1] [3, 2] is empty", "first_layer 3 > last_layer 2"});
  ExpectInvalid(ValidateJobSpec(Manual({{0, 1}, {3, 3}})),
                {"layer 2 is missing", "parallel.stages[1] [3, 3]", "exactly once"});
  ExpectInvalid(ValidateJobSpec(Manual({{1, 3}})),
                {"layer 0 is missing", "parallel.stages[0] [1, 3]"});
  ExpectInvalid(ValidateJobSpec(Manual({{0, 2}, {2, 3}})),
                {"layer 2 is duplicated", "parallel.stages[0] [0, 2]", "parallel.stages[1] [2, 3]",
                 "exactly once"});
  ExpectInvalid(ValidateJobSpec(Manual({{0, 1}, {2, 3}, {0, 0}})),
                {"parallel.stages[2] [0, 0] comes after parallel.stages[1] [2, 3]", "layer order"});
  ExpectInvalid(ValidateJobSpec(Manual({{2, 3}, {0, 1}})), {"layer 0 is missing"});
  ExpectInvalid(ValidateJobSpec(Manual({{0, 1}, {2, 2}})),
                {"layer 3 is missing", "parallel.stages[1] [2, 2]", "last layer 3"});
  ExpectInvalid(ValidateJobSpec(Manual({{0, 1}, {2, 5}})),
                {"parallel.stages[1] [2, 5] goes past the last layer 3 of the model (4 layers): "
                 "end it at layer 3 at most"});
  ExpectInvalid(ValidateJobSpec(Manual({{-1, 1}, {2, 3}})),
                {"parallel.stages[0] [-1, 1]", "must be >= 0"});
  v1::JobSpec spec = Manual({{0, 1}, {2, 3}});
  spec.mutable_parallel()->set_stages(3);
  ExpectInvalid(ValidateJobSpec(spec),
                {"parallel.stages 3 does not match the 2 explicit stage ranges"});
  spec = Manual({{0, 3}});
  spec.mutable_parallel()->set_stages(2);
  ExpectInvalid(ValidateJobSpec(spec),
                {"parallel.stages 2 does not match the 1 explicit stage range"});
  spec = Manual({{0, 1}, {2, 3}});
  spec.mutable_parallel()->set_planner("balanced");
  ExpectInvalid(ValidateJobSpec(spec), {"explicit list", "parallel.planner manual"});
}

TEST(ValidateJobSpecTest, Devices) {
  v1::JobSpec spec = Example();
  spec.mutable_parallel()->set_devices(0);
  ExpectInvalid(ValidateJobSpec(spec), {"parallel.devices 0 must be >= 1"});
  spec.mutable_parallel()->set_devices(4);  // 2 replicas of each of the 2 stages
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  spec.mutable_parallel()->set_devices(1);
  ExpectInvalid(ValidateJobSpec(spec),
                {"parallel.devices 1 is fewer than parallel.stages 2", "set devices to 2"});
  spec.mutable_parallel()->set_devices(3);
  ExpectInvalid(ValidateJobSpec(spec),
                {"parallel.devices 3 is not a multiple of parallel.stages 2",
                 "each stage gets devices / stages replicas", "set devices to 2 or 4"});
  spec = Manual({{0, 1}, {2, 3}});
  spec.mutable_parallel()->set_devices(6);  // 3 replicas of each stage
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  spec.mutable_parallel()->set_devices(5);
  ExpectInvalid(
      ValidateJobSpec(spec),
      {"parallel.devices 5 is not a multiple of the 2 stages of parallel.stages: each stage "
       "gets devices / stages replicas: set devices to 4 or 6"});
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
