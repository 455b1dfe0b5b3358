#include "coordinator/service/coordinator_service.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/checkpoint_files.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/median.h"
#include "common/model_info.h"
#include "common/profile/model_profile.h"
#include "common/schedule/generators.h"
#include "common/schedule/job_lowering.h"
#include "common/schedule/job_programs.h"
#include "common/schedule/lowering.h"
#include "common/schedule/ranks.h"
#include "common/status.h"
#include "common/steps.h"
#include "coordinator/auth/access.h"
#include "coordinator/jobs/job_lifecycle.h"
#include "coordinator/planner/planner.h"
#include "coordinator/planner/planners.h"
#include "coordinator/service/emulation.h"
#include "coordinator/service/job_data.h"
#include "coordinator/service/plan_request_check.h"
#include "coordinator/service/worker_topology.h"

namespace dapple::coordinator {
namespace {

constexpr char kCancelledByUser[] = "cancelled by user";
// How often a blocked WatchJob looks at its client's cancellation flag.
constexpr absl::Duration kWatchPoll = absl::Milliseconds(100);

// An empty id would read "no job " (NOT_FOUND) as if some job were missing.
absl::Status CheckJobId(const std::string& id) {
  if (id.empty()) return absl::InvalidArgumentError("job_id must not be empty");
  return absl::OkStatus();
}

bool WorkerFits(const v1::Job& job, const WorkerRecord& worker) {
  return WorkerFitsDeviceType(job.spec().parallel().device_type(), worker.info);
}

}  // namespace

std::vector<WorkerRecord*> CoordinatorService::Fitting(const v1::Job& job,
                                                       std::vector<WorkerRecord*> workers) {
  workers.erase(std::remove_if(workers.begin(), workers.end(),
                               [&](const WorkerRecord* w) { return !WorkerFits(job, *w); }),
                workers.end());
  return workers;
}

absl::StatusOr<std::unique_ptr<CoordinatorService>> CoordinatorService::Create(
    CoordinatorOptions options) {
  DAPPLE_ASSIGN_OR_RETURN(DataRoots data_roots, DataRoots::Create(options.data_roots));
  JobManagerOptions job_options;
  job_options.db_path = options.db_path;
  job_options.now_unix_ms = options.now_unix_ms;
  job_options.metrics_persist_interval_ms = options.metrics_persist_interval_ms;
  job_options.observer = options.job_observer;
  DAPPLE_ASSIGN_OR_RETURN(std::unique_ptr<JobManager> jobs,
                          JobManager::Open(std::move(job_options)));
  if (options.profile_cache == nullptr) options.profile_cache = std::make_shared<ProfileCache>();
  DAPPLE_ASSIGN_OR_RETURN(std::unique_ptr<TraceStore> traces, TraceStore::Open(options.db_path));
  DAPPLE_ASSIGN_OR_RETURN(std::unique_ptr<LogStore> logs, LogStore::Open(options.db_path));
  DAPPLE_ASSIGN_OR_RETURN(std::unique_ptr<WorkerIdStore> worker_ids,
                          WorkerIdStore::Open(options.db_path));
  DAPPLE_ASSIGN_OR_RETURN(int64_t next_worker_id, worker_ids->LoadNext());
  DAPPLE_ASSIGN_OR_RETURN(std::unique_ptr<scheduling::QuotaStore> quotas,
                          scheduling::QuotaStore::Open(options.db_path));
  DAPPLE_ASSIGN_OR_RETURN(std::unique_ptr<ProfileStore> profile_store,
                          ProfileStore::Open(options.db_path));
  // A database written before the sequence was saved has none: the ids its jobs name still
  // must not come back for other processes.
  const int64_t saved_next_worker_id = next_worker_id;
  for (const v1::Job& job : jobs->List()) {
    auto see = [&](const std::string& id) {
      const int64_t n = WorkerRegistry::GeneratedIdNumber(id);
      if (n >= next_worker_id) next_worker_id = n + 1;
    };
    for (const std::string& id : job.worker_ids()) see(id);
    for (const v1::PlanStageSummary& stage : job.plan().stages()) {
      for (const std::string& id : stage.worker_ids()) see(id);
    }
    for (const v1::StageMetrics& m : job.stage_metrics()) see(m.worker_id());
  }
  std::unique_ptr<CoordinatorService> service(
      new CoordinatorService(std::move(options), std::move(jobs)));
  // Files read before the lock: where the running jobs' ranks write checkpoints, and the step
  // of every checkpoint a waiting job resumes from (StartJobLocked reads no file).
  std::map<std::string, std::string> recovered_dirs;
  for (const v1::Job& job : service->jobs_->List()) {
    if (job.state() == v1::JOB_STATE_RUNNING) {
      recovered_dirs[job.id()] = service->checkpoints_.RecoveredJobDir(job);
    }
    if (!IsTerminal(job.state()) && !job.resumed_from().empty()) {
      service->checkpoints_.PrepareResume(job.resumed_from());
    }
  }
  service->traces_ = std::move(traces);
  service->logs_ = std::move(logs);
  service->worker_ids_ = std::move(worker_ids);
  service->quotas_ = std::move(quotas);
  service->profile_store_ = std::move(profile_store);
  service->RestoreMeasurements();
  service->data_roots_ = std::move(data_roots);
  {
    absl::MutexLock lock(&service->mu_);
    service->workers_.ContinueGeneratedIdsFrom(next_worker_id);
    // A sequence raised by the jobs is saved by the next registration (RegisterWorker).
    service->saved_next_worker_id_ = saved_next_worker_id;
    // The jobs that were running wait for their workers (coordinator_service_reattach.cc);
    // the ones that were restarting go on restarting.
    const int64_t now = service->options_.now_unix_ms();
    for (const v1::Job& job : service->jobs_->List()) {
      if (job.state() == v1::JOB_STATE_RUNNING) {
        service->RecoverRunningLocked(job, recovered_dirs[job.id()], now);
      } else if (job.state() == v1::JOB_STATE_RESTARTING) {
        service->RecoverRestartingLocked(job, now);
      }
    }
  }
  return service;
}

void CoordinatorService::RestoreMeasurements() {
  const int64_t now = options_.now_unix_ms();
  // A cache: a table it cannot read costs measurements, never the coordinator's start.
  absl::StatusOr<ProfileStore::Loaded> read =
      profile_store_->LoadProfiles(now - options_.profile_max_age_ms, now);
  if (!read.ok()) {
    DAPPLE_LOG_WARN("saved model profiles not reused, measured again at their next job: {}",
                    read.status().message());
    read = ProfileStore::Loaded{};
  }
  const ProfileStore::Loaded& loaded = *read;
  for (const std::string& dropped : loaded.dropped) {
    DAPPLE_LOG_INFO("{}: not reused (--profile-max-age-h {}), measured again at its next job",
                    dropped, options_.profile_max_age_ms / 3'600'000);
  }
  int restored = 0;
  for (const ProfileCache::SavedProfile& saved : loaded.profiles) {
    if (absl::Status s = options_.profile_cache->Restore(saved); !s.ok()) {
      const ProfileCache::Key key = ProfileCache::KeyOf(saved.profile);
      DAPPLE_LOG_WARN("profile of model {} on {} not reused, measured at its next job: {}",
                      key.fingerprint, key.device_kind, s.message());
      (void)profile_store_->Forget(key);
      continue;
    }
    ++restored;
  }
  absl::StatusOr<std::optional<v1::CollectiveRefinementState>> collectives =
      profile_store_->LoadCollectives();
  absl::Status restored_collectives = collectives.status();
  if (collectives.ok() && collectives->has_value()) {
    restored_collectives = collectives_.Restore(**collectives);
  }
  if (!restored_collectives.ok()) {
    DAPPLE_LOG_WARN("saved collective overhead not reused (learned again from the next jobs): {}",
                    restored_collectives.message());
  }
  if (restored > 0 || collectives_.jobs() > 0) {
    DAPPLE_LOG_INFO(
        "reusing {} measured model profile{} and the collective overhead of {} job{} "
        "({:.2f} ms) from {}",
        restored, restored == 1 ? "" : "s", collectives_.jobs(),
        collectives_.jobs() == 1 ? "" : "s", collectives_.OverheadMs(), options_.db_path);
  }
}

void CoordinatorService::SaveMeasuredProfile(const ProfileCache::Key& key, bool refinement_only) {
  std::optional<ProfileCache::SavedProfile> saved = options_.profile_cache->Saved(key);
  if (!saved.has_value()) return;
  absl::Status s = refinement_only ? profile_store_->SaveRefinement(key, saved->refinement)
                                   : profile_store_->SaveProfile(*saved, options_.now_unix_ms());
  // The cache still has it: only a restart would measure the model again.
  if (!s.ok()) DAPPLE_LOG_WARN("{}", s.message());
}

CoordinatorService::~CoordinatorService() {
  Shutdown();
  // Handlers may have run after Shutdown (calls in flight while the server drained).
  if (absl::Status s = jobs_->FlushDirty(/*force=*/true); !s.ok()) {
    DAPPLE_LOG_ERROR("saving job progress at exit: {}", s.message());
  }
}

void CoordinatorService::Start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { Loop(); });
}

