// WorkerObserver: told about every change of a worker's lifecycle state in WorkerRegistry, so
// that views kept elsewhere (the Prometheus metrics, coordinator/metrics/coordinator_metrics.h)
// stay consistent with it without the cluster library depending on them.
//
// Calls are made synchronously by the registry's (thread-compatible) methods, i.e. under the
// coordinator service's mutex. An observer must be quick and must not call back into the
// registry.
#ifndef DAPPLE_COORDINATOR_CLUSTER_WORKER_OBSERVER_H_
#define DAPPLE_COORDINATOR_CLUSTER_WORKER_OBSERVER_H_

#include "dapple/v1/worker.pb.h"

namespace dapple::coordinator {

class WorkerObserver {
 public:
  virtual ~WorkerObserver() = default;

  // `worker` is now in worker.state(), coming from `from`; `from` is WORKER_STATE_UNSPECIFIED
  // for a new registration (a name that was DEAD coming back reports DEAD -> IDLE instead).
  virtual void OnWorkerState(const v1::WorkerInfo& worker, v1::WorkerState from) = 0;

  // `worker` (in its last state) was forgotten: deregistered, or DEAD past the retention.
  virtual void OnWorkerRemoved(const v1::WorkerInfo& worker) = 0;
};

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_CLUSTER_WORKER_OBSERVER_H_
