// CoordinatorService: the coordinator's logic behind both gRPC services (Coordinator for
// dapplectl, WorkerControl for workers), with no gRPC in it: every handler takes the request
// proto and fills the response proto, returning absl::Status. grpc_service.h adapts it. Its
// parts, one concern per file: coordinator_service.cc (the job handlers, the background loop,
// ending runs), coordinator_service_start.cc (starting a run: what reads files or plans is
// prepared before the lock), coordinator_service_submit.cc (SubmitJob and PlanJob: parsing,
// data, resume checks and planning, all outside the lock), coordinator_service_workers.cc (the
// WorkerControl handlers), coordinator_service_scheduling.cc (the scheduling pass),
// coordinator_service_restart.cc and coordinator_service_reattach.cc (automatic restarts,
// coordinator restarts).
//
// It owns the JobManager (job lifecycle + SQLite), the WorkerRegistry (worker lifecycle), the
// CheckpointManager (coordinator/checkpoints: per-tenant checkpoint folders, publishing, who may
// resume from what), the Rendezvous tables and a background thread that every tick_interval_ms (or
// sooner when woken by a submit, a registration or a freed worker) runs Tick(): health check,
// progress flush, scheduling (coordinator_service_scheduling.cc: tenants' quotas through the
// SchedulingManager, preemption, pending reasons; docs/scheduling.md).
//
// Worker protocol (docs/coordinator.md):
//   RegisterWorker -> id + heartbeat interval (with a RankClaim after a coordinator restart:
//   the claimed rank back, see "Coordinator restarts" in docs/coordinator.md). Heartbeat every
//   interval with running_job_id; the response carries a new StageAssignment once (only while the
//   worker reports no running job), abort_job_ids for a job the worker reports that it must stop
//   (ended, or not its job), or unknown_worker (never registered, or DEAD: register again).
//   PublishEndpoint / GetPeers: rendezvous of the job's ranks.
//   ReportProgress: any report may carry the rank's log lines (kept in LogStore, also when
//   the job already ended, as long as the worker is one of its ranks);
//   STEP / EVAL / SAMPLE (last stage: metrics, the generated text), DONE (all
//   ranks: SUCCEEDED), FAILED
//   (job FAILED naming stage and worker), ABORTED (worker IDLE).
//   DeregisterWorker: the worker is shutting down; it is forgotten at once, its running job
//   FAILS and its unanswered profile requests fail.
//   ReportProfile: the answer to a ProfileRequest (an IDLE worker's heartbeat reply carries one
//   when the coordinator wants a model measured; see "Measured profiles" below).
//
// Measured profiles: a job planned on a profile estimated from FLOPs (no measured profile of its
// model on its device kind was cached at submission; planner not manual) is, when its workers
// are free, first measured on the first of them that has no unanswered request of its own (a
// worker measures one model at a time; ProfileRequest at the job's micro-batch size, waiting at
// most profile_timeout_ms; the job's message says "measuring ..."), then re-planned with the
// measured profile. While every free worker is still measuring another model (e.g. that of a
// job cancelled meanwhile, or one a previous coordinator asked for: workers say what they
// measure in their registrations and heartbeats) the job waits: "waiting to measure the model's
// layers on cpu: every free worker is measuring another model"; a worker that answers a request
// with "busy" (ReportProfileRequest.busy_with_request_id) is asked again when done; the answer
// to a request the worker said it measures but this coordinator did not wait for (a previous
// coordinator's, or one past its deadline) is cached all the same (ProfileCache::Adopt). A worker
// measuring one model for more than profile_timeout_ms no longer holds the job back. Measurements
// are cached by model and device kind (coordinator/cluster/profile_cache.h) and kept in the
// database (profile_store.h). When measuring fails (the worker's error), times out, or its
// worker dies or deregisters (then another worker is asked, once), the job runs on its
// estimated plan and the plan's notes say why.
//
// A job needs one worker per device of its stored plan (the sum of its stages' replicas: P
// today), which may be fewer than parallel.devices when the planner chose fewer stages.
// Pending jobs say why they wait, in Job.pending_reason (scheduling_policy.h PendingReasonName)
// and their message, e.g. an admin's job short of workers "waiting for 3 idle workers:
// 2 registered, 2 idle" (registered = IDLE or BUSY; idle = IDLE and running nothing). Refreshed
// on every scheduling pass when they change; cleared when the job starts.
//
// Automatic restarts (training.restart; the rules: coordinator/jobs/restart_policy.h; the
// code: coordinator_service_restart.cc): a lost worker (DEAD, deregistered) or a rank's error
// goes through FailOrRestartLocked. When the policy restarts, the job goes RUNNING ->
// RESTARTING: its ranks are stopped as a cancel stops them (their heartbeats get the abort,
// undelivered assignments are dropped). Each tick's restart pass then waits the backoff and for
// the failed run's ranks to stop, plans the job again outside the lock on the live idle workers
// (at most parallel.devices; the same spec, so the same global batch), reads the newest
// published checkpoint's manifest, and starts it again under the same id (RESTARTING ->
// PLANNING -> RUNNING), resuming after that checkpoint's step (from scratch without one).
// Job.restarts / steps_redone / restart_history and the Restarting, Replanned and Resumed
// events record it. No usable worker for wait_for_workers_seconds: FAILED.
//
// Errors by what the caller should do: kInvalidArgument (bad spec or request field),
// kNotFound ("no job job-9", "unknown worker w-9: register again"), kFailedPrecondition
// ("job job-3 already SUCCEEDED", a rank that is not the job's), kInternal (database write),
// kUnavailable (WatchJob while shutting down).
//
// Thread safety: thread-safe; every handler may be called from any thread. Lock order: the
// service mutex before the CheckpointManager's, before the JobManager's. No file is read or
// written and no plan is made under the service mutex: submits plan and read before taking it,
// Tick prepares the jobs it may start before it (PrepareStarts), a restart plans and reads its
// checkpoint before it (RestartPass), a checkpoint is published after ReportProgress released
// it. (Under it still: the SQLite stores' writes, and a starting job's rank programs built and
// checked by the schedule simulator, schedule::JobPrograms.)
#ifndef DAPPLE_COORDINATOR_SERVICE_COORDINATOR_SERVICE_H_
#define DAPPLE_COORDINATOR_SERVICE_COORDINATOR_SERVICE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/auth/identity.h"
#include "coordinator/checkpoints/checkpoint_manager.h"
#include "coordinator/cluster/collective_refinement.h"
#include "coordinator/cluster/profile_cache.h"
#include "coordinator/cluster/profile_store.h"
#include "coordinator/cluster/rendezvous.h"
#include "coordinator/cluster/worker_registry.h"
#include "coordinator/jobs/job_manager.h"
#include "coordinator/jobs/log_store.h"
#include "coordinator/jobs/progress_tracker.h"
#include "coordinator/jobs/repeated_warnings.h"
#include "coordinator/jobs/restart_policy.h"
#include "coordinator/jobs/stage_metrics_tracker.h"
#include "coordinator/jobs/straggler_detector.h"
#include "coordinator/jobs/trace_store.h"
#include "coordinator/jobs/worker_id_store.h"
#include "coordinator/planner/planner.h"
#include "coordinator/scheduling/quota_store.h"
#include "coordinator/scheduling/scheduling_manager.h"
#include "coordinator/scheduling/scheduling_observer.h"
#include "coordinator/service/data_roots.h"
#include "coordinator/service/planning_slots.h"
#include "dapple/v1/admin.pb.h"
#include "dapple/v1/coordinator.pb.h"
#include "dapple/v1/worker.pb.h"

