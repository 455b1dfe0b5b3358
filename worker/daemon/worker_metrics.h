// WorkerMetrics: dapple-worker's Prometheus metrics (common/metrics/metric_list.h, binary
// kWorker), kept as the daemon's DaemonObserver: the id it is registered as and its host
// (dapple_worker_info), whether it runs a rank (dapple_worker_busy) and which
// (dapple_worker_rank: job_id, stage, replica), the steps it ran and the seconds they spent by
// kind (forward, backward, comm, allreduce, optimizer, idle: the kinds partition each step's
// wall time, StageStepStats), ranks finished by outcome, and the peak memory, peak
// activations and completion time of its last step, its checkpoint saves and the training
// loop's stall at them, and the checkpoint shards it resumed from by source (memory or disk).
// Counters are lifetime totals of the process, so rate() over them is the worker's utilisation
// whatever jobs it ran.
//
// Thread safety: thread-safe.
#ifndef DAPPLE_WORKER_DAEMON_WORKER_METRICS_H_
#define DAPPLE_WORKER_DAEMON_WORKER_METRICS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics/metric_set.h"
#include "worker/daemon/daemon_observer.h"

namespace dapple::worker {

// Unix time in ms from the wall clock.
int64_t MetricsWallClockUnixMs();

class WorkerMetrics : public DaemonObserver {
 public:
  explicit WorkerMetrics(std::function<int64_t()> now_unix_ms = MetricsWallClockUnixMs);

  // What the HTTP endpoint serves (common/metrics/metrics_server.h).
  std::shared_ptr<metrics::MetricSet> metric_set() const { return set_; }

  void OnRegistered(const std::string& worker_id, const std::string& hostname) override;
  void OnRankStarted(const v1::StageAssignment& assignment) override;
  void OnReport(const v1::ProgressReport& report) override;
  void OnCheckpointStall(double stall_seconds, double step_seconds) override;
  void OnCheckpointLoad(int from_memory, int from_disk) override;

 private:
  void EndRankLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::function<int64_t()> now_unix_ms_;
  const std::shared_ptr<metrics::MetricSet> set_;
  absl::Mutex mu_;
  prometheus::Labels info_ ABSL_GUARDED_BY(mu_);  // labels of dapple_worker_info; empty: none
  prometheus::Labels rank_ ABSL_GUARDED_BY(mu_);  // labels of dapple_worker_rank; empty: idle
};

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_DAEMON_WORKER_METRICS_H_
