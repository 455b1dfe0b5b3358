// dapple-worker's daemon: registers with the coordinator, heartbeats, and runs the stage
// assignments it is given, one job at a time, each on its own thread.
//
// A job's error never ends the daemon: the job's rank reports FAILED with the cause and the
// daemon goes back to idle. A job the coordinator aborts (cancelled, failed elsewhere, or a
// coordinator that no longer knows this worker) stops at the next action boundary or blocking
// call, bounded by the transport's checks of the abort flag.
#ifndef DAPPLE_WORKER_DAEMON_WORKER_DAEMON_H_
#define DAPPLE_WORKER_DAEMON_WORKER_DAEMON_H_

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dapple/v1/worker.grpc.pb.h"
#include "worker/data/fashion_mnist.h"

namespace dapple::worker {

class ProgressReporter;
class StageLinks;
class Transport;
class UcxTransport;

struct WorkerOptions {
  std::string coordinator = "127.0.0.1:7600";  // host:port
  std::string name;                            // optional stable worker name
  std::vector<std::string> devices = {"cpu"};
  std::string dump_dir;  // when set: <dir>/<job>.stage<s>.params after each successful job
  absl::Duration transport_timeout = absl::Seconds(120);  // longest wait for one message
  absl::Duration rendezvous_timeout = absl::Seconds(60);  // longest wait for the peers
};

class WorkerDaemon {
 public:
  explicit WorkerDaemon(WorkerOptions options);
  ~WorkerDaemon();

  // Runs until Stop(). Returns OK after a stop; never returns because of a job's error.
  absl::Status Run();
  // Asks Run to return; a running job is aborted. Thread-safe (call from a signal thread).
  void Stop();

 private:
  struct DataCache {
    std::shared_ptr<const Dataset> train, test;
  };

  absl::Status Register();
  void Deregister();
  void HeartbeatOnce();
  void StartJob(const v1::StageAssignment& assignment);
  void RunJob(v1::StageAssignment assignment);
  absl::Status TrainJob(const v1::StageAssignment& assignment, ProgressReporter* reporter);
  absl::StatusOr<DataCache> LoadData(const std::string& path);
  // Creates this rank's UCX transport, publishes its address (and the NCCL ids `links` owns)
  // through the coordinator's rendezvous, waits (bounded by rendezvous_timeout, abortable) for
  // every rank's, connects UCX to the neighbouring stages and then `links`' device transports.
  absl::StatusOr<std::unique_ptr<UcxTransport>> ConnectNeighbours(
      const v1::StageAssignment& assignment, const std::string& worker_id, StageLinks* links);
  // The closing handshake with the neighbouring stages (FIN both ways), then WaitSends.
  absl::Status CloseWithNeighbours(Transport* transport, const v1::StageAssignment& assignment);
  void ReapJob(bool wait);

  WorkerOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::WorkerControl::Stub> stub_;

  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::string worker_id_ ABSL_GUARDED_BY(mu_);
  std::string job_id_ ABSL_GUARDED_BY(mu_);  // running job, empty when idle
  bool job_finished_ ABSL_GUARDED_BY(mu_) = false;
  absl::Duration heartbeat_interval_ = absl::Milliseconds(500);
  std::thread job_thread_;
  std::atomic<bool> abort_{false};
  std::map<std::string, DataCache> data_cache_;  // by data.path; job thread only
};

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_DAEMON_WORKER_DAEMON_H_
