#include "common/job_spec.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace dapple {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::testing::HasSubstr;

// The example of the job spec format, line for line (line numbers matter to the tests).
constexpr char kExample[] = R"(name: fmnist-mlp
model:
  input_shape: [1, 28, 28]
  layers:
    - {type: flatten}
    - {type: linear, out: 1024}
    - {type: relu}
    - {type: linear, out: 10}
  loss: softmax_cross_entropy
data: {dataset: fashion-mnist, path: /usr/share/datasets/fashion-mnist}
training:
  global_batch: 256
  micro_batch: 32
  epochs: 3
  optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
  seed: 42
  max_steps: 0          # optional: stop after this many steps (0 = no limit)
parallel:
  schedule: dapple      # gpipe | dapple
  planner: balanced     # balanced | uniform | manual | dapple | pipedream | dp
  stages: 2             # auto | integer | list of [first_layer, last_layer] ranges
  devices: 2
)";

// Only the required fields.
constexpr char kMinimal[] = R"(name: tiny
model:
  input_shape: [784]
  layers:
    - {type: linear, out: 10}
training:
  global_batch: 64
  optimizer: {lr: 0.1}
)";

v1::JobSpec FromText(const std::string& text) {
  v1::JobSpec spec;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &spec)) << text;
  return spec;
}

// `text` with the single occurrence of `from` replaced by `to`.
std::string Edit(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "'" << from << "' not in the spec";
  EXPECT_EQ(text.find(from, at + 1), std::string::npos) << "'" << from << "' is ambiguous";
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

v1::JobSpec Example() {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(kExample, "job.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : v1::JobSpec();
}

// Asserts `status` is kInvalidArgument with a one-line message containing every part.
void ExpectInvalid(const absl::Status& status, const std::vector<std::string>& parts) {
  ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  const std::string message(status.message());
  EXPECT_EQ(message.find('\n'), std::string::npos) << "not one line: " << message;
  for (const std::string& part : parts) EXPECT_THAT(message, HasSubstr(part));
}

void ExpectParseError(const std::string& yaml, const std::string& expected) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(yaml, "job.yaml");
  ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << spec.status();
  EXPECT_EQ(std::string(spec.status().message()), expected);
}

// ------------------------------------------------------------------------------------ parsing

TEST(ParseJobSpecTest, ExampleParsesToTheExpectedProto) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(kExample, "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const v1::JobSpec expected = FromText(R"pb(
    name: "fmnist-mlp"
    model {
      input_shape: [ 1, 28, 28 ]
      layers { type: "flatten" }
      layers { type: "linear" out: 1024 }
      layers { type: "relu" }
      layers { type: "linear" out: 10 }
      loss: "softmax_cross_entropy"
    }
    data { dataset: "fashion-mnist" path: "/usr/share/datasets/fashion-mnist" }
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

TEST(ParseJobSpecTest, FillsDefaults) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(kMinimal, "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const v1::JobSpec expected = FromText(R"pb(
    name: "tiny"
    model {
      input_shape: [ 784 ]
      layers { type: "linear" out: 10 }
      loss: "softmax_cross_entropy"
    }
    data { dataset: "fashion-mnist" path: "/usr/share/datasets/fashion-mnist" }
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
  ExpectInvalid(spec.status(), {"j.yaml:4:5: YAML syntax error: illegal map value"});
}

TEST(ParseJobSpecTest, UnknownFieldNamesLineKnownFieldsAndSuggestion) {
  ExpectParseError(Edit(kExample, "training:", "trainig:"),
                   "job.yaml:11:1: unknown field 'trainig' in the job spec; known: name, model, "
                   "data, training, parallel; did you mean 'training'?");
  ExpectParseError(Edit(kExample, "lr: 0.05", "lrate: 0.05"),
                   "job.yaml:15:26: unknown field 'lrate' in training.optimizer; known: type, lr, "
                   "momentum, weight_decay, beta1, beta2, eps");
  ExpectParseError(Edit(kExample, "{type: relu}", "{type: relu, outs: 3}"),
                   "job.yaml:7:20: unknown field 'outs' in model.layers[2]; known: type, out; did "
                   "you mean 'out'?");
  ExpectParseError(
      Edit(kExample, "  devices: 2", "  device: 2"),
      "job.yaml:22:3: unknown field 'device' in parallel; known: schedule, planner, "
      "stages, devices, device_type, emulation, pipesgd, pipedream; did you mean 'devices'?");
}

TEST(ParseJobSpecTest, DuplicateField) {
  ExpectParseError(Edit(kExample, "  epochs: 3\n", "  epochs: 3\n  epochs: 4\n"),
                   "job.yaml:15:3: duplicate field 'epochs' in training (first at line 14)");
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
                   "job.yaml:22:12: parallel.devices must be an integer in [-2147483648, "
                   "2147483647], got 9999999999");
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
                   "training.micro_batch 48");
  ExpectParseError(Edit(kExample, "{type: relu}", "{type: conv9}"),
                   "job.yaml:7:7: model.layers[2]: unknown layer type 'conv9'; known: flatten, "
                   "linear, relu, gelu");
  ExpectParseError(Edit(kExample, "{type: linear, out: 1024}", "{type: linear, out: 0}"),
                   "job.yaml:6:27: model.layers[1].out 0 must be > 0");
  ExpectParseError(Edit(kExample, "stages: 2 ", "stages: 8 "),
                   "job.yaml:21:11: parallel.stages 8 is more than the 4 layers of the model: "
                   "each stage needs at least one layer");
  ExpectParseError(Edit(Edit(kExample, "planner: balanced", "planner: manual"), "stages: 2 ",
                        "stages: [[0, 1], [3, 3]]"),
                   "job.yaml:21:20: layer 2 is missing: it is in no stage (before "
                   "parallel.stages[1] [3, 3] and after parallel.stages[0] [0, 1]); stages must "
                   "cover every layer exactly once");
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
                {"model output has 12 features but fashion-mnist has 10 classes"});
  spec.mutable_model()->mutable_layers(3)->mutable_linear()->set_out(1);
  ExpectInvalid(ValidateJobSpec(spec),
                {"model output has 1 feature but fashion-mnist has 10 classes"});
  spec = Example();
  spec.mutable_model()->mutable_layers()->RemoveLast();
  spec.mutable_model()->mutable_layers()->RemoveLast();
  spec.mutable_model()->mutable_layers()->RemoveLast();  // only flatten: output [784]
  spec.mutable_parallel()->set_stages(1);
  spec.mutable_parallel()->set_devices(1);
  ExpectInvalid(ValidateJobSpec(spec), {"model output has 784 features", "10 classes"});
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
  ExpectInvalid(ValidateJobSpec(spec), {"training.global_batch 60001 must be <= 60000",
                                        "training samples of fashion-mnist"});
  spec = Example();
  spec.mutable_training()->set_micro_batch(0);
  ExpectInvalid(ValidateJobSpec(spec), {"training.micro_batch 0 must be >= 1"});
  spec.mutable_training()->set_micro_batch(512);
  ExpectInvalid(ValidateJobSpec(spec),
                {"training.micro_batch 512 must be <= training.global_batch 256"});
  spec.mutable_training()->set_micro_batch(48);
  ExpectInvalid(ValidateJobSpec(spec),
                {"training.global_batch 256 is not divisible by training.micro_batch 48"});
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
                                        "gpipe, dapple, pipedream, pipesgd"});
}

