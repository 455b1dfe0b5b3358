// dapplectl's machine-readable output (-o json, -o yaml).
//
// JSON is protobuf's own JSON printer (google::protobuf::util::MessageToJsonString) with proto
// field names preserved and primitive fields always printed, so field names, 64-bit integers
// as strings, and unset `optional` fields (left out) follow the proto3 JSON mapping. The one
// difference: enum fields hold the value's short name, "RUNNING" instead of
// "JOB_STATE_RUNNING" and "IDLE" instead of "WORKER_STATE_IDLE". This is done by printing a
// copy of the message whose descriptor (built once, in a private pool) declares enum fields as
// strings, so fields keep their declaration order.
//
// The job spec (Job.spec) is the exception to the mapping: it is printed in its canonical form,
// the one `dapplectl submit` accepts, so that it can be submitted again. YAML: JobSpecToYaml
// (common/job_spec.h), e.g. `spec:` then `name: fmnist-mlp`, `model: {input_shape: [1, 28, 28],
// layers: [{type: flatten}, {type: linear, out: 1024}, ...]}` (as block and flow YAML),
// `optimizer: {type: sgd, lr: 0.05, momentum: 0.9, weight_decay: 0}`, `stages: 2` (or `auto`, or
// `[[0, 2], [3, 5]]`). JSON: the same keys with JSON types: integers and doubles as numbers
// (not strings), strings as strings, keys that do not apply left out (adamw's beta1/beta2/eps
// for sgd, `out` for layers without one, an empty stage_ranges), `stages` a number, "auto" or
// a list of [first_layer, last_layer] pairs.
//
// Thread-safe. Errors: kInternal if protobuf fails to print (not expected for valid messages).
#ifndef DAPPLE_DAPPLECTL_JSON_OUTPUT_H_
#define DAPPLE_DAPPLECTL_JSON_OUTPUT_H_

#include <string>

#include "absl/status/statusor.h"
#include "dapple/v1/coordinator.pb.h"
#include "dapple/v1/job.pb.h"
#include "google/protobuf/message.h"

namespace dapple::ctl {

// Any message of dapple/v1 as JSON, enums by short name. pretty: indented, multi-line, ending
// in "\n"; otherwise one line without a newline.
absl::StatusOr<std::string> MessageToJson(const google::protobuf::Message& message, bool pretty);

// `get -o json`: the Job, e.g. {"id": "job-1", ..., "state": "SUCCEEDED", ...,
// "metrics": {..., "samples_per_second": 1234.5, "test_accuracy": 0.87, ...}, ...}.
inline absl::StatusOr<std::string> JobToJson(const v1::Job& job, bool pretty = true) {
  return MessageToJson(job, pretty);
}

// `list -o json`: {"jobs": [<job as in JobToJson>, ...]}.
inline absl::StatusOr<std::string> JobListToJson(const v1::ListJobsResponse& jobs,
                                                 bool pretty = true) {
  return MessageToJson(jobs, pretty);
}

// `workers -o json`: {"workers": [{"id": ..., "state": "IDLE", ...}, ...]}.
inline absl::StatusOr<std::string> WorkerListToJson(const v1::ListWorkersResponse& workers,
                                                    bool pretty = true) {
  return MessageToJson(workers, pretty);
}

// `get -o yaml`: the same tree as MessageToJson, as block-style YAML in field order;
// multi-line strings (spec_yaml) as literal blocks; the spec as JobSpecToYaml writes it (its
// flow collections kept), so `spec:`'s block can be submitted again. Ends in "\n".
absl::StatusOr<std::string> MessageToYaml(const google::protobuf::Message& message);

}  // namespace dapple::ctl

#endif  // DAPPLE_DAPPLECTL_JSON_OUTPUT_H_
