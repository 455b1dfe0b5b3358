// CoordinatorService's worker-facing RPCs (worker.proto's WorkerService: registration,
// heartbeats, rendezvous, progress with its metrics, logs and checkpoints, the key-value store of
// the collectives' rendezvous, profiles, deregistration), split from coordinator_service.cc by
// concern; the user-facing RPCs and the scheduling loop stay there. Same class, same lock rules
// (coordinator_service.h).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/schedule/ranks.h"
#include "common/status.h"
#include "common/steps.h"
#include "coordinator/auth/access.h"
#include "coordinator/cluster/registration_check.h"
#include "coordinator/jobs/job_lifecycle.h"
#include "coordinator/service/coordinator_service.h"
#include "coordinator/service/worker_topology.h"

namespace dapple::coordinator {
namespace {

// Copies the detector's verdict on rank (stage, replica) into its Job.stage_metrics entry.
void MarkStraggler(const StragglerDetector& stragglers, int stage, int replica, v1::Job* job) {
  for (v1::StageMetrics& m : *job->mutable_stage_metrics()) {
    if (m.stage() != stage || m.replica() != replica) continue;
    m.set_straggler(stragglers.IsStraggler(stage, replica));
    m.set_compute_ratio(stragglers.Ratio(stage, replica));
  }
}

// A reported host compute capacity: finite and >= 1, or unknown (0) for anything else, which a
// peer may send: a capacity below one core would slow even a lone stage.
double ValidCapacity(double capacity) {
  return std::isfinite(capacity) && capacity >= 1 ? capacity : 0;
}

}  // namespace

absl::Status CoordinatorService::RegisterWorker(const auth::Identity& caller,
                                                const v1::RegisterWorkerRequest& request,
                                                v1::RegisterWorkerResponse* response) {
  if (absl::Status s = CheckRegistration(request); !s.ok()) {
    DAPPLE_LOG_WARN("refused a worker registration: {}", s.message());
    return s;
  }
  absl::MutexLock lock(&mu_);
  const int64_t now = options_.now_unix_ms();
  WorkerRecord* reattached = nullptr;
  if (request.has_reattach()) {
    // A worker that ran a rank before this coordinator (re)started:
    // coordinator_service_reattach.cc. Only the claimed worker's own credential may claim its
    // rank (contract 4): the join token proves no particular worker.
    const std::string& claimed = request.reattach().worker_id();
    const std::string refused =
        caller.role == auth::Role::kWorker && caller.user == claimed
            ? ReattachLocked(request, now, &reattached)
            : absl::StrCat("a claim of worker ", claimed,
                           "'s rank must carry that worker's credential, not ",
                           auth::RoleWithArticle(caller.role), " token");
    if (!refused.empty() && request.reattach().done()) {
      // A worker whose last rank finished says so at every registration until its next job.
      DAPPLE_LOG_INFO("worker {} claims finished {} stage {} replica {}: not taken: {}",
                      request.reattach().worker_id(), request.reattach().job_id(),
                      request.reattach().stage(), request.reattach().replica(), refused);
      response->set_reattach_refused(refused);
    } else if (!refused.empty()) {
      DAPPLE_LOG_WARN("worker {} (host {}, pid {}) claims {} stage {} replica {}: refused: {}",
                      request.reattach().worker_id(), request.hostname(), request.pid(),
                      request.reattach().job_id(), request.reattach().stage(),
                      request.reattach().replica(), refused);
      response->set_reattach_refused(refused);
    }
    response->set_reattached(reattached != nullptr);
  }
  if (reattached == nullptr) TakeOverNameLocked(request, now);
  WorkerRecord& worker = reattached != nullptr ? *reattached : workers_.Register(request, now);
  // Saved before the id is answered, so no process can ever have been told an id that a
  // restarted coordinator hands out again (a crash between the two only skips ids).
  const int64_t next_id = workers_.next_generated_id();
  if (next_id > saved_next_worker_id_) {
    if (absl::Status s = worker_ids_->SaveNext(next_id); !s.ok()) {
      DAPPLE_LOG_ERROR("registering worker {}: {}", worker.info.id(), s.message());
      return s;
    }
    saved_next_worker_id_ = next_id;
  }
  worker.NoteMeasuring(request.measuring_request_id(), now);
  // What the planner needs to know of the worker's device (worker_topology.h).
  worker.info.set_device_memory_bytes(std::max<int64_t>(0, request.device_memory_bytes()));
  worker.info.set_device_memory_shared(request.device_memory_shared());
  worker.info.set_host_compute_capacity(ValidCapacity(request.host_compute_capacity()));
  worker.info.set_physical_device(ValidPhysicalDevice(request.physical_device()));
  if (request.has_loopback_link() && ValidLink(request.loopback_link())) {
    *worker.info.mutable_loopback_link() = request.loopback_link();
  }
  response->set_worker_id(worker.info.id());
  response->set_heartbeat_interval_ms(options_.heartbeat_interval_ms);
  WakeLocked();
  return absl::OkStatus();
}

void CoordinatorService::TakeOverNameLocked(const v1::RegisterWorkerRequest& request, int64_t now) {
  if (request.name().empty()) return;
  WorkerRecord* holder = workers_.Find(request.name());
  if (holder == nullptr || holder->info.state() == v1::WORKER_STATE_DEAD) return;
  const v1::WorkerInfo& old = holder->info;
  const int64_t silent_ms = now - old.last_heartbeat_unix_ms();
  // A live worker heartbeats every interval: one silent for several, on the same host, whose
  // name a new process asks for, is that worker restarted (kill -9, a crash, systemd) before
  // --worker-timeout-ms declared it DEAD. A live duplicate keeps its name (the new one gets an
  // id of its own), and so does a worker on another host.
  if (old.hostname() != request.hostname() || old.pid() == request.pid() ||
      silent_ms <= kNameTakeoverIntervals * options_.heartbeat_interval_ms) {
    return;
  }
  const std::string why = absl::StrFormat(
      "replaced by a new process of its name on host %s (pid %d; this one, pid %d, sent no "
      "heartbeat for %.1f s)",
      request.hostname(), request.pid(), old.pid(), silent_ms / 1000.0);
  DeclareDeadLocked(*holder, why, absl::StrCat("restarted: ", why), now);
}

void CoordinatorService::ForgetRefusedWorker(const std::string& worker_id, const std::string& why) {
  absl::MutexLock lock(&mu_);
  WorkerRecord* worker = workers_.Find(worker_id);
  if (worker == nullptr || worker->info.state() != v1::WORKER_STATE_IDLE) return;
  (void)workers_.Remove(worker_id, absl::StrCat("registration refused: ", why));
  WakeLocked();
}

absl::Status CoordinatorService::Heartbeat(const auth::Identity& caller,
                                           const v1::HeartbeatRequest& request,
                                           v1::HeartbeatResponse* response) {
  DAPPLE_RETURN_IF_ERROR(auth::CheckWorker(caller, request.worker_id()));
  absl::MutexLock lock(&mu_);
  WorkerRecord* worker = workers_.Find(request.worker_id());
  if (worker == nullptr || worker->info.state() == v1::WORKER_STATE_DEAD) {
    response->set_unknown_worker(true);
    return absl::OkStatus();
  }
  worker->info.set_last_heartbeat_unix_ms(options_.now_unix_ms());
  worker->NoteMeasuring(request.measuring_request_id(), options_.now_unix_ms());
  // The worker's refined estimate (host_capacity.h HostCapacityEstimate): plans made from now on
  // use it (worker_topology.cc).
  if (const double capacity = ValidCapacity(request.host_compute_capacity()); capacity > 0) {
    worker->info.set_host_compute_capacity(capacity);
  }
  if (request.has_loopback_link() && ValidLink(request.loopback_link())) {
    *worker->info.mutable_loopback_link() = request.loopback_link();
  }
  const std::string& reported = request.running_job_id();
  const bool was_reporting = !worker->reported_job_id.empty();
  worker->reported_job_id = reported;

  const bool busy = worker->info.state() == v1::WORKER_STATE_BUSY;
  const std::string assigned = busy ? worker->info.job_id() : std::string();
  // Running as one of its current ranks: a worker of a restarted job's failed run is not.
  const bool assigned_running = busy && IsRankLocked(assigned, worker->info.id());
  // A job the worker runs must stop unless it is running with this worker as one of its ranks:
  // it failed or was cancelled, or this coordinator never gave it (e.g. before a restart). A
  // rank that already reported DONE may still list its running job for a moment; it is left
  // alone, so that it does not abort a job that can still succeed.
  if (!reported.empty()) {
    auto run = running_.find(reported);
    bool is_rank = false;
    if (run != running_.end()) {
      const std::vector<std::string>& ids = run->second.worker_ids;
      auto it = std::find(ids.begin(), ids.end(), worker->info.id());
      // A job recovered at a restart: only a worker that claimed its rank back runs it.
      is_rank = it != ids.end() &&
                (!run->second.recovered ||
                 run->second.reattached_ranks.contains(static_cast<int>(it - ids.begin())));
    }
    if (!is_rank) response->add_abort_job_ids(reported);
  }
  if (busy && !assigned_running && reported != assigned) {
    FreeWorkerLocked(*worker, assigned, absl::StrCat("stopped running ended job ", assigned));
  } else if (assigned_running && worker->pending_assignment.has_value() && reported.empty()) {
    *response->mutable_assignment() = std::move(*worker->pending_assignment);
    worker->pending_assignment.reset();
    DAPPLE_LOG_INFO("worker {}: assignment delivered (stage {} of job {})", worker->info.id(),
                    response->assignment().stage(), assigned);
  }
  if (!busy && reported.empty()) {
    if (std::optional<v1::ProfileRequest> measure =
            options_.profile_cache->TakeFor(worker->info.id())) {
      *response->mutable_profile_request() = *std::move(measure);
    }
  }
  if (was_reporting && reported.empty()) WakeLocked();  // it may be schedulable now
  return absl::OkStatus();
}

absl::Status CoordinatorService::PublishEndpoint(const auth::Identity& caller,
                                                 const v1::PublishEndpointRequest& request,
                                                 v1::PublishEndpointResponse* response) {
  DAPPLE_RETURN_IF_ERROR(auth::CheckWorker(caller, request.worker_id()));
  absl::MutexLock lock(&mu_);
  DAPPLE_ASSIGN_OR_RETURN(WorkerRecord * worker, LiveWorkerLocked(request.worker_id()));
  worker->info.set_last_heartbeat_unix_ms(options_.now_unix_ms());
  DAPPLE_ASSIGN_OR_RETURN(v1::Job job, jobs_->Get(request.job_id()));
  if (job.state() != v1::JOB_STATE_RUNNING) return absl::OkStatus();  // GetPeers says ended
  DAPPLE_RETURN_IF_ERROR(
      CheckRankLocked(job.id(), worker->info.id(), request.stage(), request.replica()));
  return rendezvous_.Publish(request);
}

absl::Status CoordinatorService::GetPeers(const auth::Identity& caller,
                                          const v1::GetPeersRequest& request,
                                          v1::GetPeersResponse* response) {
  DAPPLE_RETURN_IF_ERROR(auth::CheckWorker(caller, caller.user));
  absl::MutexLock lock(&mu_);
  DAPPLE_ASSIGN_OR_RETURN(v1::Job job, jobs_->Get(request.job_id()));
  // Only the job's own ranks learn its endpoints.
  auto run = running_.find(job.id());
  if (run == running_.end()) {
    response->set_job_ended(job.state() != v1::JOB_STATE_RUNNING);
    return absl::OkStatus();
  }
  const std::vector<std::string>& ranks = run->second.worker_ids;
  if (std::find(ranks.begin(), ranks.end(), caller.user) == ranks.end()) {
    return absl::PermissionDeniedError(
        absl::StrCat("worker ", caller.user, " runs no rank of job ", job.id()));
  }
  for (v1::PeerEndpoint& peer : rendezvous_.Peers(job.id())) {
    *response->add_peers() = std::move(peer);
  }
  response->set_complete(rendezvous_.Complete(job.id()));
  response->set_job_ended(job.state() != v1::JOB_STATE_RUNNING);
  return absl::OkStatus();
}

absl::Status CoordinatorService::ReportProgress(const auth::Identity& caller,
                                                const v1::ProgressReport& request,
                                                v1::ProgressAck* response) {
  DAPPLE_RETURN_IF_ERROR(auth::CheckWorker(caller, request.worker_id()));
  absl::ReleasableMutexLock lock(&mu_);
  const int64_t now = options_.now_unix_ms();
  DAPPLE_ASSIGN_OR_RETURN(WorkerRecord * worker, LiveWorkerLocked(request.worker_id()));
  worker->info.set_last_heartbeat_unix_ms(now);
  const std::string& id = request.job_id();
  DAPPLE_ASSIGN_OR_RETURN(v1::Job job, jobs_->Get(id));
  const bool final_report = request.kind() == v1::PROGRESS_DONE ||
                            request.kind() == v1::PROGRESS_FAILED ||
                            request.kind() == v1::PROGRESS_ABORTED;
  if (request.kind() == v1::PROGRESS_KIND_UNSPECIFIED) {
    return absl::InvalidArgumentError(
        absl::StrCat("progress report of worker ", worker->info.id(), " has no kind"));
  }
  // Lines of a rank whose job already ended (its error, say) are kept too.
  KeepLogLinesLocked(job, request);
  if (job.state() != v1::JOB_STATE_RUNNING) {
    if (final_report) FreeWorkerLocked(*worker, id, absl::StrCat("left ended job ", id));
    response->set_abort(true);
    return absl::OkStatus();
  }
  DAPPLE_RETURN_IF_ERROR(
      CheckRankLocked(id, worker->info.id(), request.stage(), request.replica()));
  RunState& run = running_.at(id);
  run.last_report_ms = now;
  // Replicas of a stage hold identical weights and the last stage's replicas all get the
  // global loss: replica 0 alone reports loss, evaluation and sample, so no step counts twice.
  const bool last_stage = request.stage() == run.num_stages - 1 && request.replica() == 0;
  const int rank_index = run.RankOf(request.stage(), request.replica());
  const std::string rank = absl::StrCat(
      schedule::RankName(request.stage(), request.replica(), run.replicas[request.stage()]),
      " (worker ", worker->info.id(), ")");
  if (request.kind() == v1::PROGRESS_STEP) {
    // Any rank's step counts: an on-demand checkpoint must lie ahead of the fastest rank.
    checkpoints_.OnStep(
        id, request.step(),
        request.step_seconds() > 0 ? request.step_seconds() : request.stats().step_seconds(), now);
  }
  bool publish = false;
  switch (request.kind()) {
    case v1::PROGRESS_STEP:
      DAPPLE_RETURN_IF_ERROR(OnStepReportLocked(run, request, rank, last_stage, now));
      break;
    case v1::PROGRESS_EVAL:
      if (last_stage) {
        DAPPLE_RETURN_IF_ERROR(
            jobs_->Update(id, [&](v1::Job* j) { run.tracker.OnEval(request, now, j); }));
      }
      break;
    case v1::PROGRESS_SAMPLE:
      if (last_stage) {
        DAPPLE_RETURN_IF_ERROR(
            jobs_->Update(id, [&](v1::Job* j) { run.tracker.OnSample(request, now, j); }));
      }
      break;
    case v1::PROGRESS_DONE:
      run.done_ranks.insert(rank_index);
      FreeWorkerLocked(*worker, id,
                       absl::StrCat("finished stage ", request.stage(), " of job ", id));
      if (run.finished_away_since_ms > 0) {
        // Finished while the coordinator was away: the other ranks' reports may still come.
        run.done_again.insert(rank_index);
        EndFinishedAwayLocked(now);
      } else if (run.done_ranks.size() == run.worker_ids.size()) {
        DAPPLE_RETURN_IF_ERROR(EndJobLocked(id, v1::JOB_STATE_SUCCEEDED, "", now).status());
      }
      break;
    case v1::PROGRESS_FAILED:
      FreeWorkerLocked(*worker, id, absl::StrCat("failed stage ", request.stage(), " of job ", id));
      DAPPLE_RETURN_IF_ERROR(FailOrRestartLocked(id, ClassifyRankFailure(request.message()),
                                                 absl::StrCat(rank, ": ", request.message()), now));
      break;
    case v1::PROGRESS_ABORTED:
      // A rank that finished its part has nothing left to abort.
      if (run.done_ranks.contains(rank_index)) break;
      // The job is still running, so nothing told this rank to stop: without it the job can
      // never finish, so it fails rather than hangs.
      FreeWorkerLocked(*worker, id,
                       absl::StrCat("aborted stage ", request.stage(), " of job ", id));
      DAPPLE_RETURN_IF_ERROR(
          FailOrRestartLocked(id, ClassifyRankFailure(request.message()),
                              absl::StrCat(rank, " aborted: ", request.message()), now));
      break;
    case v1::PROGRESS_CHECKPOINT:
      // Replicas are identical: replica 0 of each stage writes the stage's shard. Published
      // below, outside the lock (it writes and syncs files).
      publish = request.replica() == 0;
      break;
    case v1::PROGRESS_KIND_UNSPECIFIED:
    case v1::ProgressKind_INT_MIN_SENTINEL_DO_NOT_USE_:
    case v1::ProgressKind_INT_MAX_SENTINEL_DO_NOT_USE_:
      return absl::InvalidArgumentError(absl::StrCat("progress report of worker ",
                                                     worker->info.id(), " has kind ",
                                                     static_cast<int>(request.kind())));
  }
  lock.Release();
  if (publish) OnCheckpointReport(job, request, now);
  // Until the on-demand checkpoint is published or abandoned, every ack asks for it.
  response->set_checkpoint_step(checkpoints_.RequestedStep(id));
  return absl::OkStatus();
}

absl::Status CoordinatorService::OnStepReportLocked(RunState& run,
                                                    const v1::ProgressReport& request,
                                                    const std::string& rank, bool last_stage,
                                                    int64_t now) {
  const std::string& id = request.job_id();
  if (request.has_stats() && request.stats().skipped()) {
    // Coalesced per rank: the event's count is that rank's skipped steps.
    (void)jobs_->RecordEvent(
        id, JobEventReason::kSkippedStep,
        absl::StrCat(rank, " skipped a step's update (non-finite loss or gradient)"));
  }
  // The loss of a step: replica 0 of the last stage's (its AllReduce added the replicas'), or
  // every last-stage replica's share under Pipe-SGD, which the tracker combines.
  const bool loss_rank =
      last_stage || (request.stage() == run.num_stages - 1 && run.tracker.loss_shares() > 1);
  if (request.has_stats() || (loss_rank && request.has_loss())) {
    std::optional<StragglerDetector::Change> straggler;
    DAPPLE_RETURN_IF_ERROR(jobs_->Update(id, [&](v1::Job* j) {
      if (run.stage_metrics.OnStep(request, now, j)) {
        straggler = run.stragglers.OnStep(request.stage(), request.replica(), request.stats());
        MarkStraggler(run.stragglers, request.stage(), request.replica(), j);
      }
      if (loss_rank && request.has_loss()) run.tracker.OnStep(request, now, j);
    }));
    if (straggler.has_value()) {
      (void)jobs_->RecordEvent(
          id,
          straggler->straggler ? JobEventReason::kStraggler : JobEventReason::kStragglerRecovered,
          absl::StrCat(StragglerDetector::Describe(*straggler), " (worker ", request.worker_id(),
                       ")"));
    }
  }
  if (request.has_trace()) {
    // The rank fills the trace's identity; the coordinator trusts only its own view of it.
    v1::StepTrace trace = request.trace();
    trace.set_job_id(id);
    trace.set_stage(request.stage());
    trace.set_replica(request.replica());
    trace.set_worker_id(request.worker_id());
    // A lost timeline must not fail the job or make the rank retry its report.
    LogStoreWrite(id, "traces", traces_->Put(trace, now), now);
  }
  return absl::OkStatus();
}

void CoordinatorService::KeepLogLinesLocked(const v1::Job& job, const v1::ProgressReport& report) {
  if (report.log_lines().empty() && report.log_lines_dropped() <= 0) return;
  const v1::ParallelPlanSummary& plan = job.plan();
  if (report.stage() < 0 || report.stage() >= plan.stages_size() || report.replica() < 0 ||
      report.replica() >= plan.stages(report.stage()).worker_ids_size() ||
      plan.stages(report.stage()).worker_ids(report.replica()) != report.worker_id()) {
    return;  // not this worker's rank: its lines are not the job's
  }
  std::vector<v1::JobLogLine> lines(report.log_lines().begin(), report.log_lines().end());
  if (report.log_lines_dropped() > 0) {
    v1::JobLogLine& note = lines.emplace_back();
    note.set_unix_ms(options_.now_unix_ms());
    note.set_level("warning");
    note.set_text(absl::StrCat(report.log_lines_dropped(), " log lines dropped by worker ",
                               report.worker_id(), " (its buffer of unsent lines was full)"));
  }
  LogStoreWrite(
      job.id(), "log lines",
      logs_->Append(job.id(), report.stage(), report.replica(), report.worker_id(), lines),
      options_.now_unix_ms());
}

void CoordinatorService::LogStoreWrite(const std::string& job_id, const std::string& what,
                                       const absl::Status& written, int64_t now) {
  const std::string key = absl::StrCat(job_id, " ", what);
  if (!written.ok()) {
    const std::string line =
        store_warnings_.Failed(key, absl::StrCat("job ", job_id, ": ", written.message()), now);
    if (!line.empty()) DAPPLE_LOG_WARN("{}", line);
  } else if (std::string after = store_warnings_.Succeeded(key, now); !after.empty()) {
    DAPPLE_LOG_INFO("job {}: {} stored again ({})", job_id, what, after);
  }
}

void CoordinatorService::OnCheckpointReport(const v1::Job& job, const v1::ProgressReport& report,
                                            int64_t now) {
  // Replayed by a rank after a coordinator restart (progress_reporter.h): a step at or before the
  // newest published checkpoint was published then, perhaps since deleted by
  // --keep-checkpoints (matched by step alone, older ones read "abandoned: ... .partial: No such
  // file" after a restart).
  for (const v1::CheckpointInfo& info : job.checkpoints()) {
    if (report.step() <= info.step()) return;
  }
  auto published = [&] {
    absl::StatusOr<v1::Job> current = jobs_->Get(job.id());
    const v1::Job& j = current.ok() ? *current : job;
    return std::vector<v1::CheckpointInfo>(j.checkpoints().begin(), j.checkpoints().end());
  };
  auto record = [&](const CheckpointPublisher::Outcome& o) -> absl::Status {
    if (o.kind != CheckpointPublisher::Outcome::Kind::kPublished) return absl::OkStatus();
    auto list = [&](std::vector<v1::CheckpointInfo> infos) {
      return jobs_->Update(job.id(), [&](v1::Job* j) {
        j->clear_checkpoints();
        for (const v1::CheckpointInfo& info : infos) *j->add_checkpoints() = info;
      });
    };
    absl::Status s = list(o.checkpoints);
    // Written now, not at the next throttled write: a coordinator restarted in between would
    // not list the published folder; and the superseded folders are deleted only once the list
    // without them is in the database.
    if (s.ok()) s = jobs_->FlushJob(job.id());
    if (!s.ok()) {
      DAPPLE_LOG_WARN("job {}: recording checkpoint {}: {}", job.id(), o.info.path(), s.message());
      // The database still lists the superseded checkpoints and CheckpointManager keeps their
      // folders: listed in memory too, whichever write of the job succeeds next lists only
      // folders that are on disk, and the next recorded publish deletes them.
      if (!o.superseded.empty()) {
        std::vector<v1::CheckpointInfo> all = o.superseded;
        all.insert(all.end(), o.checkpoints.begin(), o.checkpoints.end());
        (void)list(std::move(all));
      }
    }
    (void)jobs_->RecordEvent(
        job.id(), JobEventReason::kCheckpointSaved,
        absl::StrCat("checkpoint after step ", o.info.step(), " published (", o.info.reason(), ", ",
                     o.info.bytes(), " bytes): ", o.info.path()));
    return s;
  };
  const CheckpointPublisher::Outcome outcome =
      checkpoints_.OnReport(report, published, record, now);
  if (outcome.kind == CheckpointPublisher::Outcome::Kind::kAbandoned) {
    // Visible beyond the log: `dapplectl describe` (a Warning event) and
    // dapple_checkpoint_failures_total (the metrics observe the event).
    (void)jobs_->RecordEvent(job.id(), JobEventReason::kCheckpointFailed, outcome.message);
  }
}

absl::StatusOr<CoordinatorService::RunState*> CoordinatorService::StoreUserLocked(
    const std::string& job_id, const std::string& worker) {
  DAPPLE_RETURN_IF_ERROR(LiveWorkerLocked(worker).status());
  DAPPLE_ASSIGN_OR_RETURN(v1::Job job, jobs_->Get(job_id));
  auto run = running_.find(job_id);
  if (job.state() != v1::JOB_STATE_RUNNING || run == running_.end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id, " is not running (", JobStateName(job.state()), "): its store is gone"));
  }
  const std::vector<std::string>& ranks = run->second.worker_ids;
  if (std::find(ranks.begin(), ranks.end(), worker) == ranks.end()) {
    return absl::PermissionDeniedError(absl::StrCat("worker ", worker, " runs no rank of job ",
                                                    job_id, ": it may not use its store"));
  }
  return &run->second;
}

