// dapplectl's table output (-o table): what `get`, `list`, `workers`, `submit` and `cancel`
// print. Pure functions; `now_unix_ms` (milliseconds since the Unix epoch) is passed in so
// ages are testable. Thread-safe.
#ifndef DAPPLE_DAPPLECTL_VIEWS_H_
#define DAPPLE_DAPPLECTL_VIEWS_H_

#include <cstdint>
#include <string>

#include "dapple/v1/job.pb.h"
#include "dapple/v1/profile.pb.h"
#include "dapple/v1/worker.pb.h"
#include "google/protobuf/repeated_field.h"

namespace dapple::ctl {

// "submitted job-3 (fmnist-mlp)\n".
std::string RenderSubmitted(const v1::Job& job);

// "cancelled job-3\n".
std::string RenderCancelled(const v1::Job& job);

// Why a PENDING job waits: its pending_reason and message, "WaitingForQuota: 3 of 4 cpu devices
// of tenant team-a in use by 2 jobs" (the message alone when it already starts with the reason
// or there is no reason; the reason alone without a message). "" for a job that is not PENDING.
std::string PendingReasonText(const v1::Job& job);

// The OWNER column: "alice/team-a" (owner/tenant), "admin" (an admin's job, no tenant), "" for a
// job without an owner (a coordinator without authentication).
std::string OwnerText(const v1::Job& job);

// `describe`'s scheduling lines: OWNER, TENANT, PRIORITY (spec.priority), PREEMPTIONS (the
// count, then "(last: <Job.last_preemption>)" once preempted).
std::string RenderJobScheduling(const v1::Job& job);

// One job in detail, one "KEY   value" line per item: id, name, state, message (for a PENDING job
// with a pending_reason: REASON, PendingReasonText, instead), age, plan
// (planner, schedule, M, micro-batch size, bubble %, CHOSEN with the reason for the schedule
// under parallel.schedule auto; when the plan has a prediction also
// PREDICTED "12.30 ms/step, 20812 samples/s" and PROFILE (where its layer costs came from);
// then a STAGE / LAYERS / REPLICAS / WORKERS / DEVICES table, with COMPUTE MS / PEAK MEMORY /
// BUBBLE columns when predicted, and one NOTE line per plan note), metrics (step/total, epoch,
// loss, samples/s, then the last evaluation: TEST ACCURACY and TEST LOSS, or for a text
// dataset VAL LOSS "1.2345 (step 500)", BITS/BYTE and VAL ACCURACY; elapsed, ETA), the
// measured memory per rank (RenderRankMemory), the checkpoints and the generated sample
// (RenderSample). Leaves out spec_yaml, the spec and step_losses (see -o json / yaml).
std::string RenderJobDetails(const v1::Job& job, int64_t now_unix_ms);

// The generated text of a language model's job (Job.sample_text): empty when there is none,
// else a line "SAMPLE        200 bytes generated after sample.prompt "\n", temperature 0.8" (the
// prompt C-escaped) and the text, every line indented by two spaces.
std::string RenderSample(const v1::Job& job);

// The memory part of RenderJobDetails: empty when no rank reported a step (Job.stage_metrics,
// filled while the job runs), else a "MEMORY" line and one row per rank (stage, then replica):
// STAGE, REPLICA, WORKER, STEP (the newest reported), IN FLIGHT (most micro-batches whose
// activations were held at once), ACTIVATIONS (their bytes), WEIGHTS (parameters, gradients
// and optimizer state), VERSIONS and VERSION BYTES (weight versions held at the peak and their
// bytes beyond the live copy; "-" when the worker did not report them), PEAK (weights +
// activations). Bytes human-readable (FormatBytes: "1.5 KiB", "70.0 MiB").
std::string RenderRankMemory(const v1::Job& job);

// `dapplectl plan`: a STAGE / LAYERS / REPLICAS / DEVICES / COMPUTE MS / PEAK MEMORY / BUBBLE
// table (devices: the topology's names, runs compacted as "node0/0-7"; compute ms per step and
// replica; peak memory per replica), then "KEY   value" lines: STEP (predicted ms), SAMPLES/S,
// PLANNER (with its placement policy), SCHEDULE, M (and the micro-batch size), BUBBLE,
// PROFILE, CLUSTER (source and device count) and one NOTE line per note; then
// RenderPlanAlternatives.
std::string RenderPlan(const v1::ParallelPlanSummary& plan, const v1::ClusterTopology& cluster);

// The alternatives `plan` was chosen among (parallel.schedule auto, `plan --schedule auto`):
// one row each (the chosen one marked *) with schedule, recompute, P, layout (layers x
// replicas per stage, "r" on recomputing stages), M, predicted step, bubble and each stage's
// peak memory; then CHOSEN with the reason and REFUSED with each refusal. Empty without
// alternatives.
std::string RenderPlanAlternatives(const v1::ParallelPlanSummary& plan);

// Device names compacted for tables: consecutive "<node>/<i>" of one node become
// "<node>/<first>-<last>"; others are kept; joined by ",". {"a/0","a/1","a/2","b/0"} ->
// "a/0-2,b/0".
std::string CompactDevices(const google::protobuf::RepeatedPtrField<std::string>& devices);

// One row per job with the columns ID, NAME, STATE, STEP (x/y), LOSS, TEST ACC, AGE, and
// VAL LOSS before AGE when a listed job trains on a text dataset, OWNER (OwnerText) after NAME
// when a listed job has an owner, REASON (PendingReasonText) last when a listed job is PENDING
// with a reason or message; "-" marks a value the job does not have (yet). No jobs:
// "no jobs\n".
std::string RenderJobList(const google::protobuf::RepeatedPtrField<v1::Job>& jobs,
                          int64_t now_unix_ms);

// One row per worker: ID, HOSTNAME, PID, DEVICES, STATE, JOB, STAGE, HEARTBEAT (age of the
// last heartbeat), MEMORY (its device's, "16.0 GiB shared" for a host's RAM its cpu workers
// share), CAPACITY (its host's compute capacity, "1.87"), LINK (its host's loopback link,
// "850 MB/s 0.12 ms"); "-" where the worker reported none. JOB and STAGE are "-" unless the
// worker is BUSY with a job the caller may see (a worker running another tenant's job is BUSY
// with "-" "-"). No workers: "no workers\n".
std::string RenderWorkerList(const google::protobuf::RepeatedPtrField<v1::WorkerInfo>& workers,
                             int64_t now_unix_ms);

}  // namespace dapple::ctl

#endif  // DAPPLE_DAPPLECTL_VIEWS_H_
