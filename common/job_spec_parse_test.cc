// ParseJobSpec and JobSpecFieldError: defaults, syntax and structure errors, value types, and
// where each error points.
#include <limits>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/job_spec.h"
#include "common/job_spec_test_util.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace dapple {
namespace {

using ::dapple::testing::Edit;
using ::dapple::testing::ExpectInvalid;
using ::dapple::testing::ExpectParseError;
using ::dapple::testing::kExample;
using ::dapple::testing::kMinimal;
using ::google::protobuf::util::MessageDifferencer;
using ::testing::HasSubstr;

v1::JobSpec FromText(const std::string& text) {
  v1::JobSpec spec;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &spec)) << text;
  return spec;
}

// ------------------------------------------------------------------------------------ parsing

TEST(ParseJobSpecTest, ExampleParsesToTheExpectedProto) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(kExample, "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const v1::JobSpec expected = FromText(R"pb(
    name: "fmnist-mlp"
    model {
      input_shape: [ 1, 28, 28 ]
      input_type: "float"
      layers { type: "flatten" }
      layers {
        type: "linear"
        linear { out: 1024 }
      }
      layers { type: "relu" }
      layers {
        type: "linear"
        linear { out: 10 }
      }
      loss: "softmax_cross_entropy"
    }
    data {
      dataset: "fashion-mnist"
      path: "/usr/share/datasets/fashion-mnist"
      train_samples: 60000
      eval_samples: 10000
    }
    training {
      global_batch: 256
      micro_batch: 32
      epochs: 3
      optimizer {
        type: "sgd"
        lr: 0.05
        momentum: 0.9
        weight_decay: 0
        beta1: 0.9
        beta2: 0.999
        eps: 1e-8
      }
      seed: 42
      max_steps: 0
    }
    parallel { schedule: "dapple" planner: "balanced" stages: 2 devices: 2 device_type: "any" }
  )pb");
  EXPECT_TRUE(MessageDifferencer::Equals(*spec, expected)) << spec->DebugString();
  EXPECT_EQ(MicroBatches(*spec), 8);
}