// schedule pipedream: stages may have replicas (1F1B-RR: whole micro-batches round-robin), at
// most M = global_batch / micro_batch per stage where the spec fixes them (devices / stages of
// balanced, uniform and manual); not with planner dp; an optional parallel.pipedream section
// {vertical_sync}; the section under another schedule is refused.
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
                {"parallel.devices 8 with 2 stages gives 4 replicas per stage, but "
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
                {"parallel.devices 8 with 2 stages gives 4 replicas per stage",
                 "training.micro_batch 256 = 1 micro-batch per step",
                 "set devices to at most 2 (1 replica per stage)"});
  // Counts of 1 take the singular: 1 stage, 1 micro-batch.
  spec.mutable_parallel()->set_stages(1);
  ExpectInvalid(ValidateJobSpec(spec),
                {"parallel.devices 8 with 1 stage gives 8 replicas per stage, but "
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

TEST(ValidateJobSpecTest, Planner) {
  v1::JobSpec spec = Example();
  for (const char* planner : {"balanced", "uniform", "dapple", "pipedream"}) {
    spec.mutable_parallel()->set_planner(planner);
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << planner << ": " << ValidateJobSpec(spec);
  }
  spec.mutable_parallel()->set_planner("greedy");
  ExpectInvalid(ValidateJobSpec(spec),
                {"parallel.planner 'greedy' is unknown; available: balanced, uniform, manual, "
                 "dapple, pipedream, dp"});
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
  ExpectInvalid(ValidateJobSpec(spec),
                {"parallel.devices 8 is not a multiple of the 3 stages", "set devices to 6 or 9"});
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

// The example (4 layers) with explicit stages.
v1::JobSpec Manual(const std::vector<std::pair<int, int>>& ranges) {
  v1::JobSpec spec = Example();
  v1::ParallelSpec& p = *spec.mutable_parallel();
  p.set_planner("manual");
  p.set_stages(static_cast<int>(ranges.size()));
  p.set_devices(static_cast<int>(ranges.size()));
  for (const auto& [first, last] : ranges) {
    v1::StageRange& r = *p.add_stage_ranges();
    r.set_first_layer(first);
    r.set_last_layer(last);
  }
  return spec;
}

TEST(ValidateJobSpecTest, StageCount) {
  v1::JobSpec spec = Example();
  spec.mutable_parallel()->set_stages(-1);
  ExpectInvalid(ValidateJobSpec(spec), {"parallel.stages -1 must be >= 0"});
  spec.mutable_parallel()->set_stages(8);
  spec.mutable_parallel()->set_devices(8);
  ExpectInvalid(ValidateJobSpec(spec),
                {"parallel.stages 8 is more than the 4 layers of the model: each stage needs at "
                 "least one layer"});
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
                {"parallel.stages[1] [2, 5] goes past the last layer 3"});
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
                {"parallel.devices 1 is fewer than the 2 stages", "set devices to 2"});
  spec.mutable_parallel()->set_devices(3);
  ExpectInvalid(ValidateJobSpec(spec),
                {"parallel.devices 3 is not a multiple of the 2 stages",
                 "each stage gets devices / stages replicas", "set devices to 2 or 4"});
  spec = Manual({{0, 1}, {2, 3}});
  spec.mutable_parallel()->set_devices(6);  // 3 replicas of each stage
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  spec.mutable_parallel()->set_devices(5);
  ExpectInvalid(ValidateJobSpec(spec), {"parallel.devices 5 is not a multiple of the 2 stages"});
}

// ---------------------------------------------------------------------------------- round trip

void ExpectRoundTrip(const v1::JobSpec& spec) {
  const std::string yaml = JobSpecToYaml(spec);
  absl::StatusOr<v1::JobSpec> back = ParseJobSpec(yaml, "canonical.yaml");
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << yaml;
  EXPECT_TRUE(MessageDifferencer::Equals(*back, spec)) << "YAML:\n"
                                                       << yaml << "\nwant:\n"
                                                       << spec.DebugString() << "got:\n"
                                                       << back->DebugString();
}

TEST(JobSpecToYamlTest, CanonicalFormOfTheExample) {
  EXPECT_EQ(JobSpecToYaml(Example()), R"(name: fmnist-mlp
model:
  input_shape: [1, 28, 28]
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

TEST(BoundsTest, IntegersBeyondTheFieldTypeAreErrorsNotWraps) {
  // int32 fields.
  ExpectParseError(Edit(kExample, "stages: 2 ", "stages: 1099511627776 "),
                   "job.yaml:21:11: parallel.stages must be an integer in [-2147483648, "
                   "2147483647], got 1099511627776");
  ExpectParseError(Edit(kExample, "devices: 2", "devices: 1099511627776"),
                   "job.yaml:22:12: parallel.devices must be an integer in [-2147483648, "
                   "2147483647], got 1099511627776");
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
                   "activation floats per sample is 7911960000 floats (29.47 GiB of fp32) per "
                   "step, more than the maximum 2^30 (4 GiB): use a smaller global_batch or "
                   "narrower layers");
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

TEST(InapplicableKeysTest, CanonicalYamlHasOnlyTheKeysOfTheTypeAndRoundTrips) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(
      Edit(kExample, "{type: sgd, lr: 0.05, momentum: 0.9}", "{type: adamw, lr: 0.001}"),
      "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(JobSpecToYaml(*spec), HasSubstr("optimizer: {type: adamw, lr: 0.001, weight_decay: "
                                              "0, beta1: 0.9, beta2: 0.999, eps: 1e-08}\n"));
  ExpectRoundTrip(*spec);
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
                   "micro_batch, epochs, optimizer, seed, max_steps, checkpoint_every_steps; "
                   "did you mean 'epochs'?");
}

// ---------------------------------------------------------------------------------- nesting

TEST(NestingTest, DeepNestingIsRefusedBeforeYamlCpp) {
  ExpectParseError(std::string(100000, '['),
                   "job.yaml:1:64: the job spec is nested more than 64 levels deep here (it "
                   "needs 4); refused before parsing");
  ExpectParseError("name: x\nmodel: " + std::string(100000, '{'),
                   "job.yaml:2:71: the job spec is nested more than 64 levels deep here (it "
                   "needs 4); refused before parsing");
  std::string dashes;
  for (int i = 0; i < 100000; ++i) dashes += "- ";
  ExpectParseError(dashes + "x\n",
                   "job.yaml:1:129: the job spec is nested more than 64 levels deep here (it "
                   "needs 4); refused before parsing");
  std::string maps;  // k: / k: / ... one more space of indentation each
  for (int i = 0; i < 100; ++i) maps += std::string(i, ' ') + "k:\n";
  ExpectParseError(maps,
                   "job.yaml:65:65: the job spec is nested more than 64 levels deep here (it "
                   "needs 4); refused before parsing");
  // Flow brackets spread over lines count the same.
  std::string lines;
  for (int i = 0; i < 100; ++i) lines += "[\n";
  ExpectParseError("model: " + lines,
                   "job.yaml:64:1: the job spec is nested more than 64 levels deep here (it needs "
                   "4); refused before parsing");
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

// -------------------------------------------------------------------------------- bad examples

// The repository root: $DAPPLE_SOURCE_DIR (set by ctest), else found from this file's path or
// by walking up from the test binary (build folders sit inside the repository).
std::string SourceDir() {
  namespace fs = std::filesystem;
  const auto has_examples = [](const fs::path& dir) {
    std::error_code ec;
    return fs::exists(dir / "examples" / "bad", ec);
  };
  if (const char* dir = std::getenv("DAPPLE_SOURCE_DIR"); dir != nullptr && *dir != '\0') {
    return dir;
  }
  const fs::path from_file = fs::path(__FILE__).parent_path().parent_path();
  if (has_examples(from_file)) return from_file.string();
  std::error_code ec;
  for (fs::path dir = fs::read_symlink("/proc/self/exe", ec).parent_path(); !ec && !dir.empty();
       dir = dir.parent_path()) {
    if (has_examples(dir)) return dir.string();
    if (dir == dir.root_path()) break;
  }
  return from_file.string();
}

struct BadExample {
  const char* file;
  const char* error;
};

TEST(BadExamplesTest, EachFailsWithItsOneLineError) {
  const BadExample cases[] = {
      {"malformed.yaml",
       "examples/bad/malformed.yaml:6:7: YAML syntax error: this '{' is never closed (yaml-cpp "
       "stopped at 8:5: illegal block entry)"},
      {"unknown_layer.yaml",
       "examples/bad/unknown_layer.yaml:7:7: model.layers[1]: unknown layer type 'conv2d'; "
       "known: flatten, linear, relu, gelu"},
      {"indivisible_batch.yaml",
       "examples/bad/indivisible_batch.yaml:12:16: training.global_batch 256 is not divisible by "
       "training.micro_batch 48"},
      {"too_many_stages.yaml",
       "examples/bad/too_many_stages.yaml:20:11: parallel.stages 8 is more than the 6 layers of "
       "the model: each stage needs at least one layer"},
      {"misspelled_field.yaml",
       "examples/bad/misspelled_field.yaml:8:1: unknown field 'trainig' in the job spec; known: "
       "name, model, data, training, parallel; did you mean 'training'?"},
      {"huge_epochs.yaml",
       "examples/bad/huge_epochs.yaml:14:11: training.epochs 9223372036854775807 is more than "
       "the maximum 100000"},
      {"model_too_large.yaml",
       "examples/bad/model_too_large.yaml:8:7: model.layers[1] (linear 784 -> 1000000) has "
       "785000000 parameters, bringing the model to 785000000 (2.92 GiB of fp32 weights), more "
       "than the maximum 2^28 (268435456, 1 GiB)"},
      {"key_does_not_apply.yaml",
       "examples/bad/key_does_not_apply.yaml:9:20: model.layers[2].out applies only to linear "
       "layers, not relu"},
      {"too_deep.yaml",
       "examples/bad/too_deep.yaml:2:70: the job spec is nested more than 64 levels deep here (it "
       "needs 4); refused before parsing"},
  };
  for (const BadExample& c : cases) {
    SCOPED_TRACE(c.file);
    const std::string path = SourceDir() + "/examples/bad/" + c.file;
    std::ifstream in(path);
    ASSERT_TRUE(in.good()) << "cannot read " << path;
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(text, std::string("examples/bad/") + c.file);
    ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << spec.status();
    EXPECT_EQ(std::string(spec.status().message()), std::string(c.error));
  }
}

// The job specs under examples/ are meant to run as they are: each must parse and validate.
TEST(GoodExamplesTest, EveryExampleSpecIsValid) {
  namespace fs = std::filesystem;
  int checked = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(SourceDir() + "/examples")) {
    if (!entry.is_regular_file() || entry.path().extension() != ".yaml") continue;
    SCOPED_TRACE(entry.path().string());
    std::ifstream in(entry.path());
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(text, entry.path().filename().string());
    EXPECT_TRUE(spec.ok()) << spec.status();
    if (spec.ok()) ExpectRoundTrip(*spec);
    ++checked;
  }
  EXPECT_GE(checked, 1);
}

}  // namespace
}  // namespace dapple
