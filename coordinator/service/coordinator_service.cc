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
constexpr char kDefaultSource[] = "<spec>";
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

// A planner's kResourceExhausted (no plan fits device memory) is the user's to fix, like any
// other bad input; gRPC clients read RESOURCE_EXHAUSTED as a limit of the channel.
absl::Status AsInputError(const absl::Status& status) {
  if (status.code() == absl::StatusCode::kResourceExhausted) {
    return absl::InvalidArgumentError(status.message());
  }
  return status;
}

// Rank programs for a stored plan summary of `spec`: its schedule, P and M, with the
// collectives schedule::LowerOptionsFor gives each stage before each OPTIMIZER_STEP (replicas'
// ALLREDUCE, TIED_ALLREDUCE, GLOBAL_NORM). One program per stage: a stage's replicas run the
// same program (each on its SplitRows share of every micro-batch).
absl::StatusOr<v1::ParallelPlan> PlanFromSummary(const v1::JobSpec& spec,
                                                 const v1::ParallelPlanSummary& summary) {
  DAPPLE_ASSIGN_OR_RETURN(const schedule::ScheduleKind kind,
                          schedule::ParseScheduleKind(summary.schedule()));
  DAPPLE_ASSIGN_OR_RETURN(const schedule::LowerOptions lower,
                          schedule::LowerOptionsFor(spec, summary));
  DAPPLE_ASSIGN_OR_RETURN(
      std::vector<v1::RankProgram> programs,
      schedule::BuildPrograms(kind, summary.stages_size(), summary.micro_batches(), lower));
  v1::ParallelPlan plan;
  *plan.mutable_summary() = summary;
  for (v1::RankProgram& program : programs) *plan.add_programs() = std::move(program);
  return plan;
}

// SubmitJob's check that the workers have a kernel for every layer of `spec` (common/model_info.h
// CheckKernels), located at the layer in `text`: "job.yaml:6:7: model.layers[0] (conv2d): no CPU
// kernel in this build; ...". Without it every rank would fail at start with the same error.
absl::Status CheckJobKernels(const v1::JobSpec& spec, const SpecText& text) {
  int layer = -1;
  const absl::Status s =
      CheckKernels(spec.model(), spec.parallel().device_type(), UsesBf16(spec.training()), &layer);
  if (s.ok()) return s;
  return JobSpecFieldError(text.yaml, text.source, absl::StrCat("model.layers[", layer, "]"),
                           s.message());
}