absl::Status CoordinatorService::StoreSet(const auth::Identity& caller,
                                          const v1::StoreSetRequest& request,
                                          v1::StoreSetResponse* response) {
  DAPPLE_RETURN_IF_ERROR(auth::CheckWorker(caller, request.worker_id()));
  absl::MutexLock lock(&mu_);
  DAPPLE_ASSIGN_OR_RETURN(RunState * run, StoreUserLocked(request.job_id(), request.worker_id()));
  const std::string& key = request.key();
  if (key.empty() || static_cast<int64_t>(key.size()) > kMaxStoreKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "store key of ", key.size(), " bytes: a key must have 1..", kMaxStoreKeyBytes, " bytes"));
  }
  if (static_cast<int64_t>(request.value().size()) > kMaxStoreValueBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("store value of key '", key, "' has ", request.value().size(),
                     " bytes, more than the maximum ", kMaxStoreValueBytes));
  }
  auto it = run->store.find(key);
  if (it == run->store.end()) {
    if (static_cast<int>(run->store.size()) >= kMaxStoreKeys) {
      return absl::FailedPreconditionError(absl::StrCat("job ", request.job_id(),
                                                        " store is full: ", kMaxStoreKeys,
                                                        " keys (the most a job may set)"));
    }
    it = run->store.emplace(key, std::string()).first;
  }
  const int64_t bytes = run->store_bytes + static_cast<int64_t>(request.value().size()) -
                        static_cast<int64_t>(it->second.size());
  if (bytes > kMaxStoreBytes) {
    if (it->second.empty()) run->store.erase(it);
    return absl::FailedPreconditionError(
        absl::StrCat("job ", request.job_id(), " store is full: setting key '", key, "' (",
                     request.value().size(), " bytes) would hold ", bytes,
                     " bytes of values, more than the maximum ", kMaxStoreBytes));
  }
  run->store_bytes = bytes;
  it->second = request.value();
  return absl::OkStatus();
}