void CoordinatorService::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    wake_cv_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
  EndWatches();
  if (absl::Status s = jobs_->FlushDirty(/*force=*/true); !s.ok()) {
    DAPPLE_LOG_ERROR("saving job progress at shutdown: {}", s.message());
  }
}

void CoordinatorService::EndWatches() {
  // JobManager::Shutdown wakes every AwaitChange and makes IsShutdown true, which is what
  // WatchJob stops on; the job table itself keeps working.
  jobs_->Shutdown();
}

void CoordinatorService::WakeLocked() {
  wake_ = true;
  wake_cv_.Signal();
}

void CoordinatorService::Loop() {
  const absl::Duration tick = absl::Milliseconds(options_.tick_interval_ms);
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      const absl::Time deadline = absl::Now() + tick;
      while (!stop_ && !wake_) {
        if (wake_cv_.WaitWithDeadline(&mu_, deadline)) break;
      }
      if (stop_) return;
      wake_ = false;
    }
    Tick();
  }
}

void CoordinatorService::Tick() {
  PrepareStarts();
  RestartPass();
  absl::MutexLock lock(&mu_);
  const int64_t now = options_.now_unix_ms();
  CheckHealthLocked(now);
  // A failed write is logged by JobManager, per job and rate-limited: logging it again at every
  // tick would flood the log while the database disk is full.
  (void)jobs_->FlushDirty(/*force=*/false);
  ScheduleLocked(now);
}

