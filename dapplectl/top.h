// `dapplectl top [JOB]`: a live per-stage view of running jobs from their Job.stage_metrics
// (every rank's newest step, job.proto StageMetrics): one table per job with the columns
//   STAGE REPLICA WORKER STEP STEP(ms) FWD BWD COMM IDLE BUBBLE% UTIL% PEAK-MEM
// where FWD / BWD / COMM / IDLE are the step's forward, backward, communication and idle
// milliseconds, BUBBLE% = idle / step time, UTIL% = (forward + backward + optimizer) / step
// time (compute), and PEAK-MEM the rank's peak memory (weights, gradients, optimizer state and
// activations). Under the table, one line names each straggler (StageMetrics.straggler: the
// coordinator's rule, docs/dapplectl.md "top"): "STRAGGLER stage 0 replica 1 (w-2): 2.10x the
// compute per step of its stage's other replicas".
//
// Thread safety: the render functions are pure; RunTop uses its client from one thread.
#ifndef DAPPLE_DAPPLECTL_TOP_H_
#define DAPPLE_DAPPLECTL_TOP_H_

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dapple/v1/job.pb.h"
#include "dapplectl/client.h"

namespace dapple::ctl {

// One snapshot as text: per job a header line ("job-3 (demo)  RUNNING  step 120/234  1,234
// samples/s", then for a text dataset once evaluated "  validation loss 1.2345 (1.7810
// bits/byte)") then its table indented by two spaces, jobs separated by a blank line; a job
// with no step reported yet says "  no step reported yet"; no jobs at all: "no running jobs\n".
std::string RenderTop(const std::vector<v1::Job>& jobs);

// One snapshot as one line of JSON (no newline): {"jobs": [{"id": ..., "name": ..., "state":
// "RUNNING", "step": N, "total_steps": N, ["validation_loss": f, "validation_bits_per_byte": f,
// once a text dataset's job was evaluated,] "stages": [{<StageMetrics as in -o json>,
// "bubble_fraction": f, "utilization": f}, ...]}, ...]}. kInternal if protobuf cannot print.
absl::StatusOr<std::string> TopToJson(const std::vector<v1::Job>& jobs);

struct TopOptions {
  std::string job_id;                          // empty: every RUNNING job
  absl::Duration interval = absl::Seconds(1);  // between snapshots
  bool once = false;                           // one snapshot, then return
  bool json = false;                           // TopToJson lines instead of tables
  bool terminal = false;                       // clear the screen before each table snapshot
  std::function<void(absl::Duration)> sleep = [](absl::Duration d) { absl::SleepFor(d); };
};

// Prints snapshots to `out` every options.interval: with a job id, until that job is in a
// terminal state (its last snapshot is printed); without, until the process is interrupted.
// Returns the first failed call's status (kNotFound for an unknown job, the client's errors).
absl::Status RunTop(CoordinatorClient& client, const TopOptions& options, std::ostream* out);

}  // namespace dapple::ctl

#endif  // DAPPLE_DAPPLECTL_TOP_H_
