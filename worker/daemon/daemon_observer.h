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
};

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_DAEMON_DAEMON_OBSERVER_H_