namespace dapple::coordinator {

struct CoordinatorOptions {
  std::string db_path = "dapple.db";
  int64_t heartbeat_interval_ms = 500;  // told to workers at registration
  int64_t worker_timeout_ms = 5000;     // silence after which a worker is DEAD
  int64_t tick_interval_ms = 100;       // background pass period
  // A background pass later than tick_interval_ms + stall_grace_ms means the coordinator itself
  // stalled (a starved CPU, a pause): heartbeats sent meanwhile are still queued, so no worker is
  // judged DEAD until stall_grace_ms after that pass. 0: off (tests that move the clock by hand).
  int64_t stall_grace_ms = 1000;
  int64_t metrics_persist_interval_ms = 1000;
  int64_t watch_min_interval_ms = 100;  // WatchJob sends at most one snapshot per interval
  // A DEAD worker is listed this long after it died, then forgotten (removed, as if it had
  // deregistered: a later heartbeat gets unknown_worker). 0: in the pass that finds it DEAD.
  int64_t dead_worker_retention_ms = 600'000;
  std::function<int64_t()> now_unix_ms = WallClockUnixMs;  // every timestamp and timeout
  // Device memory, links and FLOP rates assumed where workers or files say nothing.
  PlanDefaults plan_defaults;
  // Measured profiles the planner prefers to estimated ones, filled by workers' ReportProfile;
  // null: the service makes its own (empty) cache.
  std::shared_ptr<ProfileCache> profile_cache;
  // How long a worker may take to measure a job's profile before the job is planned with the
  // estimated one instead.
  int64_t profile_timeout_ms = 60000;
  // Measured profiles, their refinements and the collective overhead are kept in the database
  // (coordinator/cluster/profile_store.h); at start the service reuses the profiles measured at
  // most this long ago and measures older ones again (--profile-max-age-h; 0: always).
  int64_t profile_max_age_ms = int64_t{168} * 3'600'000;
  // Measure jobs' models before planning them (see "Measured profiles"); false: plan on the
  // profile known at submission (unit tests of the scheduler that do not play the worker).
  bool measure_profiles = true;
  // Root of the jobs' checkpoint folders (<root>/<tenant>/<job id>/step-<N>/, "_admin" for
  // admins' jobs; docs/operations.md, "Checkpoints"); empty: "checkpoints" next to db_path.
  // Published checkpoints kept per job (older ones are deleted); 0: all.
  std::string checkpoint_dir;
  int keep_checkpoints = kDefaultKeepCheckpoints;
  // Workers record a timeline of step 1 and of every this many steps (StageAssignment
  // .trace_every_steps; `dapplectl trace`); 0: never.
  int32_t trace_every_steps = 50;
  // Told about every job and worker lifecycle change (coordinator/jobs/job_observer.h,
  // coordinator/cluster/worker_observer.h: the Prometheus metrics); null: nobody.
  std::shared_ptr<JobObserver> job_observer;
  std::shared_ptr<WorkerObserver> worker_observer;
  // Scheduling (docs/scheduling.md): a queued job that waited this long holds the devices it
  // needs as they come free (QuotaPolicy's starvation rule; --starvation-after-s).
  int64_t starvation_after_ms = 10 * 60 * 1000;
  // A preempted job is asked for a checkpoint first and stopped once it is published, or after
  // this long without it (then it resumes from its newest earlier checkpoint, or from scratch).
  int64_t preemption_checkpoint_timeout_ms = 30'000;
  // TENANT EXISTENCE HOOK (issue 16, wired at merge to auth::CredentialStore): OK when tenant
  // `name` exists, kNotFound "no tenant <name>" otherwise. Null: every valid tenant name (1-63
  // of [a-z0-9-], starting with a letter) is taken to exist. SetTenantQuota calls it.
  std::function<absl::Status(const std::string& name)> tenant_exists;
  // Told each scheduling pass's per-tenant state and every preemption (the per-tenant metrics);
  // null: nobody.
  std::shared_ptr<scheduling::SchedulingObserver> scheduling_observer;
  // The folders whose files a job may name (data.path, parallel.emulation.profile;
  // coordinator/service/data_roots.h, --data-root). Create refuses a relative root or "/".
  std::vector<std::string> data_roots = DefaultDataRoots();
};

class CoordinatorService {
 public:
  // Receives WatchJob's snapshots; returns false when the client is gone.
  using JobEventSink = std::function<bool(const v1::JobEvent&)>;