TEST(ParseJobSpecTest, RestartSectionFillsItsDefaults) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(
      Edit(kExample, "  seed: 42\n", "  seed: 42\n  restart: {max_restarts: 3}\n"), "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const v1::RestartSpec& r = spec->training().restart();
  EXPECT_EQ(r.max_restarts(), 3);
  EXPECT_EQ(r.backoff_seconds(), 1);
  EXPECT_EQ(r.max_backoff_seconds(), 30);
  EXPECT_TRUE(r.on_rank_error());
  EXPECT_EQ(r.wait_for_workers_seconds(), 60);
  // Without the section: no restarts.
  spec = ParseJobSpec(kExample, "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_FALSE(spec->training().has_restart());
}

TEST(ParseJobSpecTest, FillsDefaults) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(kMinimal, "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const v1::JobSpec expected = FromText(R"pb(
    name: "tiny"
    model {
      input_shape: [ 784 ]
      input_type: "float"
      layers {
        type: "linear"
        linear { out: 10 }
      }
      loss: "softmax_cross_entropy"
    }
    data {
      dataset: "fashion-mnist"
      path: "/usr/share/datasets/fashion-mnist"
      train_samples: 60000
      eval_samples: 10000
    }
    training {
      global_batch: 64
      micro_batch: 64
      epochs: 1
      optimizer {
        type: "sgd"
        lr: 0.1
        momentum: 0
        weight_decay: 0
        beta1: 0.9
        beta2: 0.999
        eps: 1e-8
      }
      seed: 0
      max_steps: 0
    }
    parallel { schedule: "dapple" planner: "balanced" stages: 0 devices: 1 device_type: "any" }
  )pb");
  EXPECT_TRUE(MessageDifferencer::Equals(*spec, expected)) << spec->DebugString();
  EXPECT_EQ(MicroBatches(*spec), 1);
}

TEST(ParseJobSpecTest, AutoStagesKeepsZeroAndTakesDevices) {
  absl::StatusOr<v1::JobSpec> spec =
      ParseJobSpec(Edit(kExample, "stages: 2 ", "stages: auto"), "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->parallel().stages(), 0);
  EXPECT_EQ(spec->parallel().devices(), 2);
  EXPECT_EQ(spec->parallel().planner(), "balanced");
}

TEST(ParseJobSpecTest, AutoOrZeroStagesWithoutDevicesIsOneStageOnOneDevice) {
  for (const char* stages : {"stages: auto ", "stages: 0 "}) {
    SCOPED_TRACE(stages);
    absl::StatusOr<v1::JobSpec> spec =
        ParseJobSpec(Edit(Edit(kExample, "stages: 2 ", stages), "  devices: 2\n", ""), "job.yaml");
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(spec->parallel().stages(), 0);
    EXPECT_EQ(spec->parallel().devices(), 1);
    EXPECT_EQ(spec->parallel().planner(), "balanced");
  }
}

TEST(ParseJobSpecTest, IntegerStagesGiveDevicesByDefault) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(
      Edit(Edit(kExample, "stages: 2 ", "stages: 3 "), "  devices: 2\n", ""), "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->parallel().stages(), 3);
  EXPECT_EQ(spec->parallel().devices(), 3);
}

TEST(ParseJobSpecTest, StageListImpliesManualPlanner) {
  std::string yaml =
      Edit(kExample,
           "  planner: balanced     # balanced | uniform | manual | dapple | pipedream | dp\n", "");
  yaml = Edit(yaml, "stages: 2 ", "stages: [[0, 1], [2, 2], [3, 3]]");
  yaml = Edit(yaml, "  devices: 2\n", "");
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(yaml, "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  v1::ParallelSpec want;
  ASSERT_TRUE(
      google::protobuf::TextFormat::ParseFromString(R"pb(
                                                      schedule: "dapple"
                                                      planner: "manual"
                                                      stages: 3
                                                      stage_ranges { first_layer: 0 last_layer: 1 }
                                                      stage_ranges { first_layer: 2 last_layer: 2 }
                                                      stage_ranges { first_layer: 3 last_layer: 3 }
                                                      devices: 3
                                                      device_type: "any"
                                                    )pb",
                                                    &want));
  EXPECT_TRUE(MessageDifferencer::Equals(spec->parallel(), want)) << spec->DebugString();
  // Block-style ranges read the same.
  absl::StatusOr<v1::JobSpec> block =
      ParseJobSpec(Edit(yaml, "stages: [[0, 1], [2, 2], [3, 3]]",
                        "stages:\n    - [0, 1]\n    - [2, 2]\n    - [3, 3]"),
                   "job.yaml");
  ASSERT_TRUE(block.ok()) << block.status();
  EXPECT_TRUE(MessageDifferencer::Equals(block->parallel(), want)) << block->DebugString();
}

TEST(ParseJobSpecTest, AdamwAndExplicitOptimizerFields) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(
      Edit(kExample, "{type: sgd, lr: 0.05, momentum: 0.9}",
           "{type: adamw, lr: 3e-4, weight_decay: 0.01, beta1: 0.8, beta2: 0.99, eps: 1e-6}"),
      "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const v1::OptimizerSpec& opt = spec->training().optimizer();
  EXPECT_EQ(opt.type(), "adamw");
  EXPECT_EQ(opt.lr(), 3e-4);
  EXPECT_EQ(opt.momentum(), 0);
  EXPECT_EQ(opt.weight_decay(), 0.01);
  EXPECT_EQ(opt.beta1(), 0.8);
  EXPECT_EQ(opt.beta2(), 0.99);
  EXPECT_EQ(opt.eps(), 1e-6);
}

TEST(ParseJobSpecTest, LargeSeedAndNegativeSeed) {
  absl::StatusOr<v1::JobSpec> spec =
      ParseJobSpec(Edit(kExample, "seed: 42", "seed: 18446744073709551615"), "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->training().seed(), std::numeric_limits<uint64_t>::max());
  ExpectParseError(Edit(kExample, "seed: 42", "seed: -1"),
                   "job.yaml:16:9: training.seed must be a non-negative integer, got '-1'");
}

// A number beyond a double's range is quoted as written, not as the inf or 0 it converts to.
TEST(ParseJobSpecTest, ANumberOutsideADoublesRangeIsQuotedAsWritten) {
  ExpectParseError(Edit(kExample, "lr: 0.05", "lr: 1e400"),
                   "job.yaml:15:30: training.optimizer.lr 1e400 is beyond the largest number "
                   "(about 1.8e308): it would be infinite");
  ExpectParseError(Edit(kExample, "lr: 0.05", "lr: -2.5E+999"),
                   "job.yaml:15:30: training.optimizer.lr -2.5E+999 is beyond the largest number "
                   "(about 1.8e308): it would be infinite");
  ExpectParseError(Edit(kExample, "lr: 0.05", "lr: 1e-400"),
                   "job.yaml:15:30: training.optimizer.lr 1e-400 is below the smallest number "
                   "(about 4.9e-324): it would be 0");
  // An explicit zero is zero (and the rule about it speaks).
  ExpectParseError(Edit(kExample, "lr: 0.05", "lr: 0.0e-400"),
                   "job.yaml:15:30: training.optimizer.lr 0 must be > 0 and finite");
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(Edit(kExample, "lr: 0.05", "lr: 1e-310"), "j");
  ASSERT_TRUE(spec.ok()) << spec.status();  // subnormal, but not 0
  EXPECT_GT(spec->training().optimizer().lr(), 0);
}

// --------------------------------------------------------------------- syntax and structure

TEST(ParseJobSpecTest, SyntaxErrorPointsAtTheUnclosedBracket) {
  // Line 5 opens a flow map that is never closed; yaml-cpp only fails on line 7.
  ExpectParseError(Edit(kExample, "    - {type: flatten}", "    - {type: flatten"),
                   "job.yaml:5:7: YAML syntax error: this '{' is never closed (yaml-cpp stopped at "
                   "7:5: illegal block entry)");
  ExpectParseError(Edit(kExample, "input_shape: [1, 28, 28]", "input_shape: [1, 28, 28"),
                   "job.yaml:3:16: YAML syntax error: this '[' is never closed (yaml-cpp stopped "
                   "at 4:9: end of sequence flow not found)");
  // At the end of the text.
  ExpectParseError("name: x\nmodel:\n  input_shape: [1, 28, 28\n",
                   "job.yaml:3:16: YAML syntax error: this '[' is never closed (yaml-cpp stopped "
                   "at 4:1: end of sequence flow not found)");
  // Brackets inside quotes and comments do not count.
  ExpectParseError("name: \"[x\"  # {\nmodel: [1,\n",
                   "job.yaml:2:8: YAML syntax error: this '[' is never closed (yaml-cpp stopped "
                   "at 3:1: end of sequence flow not found)");
}

TEST(ParseJobSpecTest, SyntaxErrorWithYamlCppPosition) {
  // A tab in indentation: yaml-cpp's own position (1-based here).
  ExpectParseError("name: x\n\tmodel: y\n",
                   "job.yaml:2:1: YAML syntax error: illegal tab when looking for indentation");
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec("name: x\nmodel:\n  a: 1\n   b: 2\n", "j.yaml");
  ExpectInvalid(spec.status(), {"j.yaml:4:5: YAML syntax error: illegal map value (a 'key: "
                                "value' where a value goes on: is this line indented deeper "
                                "than the key above it, or does a value hold ': ' and need "
                                "quotes?)"});
  // Found by a fresh user: a key indented under a scalar.
  ExpectParseError("name: x\n  model: y\n",
                   "job.yaml:2:8: YAML syntax error: illegal map value (a 'key: value' where a "
                   "value goes on: is this line indented deeper than the key above it, or does a "
                   "value hold ': ' and need quotes?)");
}

// Found by a fresh user: `{<<: *blk, heads: 4}` read "missing required field
// 'model.layers[2].type'" (yaml-cpp merges nothing); the merge key is named where it stands.
// Anchors and aliases of whole values still work.
TEST(ParseJobSpecTest, AYamlMergeKeyIsRefusedWhereItStands) {
  ExpectParseError("name: x\nmodel:\n  layers:\n    - &blk {type: relu}\n    - {<<: *blk}\n",
                   "job.yaml:5:8: YAML merge keys ('<<') are not supported: write the fields out "
                   "(an anchor and alias, '&name' and '*name', may stand for a whole value)");
  absl::StatusOr<v1::JobSpec> aliased =
      ParseJobSpec(Edit(kExample, "    - {type: linear, out: 1024}\n    - {type: relu}\n",
                        "    - &wide {type: linear, out: 1024}\n    - {type: relu}\n    - *wide\n"
                        "    - {type: relu}\n"),
                   "job.yaml");
  ASSERT_TRUE(aliased.ok()) << aliased.status();
  EXPECT_EQ(aliased->model().layers_size(), 6);
  EXPECT_EQ(aliased->model().layers(3).linear().out(), 1024);
}

// Found by a fresh user: a tab indenting a nested field read "illegal map value" at the line's
// end, and an unclosed quote "missing required field 'model'".
TEST(ParseJobSpecTest, ATabIndentAndAnUnclosedQuoteAreNamed) {
  ExpectParseError(Edit(kExample, "  global_batch: 256", "\tglobal_batch: 256"),
                   "job.yaml:12:1: YAML syntax error: this line is indented with a tab; YAML "
                   "indents with spaces only (yaml-cpp stopped at 12:14: illegal map value)");
  ExpectParseError(Edit(kExample, "name: fmnist-mlp", "name: \"fmnist-mlp"),
                   "job.yaml:1:7: this \" is not closed on its line: the value runs on to the end "
                   "of the text (close the quote; every value of a job spec fits on one line)");
  // YAML allows a quoted value over lines; in a job spec it is a quote closed too late.
  ExpectParseError(Edit(kExample, "name: fmnist-mlp", "name: 'fmnist\n  -mlp'"),
                   "job.yaml:1:7: this ' is not closed on its line: the value runs on to line 2 "
                   "(close the quote; every value of a job spec fits on one line)");
  // Quotes closed on their line, escapes and doubled single quotes are fine.
  EXPECT_TRUE(ParseJobSpec(Edit(Edit(kExample, "name: fmnist-mlp", "name: 'fmnist-mlp'"),
                                "{type: relu}", "{type: \"re\\\"lu\"}"),
                           "job.yaml")
                  .status()
                  .message()
                  .find("not closed") == absl::string_view::npos);
}

TEST(ParseJobSpecTest, PriorityParsedValidatedAndWritten) {
  absl::StatusOr<v1::JobSpec> spec =
      ParseJobSpec(Edit(kExample, "training:", "priority: 7\ntraining:"), "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->priority(), 7);
  absl::StatusOr<v1::JobSpec> again = ParseJobSpec(JobSpecToYaml(*spec), "again.yaml");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->priority(), 7);
  absl::StatusOr<v1::JobSpec> high =
      ParseJobSpec(Edit(kExample, "training:", "priority: 1001\ntraining:"), "job.yaml");
  ASSERT_FALSE(high.ok());
  EXPECT_THAT(std::string(high.status().message()),
              HasSubstr("priority 1001 must be in [-1000, 1000]"));
}

TEST(ParseJobSpecTest, UnknownFieldNamesLineKnownFieldsAndSuggestion) {
  ExpectParseError(Edit(kExample, "training:", "trainig:"),
                   "job.yaml:11:1: unknown field 'trainig' in the job spec; known: name, model, "
                   "data, training, parallel, sample, priority; did you mean 'training'?");
  ExpectParseError(Edit(kExample, "lr: 0.05", "lrate: 0.05"),
                   "job.yaml:15:26: unknown field 'lrate' in training.optimizer; known: type, lr, "
                   "momentum, weight_decay, beta1, beta2, eps");
  ExpectParseError(Edit(kExample, "{type: relu}", "{type: relu, outs: 3}"),
                   "job.yaml:7:20: unknown field 'outs' in model.layers[2] (relu); known: type");
  ExpectParseError(Edit(kExample, "{type: linear, out: 10}", "{type: linear, outs: 10}"),
                   "job.yaml:8:22: unknown field 'outs' in model.layers[3] (linear); known: type, "
                   "out; did you mean 'out'?");
  ExpectParseError(Edit(kExample, "  devices: 2", "  device: 2"),
                   "job.yaml:22:3: unknown field 'device' in parallel; known: schedule, planner, "
                   "stages, devices, device_type, emulation, pipesgd, pipedream, interleave; did "
                   "you mean 'devices'?");
}

// A field of training written under parallel (or the other way round) names where it goes.
TEST(ParseJobSpecTest, AFieldOfAnotherSectionSaysWhereItGoes) {
  ExpectParseError(
      Edit(kExample, "  devices: 2", "  devices: 2\n  recompute: all"),
      "job.yaml:23:3: unknown field 'recompute' in parallel; known: schedule, planner, stages, "
      "devices, device_type, emulation, pipesgd, pipedream, interleave; 'recompute' is a field of "
      "training: "
      "move it there (training.recompute)");
  ExpectParseError(Edit(kExample, "  epochs: 3\n", "  epochs: 3\n  schedule: gpipe\n"),
                   "job.yaml:15:3: unknown field 'schedule' in training; known: global_batch, "
                   "micro_batch, epochs, optimizer, seed, max_steps, checkpoint_every_steps, "
                   "max_grad_norm, lr_schedule, eval_every_steps, precision, recompute, "
                   "max_consecutive_skipped_steps, restart, checkpoint_every_minutes; "
                   "'schedule' is a field of parallel: move it there (parallel.schedule)");
}

TEST(ParseJobSpecTest, DuplicateField) {
  ExpectParseError(Edit(kExample, "  epochs: 3\n", "  epochs: 3\n  epochs: 4\n"),
                   "job.yaml:15:3: duplicate field 'epochs' in training (first at line 14)");
}

// A field naming one of its values refuses an explicit "" (it would read as unset and silently
// take the default), at the value's line and column.
TEST(ParseJobSpecTest, AnEmptyStringIsNotAValueAndTheValuesAreNamed) {
  struct Case {
    std::string from, to, where, values;  // where: "line:column: field"
  };
  const Case cases[] = {
      {"schedule: dapple", "schedule: \"\"", "19:13: parallel.schedule",
       "gpipe, dapple, pipedream, pipesgd, zb-h1, zb-h2, interleaved, auto"},
      {"planner: balanced", "planner: ''", "20:12: parallel.planner",
       "balanced, uniform, manual, dapple, pipedream, pipedream-code, dp"},
      {"  seed: 42\n", "  seed: 42\n  recompute: \"\"\n", "17:14: training.recompute",
       "none, all, auto"},
      {"  seed: 42\n", "  seed: 42\n  precision: ''\n", "17:14: training.precision", "fp32, bf16"},
      {"  devices: 2\n", "  devices: 2\n  device_type: ''\n", "23:16: parallel.device_type",
       "any, cpu, cuda, emulated"},
      {"{type: sgd,", "{type: '',", "15:21: training.optimizer.type", "sgd, adamw"},
      {"dataset: fashion-mnist", "dataset: ''", "10:17: data.dataset", "fashion-mnist, text"},
  };
  for (const Case& c : cases) {
    ExpectParseError(Edit(kExample, c.from, c.to),
                     "job.yaml:" + c.where + " is an empty string: give one of " + c.values +
                         ", or leave the key out for its default");
  }
}

TEST(ParseJobSpecTest, WrongTypesNameFieldValueAndExpectedType) {
  ExpectParseError(Edit(kExample, "global_batch: 256", "global_batch: abc"),
                   "job.yaml:12:17: training.global_batch must be an integer, got 'abc'");
  ExpectParseError(Edit(kExample, "global_batch: 256", "global_batch: \"256\""),
                   "job.yaml:12:17: training.global_batch must be an integer, got the string "
                   "'256'");
  ExpectParseError(Edit(kExample, "global_batch: 256", "global_batch: 25.6"),
                   "job.yaml:12:17: training.global_batch must be an integer, got '25.6'");
  ExpectParseError(Edit(kExample, "lr: 0.05", "lr: fast"),
                   "job.yaml:15:30: training.optimizer.lr must be a number, got 'fast'");
  ExpectParseError(Edit(kExample, "micro_batch: 32", "micro_batch:"),
                   "job.yaml:13:3: training.micro_batch must be an integer, got an empty value");
  ExpectParseError(Edit(kExample, "input_shape: [1, 28, 28]", "input_shape: 784"),
                   "job.yaml:3:16: model.input_shape must be a list of integers like [1, 28, 28], "
                   "got '784'");
  ExpectParseError(Edit(kExample, "input_shape: [1, 28, 28]", "input_shape: [1, 28, x]"),
                   "job.yaml:3:24: model.input_shape[2] must be an integer, got 'x'");
  ExpectParseError(Edit(kExample, "    - {type: relu}", "    - relu"),
                   "job.yaml:7:7: model.layers[2] must be a map like {type: linear, out: 10}, got "
                   "'relu'");
  ExpectParseError(Edit(kExample, "{type: linear, out: 1024}", "{type: linear, out: big}"),
                   "job.yaml:6:27: model.layers[1].out must be an integer, got 'big'");
  ExpectParseError(Edit(kExample, "name: fmnist-mlp", "name: [a, b]"),
                   "job.yaml:1:7: name must be a string, got a list");
  ExpectParseError(Edit(kExample, "stages: 2 ", "stages: many"),
                   "job.yaml:21:11: parallel.stages must be auto, an integer or a list of "
                   "[first_layer, last_layer] ranges, got 'many'");
  ExpectParseError(Edit(kExample, "stages: 2 ", "stages: [[0, 1], [2]]"),
                   "job.yaml:21:20: parallel.stages[1] must be a [first_layer, last_layer] pair, "
                   "got a list of 1 value");
  ExpectParseError(Edit(kExample, "stages: 2 ", "stages: [[0, 1, 2], [3, 3]]"),
                   "job.yaml:21:12: parallel.stages[0] must be a [first_layer, last_layer] pair, "
                   "got a list of 3 values");
  ExpectParseError(Edit(kExample, "stages: 2 ", "stages: [[0, 1], 3]"),
                   "job.yaml:21:20: parallel.stages[1] must be a [first_layer, last_layer] pair, "
                   "got '3'");
  ExpectParseError(Edit(kExample, "devices: 2", "devices: 2.5"),
                   "job.yaml:22:12: parallel.devices must be an integer, got '2.5'");
  ExpectParseError(Edit(kExample, "devices: 2", "devices: 9999999999"),
                   "job.yaml:22:12: parallel.devices 9999999999 is more than the maximum 4096");
  ExpectParseError(
      Edit(kExample, "data: {dataset: fashion-mnist, path: /usr/share/datasets/fashion-mnist}",
           "data: fashion-mnist"),
      "job.yaml:10:7: data must be a map like {dataset: fashion-mnist, path: /data}, "
      "got 'fashion-mnist'");
}

TEST(ParseJobSpecTest, MissingRequiredFields) {
  ExpectParseError(Edit(kExample, "name: fmnist-mlp\n", ""),
                   "job.yaml: missing required field 'name'");
  ExpectParseError(Edit(kExample, "  input_shape: [1, 28, 28]\n", ""),
                   "job.yaml:3:3: missing required field 'model.input_shape'");
  // Present but empty is not missing.
  ExpectParseError(Edit(kExample, "input_shape: [1, 28, 28]", "input_shape: []"),
                   "job.yaml:3:16: model.input_shape is empty: a model's input needs at least "
                   "one dimension, like [1, 28, 28]");
  ExpectParseError(Edit(kExample,
                        "  layers:\n    - {type: flatten}\n    - {type: linear, out: 1024}\n"
                        "    - {type: relu}\n    - {type: linear, out: 10}\n",
                        "  layers: []\n"),
                   "job.yaml:4:11: model.layers is empty: a model needs at least one layer");
  ExpectParseError(Edit(kExample,
                        "  layers:\n    - {type: flatten}\n    - {type: linear, out: 1024}\n"
                        "    - {type: relu}\n    - {type: linear, out: 10}\n",
                        ""),
                   "job.yaml:3:3: missing required field 'model.layers'");
  ExpectParseError(Edit(kExample, "  global_batch: 256\n", ""),
                   "job.yaml:12:3: missing required field 'training.global_batch'");
  ExpectParseError(Edit(kExample, "lr: 0.05, ", ""),
                   "job.yaml:15:14: missing required field 'training.optimizer.lr'");
  ExpectParseError(Edit(kExample, "{type: relu}", "{out: 3}"),
                   "job.yaml:7:7: missing required field 'model.layers[2].type'");
  ExpectParseError("name: x\nmodel: {input_shape: [784], layers: [{type: linear, out: 10}]}\n",
                   "job.yaml: missing required field 'training'");
}

TEST(ParseJobSpecTest, EmptyAndNonMapDocuments) {
  ExpectParseError("",
                   "job.yaml: the job spec is empty; expected a map with name, model, data, "
                   "training and parallel");
  ExpectParseError("# only a comment\n",
                   "job.yaml: the job spec is empty; expected a map with name, model, data, "
                   "training and parallel");
  ExpectParseError("- name: x\n",
                   "job.yaml:1:1: the job spec must be a map of fields (name, model, data, "
                   "training, parallel), got a list");
  ExpectParseError("just text",
                   "job.yaml:1:1: the job spec must be a map of fields (name, model, "
                   "data, training, parallel), got 'just text'");
}

TEST(ParseJobSpecTest, OnlyOneDocument) {
  ExpectParseError(std::string(kExample) + "---\nname: second\n",
                   "job.yaml:24:1: the job spec must be one YAML document, found 2 (separated by "
                   "---)");
}

TEST(ParseJobSpecTest, EmptySectionsTakeDefaultsButRequiredFieldsAreStillMissing) {
  absl::StatusOr<v1::JobSpec> spec =
      ParseJobSpec(std::string(kMinimal) + "data:\n  # path: /somewhere\nparallel:\n", "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->data().path(), "/usr/share/datasets/fashion-mnist");
  EXPECT_EQ(spec->parallel().schedule(), "dapple");
  ExpectParseError(Edit(kMinimal, "  optimizer: {lr: 0.1}\n", "  optimizer:\n"),
                   "job.yaml:8:3: missing required field 'training.optimizer.lr'");
}

TEST(ParseJobSpecTest, EmptySourceNameIsReplaced) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec("- 1\n", "");
  ExpectInvalid(spec.status(), {"<spec>:1:1: "});
}

TEST(ParseJobSpecTest, ValidationErrorsPointAtTheField) {
  ExpectParseError(Edit(kExample, "micro_batch: 32", "micro_batch: 48"),
                   "job.yaml:13:16: training.global_batch 256 is not divisible by "
                   "training.micro_batch 48: use a micro_batch that divides 256 (1, 2, 4, 8, 16, "
                   "32, 64, 128, 256)");
  ExpectParseError(
      Edit(kExample, "{type: relu}", "{type: conv9}"),
      "job.yaml:7:14: model.layers[2]: unknown layer type 'conv9'; known: flatten, "
      "linear, relu, gelu, dropout, embedding, layernorm, transformer_block, "
      "lm_head, conv2d, maxpool2d, avgpool2d, global_avgpool, batchnorm2d, residual_block");
  ExpectParseError(Edit(kExample, "{type: linear, out: 1024}", "{type: linear, out: 0}"),
                   "job.yaml:6:27: model.layers[1].out 0 must be > 0");
  ExpectParseError(Edit(kExample, "stages: 2 ", "stages: 8 "),
                   "job.yaml:21:11: parallel.stages 8 is more than the 4 layers of the model: "
                   "each stage needs at least one layer: set stages to at most 4");
  ExpectParseError(Edit(Edit(kExample, "planner: balanced", "planner: manual"), "stages: 2 ",
                        "stages: [[0, 1], [3, 3]]"),
                   "job.yaml:21:20: layer 2 is missing: it is in no stage (before "
                   "parallel.stages[1] [3, 3] and after parallel.stages[0] [0, 1]); stages must "
                   "cover every layer exactly once");
  ExpectParseError(
      Edit(kExample, "  epochs: 3", "  epochs: 3\n  max_consecutive_skipped_steps: -2"),
      "job.yaml:15:34: training.max_consecutive_skipped_steps -2 must be >= 0 (0 = "
      "the first step with a non-finite loss or gradient fails the job)");
  ExpectParseError(Edit(kExample, "  loss: softmax_cross_entropy\n", "  loss: mse\n"),
                   "job.yaml:9:9: model.loss 'mse' is not supported; supported: "
                   "softmax_cross_entropy");
}

TEST(ParseJobSpecTest, NothingThrowsOnOddInput) {
  const char* inputs[] = {
      "name: x\nmodel: {input_shape: [784], layers: [{type: linear, out: 10}]}\n"
      "training: {global_batch: 1, optimizer: {lr: 1}}\n? [a, b]\n: c\n",
      "name: &a x\nmodel: *a\n",
      "name: x\nmodel: !!binary aGVsbG8=\n",
      "{{{{{{{{",
      "name: x\n---\nname: y\n",
      "name: \"\\xZZ\"\n",
      "\xff\xfe\x00",
      "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
      "- - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - -"
      " - - - - - - - - - - - - - - - - - - - - - x",
      "a: &x [*x, *x]\nb: *x\n",
      "name: |\n  \xff\n",
  };
  for (const char* input : inputs) {
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(input, "odd.yaml");
    ExpectInvalid(spec.status(), {"odd.yaml"});
  }
}

// schedule pipedream: stages may have replicas (1F1B-RR: whole micro-batches round-robin), at
// most M = global_batch / micro_batch per stage where the spec fixes them (devices / stages of
// balanced, uniform and manual); not with planner dp; an optional parallel.pipedream section
// {vertical_sync}; the section under another schedule is refused.
TEST(ParseJobSpecTest, PipeDreamSection) {
  const std::string text = Edit(kExample, "  schedule: dapple      # gpipe | dapple",
                                "  schedule: pipedream\n  pipedream: {vertical_sync: true}");
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(text, "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->parallel().pipedream().vertical_sync());
  // Round trip through the emitted YAML.
  absl::StatusOr<v1::JobSpec> again = ParseJobSpec(JobSpecToYaml(*spec), "again.yaml");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->parallel().pipedream().vertical_sync());
  const std::string bad = Edit(kExample, "  schedule: dapple      # gpipe | dapple",
                               "  schedule: pipedream\n  pipedream: {vertical_sync: maybe}");
  ExpectInvalid(
      ParseJobSpec(bad, "job.yaml").status(),
      {"job.yaml:", "parallel.pipedream.vertical_sync must be true or false, got 'maybe'"});
}

// Booleans are YAML's plain true and false: a quoted "true" is a string, a list or a map is not
// a boolean either; each is refused naming the field, what it got and where.
TEST(ParseJobSpecTest, BooleansArePlainTrueOrFalse) {
  const auto with = [](const std::string& value) {
    return Edit(kExample, "  schedule: dapple      # gpipe | dapple",
                "  schedule: pipedream\n  pipedream: {vertical_sync: " + value + "}");
  };
  for (const char* value : {"true", "false"}) {
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(with(value), "job.yaml");
    ASSERT_TRUE(spec.ok()) << value << ": " << spec.status();
    EXPECT_EQ(spec->parallel().pipedream().vertical_sync(), std::string(value) == "true");
  }
  ExpectParseError(with("[true]"),
                   "job.yaml:20:30: parallel.pipedream.vertical_sync must be true or false, got a "
                   "list");
  ExpectParseError(with("{on: true}"),
                   "job.yaml:20:30: parallel.pipedream.vertical_sync must be true or false, got a "
                   "map");
  ExpectParseError(
      with("\"true\""),
      "job.yaml:20:30: parallel.pipedream.vertical_sync must be true or false, got the "
      "string 'true'");
  ExpectParseError(
      with("'false'"),
      "job.yaml:20:30: parallel.pipedream.vertical_sync must be true or false, got the "
      "string 'false'");
  ExpectParseError(with("yes"),
                   "job.yaml:20:30: parallel.pipedream.vertical_sync must be true or false, got "
                   "'yes'");
  ExpectParseError(with(""),
                   "job.yaml:20:15: parallel.pipedream.vertical_sync must be true or false, got an "
                   "empty value");
}

// Numbers are plain scalars too: a quoted number is a string, for integers, unsigned integers
// and floating-point fields alike (nothing in examples/ or tests/ quotes one).
TEST(ParseJobSpecTest, QuotedNumbersAreStrings) {
  ExpectParseError(Edit(kExample, "lr: 0.05", "lr: \"0.1\""),
                   "job.yaml:15:30: training.optimizer.lr must be a number, got the string '0.1'");
  ExpectParseError(Edit(kExample, "momentum: 0.9", "momentum: '0.9'"),
                   "job.yaml:15:46: training.optimizer.momentum must be a number, got the string "
                   "'0.9'");
  ExpectParseError(Edit(kExample, "seed: 42", "seed: \"42\""),
                   "job.yaml:16:9: training.seed must be a non-negative integer, got the string "
                   "'42'");
  ExpectParseError(Edit(kExample, "  devices: 2", "  devices: '2'"),
                   "job.yaml:22:12: parallel.devices must be an integer, got the string '2'");
}

// Refusals found after parsing (the coordinator's emulation profile check) point into the text
// like the parser's own.
TEST(JobSpecFieldErrorTest, PointsAtTheFieldOrItsClosestParent) {
  absl::Status s = JobSpecFieldError(kExample, "job.yaml", "training.micro_batch", "too big");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "job.yaml:13:16: too big");
  // Inside a flow map.
  EXPECT_EQ(JobSpecFieldError(kExample, "job.yaml", "training.optimizer.lr", "x").message(),
            "job.yaml:15:30: x");
  // Not in the text: its closest parent that is (parallel's first key).
  EXPECT_EQ(JobSpecFieldError(kExample, "job.yaml", "parallel.emulation.profile", "x").message(),
            "job.yaml:19:3: x");
  // An invalid spec still has positions; a text that does not parse has none.
  EXPECT_EQ(JobSpecFieldError(Edit(kExample, "micro_batch: 32", "micro_batch: 48"), "job.yaml",
                              "training.micro_batch", "x")
                .message(),
            "job.yaml:13:16: x");
  EXPECT_EQ(JobSpecFieldError("a: [", "job.yaml", "training", "x").message(), "job.yaml: x");
  EXPECT_EQ(JobSpecFieldError(kExample, "", "nothing", "x\ny").message(), "<spec>: x\\x0ay");
}

// schedule pipesgd: one stage (stages 1, or planner dp with stages auto), devices >= 2, and a
// parallel.pipesgd section with defaults warmup_steps 2 and compression none.
TEST(ParseJobSpecTest, PipeSgdSectionAndDefaults) {
  const std::string dp =
      Edit(kExample, "  schedule: dapple      # gpipe | dapple\n  planner: balanced",
           "  schedule: pipesgd\n  planner: dp");
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(Edit(dp, "  stages: 2 ", "  stages: auto "), "j");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->parallel().schedule(), "pipesgd");
  ASSERT_TRUE(spec->parallel().has_pipesgd());
  EXPECT_EQ(spec->parallel().pipesgd().warmup_steps(), 2);
  EXPECT_EQ(spec->parallel().pipesgd().compression(), "none");

  spec = ParseJobSpec(Edit(Edit(dp, "  stages: 2 ", "  stages: 1 "), "  devices: 2\n",
                           "  devices: 2\n  pipesgd: {warmup_steps: 0, compression: int8}\n"),
                      "j");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->parallel().pipesgd().warmup_steps(), 0);
  EXPECT_EQ(spec->parallel().pipesgd().compression(), "int8");
  ExpectInvalid(ParseJobSpec(dp, "j").status(),
                {"parallel.schedule pipesgd is data parallelism over one stage, got "
                 "parallel.stages 2 with parallel.planner dp: set stages to 1 (or auto with "
                 "planner dp)"});
  // Round trip of the section.
  ASSERT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
  EXPECT_THAT(JobSpecToYaml(*spec), HasSubstr("  pipesgd: {warmup_steps: 0, compression: int8}\n"));
  absl::StatusOr<v1::JobSpec> again = ParseJobSpec(JobSpecToYaml(*spec), "again");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(MessageDifferencer::Equals(*again, *spec));

  // A pipesgd section under another schedule names it.
  spec = ParseJobSpec(
      Edit(kExample, "  devices: 2\n", "  devices: 2\n  pipesgd: {warmup_steps: 1}\n"), "j");
  ExpectInvalid(spec.status(), {"parallel.pipesgd applies only to parallel.schedule pipesgd, got "
                                "parallel.schedule dapple"});
  ExpectInvalid(
      ParseJobSpec(Edit(dp, "  devices: 2\n", "  devices: 2\n  pipesgd: {warmup: 1}\n"), "j")
          .status(),
      {"parallel.pipesgd", "warmup"});
}