void CoordinatorService::CheckHealthLocked(int64_t now) {
  // Silence measured right after our own stall is partly ours: every worker looked silent at
  // once while their heartbeats waited behind this lock (seen under load: two healthy workers
  // DEAD in the same pass, the running job failed). Let the queued heartbeats land first.
  if (options_.stall_grace_ms > 0 && last_health_check_ms_ > 0 &&
      now - last_health_check_ms_ > options_.tick_interval_ms + options_.stall_grace_ms) {
    judge_workers_after_ms_ = now + options_.stall_grace_ms;
    DAPPLE_LOG_WARN(
        "coordinator stalled: health check {:.1f} s after the previous one (due every "
        "{:.1f} s); judging worker heartbeats again in {:.1f} s",
        (now - last_health_check_ms_) / 1000.0, options_.tick_interval_ms / 1000.0,
        options_.stall_grace_ms / 1000.0);
  }
  last_health_check_ms_ = now;
  ExpireReattachLocked(now);
  EndFinishedAwayLocked(now);
  const bool judge = now >= judge_workers_after_ms_;
  for (WorkerRecord* worker :
       judge ? workers_.TimedOut(now, options_.worker_timeout_ms) : std::vector<WorkerRecord*>{}) {
    const double silent_s = (now - worker->info.last_heartbeat_unix_ms()) / 1000.0;
    DeclareDeadLocked(*worker, absl::StrFormat("no heartbeat for %.1f s", silent_s),
                      absl::StrFormat("stopped heartbeating (no heartbeat for %.1f s)", silent_s),
                      now);
  }
  // DEAD workers would otherwise be listed forever; the ones kept for a while tell an
  // operator which worker failed a job.
  for (WorkerRecord* worker : workers_.ForgettableDead(now, options_.dead_worker_retention_ms)) {
    const std::string id = worker->info.id();
    (void)workers_.Remove(
        id, absl::StrFormat("DEAD for %.0f s (retention %.0f s, --dead-worker-retention-s): "
                            "forgotten",
                            (now - worker->dead_since_unix_ms) / 1000.0,
                            options_.dead_worker_retention_ms / 1000.0));
  }
}

