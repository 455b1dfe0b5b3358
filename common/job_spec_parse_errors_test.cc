// ParseJobSpec and JobSpecFieldError: syntax and structure errors, value types, and where each
// error points (job.yaml:LINE:COLUMN); defaults, bounds and nesting in job_spec_parse_test.cc.
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/job_spec.h"
#include "common/job_spec_test_util.h"
#include "gmock/gmock.h"
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
  // A tab in indentation: yaml-cpp's own position (1-based here), and the rule.
  ExpectParseError("name: x\n\tmodel: y\n",
                   "job.yaml:2:1: YAML syntax error: this line is indented with a tab; YAML "
                   "indents with spaces only (yaml-cpp stopped at 2:1: illegal tab when looking "
                   "for indentation)");
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
  // A tab before a key of a nested map (and after a space): yaml-cpp's own words name the tab,
  // but not the rule (found by a fresh user).
  ExpectParseError(Edit(kExample, "  global_batch: 256", "  global_batch: 256\n\tseed: 1"),
                   "job.yaml:13:1: YAML syntax error: this line is indented with a tab; YAML "
                   "indents with spaces only (yaml-cpp stopped at 13:1: illegal tab when looking "
                   "for indentation)");
  ExpectParseError(Edit(kExample, "  global_batch: 256", " \tglobal_batch: 256"),
                   "job.yaml:12:1: YAML syntax error: this line is indented with a tab; YAML "
                   "indents with spaces only (yaml-cpp stopped at 12:15: illegal map value)");
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
  // Found by a fresh user: a misspelt 'type' was reported only as missing.
  ExpectParseError(Edit(kExample, "{type: relu}", "{typ: relu}"),
                   "job.yaml:7:8: unknown field 'typ' in model.layers[2]; did you mean 'type'? "
                   "(every layer names its type, like {type: linear, out: 10})");
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
  ExpectParseError(Edit(kExample, "global_batch: 256", "global_batch: !!str 256"),
                   "job.yaml:12:17: training.global_batch must be an integer, got the string "
                   "'256'");
}

// A scalar tagged with its YAML core type is that type (a fresh user's `global_batch: !!int 256`
// was refused as a string).
TEST(ParseJobSpecTest, ExplicitlyTypedNumbersAreNumbers) {
  absl::StatusOr<v1::JobSpec> spec =
      ParseJobSpec(Edit(Edit(kExample, "global_batch: 256", "global_batch: !!int 256"), "lr: 0.05",
                        "lr: !!float 0.05"),
                   "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->training().global_batch(), 256);
  EXPECT_DOUBLE_EQ(spec->training().optimizer().lr(), 0.05);
  ExpectParseError(Edit(kExample, "global_batch: 256", "global_batch: !!int abc"),
                   "job.yaml:12:17: training.global_batch must be an integer, got 'abc'");
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

}  // namespace
}  // namespace dapple
