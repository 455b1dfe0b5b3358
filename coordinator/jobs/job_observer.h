// JobObserver: told about every change JobManager makes to a job, so that views of the jobs
// kept elsewhere (the Prometheus metrics, coordinator/metrics/coordinator_metrics.h) stay
// consistent with the job lifecycle without the jobs library depending on them.
//
// Calls are made under JobManager's lock, in the order the changes happened, so an observer
// sees each job's states in lifecycle order. An observer must be quick, must not block and must
// not call back into the JobManager.
#ifndef DAPPLE_COORDINATOR_JOBS_JOB_OBSERVER_H_
#define DAPPLE_COORDINATOR_JOBS_JOB_OBSERVER_H_

#include "coordinator/jobs/event_recorder.h"
#include "dapple/v1/job.pb.h"

namespace dapple::coordinator {

class JobObserver {
 public:
  virtual ~JobObserver() = default;

  // `job` is now in job.state(), coming from `from`. `from` is JOB_STATE_UNSPECIFIED when the
  // job appears: Create (PENDING), or JobManager::Open loading it from the database (any
  // state; a recovered PLANNING / RUNNING job then gets a second call for its move to FAILED).
  virtual void OnJobState(const v1::Job& job, v1::JobState from) = 0;

  // JobManager::Update changed a RUNNING job's progress (metrics, stage metrics, plan...).
  virtual void OnJobUpdate(const v1::Job& job) = 0;

  // JobManager::RecordEvent recorded an event of `job` with `reason` (what is not a state
  // change: CheckpointFailed, WorkerLost...). Told whether or not the event could be written to
  // the database, so a count kept from these stays right while the database is full. No-op by
  // default.
  virtual void OnJobEvent(const v1::Job& job, JobEventReason reason) {
    (void)job;
    (void)reason;
  }
};

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_JOBS_JOB_OBSERVER_H_