void CoordinatorService::DeclareDeadLocked(WorkerRecord& worker, const std::string& why,
                                           const std::string& lost_because, int64_t now) {
  const bool busy = worker.info.state() == v1::WORKER_STATE_BUSY;
  const std::string job_id = worker.info.job_id();
  const std::string rank = RankNameLocked(job_id, worker.info.id(), worker.info.stage());
  (void)workers_.Transition(worker, v1::WORKER_STATE_DEAD, why);
  worker.dead_since_unix_ms = now;
  if (options_.profile_cache->Expire(worker.info.id(), now) > 0) WakeLocked();
  // A worker of a restarted job's failed run is no rank of the run that replaced it.
  if (busy && IsRankLocked(job_id, worker.info.id())) {
    const std::string lost = absl::StrFormat("worker %s (%s of job %s) %s", worker.info.id(), rank,
                                             job_id, lost_because);
    (void)jobs_->RecordEvent(job_id, JobEventReason::kWorkerLost, lost);
    absl::Status ended = FailOrRestartLocked(job_id, FailureCause::kWorkerLost, lost, now);
    if (!ended.ok()) DAPPLE_LOG_ERROR("failing job {}: {}", job_id, ended.message());
  }
}

absl::StatusOr<v1::Job> CoordinatorService::EndJobLocked(const std::string& id, v1::JobState to,
                                                         const std::string& message, int64_t now) {
  auto run = running_.find(id);
  if (to == v1::JOB_STATE_SUCCEEDED && run != running_.end()) {
    if (absl::StatusOr<v1::Job> ending = jobs_->Get(id); ending.ok()) {
      RefineFromStepsLocked(run->second, *ending);
    }
  }
  DAPPLE_ASSIGN_OR_RETURN(v1::Job job, jobs_->Transition(id, to, message, [&](v1::Job* j) {
    if (run != running_.end()) {
      j->mutable_metrics()->set_elapsed_seconds(run->second.tracker.ElapsedSeconds(now));
    }
    if (to == v1::JOB_STATE_SUCCEEDED) j->mutable_metrics()->set_eta_seconds(0);
  }));
  restarting_.erase(id);
  prepared_.erase(id);
  submitted_profiles_.erase(id);
  StopRunLocked(id);
  return job;
}

namespace {

// The median over the replicas of `stage` of `median(run's tracker, stage, replica)`; nullopt when
// none has enough steps.
template <typename PerRank>
std::optional<double> OverReplicas(const v1::ParallelPlanSummary& plan, int stage,
                                   const PerRank& per_rank) {
  std::vector<double> ranks;
  for (int r = 0; r < schedule::StageReplicas(plan, stage); ++r) {
    if (std::optional<double> ms = per_rank(r)) ranks.push_back(*ms);
  }
  if (ranks.empty()) return std::nullopt;
  return Median(ranks);
}

}  // namespace