TEST(ParseJobSpecTest, DeviceTypeDefaultsToAny) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(kExample, "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->parallel().device_type(), "any");
  spec = ParseJobSpec(Edit(kExample, "devices: 2", "devices: 2\n  device_type: cuda"), "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->parallel().device_type(), "cuda");
  spec = ParseJobSpec(Edit(kExample, "devices: 2", "devices: 2\n  device_type: tpu"), "job.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()),
              HasSubstr("parallel.device_type 'tpu' is unknown; known: any, cpu, cuda"));
}

// ------------------------------------------------------------------------------ integer bounds

TEST(BoundsTest, IntegersBeyondTheFieldTypeAreErrorsNotWraps) {
  // int32 fields with a rule: the rule's bound, not the type's range.
  ExpectParseError(Edit(kExample, "stages: 2 ", "stages: 1099511627776 "),
                   "job.yaml:21:11: parallel.stages 1099511627776 is more than the maximum 4096");
  ExpectParseError(Edit(kExample, "devices: 2", "devices: 1099511627776"),
                   "job.yaml:22:12: parallel.devices 1099511627776 is more than the maximum 4096");
  ExpectParseError(Edit(kExample, "devices: 2", "devices: -4294967296"),
                   "job.yaml:22:12: parallel.devices -4294967296 is less than the minimum 1");
  ExpectParseError(Edit(kExample, "name: fmnist-mlp", "name: fmnist-mlp\npriority: 4294967296"),
                   "job.yaml:2:11: priority 4294967296 is more than the maximum 1000");
  // Layer indices (their bound is the model's length, checked by the rules): the type's range.
  ExpectParseError(Edit(Edit(kExample, "planner: balanced", "planner: manual"), "stages: 2 ",
                        "stages: [[0, 1], [2, 1099511627776]] "),
                   "job.yaml:21:24: parallel.stages[1][1] must be an integer in [-2147483648, "
                   "2147483647], got 1099511627776");
  ExpectParseError(Edit(Edit(kExample, "planner: balanced", "planner: manual"), "stages: 2 ",
                        "stages: [[-4294967296, 1], [2, 3]] "),
                   "job.yaml:21:13: parallel.stages[0][0] must be an integer in [-2147483648, "
                   "2147483647], got -4294967296");
  // int64 fields given more than int64 holds: named as out of range, not as "not an integer".
  ExpectParseError(Edit(kExample, "epochs: 3", "epochs: 99999999999999999999"),
                   "job.yaml:14:11: training.epochs must be an integer in [-9223372036854775808, "
                   "9223372036854775807], got 99999999999999999999");
  ExpectParseError(Edit(kExample, "global_batch: 256", "global_batch: -99999999999999999999"),
                   "job.yaml:12:17: training.global_batch must be an integer in "
                   "[-9223372036854775808, 9223372036854775807], got -99999999999999999999");
  ExpectParseError(Edit(kExample, "{type: linear, out: 1024}", "{type: linear, out: 1e99}"),
                   "job.yaml:6:27: model.layers[1].out must be an integer, got '1e99'");
  ExpectParseError(Edit(kExample, "seed: 42", "seed: 18446744073709551616"),
                   "job.yaml:16:9: training.seed must be an integer in [0, 18446744073709551615], "
                   "got 18446744073709551616");
}

// ------------------------------------------------------------------------ keys that don't apply

TEST(InapplicableKeysTest, OutOnlyForLinearAndRequiredThere) {
  ExpectParseError(Edit(kExample, "    - {type: relu}", "    - {type: relu, out: 5}"),
                   "job.yaml:7:20: model.layers[2].out applies only to linear layers, not relu");
  ExpectParseError(Edit(kExample, "    - {type: flatten}", "    - {type: flatten, out: 0}"),
                   "job.yaml:5:23: model.layers[0].out applies only to linear layers, not flatten");
  ExpectParseError(Edit(kExample, "    - {type: relu}", "    - {out: 7, type: gelu}"),
                   "job.yaml:7:8: model.layers[2].out applies only to linear layers, not gelu");
  ExpectParseError(Edit(kExample, "{type: linear, out: 1024}", "{type: linear}"),
                   "job.yaml:6:7: model.layers[1].out is required for linear layers, e.g. "
                   "{type: linear, out: 10}");
  // An explicit 0 is a value, and a wrong one.
  ExpectParseError(Edit(kExample, "{type: linear, out: 1024}", "{type: linear, out: 0}"),
                   "job.yaml:6:27: model.layers[1].out 0 must be > 0");
}

TEST(InapplicableKeysTest, OptimizerKeysOfTheOtherType) {
  ExpectParseError(Edit(kExample, "{type: sgd, lr: 0.05, momentum: 0.9}",
                        "{type: adamw, lr: 0.05, momentum: 0.9}"),
                   "job.yaml:15:38: training.optimizer.momentum applies only to sgd, not adamw");
  for (const char* key : {"beta1", "beta2", "eps"}) {
    SCOPED_TRACE(key);
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(
        Edit(kExample, "momentum: 0.9}", std::string("momentum: 0.9, ") + key + ": 0.9}"),
        "job.yaml");
    ExpectInvalid(spec.status(), {"job.yaml:15:51: training.optimizer." + std::string(key) +
                                  " applies only to adamw, not sgd"});
  }
  // The default type is sgd.
  ExpectParseError(Edit(kExample, "{type: sgd, lr: 0.05, momentum: 0.9}", "{lr: 0.05, beta1: 0.9}"),
                   "job.yaml:15:25: training.optimizer.beta1 applies only to adamw, not sgd");
  // weight_decay applies to both.
  EXPECT_TRUE(ParseJobSpec(Edit(kExample, "{type: sgd, lr: 0.05, momentum: 0.9}",
                                "{type: adamw, lr: 0.05, weight_decay: 0.1, eps: 1e-6}"),
                           "job.yaml")
                  .ok());
  // An unknown type is reported as unknown, not as keys that do not apply.
  absl::StatusOr<v1::JobSpec> adam = ParseJobSpec(
      Edit(kExample, "{type: sgd, lr: 0.05, momentum: 0.9}", "{type: adam, lr: 0.05, beta1: 0.9}"),
      "job.yaml");
  ExpectInvalid(adam.status(), {"training.optimizer.type 'adam' is unknown"});
}

// ---------------------------------------------------------------------------------- nesting

TEST(NestingTest, DeepNestingIsRefusedBeforeYamlCpp) {
  ExpectParseError(std::string(100000, '['),
                   "job.yaml:1:64: the job spec is nested more than 64 levels deep here (a "
                   "valid job spec needs at most 4); refused before parsing");
  ExpectParseError("name: x\nmodel: " + std::string(100000, '{'),
                   "job.yaml:2:71: the job spec is nested more than 64 levels deep here (a "
                   "valid job spec needs at most 4); refused before parsing");
  std::string dashes;
  for (int i = 0; i < 100000; ++i) dashes += "- ";
  ExpectParseError(dashes + "x\n",
                   "job.yaml:1:129: the job spec is nested more than 64 levels deep here (a "
                   "valid job spec needs at most 4); refused before parsing");
  std::string maps;  // k: / k: / ... one more space of indentation each
  for (int i = 0; i < 100; ++i) maps += std::string(i, ' ') + "k:\n";
  ExpectParseError(maps,
                   "job.yaml:65:65: the job spec is nested more than 64 levels deep here (a "
                   "valid job spec needs at most 4); refused before parsing");
  // Flow brackets spread over lines count the same.
  std::string lines;
  for (int i = 0; i < 100; ++i) lines += "[\n";
  ExpectParseError("model: " + lines,
                   "job.yaml:64:1: the job spec is nested more than 64 levels deep here (a valid "
                   "job spec needs at most 4); refused before parsing");
}

TEST(NestingTest, BracketsInScalarsAndCommentsAreNotNesting) {
  const std::string brackets(200, '[');
  // Quoted, plain and block scalars, and comments: each reaches validation.
  ExpectInvalid(
      ParseJobSpec(Edit(kExample, "name: fmnist-mlp", "name: \"" + brackets + "\""), "job.yaml")
          .status(),
      {"job.yaml:1:7: name '[[[", "has the character '[' at position 0"});
  ExpectInvalid(
      ParseJobSpec(Edit(kExample, "name: fmnist-mlp", "name: 'it''s " + brackets + "'"), "job.yaml")
          .status(),
      {"has the character ''' at position 2"});
  ExpectInvalid(
      ParseJobSpec(Edit(kExample, "name: fmnist-mlp", "name: a" + brackets), "job.yaml").status(),
      {"has the character '[' at position 1"});
  ExpectInvalid(ParseJobSpec(Edit(kExample, "name: fmnist-mlp", "name: |\n  " + brackets + "\n  x"),
                             "job.yaml")
                    .status(),
                {"has the character '[' at position 0"});
  absl::StatusOr<v1::JobSpec> commented = ParseJobSpec(
      Edit(kExample, "name: fmnist-mlp", "name: fmnist-mlp  # " + brackets), "job.yaml");
  EXPECT_TRUE(commented.ok()) << commented.status();
  // Nesting within the limit goes on to yaml-cpp and the usual messages.
  ExpectInvalid(
      ParseJobSpec("name: " + std::string(30, '[') + std::string(30, ']'), "job.yaml").status(),
      {"job.yaml:1:7: name must be a string, got a list"});
}

// The coordinator's own limits, whatever client sent the text (issue 16, "Hostile input").
TEST(LimitsTest, SpecBytesAreCheckedBeforeParsing) {
  std::string big = kExample;
  big.append(kMaxJobSpecBytes + 9 - big.size(), '#');
  ExpectInvalid(ParseJobSpec(big, "big.yaml").status(),
                {"big.yaml is 1048585 bytes; a job spec may be at most 1048576 bytes (1 MiB)"});
  // A text of binary garbage past the limit gets the same answer, not a parser error.
  ExpectInvalid(ParseJobSpec(std::string(kMaxJobSpecBytes + 1, '\x01'), "").status(),
                {"<spec> is 1048577 bytes"});
}

TEST(LimitsTest, ModelLayersAreBounded) {
  std::string layers;
  // 4094 relus for the flatten, with the example's other 3 layers: 4097.
  for (int i = 0; i < kMaxModelLayers - 2; ++i) layers += "    - {type: relu}\n";
  const std::string yaml = Edit(kExample, "    - {type: flatten}\n", layers);
  ASSERT_LE(yaml.size(), static_cast<size_t>(kMaxJobSpecBytes));
  ExpectInvalid(ParseJobSpec(yaml, "job.yaml").status(),
                {"job.yaml:5:5: model.layers has 4097 layers; a model may have at most 4096"});
}

// Restart settings without restarts would do nothing: refused where they are.
TEST(RestartTest, SettingsWithoutRestartsAreRefused) {
  ExpectInvalid(
      ParseJobSpec(Edit(kExample, "  seed: 42\n", "  seed: 42\n  restart: {backoff_seconds: 2}\n"),
                   "job.yaml")
          .status(),
      {"job.yaml:17:",
       "training.restart.backoff_seconds has no effect while training.restart.max_restarts "
       "is 0 (no restarts, the default): set max_restarts to at least 1, or remove "
       "backoff_seconds"});
  ExpectInvalid(
      ParseJobSpec(Edit(kExample, "  seed: 42\n",
                        "  seed: 42\n  restart: {max_restarts: 0, on_rank_error: false}\n"),
                   "job.yaml")
          .status(),
      {"training.restart.on_rank_error has no effect"});
  EXPECT_TRUE(
      ParseJobSpec(Edit(kExample, "  seed: 42\n", "  seed: 42\n  restart: {max_restarts: 0}\n"),
                   "job.yaml")
          .ok());
}

}  // namespace
}  // namespace dapple
