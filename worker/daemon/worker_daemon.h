// dapple-worker's daemon: registers with the coordinator, heartbeats, and runs the stage
// assignments it is given, one job at a time, each on its own thread.
//
// A job's error never ends the daemon: the job's rank reports FAILED with the cause and the
// daemon goes back to idle. A job the coordinator aborts (cancelled, failed elsewhere, or a
// coordinator that no longer knows this worker) stops at the next action boundary or blocking
// call, bounded by the transport's checks of the abort flag.
//
// Reaching the coordinator: every control RPC has a deadline (2 s; PublishEndpoint 5 s, waiting
// for a reconnect within it; progress reports 5 s, retried), and the channel's reconnect
// backoff is bounded to 100..500 ms, so a restarted coordinator is reached again within about
// one heartbeat interval, however often it restarted. Heartbeats wait for a connection being
// re-established (within their deadline) rather than failing at once, so the first heartbeat
// after the coordinator listens again reaches it.
//
// Coordinator restarts (docs/coordinator.md, "Coordinator restarts"): the running rank trains on
// while the coordinator is away (its reports wait in the ProgressReporter; the pipeline's data
// path is worker-to-worker). A coordinator that answers "unknown worker" (a heartbeat, or a
// progress report, which wakes the heartbeat loop at once) is registered with again at once,
// claiming the rank this worker runs (or just finished) under its previous id
// (RegisterWorkerRequest.reattach); accepted, the rank goes on and its acknowledged history is
// delivered again (ProgressReporter::Replay); refused, the rank is aborted.
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
#include "grpcpp/security/credentials.h"
#include "worker/comm/loopback_allreduce.h"
#include "worker/daemon/call_auth.h"
#include "worker/daemon/daemon_observer.h"
#include "worker/daemon/host_capacity.h"
#include "worker/data/dataset.h"

namespace dapple::worker {

class ProgressReporter;
class StageLinks;
class Transport;
class UcxTransport;

struct WorkerOptions {
  std::string coordinator = "127.0.0.1:7600";  // host:port
  std::string name;                            // optional stable worker name
  std::vector<std::string> devices = {"cpu"};
  // When set: <dir>/<job>.stage<s>.params after each successful job
  // (<job>.stage<s>.replica<r>.params for a stage with replicas).
  std::string dump_dir;
  absl::Duration transport_timeout = absl::Seconds(120);  // longest wait for one message
  absl::Duration rendezvous_timeout = absl::Seconds(60);  // longest wait for the peers
  // --collective-host: the address this worker's Gloo AllReduce (among a stage's replicas)
  // binds to and tells the other replicas; empty: CollectiveHost(coordinator).
  std::string collective_host;
  // --sync-checkpoints: a rank encodes and writes its checkpoint shard in the training loop
  // (the loop stalls for the whole save) instead of on a background thread after the snapshot
  // (stage_checkpointer.h); for measuring the difference (bench/checkpoint_stall.py).
  bool sync_checkpoints = false;
  // How to reach the coordinator: TLS or plain text (common/grpc_tls.h; ParseWorkerFlags makes
  // them from --ca, --tls-cert, --tls-key); null: plain text.
  std::shared_ptr<grpc::ChannelCredentials> coordinator_credentials;
  // Whether those credentials are TLS (--ca given), and whether they carry a client certificate
  // (--tls-cert): a worker whose connection the coordinator closes is told what to check
  // (ClosedByCoordinatorHint).
  bool coordinator_tls = false;
  bool coordinator_client_certificate = false;
  // The cluster's join token (--join-token-file or $DAPPLE_JOIN_TOKEN): RegisterWorker carries
  // it; every later call carries the worker credential the coordinator answered (call_auth.h).
  std::string join_token;
  // Where join_token came from, named when the coordinator refuses it.
  std::string join_token_source = "--join-token-file";
  // --comm-delay-max-ms (fault injection): a random 0..this wait before every send and receive
  // between stages (worker/comm/delay_transport.h); zero: off.
  absl::Duration comm_delay_max = absl::ZeroDuration();
  // --device-memory: memory of the compute device reported at registration; 0: probed
  // (device_memory.h).
  int64_t device_memory_bytes = 0;
  // Told about registrations, ranks and progress reports (the worker's Prometheus metrics,
  // worker_metrics.h); null: nobody.
  std::shared_ptr<DaemonObserver> observer;
};

// The warning to log when the coordinator registered this worker as `worker_id` although
// --name `requested_name` was asked for (the name is held by a live worker): "--name cpu-a is
// taken by a live worker; registered as w-1". Empty when no name was asked for or it was given.
std::string NameTakenWarning(const std::string& requested_name, const std::string& worker_id);

// The default --collective-host: the local address this host reaches `coordinator` (host:port)
// from (a connected UDP socket's name: the interface other workers most likely reach too);
// "127.0.0.1" for a loopback coordinator or when it cannot be determined.
std::string CollectiveHost(const std::string& coordinator);

// OK when this host can bind a TCP socket to `host` (an IPv4 address or name, as Gloo binds
// --collective-host), checked at start so that a worker given another machine's address is
// refused then, not left IDLE to fail every replicated job sent to it. kInvalidArgument:
// "--collective-host 8.8.8.8: cannot bind to it (Cannot assign requested address): give an
// address of this host, or leave the flag out". Binds port 0 and closes at once.
absl::Status CheckCollectiveHost(const std::string& host);

// `status` of a failed step of rank (assignment.stage, assignment.replica), with the stage's
// other replicas named when it is the AllReduce among them that lost a peer (kUnavailable):
// "... (lost a peer of the AllReduce: stage 1 replica 1 (worker w-4))"; else `status` as is.
absl::Status NameLostReplicas(const v1::StageAssignment& assignment, const absl::Status& status);

class WorkerDaemon {
 public:
  explicit WorkerDaemon(WorkerOptions options);
  ~WorkerDaemon();