void CoordinatorService::RefineFromStepsLocked(const RunState& run, const v1::Job& job) {
  const v1::ParallelPlanSummary& plan = job.plan();
  // Only steps that ran on real devices, on a plan made on the cached measurement, say
  // something about it: an emulated rank waits out its profile's times.
  if (!run.profile.has_value() || IsEmulated(job.spec()) ||
      !absl::StartsWith(plan.profile_source(), "measured on ")) {
    return;
  }
  std::vector<std::string> said;
  // The layers: each stage's compute against its prediction.
  std::vector<StageMeasurement> stages;
  std::vector<std::string> described;
  for (int s = 0; s < plan.stages_size(); ++s) {
    const v1::PlanStageSummary& stage = plan.stages(s);
    const std::optional<double> measured = OverReplicas(
        plan, s, [&](int r) { return run.stage_metrics.MedianComputeMs(s, r, kRefineMinSteps); });
    if (!measured.has_value()) continue;
    StageMeasurement m{schedule::StageChunks(plan, s), stage.compute_ms(), stage.overhead_ms(),
                       stage.contention_ms(),          *measured,          s};
    described.push_back(
        absl::StrFormat("stage %d %.1f ms (predicted %.1f)", s, m.measured_ms, m.predicted_ms));
    stages.push_back(std::move(m));
  }
  if (stages.empty()) return;
  said.push_back(
      absl::StrCat("compute per step, median after the warm-up: ", absl::StrJoin(described, ", ")));
  std::vector<std::string> not_taken;
  absl::StatusOr<int> taken =
      options_.profile_cache->Refine(run.profile->key, run.profile->generation, stages, &not_taken);
  if (!taken.ok()) {
    DAPPLE_LOG_INFO("job {}: its measured steps do not refine the model's profile: {}", job.id(),
                    taken.status().message());
  } else {
    if (*taken > 0) {
      said.push_back(absl::StrCat("refined the layer times of the model's profile on ",
                                  run.profile->key.device_kind, " (", *taken, " of ", stages.size(),
                                  " stages taken)"));
    }
    said.insert(said.end(), not_taken.begin(), not_taken.end());
    if (*taken > 0) SaveMeasuredProfile(run.profile->key, /*refinement_only=*/true);
  }
  // The collectives: the bottleneck stage's time outside its layers against its prediction, in
  // a synchronous job whose steps end in a collective of every rank.
  const absl::StatusOr<schedule::LowerOptions> lowered =
      schedule::LowerOptionsFor(job.spec(), plan);
  if (schedule::NumRanks(plan) >= 2 && lowered.ok() && lowered->global_norm &&
      schedule::RunningSchedule(job.spec(), plan) != "pipedream") {
    int b = 0;
    for (int s = 1; s < plan.stages_size(); ++s) {
      if (plan.stages(s).compute_ms() > plan.stages(b).compute_ms()) b = s;
    }
    const std::optional<double> outside = OverReplicas(plan, b, [&](int r) {
      return run.stage_metrics.MedianNonComputeMs(b, r, kRefineMinSteps);
    });
    if (outside.has_value()) {
      // Rounding, and a step whose norm's barrier the schedule overlaps (zb-h2's deferred
      // check), can put the prediction a hair below the stage's compute: nothing outside it.
      const double predicted =
          std::max(0.0, plan.predicted_step_ms() - plan.stages(b).compute_ms());
      const int collectives = schedule::CollectivesPerStep(*lowered, b);
      const double observed = collectives_.Observe(run.profile->collective_overhead_ms,
                                                   *outside - predicted, collectives);
      if (observed >= 0) {
        if (absl::Status saved = profile_store_->SaveCollectives(collectives_.State());
            !saved.ok()) {
          DAPPLE_LOG_WARN("{}", saved.message());
        }
        said.push_back(absl::StrFormat(
            "stage %d spent %.1f ms per step outside its layers (predicted %.1f, %d "
            "collective%s): each collective +%.2f ms (the cluster's overhead now %.2f ms)",
            b, *outside, predicted, collectives, collectives == 1 ? "" : "s", observed,
            collectives_.OverheadMs()));
      }
    }
  }
  (void)jobs_->RecordEvent(job.id(), JobEventReason::kMeasured, absl::StrJoin(said, "; "));
}

void CoordinatorService::StopRunLocked(const std::string& id) {
  auto run = running_.find(id);
  if (run != running_.end()) {
    for (const std::string& worker_id : run->second.worker_ids) {
      WorkerRecord* worker = workers_.Find(worker_id);
      if (worker == nullptr || worker->info.state() != v1::WORKER_STATE_BUSY ||
          worker->info.job_id() != id) {
        continue;
      }
      // A worker that never received its stage has nothing to stop; one that did stays BUSY
      // until its heartbeat stops listing the job (Heartbeat sends the abort).
      if (worker->pending_assignment.has_value()) {
        FreeWorkerLocked(*worker, id, "its job ended before the assignment was delivered");
      }
    }
    running_.erase(run);
  }
  rendezvous_.Close(id);
  checkpoints_.OnJobEnded(id);
}

