// Test-only helpers of the job spec tests (job_spec_*_test.cc): the example spec, edits of it,
// and assertions on the errors of ParseJobSpec and ValidateJobSpec.
#ifndef DAPPLE_COMMON_JOB_SPEC_TEST_UTIL_H_
#define DAPPLE_COMMON_JOB_SPEC_TEST_UTIL_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "dapple/v1/job.pb.h"

namespace dapple::testing {

// The example of the job spec format, line for line (line numbers matter to the tests).
inline constexpr char kExample[] = R"(name: fmnist-mlp
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
inline constexpr char kMinimal[] = R"(name: tiny
model:
  input_shape: [784]
  layers:
    - {type: linear, out: 10}
training:
  global_batch: 64
  optimizer: {lr: 0.1}
)";

// `text` with the single occurrence of `from` replaced by `to` (a test failure when `from` is
// missing or ambiguous).
std::string Edit(std::string text, const std::string& from, const std::string& to);

// kExample parsed as "job.yaml" (a test failure, and an empty spec, when it does not parse).
v1::JobSpec Example();

// The example (4 layers) with explicit stages.
v1::JobSpec Manual(const std::vector<std::pair<int, int>>& ranges);

// Asserts `status` is kInvalidArgument with a one-line message containing every part.
void ExpectInvalid(const absl::Status& status, const std::vector<std::string>& parts);

// Asserts ParseJobSpec(yaml, "job.yaml") fails with kInvalidArgument and exactly `expected`.
void ExpectParseError(const std::string& yaml, const std::string& expected);

// Asserts JobSpecToYaml(spec) parses back ("canonical.yaml") to exactly `spec`.
void ExpectRoundTrip(const v1::JobSpec& spec);

}  // namespace dapple::testing

#endif  // DAPPLE_COMMON_JOB_SPEC_TEST_UTIL_H_
