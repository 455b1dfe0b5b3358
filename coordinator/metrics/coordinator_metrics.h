// CoordinatorMetrics: dapple-coordinator's Prometheus metrics (common/metrics/metric_list.h,
// binary kCoordinator), kept consistent with the job and worker lifecycles by observing them:
// JobManager calls it as its JobObserver, WorkerRegistry as its WorkerObserver, so every
// state change (and a restart's recovery: JobManager::Open reports every stored job) is
// counted exactly once.
//
// What it exports (docs/operations.md, "Metrics, alerts and dashboards"):
//  - cluster: jobs by state, the queue (PENDING jobs), jobs finished by final state since
//    start (counter), workers by state and each worker's state (0/1 per state);
//  - per job (labels job_id, job_name): its state (0/1 per state) from creation; once it ran:
//    step, total steps, epoch, loss, samples/s, learning rate, gradient norm, test accuracy and
//    loss, ETA, and the last-step timestamp (the time it started RUNNING until its first step,
//    so a job stuck before step 1 is seen as stuck too). An ended job's series are removed
//    `ended_job_retention_ms` after it ended (checked before every scrape);
//  - per job, stage and replica (labels job_id, job_name, stage, replica, worker) from
//    Job.stage_metrics while the job is RUNNING: step time, forward / backward / idle /
//    comm / allreduce / optimizer seconds of the last step, bubble ratio, samples/s, gradient
//    norm, skipped steps (counter), peak memory / activation / weight bytes, peak in-flight
//    micro-batches, last-step timestamp, straggler (0/1). Removed as soon as the job leaves RUNNING
//    (or a rank's entry disappears).
//  - per tenant (label tenant; an admin's jobs "_admin"), from every scheduling pass
//    (scheduling_observer.h): nominal, in-use, borrowed and lent devices per device type,
//    queued jobs per pending reason, device-seconds waited (counter), preemptions per
//    reason (counter), and per device type the seconds its longest-waiting job within its
//    nominal quota has waited (0: none; the signal of DappleTenantStarvedWithinQuota). A tenant
//    that disappears keeps its series at 0. Abandoned checkpoints (counter, from the jobs'
//    CheckpointFailed events: JobObserver::OnJobEvent), from 0 once a job of the tenant is seen.
//
// Thread safety: thread-safe; the observer calls come under JobManager's lock or the service
// mutex and take only this object's own mutex (never calling out), so no lock cycle forms.
#ifndef DAPPLE_COORDINATOR_METRICS_COORDINATOR_METRICS_H_
#define DAPPLE_COORDINATOR_METRICS_COORDINATOR_METRICS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics/metric_set.h"
#include "coordinator/cluster/worker_observer.h"
#include "coordinator/jobs/job_manager.h"
#include "coordinator/jobs/job_observer.h"
#include "coordinator/scheduling/scheduling_observer.h"
#include "dapple/v1/job.pb.h"
#include "dapple/v1/worker.pb.h"

namespace dapple::coordinator {

struct CoordinatorMetricsOptions {
  std::function<int64_t()> now_unix_ms = WallClockUnixMs;
  // How long an ended job's per-job series stay (so dashboards and DappleJobFailed see the
  // end); 15 minutes.
  int64_t ended_job_retention_ms = 15 * 60 * 1000;
};

// "pending", "running", ... ("unspecified" otherwise): the `state` label of a job.
std::string JobStateLabel(v1::JobState state);
// "idle", "busy", "dead" ("unspecified" otherwise): the `state` label of a worker.
std::string WorkerStateLabel(v1::WorkerState state);

class CoordinatorMetrics : public JobObserver,
                           public WorkerObserver,
                           public scheduling::SchedulingObserver {
 public:
  explicit CoordinatorMetrics(CoordinatorMetricsOptions options = {});
  // Detaches from the set (a scrape still in flight then only collects).
  ~CoordinatorMetrics() override;

  // What the HTTP endpoint serves (metrics_server.h); its collection first expires ended jobs.
  std::shared_ptr<metrics::MetricSet> metric_set() const { return set_; }

  void OnJobState(const v1::Job& job, v1::JobState from) override;
  void OnJobUpdate(const v1::Job& job) override;
  // CheckpointFailed: dapple_checkpoint_failures_total{tenant} + 1.
  void OnJobEvent(const v1::Job& job, JobEventReason reason) override;
  void OnWorkerState(const v1::WorkerInfo& worker, v1::WorkerState from) override;
  void OnWorkerRemoved(const v1::WorkerInfo& worker) override;
  void OnSchedulingPass(const std::map<std::string, scheduling::TenantSchedulingState>& tenants,
                        int64_t now_unix_ms) override;
  void OnPreempted(const std::string& tenant, const std::string& kind) override;

  // A call refused as unauthenticated (coordinator/auth/authenticator.h), by `reason`:
  // dapple_auth_failures_total{reason}.
  void OnAuthFailure(absl::string_view reason);

  // Removes the per-job series of jobs that ended at least ended_job_retention_ms ago. Runs
  // before every collection; public for tests.
  void ExpireEndedJobs();

 private:
  using StageKey = std::tuple<int, int, std::string>;  // stage, replica, worker
  struct Exported {                                    // a job whose per-job series exist
    std::string name;
    v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
    bool ran = false;                    // progress gauges exist
    int64_t ended_unix_ms = 0;           // > 0: ended then
    int64_t last_step = -1;              // metrics.step() when the timestamp was taken
    std::map<StageKey, int64_t> stages;  // exported ranks -> skipped steps counted so far
  };

  prometheus::Labels JobLabels(const std::string& id, const std::string& name) const;
  void SetJobStateLocked(const std::string& id, Exported& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetProgressLocked(const v1::Job& job, Exported& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetStagesLocked(const v1::Job& job, Exported& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveStagesLocked(const std::string& id, Exported& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveJobLocked(const std::string& id, Exported& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CountJobLocked(v1::JobState state, int delta) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CountWorkerLocked(v1::WorkerState state, int delta) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetWorkerSeriesLocked(const v1::WorkerInfo& worker) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveWorkerSeriesLocked(const std::string& id, const std::string& hostname)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const CoordinatorMetricsOptions options_;
  const std::shared_ptr<metrics::MetricSet> set_;
  absl::Mutex mu_;
  std::map<std::string, v1::JobState> job_states_ ABSL_GUARDED_BY(mu_);  // every job seen
  std::map<v1::JobState, int64_t> job_counts_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Exported> exported_ ABSL_GUARDED_BY(mu_);
  struct WorkerSeen {
    std::string hostname;
    v1::WorkerState state = v1::WORKER_STATE_UNSPECIFIED;
  };
  std::map<std::string, WorkerSeen> workers_ ABSL_GUARDED_BY(mu_);
  std::map<v1::WorkerState, int64_t> worker_counts_ ABSL_GUARDED_BY(mu_);
  // Per tenant the device types of its exported device series; the previous pass's time.
  std::map<std::string, std::set<std::string>> tenant_types_ ABSL_GUARDED_BY(mu_);
  int64_t last_pass_unix_ms_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_METRICS_COORDINATOR_METRICS_H_
