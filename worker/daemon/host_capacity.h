// The host's parallel compute capacity a cpu worker reports at registration
// (RegisterWorkerRequest.host_compute_capacity) and refines in its heartbeats
// (HostCapacityEstimate): how many single-thread computations the host runs at full speed at
// once. The coordinator puts it on the host's topology node
// (ClusterNode.compute_capacity), and the plan simulator slows stages that compute at once on
// the host by min(1, capacity / k) (coordinator/planner/host_contention.h). A host's vCPU count
// says nothing about it: two vCPUs may be two hyperthreads of one core, or share a core with
// other tenants.
// Thread safety: every function may be called from any thread.
#ifndef DAPPLE_WORKER_DAEMON_HOST_CAPACITY_H_
#define DAPPLE_WORKER_DAEMON_HOST_CAPACITY_H_

#include <functional>
#include <vector>

namespace dapple::worker {

// The capacity from one measurement: `threads` copies of a fixed piece of work run at once took
// `parallel_ms` (wall clock, all of them), one copy alone `single_ms`: threads * single_ms /
// parallel_ms, clamped to [1, threads] (noise can push it outside). 1 when threads <= 1 or a
// time is not > 0.
double CapacityFromTimes(int threads, double single_ms, double parallel_ms);

// Measures the capacity with `threads` threads (when <= 0, std::thread::hardware_concurrency()
// up to 16, so a larger host reports at most 16):
// `work` (the job's kind of compute: by default single-thread sgemm of 512 x 512 x 512 through
// the worker's dense kernel, kernels/cpu/dense.h) is timed alone, then on every thread at once;
// the median over `trials` trials of CapacityFromTimes. About trials * (1 + threads /
// capacity) * the work's time (about 0.2 s by default here). Workers of one host measure one at
// a time (an exclusive flock on $TMPDIR/dapple-host-capacity.lock, /tmp by default), so this may
// first wait for another worker's measurement; concurrent ones would see each other. Other load on
// the host at the time changes it (under heavy load every thread gets its own share of the cores,
// so it comes out higher, which is what two stages then see).
double MeasureHostComputeCapacity(int threads = 0, int trials = 5,
                                  const std::function<void()>& work = nullptr);

// Held while measuring the host (its capacity, its loopback link:
// worker/comm/loopback_allreduce.h) and while a cpu worker profiles a model's layers
// (profile_runner.h), which times the same cores. Workers started together on one host
// (scripts/demo, a node's daemons after a reboot) would otherwise measure at the same moment, each
// one's "every thread at once" run competing with the others': a host of capacity 1.4 measured 1.00
// and 1.44 from two workers. An exclusive flock on a host-wide file
// ($TMPDIR/dapple-host-capacity.lock, /tmp by default) makes them measure one after the other;
// without the file (no writable /tmp) they measure unserialised. The constructor blocks until the
// lock is held.
class HostMeasurementLock {
 public:
  HostMeasurementLock();
  ~HostMeasurementLock();
  HostMeasurementLock(const HostMeasurementLock&) = delete;
  HostMeasurementLock& operator=(const HostMeasurementLock&) = delete;

 private:
  int fd_ = -1;
};

// Held while a cpu worker runs a rank of a job (WorkerDaemon::RunJob): a shared flock on a
// host-wide file ($TMPDIR/dapple-host-jobs.lock, /tmp by default), so that the other workers of
// the host can tell that a job computes here (HostRunsJob) and leave their idle measurements for
// later. A refinement measured during another worker's job saw its stages (capacity 1.0-1.4 for
// a host of 1.9) and took about 1.5 s of CPU from the job over the measurement's 0.2 s of wall
// time per trial (perf, the bench/throughput.py 1-stage job with a second, idle worker).
// Without the file (no writable /tmp) it holds nothing and HostRunsJob says false. Never blocks.
class HostJobLock {
 public:
  HostJobLock();
  ~HostJobLock();
  HostJobLock(const HostJobLock&) = delete;
  HostJobLock& operator=(const HostJobLock&) = delete;

 private:
  int fd_ = -1;
};

// Whether a HostJobLock is held on this host now, by any process (this one included). A
// snapshot: a job may start right after it returns. False when the file cannot be opened.
// Never blocks.
bool HostRunsJob();

// A worker's estimate of its host's capacity: the median of its measurements so far. One
// measurement can read far too low when other processes start at the same moment (the
// coordinator and the workers of `scripts/demo`, started together, on a 2-vCPU host: 1.00 and
// 1.11 at registration, against 1.89-1.97 for the same host measured alone); so a cpu worker
// measures again a few times in its first seconds while idle (WorkerDaemon, kCapacityRefinements)
// and reports the median in its heartbeats.
// Thread safety: none (the owner locks).
class HostCapacityEstimate {
 public:
  // Records one measurement (MeasureHostComputeCapacity's result; values < 1 or not finite are
  // ignored).
  void Add(double capacity);
  // The median of the measurements (the mean of the middle two for an even count); 0 when there
  // are none.
  double Median() const;
  int count() const { return static_cast<int>(measured_.size()); }

 private:
  std::vector<double> measured_;
};

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_DAEMON_HOST_CAPACITY_H_
