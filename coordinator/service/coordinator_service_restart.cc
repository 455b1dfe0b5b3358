// CoordinatorService's automatic restarts (training.restart): the entry point a lost worker or
// a rank's error goes through, and the restart pass of every tick. The rules are
// coordinator/jobs/restart_policy.h's; this file only applies them. Same class, same lock rules
// (coordinator_service.h); planning and checkpoint reads happen outside the lock.
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/checkpoint_files.h"
#include "common/logging.h"
#include "common/schedule/ranks.h"
#include "common/spec_text.h"
#include "common/status.h"
#include "common/steps.h"
#include "coordinator/jobs/event_recorder.h"
#include "coordinator/jobs/job_lifecycle.h"
#include "coordinator/service/coordinator_service.h"
#include "coordinator/service/emulation.h"
#include "coordinator/service/worker_topology.h"

namespace dapple::coordinator {
namespace {

// The spec a restart plans with: the job's own (same global batch, micro-batch, schedule) on
// `devices` workers; a fixed stage count above them becomes what they can hold.
v1::JobSpec SpecOn(const v1::JobSpec& spec, int devices) {
  v1::JobSpec out = spec;
  v1::ParallelSpec* p = out.mutable_parallel();
  p->set_devices(devices);
  if (p->stages() > devices) p->set_stages(devices);
  return out;
}

}  // namespace

bool CoordinatorService::IsRankLocked(const std::string& job_id,
                                      const std::string& worker_id) const {
  auto run = running_.find(job_id);
  if (run == running_.end()) return false;
  const std::vector<std::string>& ranks = run->second.worker_ids;
  auto it = std::find(ranks.begin(), ranks.end(), worker_id);
  if (it == ranks.end()) return false;
  // A job recovered at a coordinator restart: only a worker that claimed its rank back runs it.
  return !run->second.recovered ||
         run->second.reattached_ranks.contains(static_cast<int>(it - ranks.begin()));
}

absl::Status CoordinatorService::FailOrRestartLocked(const std::string& id, FailureCause cause,
                                                     const std::string& message, int64_t now) {
  DAPPLE_ASSIGN_OR_RETURN(v1::Job job, jobs_->Get(id));
  const RestartDecision decision =
      job.state() == v1::JOB_STATE_RUNNING
          ? DecideRestart(job.spec().training().restart(), cause, job.restarts())
          : RestartDecision{};
  if (!decision.restart) {
    const std::string failed =
        decision.why_not.empty() ? message : absl::StrCat(message, " (", decision.why_not, ")");
    return EndJobLocked(id, v1::JOB_STATE_FAILED, failed, now).status();
  }
  auto run = running_.find(id);
  // Right after a coordinator restart the job's row lags its ranks (their reports are still
  // replaying); the steps their claims said they had done count as done too (a rank that died
  // at step 232 while the coordinator was down was recorded "failed after step 200, 0 redone").
  const int64_t reattached_step = run != running_.end() ? run->second.reattached_step : 0;
  const int next = job.restarts() + 1;
  const std::string restarting = absl::StrFormat("restart %d of %d in %.1f s after: %s", next,
                                                 job.spec().training().restart().max_restarts(),
                                                 decision.backoff_ms / 1000.0, message);
  DAPPLE_RETURN_IF_ERROR(jobs_
                             ->Transition(id, v1::JOB_STATE_RESTARTING, restarting,
                                          [&](v1::Job* j) {
                                            if (run != running_.end()) {
                                              j->mutable_metrics()->set_elapsed_seconds(
                                                  run->second.tracker.ElapsedSeconds(now));
                                            }
                                            j->set_restarts(next);
                                            v1::JobRestart* r = j->add_restart_history();
                                            r->set_unix_ms(now);
                                            r->set_cause(std::string(FailureCauseName(cause)));
                                            r->set_message(message);
                                            r->set_failed_after_step(
                                                std::max(j->metrics().step(), reattached_step));
                                          })
                             .status());
  DAPPLE_LOG_WARN("job {}: {}", id, restarting);
  StopRunLocked(id);
  restarting_[id] = RestartWait{now, now + decision.backoff_ms};
  WakeLocked();
  return absl::OkStatus();
}

void CoordinatorService::RecoverRestartingLocked(const v1::Job& job, int64_t now) {
  RestartWait wait = ResumedRestartWait(job);
  // The live workers register again within a heartbeat or so of the restart: planned on the
  // first one alone, the job would run on fewer workers than it could until its next restart.
  const int64_t workers_back = now + options_.worker_timeout_ms;
  const bool backoff_longer = wait.not_before_ms >= workers_back;
  wait.not_before_ms = std::max(wait.not_before_ms, workers_back);
  restarting_[job.id()] = wait;
  const std::string message = absl::StrFormat(
      "coordinator restarted while the job was RESTARTING: restart %d of %d goes on, planned "
      "again in %.1f s (%s)",
      job.restarts(), job.spec().training().restart().max_restarts(),
      (wait.not_before_ms - now) / 1000.0,
      backoff_longer ? "the rest of its backoff"
                     : "time for the workers to register again (--worker-timeout-ms)");
  (void)jobs_->RecordEvent(job.id(), JobEventReason::kCoordinatorRestarted, message);
  DAPPLE_LOG_INFO("job {}: {}", job.id(), message);
}

void CoordinatorService::RecordResume(const Replanned& replanned,
                                      const v1::ParallelPlanSummary& summary, int64_t now,
                                      v1::Job* job) {
  const int64_t first = replanned.first_step;
  v1::JobMetrics* m = job->mutable_metrics();
  int64_t redone = 0;
  if (!job->restart_history().empty()) {
    v1::JobRestart* r = job->mutable_restart_history(job->restart_history_size() - 1);
    redone = std::max<int64_t>(0, r->failed_after_step() - first);
    r->set_resumed_after_step(first);
    r->set_checkpoint(replanned.checkpoint);
    r->set_steps_redone(redone);
    r->set_plan(PlannedMessage(summary));
    r->set_resumed_unix_ms(now);
  }
  job->set_steps_redone(job->steps_redone() + redone);
  // The steps after the checkpoint run again and report again: step_losses keeps the steps the
  // resumed weights came from, the redone ones append as they come.
  m->set_step(first);
  m->set_epoch(first > 0 ? EpochOfStep(job->spec(), first) : 0);
  while (job->step_losses_size() > first) job->mutable_step_losses()->RemoveLast();
  job->clear_stage_metrics();  // the failed run's ranks
}

void CoordinatorService::RestartPass() {
  struct Due {
    v1::Job job;
    int devices = 0;
    std::vector<v1::WorkerInfo> workers;  // the idle fitting workers to plan on
  };
  std::vector<Due> due;
  {
    absl::MutexLock lock(&mu_);
    if (restarting_.empty()) return;
    const int64_t now = options_.now_unix_ms();
    std::vector<std::string> ids;
    for (const auto& [id, wait] : restarting_) ids.push_back(id);
    std::sort(ids.begin(), ids.end());
    for (const std::string& id : ids) {
      absl::StatusOr<v1::Job> job = jobs_->Get(id);
      if (!job.ok() || job->state() != v1::JOB_STATE_RESTARTING) {
        restarting_.erase(id);  // cancelled meanwhile
        continue;
      }
      std::vector<WorkerRecord*> idle = Fitting(*job, workers_.Schedulable());
      RestartCluster cluster;
      cluster.idle_workers = static_cast<int>(idle.size());
      for (const v1::WorkerInfo& w : workers_.List()) {
        if (w.state() == v1::WORKER_STATE_BUSY && w.job_id() == id &&
            now - w.last_heartbeat_unix_ms() <
                kStoppingHeartbeats * options_.heartbeat_interval_ms) {
          ++cluster.stopping_workers;
        }
      }
      const ReplanDecision d = DecideReplan(job->spec().training().restart(), restarting_.at(id),
                                            cluster, job->spec().parallel().devices(), now);
      switch (d.action) {
        case ReplanDecision::Action::kWait:
          if (absl::Status s = jobs_->SetPendingMessage(id, d.message); !s.ok()) {
            DAPPLE_LOG_WARN("job {}: {}", id, s.message());
          }
          break;
        case ReplanDecision::Action::kFail: {
          // What the job was restarting from leads the message: the wait alone reads as if the
          // job failed for want of workers.
          const std::string why =
              job->restart_history().empty()
                  ? d.message
                  : absl::StrCat("restarting after: ", job->restart_history().rbegin()->message(),
                                 "; ", d.message);
          if (absl::Status s = EndJobLocked(id, v1::JOB_STATE_FAILED, why, now).status(); !s.ok()) {
            DAPPLE_LOG_ERROR("failing job {}: {}", id, s.message());
          }
          break;
        }
        case ReplanDecision::Action::kReplan: {
          Due& next = due.emplace_back();
          next.job = *std::move(job);
          next.devices = d.devices;
          for (int i = 0; i < d.devices; ++i) next.workers.push_back(idle[i]->info);
          break;
        }
      }
    }
  }
  for (Due& d : due) {
    // Outside the lock: the manifest read and the planner's search.
    const absl::StatusOr<CheckpointManager::ResumePoint> resume_point =
        CheckpointManager::NewestCheckpoint(d.job);
    const CheckpointManager::ResumePoint resume =
        resume_point.value_or(CheckpointManager::ResumePoint{});
    const v1::JobSpec spec = SpecOn(d.job.spec(), d.devices);
    std::optional<ProfileUse> profile;
    PlanInputs inputs = SubmissionPlanInputs(spec, d.job.tenant(), d.workers, &profile);
    if (d.devices < d.job.spec().parallel().devices()) {
      // The notes count the workers left, not the spec's devices.
      inputs.devices_noun =
          absl::StrCat(d.devices == 1 ? "live worker" : "live workers", " (parallel.devices ",
                       d.job.spec().parallel().devices(), ")");
    }
    absl::StatusOr<v1::ParallelPlan> plan = MakeJobPlan(spec, inputs);
    absl::MutexLock lock(&mu_);
    const int64_t now = options_.now_unix_ms();
    const std::string& id = d.job.id();
    absl::StatusOr<v1::Job> current = jobs_->Get(id);
    if (!current.ok() || current->state() != v1::JOB_STATE_RESTARTING) continue;
    if (!resume_point.ok()) {
      const std::string why = absl::StrCat("cannot restart: ", resume_point.status().message());
      if (absl::Status s = EndJobLocked(id, v1::JOB_STATE_FAILED, why, now).status(); !s.ok()) {
        DAPPLE_LOG_ERROR("failing job {}: {}", id, s.message());
      }
      continue;
    }
    if (!plan.ok()) {
      const std::string why = absl::StrCat(
          "planning the restart on ", d.devices,
          d.devices == 1 ? " worker failed: " : " workers failed: ", plan.status().message());
      if (absl::Status s = EndJobLocked(id, v1::JOB_STATE_FAILED, why, now).status(); !s.ok()) {
        DAPPLE_LOG_ERROR("failing job {}: {}", id, s.message());
      }
      continue;
    }
    // The workers it was planned on may have been taken meanwhile: the next pass decides again.
    const std::vector<WorkerRecord*> free = Fitting(*current, workers_.Schedulable());
    if (schedule::NumRanks(plan->summary()) > static_cast<int>(free.size())) continue;
    const Replanned replanned{*plan, resume.step, resume.dir, profile};
    (void)jobs_->RecordEvent(id, JobEventReason::kReplanned,
                             absl::StrCat("planned again on ", d.devices,
                                          d.devices == 1 ? " live worker: " : " live workers: ",
                                          PlannedMessage(plan->summary())));
    // False: it could not even leave RESTARTING; the next pass tries again.
    if (!StartJobLocked(*current, free, now, &replanned)) continue;
    restarting_.erase(id);
    absl::StatusOr<v1::Job> started = jobs_->Get(id);
    if (started.ok() && started->state() == v1::JOB_STATE_RUNNING) {
      const v1::JobRestart& r = *started->restart_history().rbegin();
      (void)jobs_->RecordEvent(
          id, JobEventReason::kResumed,
          resume.dir.empty()
              ? absl::StrCat("resumed from scratch (no published checkpoint): ",
                             job_spec_internal::Count(r.steps_redone(), "step", "steps"), " redone")
              : absl::StrCat("resumed after step ", resume.step, " from ", resume.dir, ": ",
                             job_spec_internal::Count(r.steps_redone(), "step", "steps"),
                             " redone"));
      DAPPLE_LOG_INFO("job {}: restarted after step {} ({} steps redone)", id, resume.step,
                      r.steps_redone());
    }
  }
}

}  // namespace dapple::coordinator