// SubmitJob's check of resume_from (coordinator.proto): a published checkpoint whose spec
// `spec` may continue (common/checkpoint_files.h CheckResumable), that leaves steps to run and
// that was not written by an emulated job unless `spec` is emulated too.
// Returns the directory without trailing '/'. kInvalidArgument naming the path and the rule.
absl::StatusOr<std::string> CheckResumeFrom(const std::string& path, const v1::JobSpec& spec) {
  std::string dir = path;
  while (dir.size() > 1 && absl::EndsWith(dir, "/")) dir.pop_back();
  absl::StatusOr<v1::CheckpointManifest> manifest = ReadCheckpointManifest(dir);
  if (!manifest.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--resume-from (resume_from): ", manifest.status().message()));
  }
  // An emulated job waits instead of computing, so its shards hold weights that were never
  // trained: a real job resuming from them would carry on at step N from untrained weights
  // without a word. The manifest records the source job's spec and plan (checkpoint_publisher
  // copies both from the job); either saying emulated is enough. The other way round (an
  // emulated job from a real checkpoint) is harmless: it only measures time.
  if ((IsEmulated(manifest->spec()) || manifest->plan().emulated()) && !IsEmulated(spec)) {
    const std::string& type = spec.parallel().device_type();
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot resume from '", dir, "': it was written by an emulated job (",
        manifest->job_id().empty() ? std::string() : absl::StrCat(manifest->job_id(), ", "),
        "parallel.device_type emulated: its weights are not trained) and this job has "
        "parallel.device_type ",
        type.empty() ? "any" : type, "; resume it only into an emulated job"));
  }
  if (absl::Status s = CheckResumable(manifest->spec(), spec); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resume from '", dir, "': ", s.message()));
  }
  const int64_t total = TotalSteps(spec);
  if (manifest->step() >= total) {
    const int64_t max_steps = spec.training().max_steps();
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot resume from '", dir, "': it was taken after step ", manifest->step(),
        " and the job runs ", total, " steps (training.epochs ", spec.training().epochs(), " x ",
        StepsPerEpoch(spec), " steps per epoch",
        max_steps > 0 ? absl::StrCat(", at most training.max_steps ", max_steps) : "",
        "): nothing left to run: raise training.epochs",
        max_steps > 0 ? " and training.max_steps" : "", " to train past step ", manifest->step()));
  }
  return dir;
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
  service->traces_ = std::move(traces);
  service->logs_ = std::move(logs);
  service->worker_ids_ = std::move(worker_ids);
  service->quotas_ = std::move(quotas);
  service->data_roots_ = std::move(data_roots);
  {
    absl::MutexLock lock(&service->mu_);
    service->workers_.ContinueGeneratedIdsFrom(next_worker_id);
    // A sequence raised by the jobs is saved by the next registration (RegisterWorker).
    service->saved_next_worker_id_ = saved_next_worker_id;
    // The jobs that were running wait for their workers (coordinator_service_reattach.cc).
    const int64_t now = service->options_.now_unix_ms();
    for (const v1::Job& job : service->jobs_->List()) {
      if (job.state() == v1::JOB_STATE_RUNNING) service->RecoverRunningLocked(job, now);
    }
  }
  return service;
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
  RestartPass();
  absl::MutexLock lock(&mu_);
  const int64_t now = options_.now_unix_ms();
  CheckHealthLocked(now);
  if (absl::Status s = jobs_->FlushDirty(/*force=*/false); !s.ok()) {
    DAPPLE_LOG_WARN("saving job progress: {}", s.message());
  }
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
  const bool judge = now >= judge_workers_after_ms_;
  for (WorkerRecord* worker :
       judge ? workers_.TimedOut(now, options_.worker_timeout_ms) : std::vector<WorkerRecord*>{}) {
    const double silent_s = (now - worker->info.last_heartbeat_unix_ms()) / 1000.0;
    const bool busy = worker->info.state() == v1::WORKER_STATE_BUSY;
    const std::string job_id = worker->info.job_id();
    const std::string rank = RankNameLocked(job_id, worker->info.id(), worker->info.stage());
    (void)workers_.Transition(*worker, v1::WORKER_STATE_DEAD,
                              absl::StrFormat("no heartbeat for %.1f s", silent_s));
    worker->dead_since_unix_ms = now;
    if (options_.profile_cache->Expire(worker->info.id(), now) > 0) WakeLocked();
    // A worker of a restarted job's failed run is no rank of the run that replaced it.
    if (busy && IsRankLocked(job_id, worker->info.id())) {
      const std::string lost =
          absl::StrFormat("worker %s (%s of job %s) stopped heartbeating (no heartbeat for %.1f s)",
                          worker->info.id(), rank, job_id, silent_s);
      (void)jobs_->RecordEvent(job_id, JobEventReason::kWorkerLost, lost);
      absl::Status ended = FailOrRestartLocked(job_id, FailureCause::kWorkerLost, lost, now);
      if (!ended.ok()) DAPPLE_LOG_ERROR("failing job {}: {}", job_id, ended.message());
    }
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

namespace {

// A job whose stages come from a profile (every planner but manual) and whose stored plan used
// an estimated one.
bool WantsMeasuredProfile(const v1::Job& job) {
  return job.spec().parallel().planner() != "manual" &&
         absl::StartsWith(job.plan().profile_source(), "estimated");
}

// PlanStageSummary.devices of an emulated job's ranks: what the worker's backend reports.
constexpr char kEmulatedDevice[] = "emulated";

std::string FirstDevice(const WorkerRecord& w) {
  return w.info.devices().empty() ? "cpu" : w.info.devices(0);
}

}  // namespace

bool CoordinatorService::ProfileReadyLocked(const v1::Job& job,
                                            const std::vector<WorkerRecord*>& free, int64_t now) {
  measuring_.erase(job.id());
  if (!options_.measure_profiles || !WantsMeasuredProfile(job) || free.empty()) return true;
  ProfileCache& cache = *options_.profile_cache;
  const std::string device = FirstDevice(*free[0]);
  const ProfileCache::Key key = ProfileCache::KeyOf(job.spec().model(), device);
  switch (cache.StateOf(key)) {
    case ProfileCache::State::kReady:
    case ProfileCache::State::kFailed:
      return true;
    case ProfileCache::State::kMissing: {
      // A worker measures one model at a time and refuses a second request, so a worker still
      // measuring (e.g. the model of a job cancelled meanwhile) is not asked.
      WorkerRecord* asked = nullptr;
      for (WorkerRecord* w : free) {
        if (DeviceKindOf(FirstDevice(*w)) == key.device_kind &&
            !cache.HasOutstanding(w->info.id())) {
          asked = w;
          break;
        }
      }
      if (asked == nullptr) {
        measuring_[job.id()] = {key,
                                absl::StrCat("waiting to measure the model's layers on ", device,
                                             ": every free worker is measuring another model")};
        return false;
      }
      cache.Request(asked->info.id(), job.spec(), FirstDevice(*asked),
                    job.spec().training().micro_batch(), now + options_.profile_timeout_ms);
      DAPPLE_LOG_INFO("job {}: measuring the model on worker {} ({})", job.id(), asked->info.id(),
                      FirstDevice(*asked));
      break;
    }
    case ProfileCache::State::kPending:
      break;
  }
  measuring_[job.id()] = {key, absl::StrCat("measuring the model's layers on ", device,
                                            " before planning (a worker times each layer)")};
  return false;
}

bool CoordinatorService::StartJobLocked(const v1::Job& job, const std::vector<WorkerRecord*>& free,
                                        int64_t now, const Replanned* replanned) {
  const std::string& id = job.id();
  if (absl::Status s = jobs_->Transition(id, v1::JOB_STATE_PLANNING, "").status(); !s.ok()) {
    DAPPLE_LOG_ERROR("job {} cannot start planning: {}", id, s.message());
    return false;
  }
  auto fail = [&](const std::string& message) {
    absl::Status s = jobs_->Transition(id, v1::JOB_STATE_FAILED, message).status();
    if (!s.ok()) DAPPLE_LOG_ERROR("job {}: {}", id, s.message());
    return true;
  };
  // A job planned on an estimated profile is planned again once its model was measured.
  const ProfileCache::Key key =
      ProfileCache::KeyOf(job.spec().model(), free.empty() ? "cpu" : FirstDevice(*free[0]));
  // A restart planned the job already (outside the lock), on the workers it found.
  const bool measured =
      replanned == nullptr && WantsMeasuredProfile(job) && options_.profile_cache->Lookup(key);
  const bool asked = replanned == nullptr && options_.measure_profiles && WantsMeasuredProfile(job);
  absl::StatusOr<v1::ParallelPlan> plan =
      replanned != nullptr ? absl::StatusOr<v1::ParallelPlan>(replanned->plan)
      : job.plan().stages().empty() || measured
          ? MakeJobPlan(job.spec(), SubmissionPlanInputs(job.spec(), workers_.List()))
          : PlanFromSummary(job.spec(), job.plan());
  if (!plan.ok()) return fail(std::string(plan.status().message()));
  if (measured && !job.plan().stages().empty() &&
      schedule::NumRanks(plan->summary()) > static_cast<int>(free.size())) {
    // The measured plan wants more workers than are free now: run the stored plan rather
    // than wait (another job may hold them for long).
    const int wanted = schedule::NumRanks(plan->summary());
    plan = PlanFromSummary(job.spec(), job.plan());
    if (!plan.ok()) return fail(std::string(plan.status().message()));
    plan->mutable_summary()->add_notes(
        absl::StrCat("the plan on the measured profile wants ", wanted, " workers but ",
                     free.size(), " are free: running the plan made at submission"));
  }
  if (asked && !measured) {
    if (std::string why = options_.profile_cache->Error(key); !why.empty()) {
      plan->mutable_summary()->add_notes(absl::StrCat("planned on the estimated profile: ", why));
      (void)jobs_->RecordEvent(
          id, JobEventReason::kMeasured,
          absl::StrCat("measuring the model's layers failed: ", why, "; the estimated plan runs"));
    }
  }
  if (measured) {
    (void)jobs_->RecordEvent(id, JobEventReason::kMeasured,
                             absl::StrCat("the model's layers were measured on ", key.device_kind,
                                          ": planned again on that profile"));
  }
  if (replanned == nullptr && (job.plan().stages().empty() || measured)) {
    (void)jobs_->RecordEvent(id, JobEventReason::kPlanned, PlannedMessage(plan->summary()));
  }
  const int num_stages = plan->programs_size();
  const int num_ranks = schedule::NumRanks(plan->summary());
  if (num_stages < 1 || num_ranks > static_cast<int>(free.size()) ||
      plan->summary().stages_size() != num_stages) {
    return fail(absl::StrCat("the plan has ", num_stages, " stages on ", num_ranks, " workers but ",
                             free.size(), " workers are free"));
  }

  // One worker per rank (stage, replica), in RankIndex order: stage 0's replicas first.
  v1::ParallelPlanSummary summary = plan->summary();
  std::vector<std::string> worker_ids;
  std::vector<int> replicas;
  // An emulated rank computes on none of its worker's devices (it waits; its worker log and
  // trace say "emulated"), so the plan's devices say so too; StageAssignment.device stays the
  // worker's own device (below).
  const bool emulated_devices = IsEmulated(job.spec());
  for (int s = 0; s < num_stages; ++s) {
    v1::PlanStageSummary& stage = *summary.mutable_stages(s);
    stage.set_replicas(schedule::StageReplicas(plan->summary(), s));
    replicas.push_back(stage.replicas());
    stage.clear_worker_ids();
    stage.clear_devices();
    stage.clear_hostnames();
    for (int r = 0; r < stage.replicas(); ++r) {
      const WorkerRecord& w = *free[worker_ids.size()];
      worker_ids.push_back(w.info.id());
      stage.add_worker_ids(w.info.id());
      // A worker computes on the first device it offers (one rank per worker).
      stage.add_devices(emulated_devices ? kEmulatedDevice : FirstDevice(w));
      stage.add_hostnames(w.info.hostname());
    }
  }
  const int64_t total_steps = TotalSteps(job.spec());
  // A resumed job starts after its checkpoint's step, from that checkpoint's manifest.
  int64_t first_step = 0;
  std::string resume_manifest;
  // A preempted job resumes from its newest published checkpoint (the one it saved before
  // stopping, when it could), else as it first started.
  const bool preempted = replanned == nullptr && job.preemptions() > 0;
  if (replanned != nullptr) {
    first_step = replanned->first_step;
    if (!replanned->checkpoint.empty()) {
      resume_manifest = absl::StrCat(replanned->checkpoint, "/", kManifestFile);
    }
  } else if (preempted && !job.checkpoints().empty()) {
    const v1::CheckpointInfo& newest = *job.checkpoints().rbegin();
    first_step = newest.step();
    resume_manifest = absl::StrCat(newest.path(), "/", kManifestFile);
  } else if (!job.resumed_from().empty()) {
    absl::StatusOr<v1::CheckpointManifest> manifest = ReadCheckpointManifest(job.resumed_from());
    if (!manifest.ok()) return fail(absl::StrCat("resume: ", manifest.status().message()));
    first_step = manifest->step();
    resume_manifest = absl::StrCat(job.resumed_from(), "/", kManifestFile);
  }
  // The files were checked at submit; again here, since the roots may have changed since (a
  // restart with other --data-root) and a job from an older database was never checked.
  if (absl::Status s = CheckJobFiles(job.spec(), data_roots_); !s.ok()) {
    return fail(std::string(s.message()));
  }
  // Emulated jobs: the profile file is read again (it was checked at submit) for the ranks.
  absl::StatusOr<std::optional<v1::ModelProfile>> emulated = EmulatedProfileOf(job.spec());
  if (!emulated.ok()) return fail(std::string(emulated.status().message()));
  // Every rank's program for the run from first_step, proven deadlock-free by the simulator.
  absl::StatusOr<std::vector<v1::RankProgram>> programs =
      schedule::JobPrograms(job.spec(), summary, first_step);
  if (!programs.ok()) return fail(std::string(programs.status().message()));
  absl::StatusOr<v1::Job> running =
      jobs_->Transition(id, v1::JOB_STATE_RUNNING, "", [&](v1::Job* j) {
        *j->mutable_plan() = summary;
        j->clear_worker_ids();
        for (const std::string& w : worker_ids) j->add_worker_ids(w);
        j->mutable_metrics()->set_total_steps(total_steps);
        j->mutable_metrics()->set_epochs(static_cast<int32_t>(j->spec().training().epochs()));
        // step_losses[i] stays step i + 1: the steps before first_step read as NaN.
        // A resumed job shows where it resumes; its loss is unknown until its first step here.
        if (first_step > 0) {
          j->mutable_metrics()->set_step(first_step);
          j->mutable_metrics()->set_epoch(EpochOfStep(j->spec(), first_step));
          j->mutable_metrics()->set_loss(std::numeric_limits<double>::quiet_NaN());
        }
        if (replanned != nullptr) RecordResume(*replanned, summary, now, j);
        if (preempted) {
          // The steps after the checkpoint run again and report again (as a restart's do).
          j->set_steps_redone(j->steps_redone() +
                              std::max<int64_t>(0, j->metrics().step() - first_step));
          j->mutable_metrics()->set_step(first_step);
          j->mutable_metrics()->set_epoch(first_step > 0 ? EpochOfStep(j->spec(), first_step) : 0);
          while (j->step_losses_size() > first_step) j->mutable_step_losses()->RemoveLast();
          j->clear_stage_metrics();
        }
      });
  if (!running.ok()) {
    return fail(absl::StrCat("could not start: ", running.status().message()));
  }

  for (int s = 0; s < num_stages; ++s) {
    for (int r = 0; r < replicas[s]; ++r) {
      WorkerRecord& worker = *free[schedule::RankIndex(summary, s, r)];
      (void)workers_.Transition(worker, v1::WORKER_STATE_BUSY,
                                absl::StrCat(schedule::RankName(s, r, replicas[s]), " of job ", id),
                                id, s);
      v1::StageAssignment assignment;
      assignment.set_job_id(id);
      *assignment.mutable_spec() = job.spec();
      *assignment.mutable_plan() = summary;
      assignment.set_stage(s);
      assignment.set_replica(r);
      assignment.set_num_stages(num_stages);
      *assignment.mutable_program() = (*programs)[schedule::RankIndex(summary, s, r)];
      assignment.set_first_step(first_step);
      assignment.set_checkpoint_dir(checkpoints_.JobDir(id));
      assignment.set_resume_manifest(resume_manifest);
      assignment.set_device(FirstDevice(worker));
      assignment.set_trace_every_steps(options_.trace_every_steps);
      if (emulated->has_value()) *assignment.mutable_emulated_profile() = **emulated;
      worker.pending_assignment = std::move(assignment);
    }
  }
  rendezvous_.Open(id, replicas);
  checkpoints_.OnJobStarted(id, job.spec(), summary, first_step);
  // A restarted or preempted job's elapsed time counts its earlier runs too.
  const int64_t started =
      replanned != nullptr || preempted
          ? now - static_cast<int64_t>(std::llround(job.metrics().elapsed_seconds() * 1000.0))
          : now;
  RunState run{num_stages,
               replicas,
               worker_ids,
               {},
               ProgressTracker(job.spec().training().global_batch(), started)};
  run.admitted_unix_ms = now;
  running_.insert_or_assign(id, std::move(run));
  return true;
}

absl::StatusOr<v1::Job> CoordinatorService::EndJobLocked(const std::string& id, v1::JobState to,
                                                         const std::string& message, int64_t now) {
  auto run = running_.find(id);
  DAPPLE_ASSIGN_OR_RETURN(v1::Job job, jobs_->Transition(id, to, message, [&](v1::Job* j) {
    if (run != running_.end()) {
      j->mutable_metrics()->set_elapsed_seconds(run->second.tracker.ElapsedSeconds(now));
    }
    if (to == v1::JOB_STATE_SUCCEEDED) j->mutable_metrics()->set_eta_seconds(0);
  }));
  restarting_.erase(id);
  StopRunLocked(id);
  return job;
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

// --- Coordinator ---

absl::StatusOr<std::string> CoordinatorService::CheckResumeOwner(const auth::Identity& caller,
                                                                 const std::string& dir) {
  if (caller.role == auth::Role::kAdmin) return dir;
  // Whose checkpoint it is: the job that wrote it (its manifest), which must be the caller's
  // tenant's, and the folder must be that job's own under the checkpoint root, so that a
  // manifest copied elsewhere cannot point at another tenant's shards.
  const absl::Status denied = absl::PermissionDeniedError(absl::StrCat(
      "--resume-from '", dir, "' is not a checkpoint of a job of tenant ", caller.tenant));
  absl::StatusOr<v1::CheckpointManifest> manifest = ReadCheckpointManifest(dir);
  if (!manifest.ok() || manifest->job_id().empty()) return denied;
  absl::StatusOr<v1::Job> owner = jobs_->Get(manifest->job_id());
  if (!owner.ok() || !auth::CanAccessJob(caller, *owner)) return denied;
  std::error_code ec;
  const std::filesystem::path real = std::filesystem::weakly_canonical(dir, ec);
  if (ec) return denied;
  std::string job_dir;
  {
    absl::MutexLock lock(&mu_);
    job_dir = checkpoints_.JobDir(owner->id());
  }
  const std::filesystem::path root = std::filesystem::weakly_canonical(job_dir, ec);
  if (ec || !absl::StartsWith(real.string(), root.string() + "/")) return denied;
  return dir;
}

absl::Status CoordinatorService::SubmitJob(const auth::Identity& caller,
                                           const v1::SubmitJobRequest& request,
                                           v1::SubmitJobResponse* response) {
  const std::string& source =
      request.source_name().empty() ? std::string(kDefaultSource) : request.source_name();
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(request.spec_yaml(), source);
  if (!spec.ok()) {
    DAPPLE_LOG_INFO("rejected job spec {}: {}", source, spec.status().message());
    return absl::InvalidArgumentError(spec.status().message());
  }
  const SpecText text{request.spec_yaml(), source};
  // A tenant at its limit of queued jobs is refused before any work (CheckSubmit below checks
  // again with the plan's devices, under the lock).
  if (!caller.tenant.empty()) {
    absl::MutexLock lock(&mu_);
    // A job for any device is charged to a type the tenant has quota for and runs there; the
    // stored spec names it, before planning, so that the plan is made on those workers.
    const std::string charged =
        ManagerLocked().ChargedDeviceType(caller.tenant, spec->parallel().device_type());
    if (charged != "any") spec->mutable_parallel()->set_device_type(charged);
    scheduling::Workload probe;
    probe.tenant = caller.tenant;
    if (absl::Status s = ManagerLocked().CheckSubmit(probe, jobs_->PendingOfTenant(caller.tenant));
        s.code() == absl::StatusCode::kResourceExhausted) {
      DAPPLE_LOG_INFO("refused job {} of tenant {}: {}", source, caller.tenant, s.message());
      return s;
    }
  }
  // Outside the lock: reads the data file. Before the resume check, whose step count needs the
  // resolved samples.
  if (absl::Status s = ResolveJobData(&*spec, data_roots_, &text); !s.ok()) {
    DAPPLE_LOG_INFO("rejected job spec {}: {}", source, s.message());
    return s;
  }
  if (absl::Status s = CheckJobKernels(*spec, text); !s.ok()) {
    DAPPLE_LOG_INFO("rejected job spec {}: {}", source, s.message());
    return s;
  }
  std::string resumed_from;
  if (!request.resume_from().empty()) {
    absl::StatusOr<std::string> checked = CheckResumeFrom(request.resume_from(), *spec);
    if (checked.ok()) checked = CheckResumeOwner(caller, *checked);
    if (!checked.ok()) {
      DAPPLE_LOG_INFO("rejected resume of {}: {}", source, checked.status().message());
      return checked.status();
    }
    resumed_from = *std::move(checked);
  }
  // Planned outside the lock: a big model's search should not hold up heartbeats.
  absl::StatusOr<v1::ParallelPlan> plan =
      MakeJobPlan(*spec, SubmissionPlanInputs(*spec, WorkerSnapshot()), &text);
  if (!plan.ok()) {
    DAPPLE_LOG_INFO("rejected job spec {}: {}", source, plan.status().message());
    return AsInputError(plan.status());
  }
  // Checked and stored under the lock, so that concurrent submits count each other.
  absl::MutexLock lock(&mu_);
  v1::Job planned;
  *planned.mutable_spec() = *spec;
  *planned.mutable_plan() = plan->summary();
  scheduling::Workload workload;
  workload.tenant = caller.tenant;
  workload.devices[scheduling::DeviceTypeKey(spec->parallel().device_type())] =
      WorkersNeeded(planned);
  if (absl::Status s = ManagerLocked().CheckSubmit(workload, jobs_->PendingOfTenant(caller.tenant));
      !s.ok()) {
    DAPPLE_LOG_INFO("refused job {} of tenant {}: {}", source, caller.tenant, s.message());
    return s;
  }
  DAPPLE_ASSIGN_OR_RETURN(
      *response->mutable_job(),
      jobs_->Create(*spec, request.spec_yaml(), plan->summary(), [&](v1::Job* j) {
        j->set_resumed_from(resumed_from);
        j->set_owner(caller.user);
        j->set_tenant(caller.tenant);
      }));
  WakeLocked();
  return absl::OkStatus();
}

std::vector<v1::WorkerInfo> CoordinatorService::WorkerSnapshot() {
  absl::MutexLock lock(&mu_);
  return workers_.List();
}

PlanInputs CoordinatorService::SubmissionPlanInputs(
    const v1::JobSpec& spec, const std::vector<v1::WorkerInfo>& workers) const {
  PlanInputs inputs;
  inputs.defaults = options_.plan_defaults;
  // dapple, pipedream and dp replicate stages up to the job's devices; the others make
  // parallel.devices / stages replicas of each stage (planner.h).
  inputs.max_replicas = std::max(1, spec.parallel().devices());
  // PipeDream's 1F1B-RR sends whole micro-batches round-robin to a stage's replicas: each
  // needs at least one per step, so at most M = global_batch / micro_batch replicas (MakePlan
  // refuses a plan with more; the spec's validation refuses devices / stages > M).
  // (PipeDream's code limits replicas only to 1 or to all devices: planner pipedream-code checks
  // M >= D itself, planner.h.)
  if (spec.parallel().schedule() == "pipedream" &&
      spec.parallel().planner() != kPipeDreamCodePlanner && spec.training().micro_batch() > 0) {
    const int64_t micro_batches = spec.training().global_batch() / spec.training().micro_batch();
    inputs.max_replicas = static_cast<int>(
        std::max<int64_t>(1, std::min<int64_t>(inputs.max_replicas, micro_batches)));
  }
  const std::string& type = spec.parallel().device_type();
  inputs.device_kind = JobDeviceKind(type, workers);
  inputs.profile = options_.profile_cache->Lookup(
      ProfileCache::Key{profile::ModelFingerprint(spec.model()), inputs.device_kind});
  if (static_cast<int>(LiveFittingWorkers(workers, type).size()) >= spec.parallel().devices()) {
    absl::StatusOr<v1::ClusterTopology> topology =
        TopologyFromWorkers(workers, type, options_.plan_defaults);
    if (topology.ok()) inputs.topology = *std::move(topology);
  }
  return inputs;
}

absl::Status CoordinatorService::PlanJob(const auth::Identity& caller,
                                         const v1::PlanJobRequest& request,
                                         v1::PlanJobResponse* response) {
  const std::string& source =
      request.source_name().empty() ? std::string(kDefaultSource) : request.source_name();
  if (request.has_profile()) DAPPLE_RETURN_IF_ERROR(CheckProfile(request.profile()));
  if (request.has_cluster()) DAPPLE_RETURN_IF_ERROR(CheckTopology(request.cluster()));
  if (request.global_batch() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--global-batch ", request.global_batch(), " must be >= 0 (0: the default)"));
  }
  const std::vector<v1::WorkerInfo> workers = WorkerSnapshot();
  v1::ParallelPlanSummary summary;
  v1::ClusterTopology topology;
  if (request.spec_yaml().empty()) {
    if (!request.has_profile()) {
      return absl::InvalidArgumentError(
          "a plan without a job spec needs a profile (dapplectl plan --profile FILE)");
    }
    if (request.has_cluster()) {
      topology = request.cluster();
    } else {
      DAPPLE_ASSIGN_OR_RETURN(topology,
                              TopologyFromWorkers(workers, "any", options_.plan_defaults));
    }
    absl::StatusOr<v1::ParallelPlanSummary> planned = PlanProfile(
        request.profile(), topology, request.planner(), request.global_batch(), request.schedule());
    if (!planned.ok()) return AsInputError(planned.status());
    summary = *std::move(planned);
  } else {
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(request.spec_yaml(), source);
    if (!spec.ok()) return absl::InvalidArgumentError(spec.status().message());
    // Both overrides first, then one validation: each alone may not fit the spec's other field
    // (--planner pipedream-code needs schedule pipedream, which --schedule may be giving).
    std::vector<std::string> overrides;
    v1::ParallelSpec* parallel = spec->mutable_parallel();
    if (!request.planner().empty() && request.planner() != parallel->planner()) {
      parallel->set_planner(request.planner());
      if (request.planner() != "manual" && parallel->stage_ranges_size() > 0) {
        parallel->clear_stage_ranges();
        parallel->set_stages(0);
      }
      overrides.push_back(absl::StrCat("--planner ", request.planner(),
                                       " in place of the spec's parallel.planner"));
    }
    if (!request.schedule().empty() && request.schedule() != parallel->schedule()) {
      parallel->set_schedule(request.schedule());
      overrides.push_back(absl::StrCat("--schedule ", request.schedule(),
                                       " in place of the spec's parallel.schedule"));
      // parallel.interleave belongs to schedule interleaved alone: 2 model chunks per stage
      // where the spec has none (Megatron's smallest), dropped under another schedule.
      if (request.schedule() == "interleaved" && parallel->interleave() == 0) {
        parallel->set_interleave(2);
        overrides.push_back("parallel.interleave 2 (unset in the spec)");
      } else if (request.schedule() != "interleaved") {
        parallel->set_interleave(0);
      }
    }
    if (!overrides.empty()) {
      if (absl::Status s = ValidateJobSpec(*spec); !s.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("with ", absl::StrJoin(overrides, " and "), ": ", s.message()));
      }
    }
    // As submit does: the plan of a spec whose data submit would refuse is refused too.
    const SpecText text{request.spec_yaml(), source};
    DAPPLE_RETURN_IF_ERROR(ResolveJobData(&*spec, data_roots_, &text));
    PlanInputs inputs = SubmissionPlanInputs(*spec, workers);
    if (request.has_profile()) inputs.profile = request.profile();
    // Without a cluster file the topology is submit's: the registered workers when there are
    // parallel.devices of them, else the hypothetical node MakePlan assumes then.
    const bool hypothetical = !request.has_cluster() && !inputs.topology.has_value();
    if (request.has_cluster()) {
      inputs.topology = request.cluster();
    } else if (hypothetical) {
      inputs.topology = SingleNodeTopology(spec->parallel().devices(), options_.plan_defaults);
    }
    topology = *inputs.topology;
    absl::StatusOr<v1::ParallelPlan> plan = MakeJobPlan(*spec, inputs, &text);
    if (!plan.ok()) return AsInputError(plan.status());
    summary = std::move(*plan->mutable_summary());
    // A plan does not depend on the kernels; a job that submit would refuse for want of one
    // says so.
    if (absl::Status s = CheckJobKernels(*spec, text); !s.ok()) {
      summary.add_notes(absl::StrCat("submit would refuse this job: ", s.message()));
    }
    if (hypothetical) {
      const std::string& type = spec->parallel().device_type();
      const size_t fitting = LiveFittingWorkers(workers, type).size();
      const int wanted = summary.num_devices();
      summary.add_notes(absl::StrCat(
          fitting, fitting == 1 ? " registered worker" : " registered workers",
          type.empty() || type == "any" ? "" : absl::StrCat(" (", type, ")"),
          " for parallel.devices ", spec->parallel().devices(),
          ": planned as submit plans it, on a hypothetical node (coordinator defaults); the job "
          "would wait for ",
          wanted, wanted == 1 ? " worker" : " workers"));
    }
  }
  // Nothing runs, so the devices a user wants to see are the topology's.
  for (v1::PlanStageSummary& stage : *summary.mutable_stages()) {
    *stage.mutable_devices() = stage.placement();
  }
  *response->mutable_plan() = std::move(summary);
  *response->mutable_cluster() = std::move(topology);
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
  DAPPLE_ASSIGN_OR_RETURN(*response, traces_->Get(request.job_id()));
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
      return absl::InvalidArgumentError(absl::StrCat(
          "job ", job.id(), " has no rank ", request.stage(), "/", request.replica(), ": ", why));
    }
    query.rank = std::make_pair(request.stage(), request.replica());
  }
  DAPPLE_ASSIGN_OR_RETURN(std::vector<v1::JobLogLine> lines, logs_->Get(job.id(), query));
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
