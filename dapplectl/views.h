// dapplectl's table output (-o table): what `get`, `list`, `workers`, `submit` and `cancel`
// print. Pure functions; `now_unix_ms` (milliseconds since the Unix epoch) is passed in so
// ages are testable. Thread-safe.
#ifndef DAPPLE_DAPPLECTL_VIEWS_H_
#define DAPPLE_DAPPLECTL_VIEWS_H_

#include <cstdint>
#include <string>

#include "dapple/v1/job.pb.h"
#include "dapple/v1/worker.pb.h"
#include "google/protobuf/repeated_field.h"

namespace dapple::ctl {

// "submitted job-3 (fmnist-mlp)\n".
std::string RenderSubmitted(const v1::Job& job);

// "cancelled job-3\n".
std::string RenderCancelled(const v1::Job& job);

// One job in detail, one "KEY   value" line per item: id, name, state, message, age, plan
// (planner, schedule, M, micro-batch size, bubble %, then a STAGE / LAYERS / REPLICAS /
// WORKERS table), metrics (step/total, epoch, loss, samples/s, test accuracy and loss,
// elapsed, ETA). Leaves out spec_yaml, the spec and step_losses (see -o json / yaml).
std::string RenderJobDetails(const v1::Job& job, int64_t now_unix_ms);

// One row per job with the columns ID, NAME, STATE, STEP (x/y), LOSS, TEST ACC, AGE;
// "-" marks a value the job does not have yet. No jobs: "no jobs\n".
std::string RenderJobList(const google::protobuf::RepeatedPtrField<v1::Job>& jobs,
                          int64_t now_unix_ms);

// One row per worker: ID, HOSTNAME, PID, DEVICES, STATE, JOB, STAGE, HEARTBEAT (age of the
// last heartbeat). JOB and STAGE are "-" unless the worker is BUSY. No workers: "no workers\n".
std::string RenderWorkerList(const google::protobuf::RepeatedPtrField<v1::WorkerInfo>& workers,
                             int64_t now_unix_ms);

}  // namespace dapple::ctl

#endif  // DAPPLE_DAPPLECTL_VIEWS_H_
