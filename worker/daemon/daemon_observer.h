// DaemonObserver: told what the worker daemon does (registration, a rank starting, every
// progress report it makes), so that views kept elsewhere (the worker's Prometheus metrics,
// worker_metrics.h) follow it without the daemon depending on them.
//
// Calls come from the daemon's heartbeat thread (OnRegistered) and job thread (the others);
// an observer must be thread-safe, quick, and must not call back into the daemon.
#ifndef DAPPLE_WORKER_DAEMON_DAEMON_OBSERVER_H_
#define DAPPLE_WORKER_DAEMON_DAEMON_OBSERVER_H_

#include <string>

#include "dapple/v1/plan.pb.h"
#include "dapple/v1/worker.pb.h"

namespace dapple::worker {

class DaemonObserver {
 public:
  virtual ~DaemonObserver() = default;

  // The coordinator registered this worker as `worker_id` (again after a coordinator restart).
  virtual void OnRegistered(const std::string& worker_id, const std::string& hostname) = 0;

  // The daemon starts running `assignment`'s rank.
  virtual void OnRankStarted(const v1::StageAssignment& assignment) = 0;

  // The daemon made `report` (before queueing it for the coordinator): PROGRESS_STEP with the
  // step's stats, PROGRESS_EVAL, and the rank's final DONE / FAILED / ABORTED.
  virtual void OnReport(const v1::ProgressReport& report) = 0;

  // A checkpoint step stalled the rank's training loop for `stall_seconds` (the snapshot copy,
  // plus the wait for the previous save or, with --sync-checkpoints, the whole write) after a
  // step that took `step_seconds`.
  virtual void OnCheckpointStall(double stall_seconds, double step_seconds) {}

  // The rank resumed from a checkpoint reading `from_memory` shards from the worker's in-memory
  // copy and `from_disk` shards from their files.
  virtual void OnCheckpointLoad(int from_memory, int from_disk) {}
};

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_DAEMON_DAEMON_OBSERVER_H_