absl::Status CoordinatorService::StoreGet(const auth::Identity& caller,
                                          const v1::StoreGetRequest& request,
                                          v1::StoreGetResponse* response) {
  DAPPLE_RETURN_IF_ERROR(auth::CheckWorker(caller, request.worker_id()));
  absl::MutexLock lock(&mu_);
  if (request.keys().empty()) {
    return absl::InvalidArgumentError("store get of job " + request.job_id() + " names no keys");
  }
  absl::StatusOr<RunState*> run = StoreUserLocked(request.job_id(), request.worker_id());
  if (absl::IsFailedPrecondition(run.status())) {
    // The job ended: the waiting rank stops instead of polling until its timeout.
    response->set_job_ended(true);
    return absl::OkStatus();
  }
  DAPPLE_RETURN_IF_ERROR(run.status());
  for (const std::string& key : request.keys()) {
    if (!(*run)->store.contains(key)) return absl::OkStatus();  // not ready
  }
  response->set_ready(true);
  for (const std::string& key : request.keys()) response->add_values((*run)->store.at(key));
  return absl::OkStatus();
}

absl::Status CoordinatorService::ReportProfile(const auth::Identity& caller,
                                               const v1::ReportProfileRequest& request,
                                               v1::ReportProfileResponse* response) {
  DAPPLE_RETURN_IF_ERROR(auth::CheckWorker(caller, request.worker_id()));
  absl::MutexLock lock(&mu_);
  DAPPLE_ASSIGN_OR_RETURN(WorkerRecord * worker, LiveWorkerLocked(request.worker_id()));
  v1::ReportProfileRequest report = request;
  const int64_t now = options_.now_unix_ms();
  // A measurement this cache did not ask for (or no longer waits for) but the worker said it
  // was making: one a previous coordinator asked for before it restarted, or one past its
  // deadline. Kept rather than measured again.
  const bool said_measuring =
      !worker->measuring_request_id.empty() && worker->measuring_request_id == report.request_id();
  worker->NoteMeasuring(report.busy_with_request_id(), now);
  if (!report.busy_with_request_id().empty() &&
      now - worker->measuring_since_unix_ms >= options_.profile_timeout_ms) {
    // Measuring one model for longer than a measurement may take: the request fails (the job
    // plans on its estimate) rather than wait on this worker again.
    report.clear_busy_with_request_id();
    report.set_error(
        absl::StrCat(report.error(), " for more than ", options_.profile_timeout_ms / 1000, " s"));
  }
  if (report.has_profile()) {
    report.mutable_profile()->set_source(
        absl::StrCat(report.profile().source(), " by worker ", request.worker_id()));
  }
  ProfileCache::Key key;
  absl::Status s = options_.profile_cache->Report(report, &key);
  if (absl::IsNotFound(s) && said_measuring) {
    // Kept for the jobs waiting for that model (the request's tenant is not known here).
    std::vector<ProfileCache::Key> waiting;
    for (const auto& [job, measuring] : measuring_) waiting.push_back(measuring.key);
    absl::StatusOr<std::vector<ProfileCache::Key>> adopted =
        options_.profile_cache->Adopt(report, waiting);
    s = adopted.status();
    if (s.ok()) {
      DAPPLE_LOG_INFO(
          "worker {}: profile of {} layers measured (request {}, which this "
          "coordinator did not wait for: kept)",
          request.worker_id(), report.profile().layers_size(), report.request_id());
      for (const ProfileCache::Key& filled : *adopted) {
        SaveMeasuredProfile(filled, /*refinement_only=*/false);
      }
      WakeLocked();
      return s;
    }
  }
  if (s.ok() && !report.busy_with_request_id().empty()) {
    DAPPLE_LOG_INFO("worker {}: {}: asking again when it is done", request.worker_id(),
                    report.error());
  } else if (s.ok() && report.error().empty()) {
    DAPPLE_LOG_INFO("worker {}: profile of {} layers measured", request.worker_id(),
                    report.profile().layers_size());
    SaveMeasuredProfile(key, /*refinement_only=*/false);
  } else {
    DAPPLE_LOG_WARN("worker {}: profile: {}", request.worker_id(),
                    s.ok() ? report.error() : std::string(s.message()));
  }
  WakeLocked();
  return s;
}

