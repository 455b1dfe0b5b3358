// ParseJobSpec: defaults, integer bounds, keys that do not apply, nesting and size limits; its
// syntax, structure and type errors and where they point in job_spec_parse_errors_test.cc.
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