void CoordinatorService::FreeWorkerLocked(WorkerRecord& worker, const std::string& job_id,
                                          const std::string& reason) {
  if (worker.info.state() != v1::WORKER_STATE_BUSY || worker.info.job_id() != job_id) return;
  (void)workers_.Transition(worker, v1::WORKER_STATE_IDLE, reason);
  WakeLocked();
}

absl::StatusOr<WorkerRecord*> CoordinatorService::LiveWorkerLocked(const std::string& id) {
  WorkerRecord* worker = workers_.Find(id);
  if (worker == nullptr || worker->info.state() == v1::WORKER_STATE_DEAD) {
    return absl::NotFoundError(absl::StrCat("unknown worker ", id, ": register again"));
  }
  return worker;
}

std::string CoordinatorService::RankNameLocked(const std::string& job_id,
                                               const std::string& worker_id, int stage) const {
  auto run = running_.find(job_id);
  if (run != running_.end()) {
    const RunState& state = run->second;
    int index = 0;
    for (int s = 0; s < state.num_stages; ++s) {
      for (int r = 0; r < state.replicas[s]; ++r, ++index) {
        if (state.worker_ids[index] == worker_id)
          return schedule::RankName(s, r, state.replicas[s]);
      }
    }
  }
  return absl::StrCat("stage ", stage);
}

absl::Status CoordinatorService::CheckRankLocked(const std::string& job_id,
                                                 const std::string& worker, int stage,
                                                 int replica) {
  auto run = running_.find(job_id);
  if (run == running_.end()) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job_id, " is not running"));
  }
  const RunState& state = run->second;
  if (stage < 0 || stage >= state.num_stages) {
    return absl::InvalidArgumentError(absl::StrCat("job ", job_id, " has stages 0..",
                                                   state.num_stages - 1, ", got stage ", stage,
                                                   " replica ", replica));
  }
  if (replica < 0 || replica >= state.replicas[stage]) {
    return absl::InvalidArgumentError(absl::StrCat("job ", job_id, " has replicas 0..",
                                                   state.replicas[stage] - 1, " of stage ", stage,
                                                   ", got replica ", replica));
  }
  const std::string& expected = state.worker_ids[state.RankOf(stage, replica)];
  if (expected != worker) {
    // A worker's credential used for a rank not assigned to it (docs/security.md).
    return absl::PermissionDeniedError(absl::StrCat(
        "worker ", worker, " is not ", schedule::RankName(stage, replica, state.replicas[stage]),
        " of job ", job_id, " (", expected, " is)"));
  }
  if (state.recovered && !state.reattached_ranks.contains(state.RankOf(stage, replica))) {
    // A worker of the same name that did not claim the rank (a new process) is not that rank.
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", worker, " did not claim ",
                     schedule::RankName(stage, replica, state.replicas[stage]), " of job ", job_id,
                     " back after the coordinator restarted"));
  }
  return absl::OkStatus();
}

absl::Status CoordinatorService::GetJob(const auth::Identity& caller,
                                        const v1::GetJobRequest& request, v1::Job* response) {
  DAPPLE_RETURN_IF_ERROR(CheckJobId(request.job_id()));
  DAPPLE_ASSIGN_OR_RETURN(*response, jobs_->Get(request.job_id()));
  if (absl::Status s = auth::CheckJobAccess(caller, *response); !s.ok()) {
    response->Clear();
    return s;
  }
  DAPPLE_ASSIGN_OR_RETURN(std::vector<v1::JobEventRecord> events, jobs_->Events(request.job_id()));
  for (v1::JobEventRecord& e : events) *response->add_events() = std::move(e);
  return absl::OkStatus();
}

