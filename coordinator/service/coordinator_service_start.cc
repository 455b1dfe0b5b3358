// CoordinatorService: starting a job's run (coordinator_service.h): what is slow (files,
// planning) is prepared before the lock by PrepareStarts; StartJobLocked then plans from it,
// picks the workers, hands each rank its StageAssignment and records the move to RUNNING.
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
#include "coordinator/service/coordinator_service.h"
#include "coordinator/service/data_roots.h"
#include "coordinator/service/emulation.h"
#include "coordinator/service/job_data.h"
#include "coordinator/service/plan_request_check.h"
#include "coordinator/service/worker_topology.h"

namespace dapple::coordinator {

namespace {

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

// `planned` with one worker of `free` per rank (stage, replica), in RankIndex order (stage 0's
// replicas first): each stage's replicas, worker_ids, devices and hostnames. An emulated rank
// computes on none of its worker's devices (it waits; its worker log and trace say "emulated"),
// so the plan's devices say so too; StageAssignment.device stays the worker's own device.
v1::ParallelPlanSummary WithWorkers(const v1::ParallelPlanSummary& planned,
                                    const std::vector<WorkerRecord*>& free, bool emulated_devices) {
  v1::ParallelPlanSummary summary = planned;
  size_t next = 0;
  for (int s = 0; s < summary.stages_size(); ++s) {
    v1::PlanStageSummary& stage = *summary.mutable_stages(s);
    stage.set_replicas(schedule::StageReplicas(planned, s));
    stage.clear_worker_ids();
    stage.clear_devices();
    stage.clear_hostnames();
    for (int r = 0; r < stage.replicas(); ++r) {
      const WorkerRecord& w = *free[next++];
      stage.add_worker_ids(w.info.id());
      // A worker computes on the first device it offers (one rank per worker).
      stage.add_devices(emulated_devices ? kEmulatedDevice : FirstDevice(w));
      stage.add_hostnames(w.info.hostname());
    }
  }
  return summary;
}

}  // namespace

void CoordinatorService::PrepareStarts() {
  // The device kinds a job could start on now, for the measured profiles StartJobLocked looks
  // up (by its first free worker's device).
  std::set<std::string> devices;
  const std::vector<v1::WorkerInfo> workers = WorkerSnapshot();
  for (const v1::WorkerInfo& w : workers) {
    if (w.state() != v1::WORKER_STATE_DEAD) {
      devices.insert(w.devices().empty() ? "cpu" : w.devices(0));
    }
  }
  std::vector<std::string> ids = jobs_->PendingIds();
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, wait] : restarting_) ids.push_back(id);
  }
  for (const std::string& id : ids) {
    absl::StatusOr<v1::Job> found = jobs_->Get(id);
    if (!found.ok()) continue;
    const v1::Job& job = *found;
    const bool pending = job.state() == v1::JOB_STATE_PENDING;
    if (!pending && job.state() != v1::JOB_STATE_RESTARTING) continue;
    bool measured = false;
    for (const std::string& device : devices) {
      measured = measured ||
                 (WantsMeasuredProfile(job) &&
                  options_.profile_cache->StateOf(ProfileCache::KeyOf(
                      job.spec().model(), device, job.tenant())) == ProfileCache::State::kReady);
    }
    const bool want_plan = pending && (job.plan().stages().empty() || measured);
    const bool want_emulated = IsEmulated(job.spec());
    {
      absl::MutexLock lock(&mu_);
      auto it = prepared_.find(job.id());
      // A plan made on a measured profile that jobs refined since is made again: a job queued
      // behind others starts on what they measured.
      const std::optional<ProfileUse>& made_on =
          it == prepared_.end() ? std::nullopt : it->second.profile;
      const bool stale = made_on.has_value() &&
                         options_.profile_cache->Generation(made_on->key) != made_on->generation;
      if (it != prepared_.end() && it->second.files.has_value() &&
          (!want_plan || (it->second.plan.has_value() && !stale)) &&
          (!want_emulated || it->second.emulated.has_value())) {
        continue;
      }
    }
    // The slow part, without the lock: the job's files and its planning.
    Prepared prepared;
    prepared.files = CheckJobFiles(job.spec(), data_roots_);
    if (want_emulated) prepared.emulated = EmulatedProfileOf(job.spec());
    if (want_plan) {
      prepared.plan = MakeJobPlan(
          job.spec(), SubmissionPlanInputs(job.spec(), job.tenant(), workers, &prepared.profile));
    }
    absl::MutexLock lock(&mu_);
    Prepared& kept = prepared_[job.id()];
    kept.files = std::move(prepared.files);
    if (prepared.emulated.has_value()) kept.emulated = std::move(prepared.emulated);
    if (prepared.plan.has_value()) {
      kept.plan = std::move(prepared.plan);
      kept.profile = prepared.profile;
    }
  }
}