  // Locks and opens the job database (JobManager::Open: recovery of an existing one). Errors
  // as there, e.g. kFailedPrecondition "cannot open job database '/x/y.db': unable to open
  // database file", "database d.db is in use by another dapple-coordinator (pid 123)".
  static absl::StatusOr<std::unique_ptr<CoordinatorService>> Create(CoordinatorOptions options);

  // Shutdown(), then writes any unsaved progress.
  ~CoordinatorService();
  CoordinatorService(const CoordinatorService&) = delete;
  CoordinatorService& operator=(const CoordinatorService&) = delete;

  // Starts the background thread (no-op when started). Tests may instead call Tick().
  void Start();

  // Stops the background thread, ends every WatchJob (EndWatches) and writes unsaved
  // progress. Idempotent. Other handlers keep working (for calls still in flight).
  void Shutdown();

  // Ends every WatchJob in progress with kUnavailable "coordinator is shutting down" (at once
  // when it waits for a change, else within 100 ms); later WatchJob calls get that status at
  // once, before any snapshot. The background thread and the other handlers keep working.
  // GrpcServer::Shutdown calls it. Idempotent.
  void EndWatches();

  // One background pass now: workers silent for worker_timeout_ms become DEAD (failing their
  // running job), workers DEAD for dead_worker_retention_ms are forgotten (one log line each),
  // progress older than the persist interval is written, then the scheduling pass
  // (coordinator_service_scheduling.cc: preemptions advanced, the policy's decision applied) and
  // the PENDING jobs' reasons and messages say why they still wait.
  void Tick();

  // --- Coordinator (dapplectl) ---

  // Parses and validates request.spec_yaml (ParseJobSpec, messages name request.source_name,
  // "<spec>" when empty), resolves its data (ResolveJobData, job_data.h: a text dataset's file
  // is read and its sample counts and size go into the stored spec's data section; a bad file
  // is refused at the data.path line), plans it (MakePlan, planner.h) and stores the job as
  // PENDING with the
  // plan and its prediction in Job.plan (worker ids empty until it starts). The plan's inputs:
  // the cached measured profile of the model on the job's device kind, else an estimated one;
  // the topology of the registered live workers of its device_type when there are at least
  // parallel.devices of them, else one node of parallel.devices devices with
  // options.plan_defaults; replicas per stage up to parallel.devices, and under schedule
  // pipedream up to M = global_batch / micro_batch (1F1B-RR gives each replica whole
  // micro-batches).
  // kInvalidArgument with the parser's or the planner's message (a plan that fits no device's
  // memory included), nothing stored; kInternal when the write fails. The job's owner and
  // tenant are `caller`'s (Job.owner, Job.tenant): from the verified identity, never the spec.
  absl::Status SubmitJob(const auth::Identity& caller, const v1::SubmitJobRequest& request,
                         v1::SubmitJobResponse* response);
  // A dry run of the planner (coordinator.proto PlanJobRequest; docs/coordinator.md): nothing
  // is stored or started. With spec_yaml: the spec's data resolved as SubmitJob resolves it
  // (a text file that submit would refuse is refused here too), then MakePlan on the spec
  // (request.planner, when set,
  // replaces parallel.planner; with it explicit stage ranges give way to stages auto), on
  // request.profile (which must match the model) or the profile SubmitJob would use, and on
  // request.cluster or, as SubmitJob, the registered live workers of the job's device_type when
  // there are parallel.devices of them, else one hypothetical node of parallel.devices devices
  // with options.plan_defaults (a note then says so: "2 registered workers for parallel.devices
  // 4096: planned as submit plans it, on a hypothetical node ..."). Without
  // spec_yaml: PlanProfile on request.profile (required) and request.cluster or every
  // registered live worker. The response's stages carry their topology device names in
  // `devices` (no workers are assigned in a dry run).
  // Errors: kInvalidArgument for a bad spec, profile, cluster or planner name, a profile that
  // does not match the model (naming the first mismatch), a plan that fits no device's memory
  // (the planner's message); kFailedPrecondition "no registered workers ... to plan on: start
  // workers, or give a cluster file (dapplectl plan --cluster CLUSTER.yaml)" (without spec_yaml).
  absl::Status PlanJob(const auth::Identity& caller, const v1::PlanJobRequest& request,
                       v1::PlanJobResponse* response);
  // The job with its events (Job.events, JobManager::Events: kept in the database, newest
  // last). kNotFound "no job job-9"; kInvalidArgument "job_id must not be empty" (also
  // CancelJob, WatchJob).
  absl::Status GetJob(const auth::Identity& caller, const v1::GetJobRequest& request,
                      v1::Job* response);
  absl::Status ListJobs(const auth::Identity& caller, const v1::ListJobsRequest& request,
                        v1::ListJobsResponse* response);  // newest first
  // PENDING / PLANNING / RUNNING -> CANCELLED "cancelled by user"; kFailedPrecondition
  // "job job-3 already SUCCEEDED" for a terminal job; kNotFound "no job job-9".
  absl::Status CancelJob(const auth::Identity& caller, const v1::CancelJobRequest& request,
                         v1::Job* response);
  // Sends the current snapshot, then one per change (at most one per watch_min_interval_ms,
  // the newest), and returns OK after sending a terminal state or when `send` returns false.
  // kCancelled once `cancelled()` is true (polled every 100 ms), kUnavailable after
  // EndWatches / Shutdown, kNotFound for an unknown job, kInvalidArgument for an empty job
  // id. Blocks the calling thread meanwhile.
  absl::Status WatchJob(const auth::Identity& caller, const v1::WatchJobRequest& request,
                        const JobEventSink& send, const std::function<bool()>& cancelled);
  absl::Status ListWorkers(const auth::Identity& caller, const v1::ListWorkersRequest& request,
                           v1::ListWorkersResponse* response);  // registration order
  // dapplectl checkpoint: asks every rank of the RUNNING job to save a checkpoint after
  // response.step (CheckpointPublisher::RequestOnDemand: the highest reported step plus about
  // 2 s of steps, at least 2, capped at the last step); the ranks learn it from their progress
  // acks until it is published or abandoned. kFailedPrecondition "job job-3 is PENDING, not
  // RUNNING: only a running job can be checkpointed" / "... already reached its last step";
  // kNotFound; kInvalidArgument for an empty id.
  absl::Status CheckpointJob(const auth::Identity& caller, const v1::CheckpointJobRequest& request,
                             v1::CheckpointJobResponse* response);
  // The traced steps kept for the job (the newest TraceStore::kStepsPerRank per rank, from
  // the job database: also after the job ended or the coordinator restarted), by step, stage
  // and replica; num_stages from the job's plan. A job with no traced step yet gets an empty
  // JobTrace (job_id and num_stages set), not an error. kNotFound "no job job-9";
  // kInvalidArgument "job_id must not be empty"; kDataLoss / kInternal from the store.
  absl::Status GetJobTrace(const auth::Identity& caller, const v1::GetJobTraceRequest& request,
                           v1::JobTrace* response);
  // The log lines the job's ranks shipped (LogStore: the newest LogStore::kLinesPerRank per
  // rank, from the job database: also after the job ended or the coordinator restarted),
  // filtered as the request says, by seq; response.state is the job's state. kNotFound "no job
  // job-9"; kInvalidArgument "job_id must not be empty", a negative tail, or a rank outside the
  // job's plan ("job job-3 has no rank 2/0: stages 0..1"); kInternal from the store.
  absl::Status GetJobLogs(const auth::Identity& caller, const v1::GetJobLogsRequest& request,
                          v1::GetJobLogsResponse* response);