absl::Status CoordinatorService::GetJobTrace(const auth::Identity& caller,
                                             const v1::GetJobTraceRequest& request,
                                             v1::JobTrace* response) {
  DAPPLE_RETURN_IF_ERROR(CheckJobId(request.job_id()));
  DAPPLE_ASSIGN_OR_RETURN(v1::Job job, jobs_->Get(request.job_id()));
  DAPPLE_RETURN_IF_ERROR(auth::CheckJobAccess(caller, job));
  // A job resumed after a restart may run on another layout: its earlier run's traces (other
  // stages, steps it ran again) would mix with the new ones, so only the run's own are served.
  const int64_t since = job.restart_history_size() > 0
                            ? job.restart_history(job.restart_history_size() - 1).resumed_unix_ms()
                            : 0;
  DAPPLE_ASSIGN_OR_RETURN(*response, traces_->Get(request.job_id(), since));
  if (job.plan().stages_size() > 0) response->set_num_stages(job.plan().stages_size());
  return absl::OkStatus();
}

absl::Status CoordinatorService::GetJobLogs(const auth::Identity& caller,
                                            const v1::GetJobLogsRequest& request,
                                            v1::GetJobLogsResponse* response) {
  DAPPLE_RETURN_IF_ERROR(CheckJobId(request.job_id()));
  DAPPLE_ASSIGN_OR_RETURN(v1::Job job, jobs_->Get(request.job_id()));
  DAPPLE_RETURN_IF_ERROR(auth::CheckJobAccess(caller, job));
  if (request.tail() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tail must be >= 0 (0: every line), got ", request.tail()));
  }
  LogStore::Query query;
  query.after_seq = request.after_seq();
  query.tail = request.tail();
  bool in_plan = true;
  std::string not_in_plan;
  if (request.one_rank()) {
    const int stages = job.plan().stages_size();
    if (request.stage() < 0 || request.stage() >= stages || request.replica() < 0 ||
        request.replica() >= job.plan().stages(request.stage()).replicas()) {
      // Name what is wrong: a stage past the last, or a replica past its stage's last.
      std::string why;
      if (stages == 0) {
        why = "it has no plan yet";
      } else if (request.stage() < 0 || request.stage() >= stages) {
        why = absl::StrCat("its stages are 0..", stages - 1);
      } else {
        why = absl::StrCat("stage ", request.stage(), " has replicas 0..",
                           job.plan().stages(request.stage()).replicas() - 1);
      }
      in_plan = false;
      not_in_plan = absl::StrCat("job ", job.id(), " has no rank ", request.stage(), "/",
                                 request.replica(), ": ", why);
    }
    query.rank = std::make_pair(request.stage(), request.replica());
  }
  DAPPLE_ASSIGN_OR_RETURN(std::vector<v1::JobLogLine> lines, logs_->Get(job.id(), query));
  // A rank of an earlier layout (before a restart re-planned the job) is still a rank whose
  // lines are kept; only a rank that never logged is refused.
  if (!in_plan && lines.empty() && request.after_seq() == 0) {
    return absl::InvalidArgumentError(not_in_plan);
  }
  for (v1::JobLogLine& line : lines) *response->add_lines() = std::move(line);
  response->set_state(job.state());
  return absl::OkStatus();
}

absl::Status CoordinatorService::ListJobs(const auth::Identity& caller,
                                          const v1::ListJobsRequest& request,
                                          v1::ListJobsResponse* response) {
  for (v1::Job& job : jobs_->List()) {
    if (auth::CanAccessJob(caller, job)) *response->add_jobs() = std::move(job);
  }
  return absl::OkStatus();
}

absl::Status CoordinatorService::CancelJob(const auth::Identity& caller,
                                           const v1::CancelJobRequest& request, v1::Job* response) {
  DAPPLE_RETURN_IF_ERROR(CheckJobId(request.job_id()));
  absl::MutexLock lock(&mu_);
  DAPPLE_ASSIGN_OR_RETURN(const v1::Job job, jobs_->Get(request.job_id()));
  DAPPLE_RETURN_IF_ERROR(auth::CheckJobAccess(caller, job));
  DAPPLE_ASSIGN_OR_RETURN(*response, EndJobLocked(request.job_id(), v1::JOB_STATE_CANCELLED,
                                                  kCancelledByUser, options_.now_unix_ms()));
  WakeLocked();
  return absl::OkStatus();
}