absl::Status CoordinatorService::DeregisterWorker(const auth::Identity& caller,
                                                  const v1::DeregisterWorkerRequest& request,
                                                  v1::DeregisterWorkerResponse* response) {
  DAPPLE_RETURN_IF_ERROR(auth::CheckWorker(caller, request.worker_id()));
  absl::MutexLock lock(&mu_);
  WorkerRecord* worker = workers_.Find(request.worker_id());
  if (worker == nullptr) {
    return absl::NotFoundError(absl::StrCat("unknown worker ", request.worker_id()));
  }
  const std::string id = worker->info.id();
  const std::string job_id = worker->info.job_id();
  const std::string rank = RankNameLocked(job_id, id, worker->info.stage());
  // The job ends first, while the worker is still known, so that EndJobLocked sees all ranks.
  if (worker->info.state() == v1::WORKER_STATE_BUSY && IsRankLocked(job_id, id)) {
    const std::string lost =
        absl::StrFormat("worker %s (%s of job %s) shut down", id, rank, job_id);
    (void)jobs_->RecordEvent(job_id, JobEventReason::kWorkerLost, lost);
    absl::Status ended =
        FailOrRestartLocked(job_id, FailureCause::kWorkerLost, lost, options_.now_unix_ms());
    if (!ended.ok()) DAPPLE_LOG_ERROR("failing job {}: {}", job_id, ended.message());
  }
  DAPPLE_RETURN_IF_ERROR(workers_.Remove(id, "deregistered: shutting down"));
  // Its measurements will never come: the jobs waiting for them plan on estimates now.
  options_.profile_cache->FailWorker(id, "shut down");
  WakeLocked();  // the pending jobs' explanations count it no more
  return absl::OkStatus();
}

}  // namespace dapple::coordinator