  // --- WorkerControl (workers) ---

  // Generated ids ("w-N") continue across restarts on one db_path: the sequence is saved in
  // the database before the id is answered (jobs/worker_id_store.h) and, on opening, raised
  // past every "w-N" the stored jobs name. kInternal "saving the worker id sequence ..." when
  // that write fails: the worker stays registered and its retry from the same process gets the
  // same id once the sequence is saved. A request with a RankClaim (reattach: the worker ran a
  // rank before this coordinator started) is answered reattached = true and the claimed id when
  // the claim is accepted (ReattachLocked), else reattach_refused says why and the worker is
  // registered as any other. A request that breaks a rule of cluster/registration_check.h is
  // kInvalidArgument naming the field, before anything is recorded. A request for the name of a
  // worker of the same host (another pid) that sent no heartbeat for more than
  // kNameTakeoverIntervals intervals gets that name: the worker restarted before the heartbeat
  // timeout declared it DEAD, and is declared DEAD now.
  absl::Status RegisterWorker(const auth::Identity& caller,
                              const v1::RegisterWorkerRequest& request,
                              v1::RegisterWorkerResponse* response);
  // A registration that asks for the name of a worker on the same host that has been silent for
  // more than this many heartbeat intervals takes the name over (RegisterWorker).
  static constexpr int64_t kNameTakeoverIntervals = 3;
  // Forgets the IDLE worker `worker_id` that RegisterWorker just registered but whose
  // registration the adapter then refused (`why`: its credential could not be issued, e.g. the
  // id is a user's name), so that it is not listed as a worker. Nothing when it is unknown or
  // not IDLE.
  void ForgetRefusedWorker(const std::string& worker_id, const std::string& why);
  // Unknown or DEAD worker: OK with unknown_worker = true.
  absl::Status Heartbeat(const auth::Identity& caller, const v1::HeartbeatRequest& request,
                         v1::HeartbeatResponse* response);
  // Stores the rank's endpoint while the job is RUNNING (ignored once it ended). kNotFound for
  // an unknown worker or job; kFailedPrecondition when the worker is not that rank of the job;
  // kInvalidArgument for a stage / replica outside the plan.
  absl::Status PublishEndpoint(const auth::Identity& caller,
                               const v1::PublishEndpointRequest& request,
                               v1::PublishEndpointResponse* response);
  // kNotFound for an unknown job.
  absl::Status GetPeers(const auth::Identity& caller, const v1::GetPeersRequest& request,
                        v1::GetPeersResponse* response);
  // Applies a rank's report (see the protocol above). ack.abort is true when the job was
  // already not RUNNING when the report arrived. kNotFound for an unknown worker or job;
  // kFailedPrecondition when the worker is not that rank of the running job;
  // kInvalidArgument for PROGRESS_KIND_UNSPECIFIED.
  absl::Status ReportProgress(const auth::Identity& caller, const v1::ProgressReport& request,
                              v1::ProgressAck* response);
  // Forgets the worker at once (any state). When it is BUSY in a RUNNING job (the assignment
  // delivered or not), the job FAILS with "worker w-2 (stage 1 of job job-3) shut down" and
  // its other ranks are told to abort by their heartbeats. Its unanswered profile requests fail
  // at once ("worker w-2 shut down before reporting the profile"). kNotFound "unknown worker w-9".
  absl::Status DeregisterWorker(const auth::Identity& caller,
                                const v1::DeregisterWorkerRequest& request,
                                v1::DeregisterWorkerResponse* response);
  // The per-job key-value store the ranks of a running job rendezvous through (Gloo's
  // rendezvous among a stage's replicas: worker/daemon/coordinator_store.h). It exists while
  // the job is RUNNING and is forgotten when it ends; only workers that run a rank of the job
  // may use it. StoreSet records (or replaces) one key. Bounds: kMaxStoreKeys keys and
  // kMaxStoreBytes of values per job, kMaxStoreKeyBytes per key, kMaxStoreValueBytes per value.
  // Errors: kNotFound for an unknown worker or job; kFailedPrecondition "job job-3 is not
  // running (SUCCEEDED): its store is gone" (StoreSet only) and "job job-3 store is full: 4096
  // keys (the most a job may set)" (or bytes); kPermissionDenied "worker w-9 runs no rank of job
  // job-3"; kInvalidArgument for an empty or too long key and a too large value (naming the sizes).
  static constexpr int kMaxStoreKeys = 4096;
  static constexpr int64_t kMaxStoreKeyBytes = 1024;
  static constexpr int64_t kMaxStoreValueBytes = int64_t{1} << 20;
  static constexpr int64_t kMaxStoreBytes = int64_t{16} << 20;  // all values of one job
  absl::Status StoreSet(const auth::Identity& caller, const v1::StoreSetRequest& request,
                        v1::StoreSetResponse* response);
  // ready = every key of request.keys is set, values then in request order (none otherwise);
  // job_ended = the job is no longer RUNNING (the caller stops waiting). Never blocks: callers
  // poll. Errors as StoreSet (a job that ended is OK with job_ended), kInvalidArgument for no
  // keys.
  absl::Status StoreGet(const auth::Identity& caller, const v1::StoreGetRequest& request,
                        v1::StoreGetResponse* response);
  // A worker's measured profile (or why it could not measure). kNotFound for an unknown worker
  // or request; kPermissionDenied / kInvalidArgument as ProfileCache::Report.
  absl::Status ReportProfile(const auth::Identity& caller, const v1::ReportProfileRequest& request,
                             v1::ReportProfileResponse* response);