absl::Status CoordinatorService::WatchJob(const auth::Identity& caller,
                                          const v1::WatchJobRequest& request,
                                          const JobEventSink& send,
                                          const std::function<bool()>& cancelled) {
  const std::string& id = request.job_id();
  DAPPLE_RETURN_IF_ERROR(CheckJobId(id));
  DAPPLE_ASSIGN_OR_RETURN(JobManager::Snapshot snapshot, jobs_->GetSnapshot(id));
  DAPPLE_RETURN_IF_ERROR(auth::CheckJobAccess(caller, snapshot.job));
  // A watch that starts during shutdown gets no snapshot: its client reconnects elsewhere
  // (or later) rather than looping on one snapshot per stream.
  if (jobs_->IsShutdown()) return absl::UnavailableError("coordinator is shutting down");
  const absl::Duration min_interval = absl::Milliseconds(options_.watch_min_interval_ms);
  auto stopped = [&]() -> absl::Status {
    if (cancelled()) return absl::CancelledError("watch cancelled by the client");
    if (jobs_->IsShutdown()) return absl::UnavailableError("coordinator is shutting down");
    return absl::OkStatus();
  };
  while (true) {
    v1::JobEvent event;
    *event.mutable_job() = std::move(snapshot.job);
    if (!send(event)) return absl::OkStatus();
    const absl::Time sent = absl::Now();
    if (IsTerminal(event.job().state())) return absl::OkStatus();
    do {
      DAPPLE_RETURN_IF_ERROR(stopped());
    } while (!jobs_->AwaitChange(id, snapshot.version, absl::Now() + kWatchPoll));
    // Coalesce bursts (a step report per few ms) into one snapshot per interval.
    for (absl::Time now = absl::Now(); now < sent + min_interval; now = absl::Now()) {
      DAPPLE_RETURN_IF_ERROR(stopped());
      absl::SleepFor(std::min(sent + min_interval - now, kWatchPoll));
    }
    DAPPLE_RETURN_IF_ERROR(stopped());
    DAPPLE_ASSIGN_OR_RETURN(snapshot, jobs_->GetSnapshot(id));
  }
}

absl::Status CoordinatorService::ListWorkers(const auth::Identity& caller,
                                             const v1::ListWorkersRequest& request,
                                             v1::ListWorkersResponse* response) {
  absl::MutexLock lock(&mu_);
  absl::flat_hash_map<std::string, bool> visible;  // job id -> the caller may see it
  for (v1::WorkerInfo& info : workers_.List()) {
    if (!info.job_id().empty()) {
      auto [it, added] = visible.try_emplace(info.job_id(), false);
      if (added) {
        absl::StatusOr<v1::Job> job = jobs_->Get(info.job_id());
        it->second = job.ok() && auth::CanAccessJob(caller, *job);
      }
      // Another tenant's work: the worker is shown busy, but not with what.
      if (!it->second) {
        info.clear_job_id();
        info.clear_stage();
      }
    }
    *response->add_workers() = std::move(info);
  }
  return absl::OkStatus();
}

// --- WorkerControl ---

absl::Status CoordinatorService::CheckpointJob(const auth::Identity& caller,
                                               const v1::CheckpointJobRequest& request,
                                               v1::CheckpointJobResponse* response) {
  DAPPLE_RETURN_IF_ERROR(CheckJobId(request.job_id()));
  absl::MutexLock lock(&mu_);
  DAPPLE_ASSIGN_OR_RETURN(v1::Job job, jobs_->Get(request.job_id()));
  DAPPLE_RETURN_IF_ERROR(auth::CheckJobAccess(caller, job));
  if (job.state() != v1::JOB_STATE_RUNNING || !running_.contains(job.id())) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job.id(), " is ", JobStateName(job.state()),
                     ", not RUNNING: only a running job can be checkpointed"));
  }
  DAPPLE_ASSIGN_OR_RETURN(const int64_t step,
                          checkpoints_.RequestOnDemand(job.id(), TotalSteps(job.spec())));
  DAPPLE_LOG_INFO("job {}: checkpoint after step {} requested", job.id(), step);
  *response->mutable_job() = std::move(job);
  response->set_step(step);
  return absl::OkStatus();
}

}  // namespace dapple::coordinator