bool CoordinatorService::ProfileReadyLocked(const v1::Job& job,
                                            const std::vector<WorkerRecord*>& free, int64_t now) {
  measuring_.erase(job.id());
  if (!options_.measure_profiles || !WantsMeasuredProfile(job) || free.empty()) return true;
  ProfileCache& cache = *options_.profile_cache;
  const std::string device = FirstDevice(*free[0]);
  const ProfileCache::Key key = ProfileCache::KeyOf(job.spec().model(), device, job.tenant());
  ProfileCache::State state = cache.StateOf(key);
  // A measurement lost with its worker is asked of another one (once), not given up for the
  // FLOP estimate.
  std::string lost;
  if (state == ProfileCache::State::kFailed && cache.WorthAskingAgain(key)) {
    lost = cache.Error(key);
    state = ProfileCache::State::kMissing;
  }
  switch (state) {
    case ProfileCache::State::kReady:
    case ProfileCache::State::kFailed:
      return true;
    case ProfileCache::State::kMissing: {
      // A worker measures one model at a time and refuses a second request, so a worker still
      // measuring (e.g. the model of a job cancelled meanwhile, or one a previous coordinator
      // asked for) is not asked; one measuring longer than a measurement may take is asked (a
      // busy answer then fails the request: ReportProfile).
      WorkerRecord* asked = nullptr;
      for (WorkerRecord* w : free) {
        const bool measuring = !w->measuring_request_id.empty() &&
                               now - w->measuring_since_unix_ms < options_.profile_timeout_ms;
        if (DeviceKindOf(FirstDevice(*w)) == key.device_kind &&
            !cache.HasOutstanding(w->info.id()) && !measuring) {
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
                    job.spec().training().micro_batch(), now + options_.profile_timeout_ms,
                    job.tenant());
      if (!lost.empty()) {
        (void)jobs_->RecordEvent(job.id(), JobEventReason::kMeasured,
                                 absl::StrCat(lost, ": asking worker ", asked->info.id()));
      }
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

absl::StatusOr<v1::ParallelPlan> CoordinatorService::PlanToStartLocked(
    const v1::Job& job, const std::vector<WorkerRecord*>& free, const Replanned* replanned,
    std::optional<ProfileUse>* profile) {
  const std::string& id = job.id();
  *profile = std::nullopt;
  // A restart planned the job already (outside the lock), on the workers it found.
  if (replanned != nullptr) {
    *profile = replanned->profile;
    return replanned->plan;
  }
  // A job planned on an estimated profile is planned again once its model was measured.
  const ProfileCache::Key key = ProfileCache::KeyOf(
      job.spec().model(), free.empty() ? "cpu" : FirstDevice(*free[0]), job.tenant());
  const bool measured = WantsMeasuredProfile(job) &&
                        options_.profile_cache->StateOf(key) == ProfileCache::State::kReady;
  const bool asked = options_.measure_profiles && WantsMeasuredProfile(job);
  // A new plan was made before the lock (PrepareStarts; StartJobLocked checked it is there).
  const bool prepared = job.plan().stages().empty() || measured;
  absl::StatusOr<v1::ParallelPlan> plan =
      prepared ? *prepared_.at(id).plan : PlanFromSummary(job.spec(), job.plan());
  if (!plan.ok()) return plan.status();
  if (prepared) {
    *profile = prepared_.at(id).profile;
  } else if (auto submitted = submitted_profiles_.find(id);
             submitted != submitted_profiles_.end()) {
    *profile = submitted->second;
  }
  if (measured && !job.plan().stages().empty() &&
      schedule::NumRanks(plan->summary()) > static_cast<int>(free.size())) {
    // The measured plan wants more workers than are free now: run the stored plan rather
    // than wait (another job may hold them for long).
    const int wanted = schedule::NumRanks(plan->summary());
    plan = PlanFromSummary(job.spec(), job.plan());
    if (!plan.ok()) return plan.status();
    *profile = std::nullopt;
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
  if (job.plan().stages().empty() || measured) {
    (void)jobs_->RecordEvent(id, JobEventReason::kPlanned, PlannedMessage(plan->summary()));
  }
  return plan;
}

absl::StatusOr<CoordinatorService::StartPoint> CoordinatorService::StartPointLocked(
    const v1::Job& job, const Replanned* replanned) const {
  StartPoint start;
  if (replanned != nullptr) {
    start.first_step = replanned->first_step;
    if (!replanned->checkpoint.empty()) {
      start.resume_manifest = absl::StrCat(replanned->checkpoint, "/", kManifestFile);
    }
  } else if (job.preemptions() > 0 && !job.checkpoints().empty()) {
    // A preempted job resumes from its newest published checkpoint (the one it saved before
    // stopping, when it could), else as it first started.
    const v1::CheckpointInfo& newest = *job.checkpoints().rbegin();
    start.first_step = newest.step();
    start.resume_manifest = absl::StrCat(newest.path(), "/", kManifestFile);
  } else if (!job.resumed_from().empty()) {
    // Read at submit (or at start-up), not here under the lock.
    absl::StatusOr<int64_t> step = checkpoints_.ResumeStep(job.resumed_from());
    if (!step.ok())
      return absl::Status(step.status().code(), absl::StrCat("resume: ", step.status().message()));
    start.first_step = *step;
    start.resume_manifest = absl::StrCat(job.resumed_from(), "/", kManifestFile);
  }
  return start;
}

void CoordinatorService::AssignRanksLocked(const v1::Job& job,
                                           const v1::ParallelPlanSummary& summary,
                                           const std::vector<WorkerRecord*>& free,
                                           const std::vector<v1::RankProgram>& programs,
                                           const StartPoint& start,
                                           const std::optional<v1::ModelProfile>& emulated) {
  const std::string& id = job.id();
  // The one place the job's checkpoint folder is named (per tenant; CheckpointManager).
  const std::string checkpoint_dir = checkpoints_.JobDir(job);
  for (int s = 0; s < summary.stages_size(); ++s) {
    const int replicas = summary.stages(s).replicas();
    for (int r = 0; r < replicas; ++r) {
      WorkerRecord& worker = *free[schedule::RankIndex(summary, s, r)];
      (void)workers_.Transition(worker, v1::WORKER_STATE_BUSY,
                                absl::StrCat(schedule::RankName(s, r, replicas), " of job ", id),
                                id, s);
      v1::StageAssignment assignment;
      assignment.set_job_id(id);
      *assignment.mutable_spec() = job.spec();
      *assignment.mutable_plan() = summary;
      assignment.set_stage(s);
      assignment.set_replica(r);
      assignment.set_num_stages(summary.stages_size());
      *assignment.mutable_program() = programs[schedule::RankIndex(summary, s, r)];
      assignment.set_first_step(start.first_step);
      assignment.set_checkpoint_dir(checkpoint_dir);
      assignment.set_resume_manifest(start.resume_manifest);
      assignment.set_device(FirstDevice(worker));
      assignment.set_trace_every_steps(options_.trace_every_steps);
      if (emulated.has_value()) *assignment.mutable_emulated_profile() = *emulated;
      worker.pending_assignment = std::move(assignment);
    }
  }
  checkpoints_.OnJobStarted(job, checkpoint_dir, summary, start.first_step);
}

bool CoordinatorService::PreparedLocked(const v1::Job& job, const std::vector<WorkerRecord*>& free,
                                        const Replanned* replanned) const {
  auto it = prepared_.find(job.id());
  if (it == prepared_.end() || !it->second.files.has_value()) return false;
  if (IsEmulated(job.spec()) && !it->second.emulated.has_value()) return false;
  if (replanned != nullptr) return true;
  const bool measured = WantsMeasuredProfile(job) &&
                        options_.profile_cache->StateOf(ProfileCache::KeyOf(
                            job.spec().model(), free.empty() ? "cpu" : FirstDevice(*free[0]),
                            job.tenant())) == ProfileCache::State::kReady;
  if (job.plan().stages().empty() || measured) {
    return it != prepared_.end() && it->second.plan.has_value();
  }
  return true;
}

bool CoordinatorService::StartJobLocked(const v1::Job& job, const std::vector<WorkerRecord*>& free,
                                        int64_t now, const Replanned* replanned) {
  const std::string& id = job.id();
  if (!PreparedLocked(job, free, replanned)) {
    // Prepared since the pass before the lock began (a submit, a measurement just in): the
    // next pass, at once.
    WakeLocked();
    return false;
  }
  if (absl::Status s = jobs_->Transition(id, v1::JOB_STATE_PLANNING, "").status(); !s.ok()) {
    DAPPLE_LOG_ERROR("job {} cannot start planning: {}", id, s.message());
    return false;
  }
  auto fail = [&](const std::string& message) {
    absl::Status s = jobs_->Transition(id, v1::JOB_STATE_FAILED, message).status();
    if (!s.ok()) DAPPLE_LOG_ERROR("job {}: {}", id, s.message());
    return true;
  };
  std::optional<ProfileUse> profile;
  absl::StatusOr<v1::ParallelPlan> plan = PlanToStartLocked(job, free, replanned, &profile);
  // Emulated jobs: the profile file was read again (it was checked at submit) for the ranks,
  // before the lock (PrepareStarts). What was prepared is used once: a preempted job is
  // prepared again.
  absl::StatusOr<std::optional<v1::ModelProfile>> emulated = std::optional<v1::ModelProfile>();
  absl::Status files = absl::OkStatus();
  if (auto it = prepared_.find(id); it != prepared_.end()) {
    if (it->second.emulated.has_value()) emulated = *std::move(it->second.emulated);
    if (it->second.files.has_value()) files = *it->second.files;
  }
  prepared_.erase(id);
  submitted_profiles_.erase(id);
  if (!plan.ok()) return fail(std::string(plan.status().message()));
  const int num_stages = plan->programs_size();
  const int num_ranks = schedule::NumRanks(plan->summary());
  if (num_stages < 1 || num_ranks > static_cast<int>(free.size()) ||
      plan->summary().stages_size() != num_stages) {
    return fail(absl::StrCat("the plan has ", num_stages, " stages on ", num_ranks, " workers but ",
                             free.size(), " workers are free"));
  }

  const v1::ParallelPlanSummary summary =
      WithWorkers(plan->summary(), free, /*emulated_devices=*/IsEmulated(job.spec()));
  std::vector<int> replicas;
  std::vector<std::string> worker_ids;
  for (const v1::PlanStageSummary& stage : summary.stages()) {
    replicas.push_back(stage.replicas());
    worker_ids.insert(worker_ids.end(), stage.worker_ids().begin(), stage.worker_ids().end());
  }
  const int64_t total_steps = TotalSteps(job.spec());
  const bool preempted = replanned == nullptr && job.preemptions() > 0;
  absl::StatusOr<StartPoint> start = StartPointLocked(job, replanned);
  if (!start.ok()) return fail(std::string(start.status().message()));
  const int64_t first_step = start->first_step;
  // The files were checked at submit; again (before the lock), since the roots may have
  // changed since (a restart with other --data-root) and a job from an older database was never
  // checked.
  if (!files.ok()) return fail(std::string(files.message()));
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
        // A resumed job shows where it resumes, with that step's loss when its history has it
        // (a restart's run reported it; `list` read "nan" until the next step otherwise).
        if (first_step > 0) {
          j->mutable_metrics()->set_step(first_step);
          j->mutable_metrics()->set_epoch(EpochOfStep(j->spec(), first_step));
          j->mutable_metrics()->set_loss(j->step_losses_size() >= first_step
                                             ? j->step_losses(static_cast<int>(first_step - 1))
                                             : std::numeric_limits<double>::quiet_NaN());
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

  AssignRanksLocked(job, summary, free, *programs, *start, *emulated);
  rendezvous_.Open(id, replicas);
  // A restarted or preempted job's elapsed time counts its earlier runs too, and a restart's
  // time since the failure (its backoff, the wait for workers, a coordinator outage in
  // between): the job was RESTARTING, not queued as a preempted one is.
  const int64_t elapsed_ms =
      static_cast<int64_t>(std::llround(job.metrics().elapsed_seconds() * 1000.0));
  int64_t started = now;
  if (replanned != nullptr && !job.restart_history().empty()) {
    started = std::min(now, job.restart_history().rbegin()->unix_ms() - elapsed_ms);
  } else if (replanned != nullptr || preempted) {
    started = now - elapsed_ms;
  }
  RunState run(ProgressTracker(job.spec().training().global_batch(), started,
                               schedule::LossReplicas(summary)));
  run.num_stages = num_stages;
  run.replicas = replicas;
  run.worker_ids = worker_ids;
  run.admitted_unix_ms = now;
  run.profile = profile;
  running_.insert_or_assign(id, std::move(run));
  return true;
}

}  // namespace dapple::coordinator