  // Runs until Stop(). Returns OK after a stop; never returns because of a job's error.
  absl::Status Run();
  // Asks Run to return. Run then deregisters first (best effort, at most 2 s), so that the
  // coordinator fails a running job with "worker W (stage S of job J) shut down"; then aborts
  // the job (whose final report, should it still reach the coordinator, says the worker is
  // shutting down) and waits for it. Thread-safe (call from a signal thread).
  void Stop();

 private:
  // A job's datasets, kept for the next job on the same data.
  struct DataCache {
    std::string key;  // DataKey (worker_job.cc) of what was loaded
    Datasets data;
  };
  struct JobResources;  // transport, links and runtime of the running job
                        // (worker_daemon_internal.h)

  // `wait_for_coordinator`: the previous attempt failed (the coordinator is away). The call then
  // waits, up to kRetryRegisterDeadline, for the channel to connect instead of failing at once:
  // gRPC's synchronous client makes progress on a connection attempt only while a call polls
  // it, so fail-fast calls every interval left a coordinator that was back unnoticed for 5 s.
  absl::Status Register(bool wait_for_coordinator = false);
  // Register, logging the first failure of a streak (and the recovery) only. kUnauthenticated
  // when the coordinator refused the join token (logged: "the coordinator refused the join
  // token: ...; check --join-token-file"): Run then stops and returns it (exit code 1).
  absl::Status TryRegister(bool* warned);
  void Deregister();
  // False when the coordinator answered that it does not know this worker (worker_id_ is then
  // cleared and a running job aborted); true otherwise, also when the call failed.
  bool HeartbeatOnce();
  std::string WorkerId();
  void StartJob(const v1::StageAssignment& assignment);
  void RunJob(v1::StageAssignment assignment);
  // Runs the job; what it creates goes into `resources`, which the caller destroys only after
  // the final report was delivered, so that no peer sees this rank's connections close first.
  absl::Status TrainJob(const v1::StageAssignment& assignment, ProgressReporter* reporter,
                        JobResources* resources);
  // The datasets of `data` (LoadDatasets), from the cache when the same data was loaded before
  // (same data.* fields and, for a text file, the same file: device, inode, size and
  // modification time). One entry per data.path: loading another version replaces it.
  absl::StatusOr<Datasets> LoadData(const v1::DataSpec& data);
  // Creates this rank's UCX transport, publishes its address (and the NCCL ids `links` owns)
  // through the coordinator's rendezvous, waits (bounded by rendezvous_timeout, abortable) for
  // every rank's, connects UCX to the neighbouring stages and then `links`' device transports.
  // The transport is stored in `*transport` as soon as it exists, also when a later step fails.
  absl::Status ConnectNeighbours(const v1::StageAssignment& assignment,
                                 const std::string& worker_id, StageLinks* links,
                                 std::unique_ptr<UcxTransport>* transport);
  // Joins the Gloo collectives this rank needs (schedule::LowerOptionsFor): its stage's
  // replicas' (replicas > 1; prefix "<job>/stage-<s>", res->replicas), the tied weights' group
  // (a stage holding a tied weight split across stages; "<job>/tied", res->tied) and the job's
  // (gradient clipping over more than one rank; "<job>/job", res->job). Rendezvous through the
  // coordinator's per-job store (coordinator_store.h), bound to --collective-host, every wait
  // bounded by transport_timeout.
  absl::Status JoinCollectives(const v1::StageAssignment& assignment, const std::string& worker_id,
                               JobResources* res);
  // The closing handshake with every rank of the neighbouring stages (FIN both ways), then
  // WaitSends.
  absl::Status CloseWithNeighbours(Transport* transport, const v1::StageAssignment& assignment);
  void ReapJob(bool wait);
  // Measures a model for the coordinator (ProfileRequest in a heartbeat reply) on its own
  // thread, so heartbeats go on; one at a time: a request while one runs is answered at once
  // with busy_with_request_id R and the error "worker W is measuring another model (request R)"
  // (the coordinator asks again when this worker is done, or asks another one, rather than wait
  // for its deadline). Heartbeat thread only.
  void StartProfile(const v1::ProfileRequest& request);
  // The request being measured now, "" when none (registrations and heartbeats send it, so that
  // a restarted coordinator does not ask this worker while it measures). Heartbeat thread only.
  std::string MeasuringRequestId() const;
  // ReportProfile (2 s deadline; a failure is logged).
  void SendProfileReport(const v1::ReportProfileRequest& report);
  void JoinProfile();
  // A cpu worker's capacity thread: measures the host's capacity again at kCapacityRefinements'
  // times after the first registration, each time the worker is idle (no job, no profile; a
  // busy time is skipped), and adds it to capacity_estimate_. Returns at Stop or after the
  // last one.
  void RefineHostCapacity();
  // One measurement of the host (not under mu_: it takes both cores for a fraction of a second):
  // its compute capacity and its loopback link (worker/comm/loopback_allreduce.h), added to
  // capacity_estimate_ and link_estimate_. A link measurement that fails is logged and skipped.
  void MeasureHost();
  // A request's host fields from the estimates: host_compute_capacity and loopback_link (when
  // one was measured).
  template <typename Request>
  void SetHostEstimates(Request* request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool IsCpuWorker() const;

  WorkerOptions options_;
  // RegisterWorkerRequest.instance_key: drawn once, sent at every registration, never logged.
  const std::string instance_key_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::WorkerControl::Stub> stub_;
  CallAuth auth_{options_.join_token};  // after options_: built from it

  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::string worker_id_ ABSL_GUARDED_BY(mu_);
  // A cpu worker's host_compute_capacity (host_capacity.h): measured at the first registration
  // (a fraction of a second), then refined by RefineHostCapacity; registrations and heartbeats
  // send capacity_estimate_.Median().
  HostCapacityEstimate capacity_estimate_ ABSL_GUARDED_BY(mu_);
  // Likewise its loopback link (RegisterWorkerRequest.loopback_link).
  LinkEstimateMedian link_estimate_ ABSL_GUARDED_BY(mu_);
  std::string job_id_ ABSL_GUARDED_BY(mu_);  // running job, empty when idle
  bool job_finished_ ABSL_GUARDED_BY(mu_) = false;
  // The id the coordinator knew this worker by before it answered "unknown worker" (for the
  // rank claim of the next registration; cleared by it).
  std::string previous_id_ ABSL_GUARDED_BY(mu_);
  // The rank of the running job, or of the last job when its rank finished DONE (done_ set),
  // claimed at a re-registration; job_id empty: none.
  v1::RankClaim rank_ ABSL_GUARDED_BY(mu_);
  // The running job's reporter while it exists (RunJob), for Replay after a re-attach.
  ProgressReporter* reporter_ ABSL_GUARDED_BY(mu_) = nullptr;
  // A progress report found the coordinator without this worker: heartbeat (and register) now.
  bool reregister_now_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<int64_t> last_step_{0};  // the running rank's newest completed step
  absl::Duration heartbeat_interval_ = absl::Milliseconds(500);
  std::thread job_thread_;
  std::thread profile_thread_;
  std::thread capacity_thread_;  // RefineHostCapacity, started by the first registration
  std::atomic<bool> profiling_{false};
  std::string profile_request_id_;  // the last request measured; heartbeat thread only
  std::atomic<bool> abort_{false};
  // The on-demand checkpoint step of the running job's newest progress ack (0: none); written
  // by its ProgressReporter, read by the job thread (worker/checkpoint/stage_checkpointer.h).
  std::atomic<int64_t> checkpoint_step_{0};
  std::atomic<bool> stopping_{false};  // Stop() was called
  // The last heartbeat found the coordinator unreachable (UNAVAILABLE, DEADLINE_EXCEEDED).
  std::atomic<bool> heartbeat_failing_{false};
  std::map<std::string, DataCache> data_cache_;  // by data.path; job thread only
};

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_DAEMON_WORKER_DAEMON_H_