  // --- Admin: quotas (admin.proto; docs/scheduling.md). `caller` must be an admin
  // (kPermissionDenied otherwise). coordinator_service_scheduling.cc.
  // Replaces a tenant's quota (kNotFound for an unknown tenant; kInvalidArgument naming the
  // field, value and rule); answers the tenant with its quota and usage.
  absl::Status SetTenantQuota(const auth::Identity& caller,
                              const v1::SetTenantQuotaRequest& request, v1::Tenant* response);
  // Creates or replaces a cohort's shared devices.
  absl::Status SetCohort(const auth::Identity& caller, const v1::SetCohortRequest& request,
                         v1::Cohort* response);
  // Fills quota, usage, queued_jobs and admitted_jobs of each tenant already in
  // response->tenants (matched by name; the caller lists them from the credential store) and
  // adds every cohort and the notes of nominal quotas beyond the live devices.
  absl::Status DescribeTenants(const auth::Identity& caller, v1::ListTenantsResponse* response);

 private:
  // A rank whose heartbeat is this many intervals old is taken for gone (its worker died and will
  // be judged DEAD later): neither a restart nor a preemption waits for it to stop.
  static constexpr int kStoppingHeartbeats = 3;

  // The cached profile a plan was made on, and its refinement's generation (ProfileCache::Lookup),
  // and the collective overhead its topology had (0 without a topology of the workers): the job's
  // measured steps refine both when it succeeds (RefineFromStepsLocked).
  struct ProfileUse {
    ProfileCache::Key key;
    int64_t generation = 0;
    double collective_overhead_ms = 0;
  };
  // What the coordinator keeps in memory about a RUNNING job.
  struct RunState {
    explicit RunState(ProgressTracker progress) : tracker(std::move(progress)) {}
    int num_stages = 0;
    std::vector<int> replicas;            // by stage, each >= 1
    std::vector<std::string> worker_ids;  // by rank (schedule::RankIndex)
    std::set<int> done_ranks;             // RankIndex of the ranks that reported DONE
    ProgressTracker tracker;
    int64_t admitted_unix_ms = 0;       // when it started (or was recovered): preemption order
    StageMetricsTracker stage_metrics;  // every rank's newest step stats
    StragglerDetector stragglers;       // judges the ranks' compute times
    // The job's store (StoreSet / StoreGet): key -> value, and the bytes of its values.
    std::map<std::string, std::string> store;
    int64_t store_bytes = 0;
    // A RUNNING job found in the database at a restart waits for its ranks to re-register
    // (RegisterWorker with a RankClaim) until reattach_deadline_ms (0: the first health check
    // sets it to worker_timeout_ms from then). RankIndex of the ranks back.
    // recovered: rebuilt at a restart; only the ranks claimed back are accepted (CheckRankLocked).
    bool recovered = false;
    bool reattaching = false;
    std::set<int> reattached_ranks;
    // The newest step the re-attached ranks' claims name (RankClaim.last_step): the ranks trained
    // on while the coordinator was away, so the job row's step is behind it.
    int64_t reattached_step = 0;
    // Every rank finished while the coordinator was away (claimed done at re-attach): since
    // when, the newest report that arrived since, and the ranks that sent their DONE again. The
    // ranks deliver what the old coordinator never saved (their steps, evaluation, checkpoints)
    // right after re-attaching; the job ends once every rank sent DONE again, or once no report
    // came for kFinishGraceHeartbeats heartbeats (a rank whose DONE the old coordinator had
    // acknowledged sends none).
    int64_t finished_away_since_ms = 0;
    int64_t last_report_ms = 0;
    std::set<int> done_again;
    int64_t reattach_deadline_ms = 0;
    // The measured profile the run's plan was made on (none for a stored, restarted or
    // recovered plan, or an estimated or file profile).
    std::optional<ProfileUse> profile;
    int RankOf(int stage, int replica) const {
      int index = replica;
      for (int s = 0; s < stage; ++s) index += replicas[s];
      return index;
    }
  };

  CoordinatorService(CoordinatorOptions options, std::unique_ptr<JobManager> jobs)
      : options_(std::move(options)), jobs_(std::move(jobs)) {
    workers_.SetObserver(options_.worker_observer);
  }

  // --- Coordinator restarts (coordinator_service_reattach.cc) ---
  // Rebuilds the RunState of RUNNING `job` found in the database at start (its plan's ranks and
  // workers, its metrics, its rendezvous and checkpoint bookkeeping: its ranks keep writing to
  // `checkpoint_dir`, CheckpointManager::RecoveredJobDir) in the reattaching mode; a job whose
  // stored plan names no worker for some rank FAILS at once.
  void RecoverRunningLocked(const v1::Job& job, const std::string& checkpoint_dir, int64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Create: a job that was RESTARTING waits out the rest of its backoff (ResumedRestartWait) and
  // restarts as it would have (RestartPass), with a CoordinatorRestarted event. The failed run's
  // ranks that still run claim their ranks when they register again and are refused (the job is
  // not RUNNING): they abort.
  void RecoverRestartingLocked(const v1::Job& job, int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RegisterWorker with a RankClaim: "" when the claim is accepted (the worker is then
  // registered under the claimed id as that rank, BUSY, or IDLE and counted done when the claim
  // says done), else why not (the caller registers it as a new worker).
  std::string ReattachLocked(const v1::RegisterWorkerRequest& request, int64_t now,
                             WorkerRecord** worker) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reattaching jobs whose deadline passed with ranks missing FAIL as a job that lost a worker
  // does (the WorkerLost event, then EndJobLocked, as CheckHealthLocked), naming the missing
  // ranks and workers.
  void ExpireReattachLocked(int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the jobs whose ranks all finished while the coordinator was away once their reports
  // are in (RunState.finished_away_since_ms).
  static constexpr int kFinishGraceHeartbeats = 4;
  void EndFinishedAwayLocked(int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // TopologyFromWorkers (worker_topology.h) with the collective overhead the jobs measured
  // (CollectiveRefinement), its source saying so once any job did; without it for an emulated
  // job (`emulated`), whose ranks wait instead of computing: the overhead is learned from ranks
  // that keep the host's cores busy, and an emulated job's hand-offs find them idle.
  absl::StatusOr<v1::ClusterTopology> TopologyOfWorkers(const std::vector<v1::WorkerInfo>& workers,
                                                        const std::string& device_type,
                                                        bool emulated = false) const;
  // The inputs SubmitJob plans `spec` of `tenant` ("": the operator's) with (see there), given
  // the registered workers: the tenant's own measured profile of the model, if any
  // (ProfileCache::ScopedFingerprint). `use`, when not null, is set to the cached measured
  // profile of the inputs (nullopt when there is none).
  PlanInputs SubmissionPlanInputs(const v1::JobSpec& spec, const std::string& tenant,
                                  const std::vector<v1::WorkerInfo>& workers,
                                  std::optional<ProfileUse>* use = nullptr) const;
  std::vector<v1::WorkerInfo> WorkerSnapshot() ABSL_LOCKS_EXCLUDED(mu_);

  // The workers of `workers` whose devices fit the job's parallel.device_type, in order.
  static std::vector<WorkerRecord*> Fitting(const v1::Job& job, std::vector<WorkerRecord*> workers);

  void Loop();
  void WakeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CheckHealthLocked(int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves `worker` to DEAD (`why`: the registry's reason) and, when it ran a rank of a job's
  // current run, fails or restarts that job as a lost worker ("worker w-1 (stage 0 of job job-1)
  // <lost_because>").
  void DeclareDeadLocked(WorkerRecord& worker, const std::string& why,
                         const std::string& lost_because, int64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RegisterWorker's takeover of a name (kNameTakeoverIntervals): the silent holder is a process
  // since restarted; it is declared DEAD first (its job fails or restarts as a lost worker), so
  // that the registry gives the name to the new process.
  void TakeOverNameLocked(const v1::RegisterWorkerRequest& request, int64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ScheduleLocked(int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // --- Scheduling (coordinator_service_scheduling.cc; docs/scheduling.md) ---
  // The policy's snapshot: every PENDING, RUNNING and RESTARTING job as a Workload (a PENDING
  // job whose preempted ranks still run, and a RUNNING one being preempted, hold their devices:
  // admitted and stopping) and the idle live workers per device type.
  scheduling::ClusterState ClusterStateLocked(int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The manager on the stored quotas (rebuilt after SetTenantQuota / SetCohort).
  const scheduling::SchedulingManager& ManagerLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // SchedulingManager::CheckSubmit for `planned` (its spec and plan) submitted by `caller`: the
  // plan's workers charged to the device type the tenant's quota gives the spec's
  // parallel.device_type. OK for an admin. SubmitJob refuses on its answer; PlanJob notes it.
  absl::Status CheckTenantQuotaLocked(const auth::Identity& caller, const v1::Job& planned)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Preemption, step 1: asks the RUNNING job for an on-demand checkpoint (stops it at once when
  // none can be taken) and records the Preempted event.
  void BeginPreemptionLocked(const std::string& id, const std::string& reason, int64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Step 2, each pass: a job whose checkpoint was published, or whose wait ran out, is stopped.
  void AdvancePreemptionsLocked(int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RUNNING -> PENDING (preemptions + 1, last_preemption), its ranks told to stop.
  void StopPreemptedLocked(const std::string& id, const std::string& why, int64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tells options_.scheduling_observer the pass's per-tenant state (`reasons`: each queued
  // job's pending reason).
  void ObserveLocked(const scheduling::ClusterState& state,
                     const std::map<std::string, std::string>& reasons, int64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Per job id, its live workers still BUSY with it and heartbeating (for a PENDING job: its
  // preempted ranks that have not stopped yet).
  std::map<std::string, int> StoppingRanksLocked(int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The old FIFO message of an operator's job short of idle workers: "waiting for 3 idle
  // workers: 2 registered, 2 idle" ("" when enough are idle).
  std::string IdleWorkersMessageLocked(const v1::Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What a restart hands StartJobLocked: the plan made on the live workers and where to resume.
  struct Replanned {
    v1::ParallelPlan plan;
    int64_t first_step = 0;  // the checkpoint's step (0: from scratch)
    std::string checkpoint;  // its directory ("" from scratch)
    // The cached measured profile `plan` was made on (none: an estimated one): the restarted
    // run's steps refine it as any run's do.
    std::optional<ProfileUse> profile;
  };
  // Starts job `id` with its stored plan (or the one PrepareStarts made: a job stored by an
  // older version, or whose model was measured) on the first workers of `free`; false when it
  // could not even leave PENDING, or was not prepared yet (then the loop is woken for another
  // pass).
  // `replanned`: a restart's plan and resume point (then no planning happens here).
  bool StartJobLocked(const v1::Job& job, const std::vector<WorkerRecord*>& free, int64_t now,
                      const Replanned* replanned = nullptr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // StartJobLocked's plan: `replanned`'s, else the stored one (made into rank programs), or a
  // new one when there is none or the model was measured since (recording the Measured and
  // Planned events). Errors: the planner's.
  // `profile` is set to what a plan made before the lock was made on (nullopt otherwise).
  absl::StatusOr<v1::ParallelPlan> PlanToStartLocked(const v1::Job& job,
                                                     const std::vector<WorkerRecord*>& free,
                                                     const Replanned* replanned,
                                                     std::optional<ProfileUse>* profile)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Where a starting job resumes: after `first_step` from `resume_manifest` ("" and 0: from
  // scratch). A restart's checkpoint, a preempted job's newest one, or its --resume-from (whose
  // step CheckpointManager read outside the lock); kNotFound "resume: ..." when that was not
  // read.
  struct StartPoint {
    int64_t first_step = 0;
    std::string resume_manifest;
  };
  absl::StatusOr<StartPoint> StartPointLocked(const v1::Job& job, const Replanned* replanned) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hands each rank of `summary` (its stages' replicas set) its StageAssignment on the workers
  // of `free` in RankIndex order (BUSY, pending_assignment), with the job's checkpoint folder
  // (CheckpointManager::JobDir), and starts the job's checkpoint bookkeeping.
  void AssignRanksLocked(const v1::Job& job, const v1::ParallelPlanSummary& summary,
                         const std::vector<WorkerRecord*>& free,
                         const std::vector<v1::RankProgram>& programs, const StartPoint& start,
                         const std::optional<v1::ModelProfile>& emulated)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // False while the job waits for its model to be measured (asking the first free worker without
  // an unanswered request when nobody has been asked yet; measuring_ then has the job); see
  // "Measured profiles".
  bool ProfileReadyLocked(const v1::Job& job, const std::vector<WorkerRecord*>& free, int64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves job `id` to a terminal state (JobManager::Transition), finalises its metrics, then
  // StopRunLocked. A RESTARTING job stops waiting to restart. A SUCCEEDED job refines the
  // profile its plan was made on and the collective overhead (RefineFromStepsLocked).
  absl::StatusOr<v1::Job> EndJobLocked(const std::string& id, v1::JobState to,
                                       const std::string& message, int64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Create: puts the profiles saved in profile_store_ (measured within
  // options_.profile_max_age_ms) into the cache and restores collectives_; what cannot be read or
  // reused is logged and measured (learned) again: a cache never stops the start.
  void RestoreMeasurements();
  // Saves key's ready profile and refinement (refinement_only: the refinement alone) to
  // profile_store_; a write error is logged (the cache keeps it until a restart).
  void SaveMeasuredProfile(const ProfileCache::Key& key, bool refinement_only);
  // The measured steps of `run` (its ranks' medians per step, StageMetricsTracker) refine the
  // cached profile `job`'s plan was made on (ProfileCache::Refine: each stage's compute) and the
  // cluster's collective overhead (CollectiveRefinement: the bottleneck stage's time outside its
  // layers), with a Measured event naming each stage's measured and predicted compute; nothing
  // when the plan was not made on a cached measured profile or no stage has kRefineMinSteps
  // steps after the warm-up. What changed is saved (profile_store_).
  static constexpr int kRefineMinSteps = 10;
  void RefineFromStepsLocked(const RunState& run, const v1::Job& job)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets the run of job `id` (if any): drops undelivered assignments (those workers go
  // IDLE), its RunState, rendezvous and checkpoint requests. Workers that already run the job
  // stay BUSY until they stop reporting it (their heartbeats tell them to abort).
  void StopRunLocked(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // What StartJobLocked needs of a PENDING or RESTARTING job that reads files or plans, made
  // before the lock by PrepareStarts: the check of its files against the data roots, its
  // emulation profile (emulated jobs), and its plan on
  // the registered workers when it has none stored or its model was measured since.
  struct Prepared {
    std::optional<absl::Status> files;  // CheckJobFiles on the data roots (every job)
    std::optional<absl::StatusOr<std::optional<v1::ModelProfile>>> emulated;
    std::optional<absl::StatusOr<v1::ParallelPlan>> plan;
    std::optional<ProfileUse> profile;  // what `plan` was made on
  };
  // Tick's first part, without the lock: prepares every waiting job not prepared yet (the
  // lock is taken only to look and to store).
  void PrepareStarts() ABSL_LOCKS_EXCLUDED(mu_);
  // True when StartJobLocked has what it needs of `job` (see Prepared) on `free`.
  bool PreparedLocked(const v1::Job& job, const std::vector<WorkerRecord*>& free,
                      const Replanned* replanned) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // --- Automatic restarts (coordinator_service_restart.cc) ---
  // "This job's run failed" with `cause` and `message`: the one entry point for a lost worker
  // and a rank's error. When the job is RUNNING and its restart policy allows, the job goes
  // RESTARTING (its ranks stopped) and the restart pass takes it from there; otherwise it ends
  // FAILED with `message` (and the policy's reason not to restart, when there is one).
  absl::Status FailOrRestartLocked(const std::string& id, FailureCause cause,
                                   const std::string& message, int64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tick's first part: for every RESTARTING job, the policy's decision (wait, fail, replan);
  // the due ones are planned outside the lock and started under it again.
  void RestartPass() ABSL_LOCKS_EXCLUDED(mu_);
  // Fills the job's newest JobRestart (and steps_redone, metrics.step, step_losses) as the run
  // that `replanned` starts with plan `summary` resumes; called in the move to RUNNING.
  static void RecordResume(const Replanned& replanned, const v1::ParallelPlanSummary& summary,
                           int64_t now, v1::Job* job);
  // True when worker `worker_id` runs a rank of the current run of job `job_id` (a worker of a
  // failed run of a restarted job does not).
  bool IsRankLocked(const std::string& job_id, const std::string& worker_id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The live (not DEAD) worker `id`, or kNotFound "unknown worker <id>: register again".
  absl::StatusOr<WorkerRecord*> LiveWorkerLocked(const std::string& id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The running job `job_id` whose ranks include `worker` (for its store): kNotFound for an
  // unknown worker or job, kFailedPrecondition for a job not running, kPermissionDenied for a
  // worker that runs none of its ranks.
  absl::StatusOr<RunState*> StoreUserLocked(const std::string& job_id, const std::string& worker)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // "stage 1 replica 0" (or "stage 1" when the stage has one replica) for the rank `worker_id`
  // runs in running job `job_id`; "stage <stage>" when it runs none.
  std::string RankNameLocked(const std::string& job_id, const std::string& worker_id,
                             int stage) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // OK when `worker` is rank (stage, replica) of running job `job_id` (kPermissionDenied "worker
  // w-1 is not stage 1 of job job-1 (w-2 is)" otherwise) and, for a job recovered at a restart,
  // has claimed that rank back (kFailedPrecondition otherwise).
  absl::Status CheckRankLocked(const std::string& job_id, const std::string& worker, int stage,
                               int replica) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FreeWorkerLocked(WorkerRecord& worker, const std::string& job_id, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A rank's PROGRESS_STEP report of running job `run` (already checked to be that rank's;
  // `rank` names it in events, `last_stage`: replica 0 of the last stage, whose loss counts):
  // skipped-step and straggler events, stage metrics, progress, the step's trace.
  absl::Status OnStepReportLocked(RunState& run, const v1::ProgressReport& request,
                                  const std::string& rank, bool last_stage, int64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Keeps the log lines of `report` (and a line saying how many the worker dropped) when its
  // worker runs rank (stage, replica) of `job` by the job's plan; a failed write is logged.
  void KeepLogLinesLocked(const v1::Job& job, const v1::ProgressReport& report)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The outcome of writing job `job_id`'s `what` ("log lines", "traces") to the database: a
  // failure logged through store_warnings_ (rate-limited), a success after failures logged once.
  void LogStoreWrite(const std::string& job_id, const std::string& what,
                     const absl::Status& written, int64_t now);
  // A rank's PROGRESS_CHECKPOINT report of running `job` (checked under the lock by
  // ReportProgress): hands it to checkpoints_, which writes the files, and records a published
  // checkpoint in Job.checkpoints (a failure is logged: the job keeps running). Outside the
  // lock.
  void OnCheckpointReport(const v1::Job& job, const v1::ProgressReport& report, int64_t now)
      ABSL_LOCKS_EXCLUDED(mu_);

  const CoordinatorOptions options_;
  DataRoots data_roots_;  // from options_.data_roots; set by Create, then read-only
  const std::unique_ptr<JobManager> jobs_;  // thread-safe on its own
  std::unique_ptr<TraceStore> traces_;      // set by Create; thread-safe on its own
  std::unique_ptr<LogStore> logs_;          // set by Create; thread-safe on its own
  // Failed writes of the jobs' log lines and traces (a full database disk fails each report's),
  // logged once, then as a count at most once a minute per job and store.
  RepeatedWarnings store_warnings_;  // thread-safe on its own
  // The saved sequence of generated worker ids; set by Create; thread-safe on its own.
  std::unique_ptr<WorkerIdStore> worker_ids_;

  absl::Mutex mu_;
  int64_t last_health_check_ms_ = 0;    // CheckHealthLocked's previous pass (guarded by mu_)
  int64_t judge_workers_after_ms_ = 0;  // no DEAD verdicts before this (a stall's grace)
  WorkerRegistry workers_ ABSL_GUARDED_BY(mu_);
  // The generated-id sequence as last saved in worker_ids_ (WorkerRegistry::next_generated_id).
  int64_t saved_next_worker_id_ ABSL_GUARDED_BY(mu_) = 1;
  // Checkpoint folders, publishing, resuming; thread-safe on its own (its mutex after mu_).
  CheckpointManager checkpoints_{options_.checkpoint_dir.empty()
                                     ? DefaultCheckpointRoot(options_.db_path)
                                     : options_.checkpoint_dir,
                                 options_.keep_checkpoints};
  Rendezvous rendezvous_ ABSL_GUARDED_BY(mu_);
  // What each collective costs beyond the link model, learned from the jobs (thread-safe).
  CollectiveRefinement collectives_;
  // Where the measured profiles, their refinements and collectives_ are kept; set by Create;
  // thread-safe on its own.
  std::unique_ptr<ProfileStore> profile_store_;
  absl::flat_hash_map<std::string, RunState> running_ ABSL_GUARDED_BY(mu_);
  // RESTARTING jobs: when they failed and when their backoff ends.
  absl::flat_hash_map<std::string, RestartWait> restarting_ ABSL_GUARDED_BY(mu_);
  absl::CondVar wake_cv_;
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // PENDING jobs whose model is being measured (ProfileReadyLocked said no): the cache key and
  // the message. The job waits as BeingMeasured while the key's measurement is in flight.
  struct Measuring {
    ProfileCache::Key key;
    std::string message;
  };
  absl::flat_hash_map<std::string, Measuring> measuring_ ABSL_GUARDED_BY(mu_);
  // The plans each caller has SubmitJob and PlanJob compute now (thread-safe on its own).
  PlanningSlots planning_slots_;
  // Tenants' quotas and cohorts (set by Create; thread-safe on its own) and the manager built
  // on them (null: rebuilt by ManagerLocked).
  std::unique_ptr<scheduling::QuotaStore> quotas_;
  std::unique_ptr<scheduling::SchedulingManager> manager_ ABSL_GUARDED_BY(mu_);
  // RUNNING jobs being preempted: why, the on-demand checkpoint step they save first (0: none)
  // and when they are stopped anyway.
  struct Preempting {
    std::string reason;
    int64_t checkpoint_step = 0;
    int64_t deadline_ms = 0;
  };
  absl::flat_hash_map<std::string, Preempting> preempting_ ABSL_GUARDED_BY(mu_);
  // Jobs prepared by PrepareStarts (forgotten when they start or end).
  absl::flat_hash_map<std::string, Prepared> prepared_ ABSL_GUARDED_BY(mu_);
  // The cached measured profile each waiting job's plan from SubmitJob was made on (jobs planned
  // on an estimated or file profile have none): the run takes it when it starts on that plan.
  // Memory only: a job submitted before a coordinator restart refines nothing.
  absl::flat_hash_map<std::string, ProfileUse> submitted_profiles_ ABSL_GUARDED_BY(mu_);
  // When preempted jobs entered the queue again (their place in it; others: created_unix_ms).
  absl::flat_hash_map<std::string, int64_t> requeued_at_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // started and joined by the owner's thread only
};

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_SERVICE_COORDINATOR_SERVICE_H_
