// CoordinatorService across its own restarts (docs/coordinator.md, "Coordinator restarts"): the
// RUNNING jobs found in the database wait for their workers, which keep training meanwhile, to
// register again and claim their ranks; a job whose ranks are all back runs on; one whose ranks
// do not all come back within worker_timeout_ms of the first health check FAILS as a job that
// lost a worker. Same class, same lock rules (coordinator_service.h).
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/schedule/job_lowering.h"
#include "common/schedule/ranks.h"
#include "coordinator/service/coordinator_service.h"

namespace dapple::coordinator {

void CoordinatorService::RecoverRunningLocked(const v1::Job& job, const std::string& checkpoint_dir,
                                              int64_t now) {
  const v1::ParallelPlanSummary& plan = job.plan();
  // The job ran on while the coordinator was away: its stored elapsed time was measured when the
  // row was last updated, and the outage counts too.
  const int64_t running_since =
      std::min(now, job.updated_unix_ms() -
                        static_cast<int64_t>(std::llround(job.metrics().elapsed_seconds() * 1e3)));
  RunState run(ProgressTracker(job.spec().training().global_batch(), running_since,
                               schedule::LossReplicas(plan)));
  run.num_stages = plan.stages_size();
  for (int s = 0; s < plan.stages_size(); ++s) {
    const int replicas = schedule::StageReplicas(plan, s);
    run.replicas.push_back(replicas);
    for (int r = 0; r < replicas; ++r) {
      run.worker_ids.push_back(r < plan.stages(s).worker_ids_size() ? plan.stages(s).worker_ids(r)
                                                                    : std::string());
    }
  }
  const bool complete = run.num_stages > 0 &&
                        std::find(run.worker_ids.begin(), run.worker_ids.end(), std::string()) ==
                            run.worker_ids.end();
  run.recovered = true;
  run.reattaching = true;
  running_.insert_or_assign(job.id(), std::move(run));
  rendezvous_.Open(job.id(), running_.at(job.id()).replicas);
  checkpoints_.OnJobStarted(job, checkpoint_dir, plan, job.metrics().step());
  if (!complete) {
    // Written by a version that did not store the ranks' workers: nobody can claim them.
    absl::Status s = EndJobLocked(job.id(), v1::JOB_STATE_FAILED,
                                  "coordinator restarted while the job was running, and its "
                                  "stored plan does not name the worker of every rank",
                                  now)
                         .status();
    if (!s.ok()) DAPPLE_LOG_ERROR("failing job {}: {}", job.id(), s.message());
    return;
  }
  const std::vector<std::string>& ids = running_.at(job.id()).worker_ids;
  const std::string workers =
      ids.size() == 1 ? absl::StrCat("worker (", ids[0], ")")
                      : absl::StrCat(ids.size(), " workers (", absl::StrJoin(ids, ", "), ")");
  const std::string message = absl::StrFormat(
      "coordinator restarted at step %d: waiting up to %.1f s for the job's %s to register again",
      job.metrics().step(), options_.worker_timeout_ms / 1000.0, workers);
  (void)jobs_->RecordEvent(job.id(), JobEventReason::kCoordinatorRestarted, message);
  DAPPLE_LOG_INFO("job {}: {}", job.id(), message);
}

std::string CoordinatorService::ReattachLocked(const v1::RegisterWorkerRequest& request,
                                               int64_t now, WorkerRecord** out) {
  const v1::RankClaim& claim = request.reattach();
  const std::string& id = claim.job_id();
  auto it = running_.find(id);
  if (it == running_.end()) {
    absl::StatusOr<v1::Job> job = jobs_->Get(id);
    return job.ok() ? absl::StrCat("job ", id, " is ", JobStateName(job->state()))
                    : absl::StrCat("no job ", id);
  }
  RunState& run = it->second;
  if (claim.stage() < 0 || claim.stage() >= run.num_stages || claim.replica() < 0 ||
      claim.replica() >= run.replicas[claim.stage()]) {
    return absl::StrFormat("job %s has no stage %d replica %d", id, claim.stage(), claim.replica());
  }
  const int rank = run.RankOf(claim.stage(), claim.replica());
  const std::string rank_name =
      schedule::RankName(claim.stage(), claim.replica(), run.replicas[claim.stage()]);
  // Identity: only the worker the database names for the rank may take it back.
  if (run.worker_ids[rank] != claim.worker_id()) {
    return absl::StrCat("the job database says ", rank_name, " of job ", id, " is held by ",
                        run.worker_ids[rank], ", not ", claim.worker_id());
  }
  WorkerRecord* known = workers_.Find(claim.worker_id());
  const bool live = known != nullptr && known->info.state() != v1::WORKER_STATE_DEAD;
  if (live && known->info.hostname() == request.hostname() && known->info.pid() == request.pid() &&
      run.reattached_ranks.contains(rank)) {
    // A retry whose first answer was lost: the same worker, already re-attached.
    known->info.set_last_heartbeat_unix_ms(now);
    *out = known;
    return "";
  }
  if (!run.reattaching || run.reattached_ranks.contains(rank)) {
    return absl::StrCat(rank_name, " of job ", id,
                        " is attached already: the job is not waiting for its workers");
  }
  if (live) return absl::StrCat("worker id ", claim.worker_id(), " is held by a live worker");
  v1::RegisterWorkerRequest as = request;
  as.set_name(claim.worker_id());
  WorkerRecord& worker = workers_.Register(as, now);
  if (worker.info.id() != claim.worker_id()) {
    // Cannot happen (the id is not live), but a rank must never run under another id.
    return absl::StrCat("worker id ", claim.worker_id(), " could not be given back");
  }
  *out = &worker;
  run.reattached_ranks.insert(rank);
  run.reattached_step = std::max(run.reattached_step, claim.last_step());
  if (claim.done()) {
    // Its DONE report may have been acknowledged by the previous coordinator only.
    run.done_ranks.insert(rank);
  } else {
    (void)workers_.Transition(
        worker, v1::WORKER_STATE_BUSY,
        absl::StrCat(rank_name, " of job ", id, " (re-attached at step ", claim.last_step(), ")"),
        id, claim.stage());
  }
  DAPPLE_LOG_INFO("job {}: worker {} re-attached as {} (its step {}{}); {}/{} ranks back", id,
                  claim.worker_id(), rank_name, claim.last_step(), claim.done() ? ", done" : "",
                  run.reattached_ranks.size(), run.worker_ids.size());
  if (run.reattached_ranks.size() < run.worker_ids.size()) return "";
  run.reattaching = false;
  absl::StatusOr<v1::Job> job = jobs_->Get(id);
  const int64_t stored_step = job.ok() ? job->metrics().step() : 0;
  (void)jobs_->RecordEvent(
      id, JobEventReason::kReattached,
      absl::StrFormat("%s re-attached after the coordinator restart; running on from step %d",
                      run.worker_ids.size() == 1
                          ? std::string("its rank")
                          : absl::StrCat("all ", run.worker_ids.size(), " ranks"),
                      std::max(stored_step, run.reattached_step)));
  if (run.done_ranks.size() == run.worker_ids.size()) {
    // Not ended yet: the ranks' reports the old coordinator never saved are on their way.
    run.finished_away_since_ms = now;
    DAPPLE_LOG_INFO(
        "job {}: every rank finished while the coordinator was away: ending it once "
        "their reports are in",
        id);
  }
  return "";
}

void CoordinatorService::EndFinishedAwayLocked(int64_t now) {
  const int64_t grace = kFinishGraceHeartbeats * options_.heartbeat_interval_ms;
  std::vector<std::string> ended;
  for (const auto& [id, run] : running_) {
    if (run.finished_away_since_ms == 0) continue;
    const int64_t quiet_since = std::max(run.finished_away_since_ms, run.last_report_ms);
    if (run.done_again.size() == run.worker_ids.size() || now - quiet_since >= grace) {
      ended.push_back(id);
    }
  }
  for (const std::string& id : ended) {
    absl::Status s = EndJobLocked(id, v1::JOB_STATE_SUCCEEDED, "", now).status();
    if (!s.ok()) DAPPLE_LOG_ERROR("job {}: {}", id, s.message());
  }
}

void CoordinatorService::ExpireReattachLocked(int64_t now) {
  std::vector<std::pair<std::string, std::string>> lost;  // (job, message)
  for (auto& [id, run] : running_) {
    if (!run.reattaching) continue;
    if (run.reattach_deadline_ms == 0) {
      // Counted from the first pass, when the coordinator serves: not from opening the database.
      run.reattach_deadline_ms = now + options_.worker_timeout_ms;
      continue;
    }
    if (now < run.reattach_deadline_ms) continue;
    std::vector<std::string> missing;
    int index = 0;
    for (int s = 0; s < run.num_stages; ++s) {
      for (int r = 0; r < run.replicas[s]; ++r, ++index) {
        if (run.reattached_ranks.contains(index)) continue;
        missing.push_back(absl::StrCat("worker ", run.worker_ids[index], " (",
                                       schedule::RankName(s, r, run.replicas[s]), ")"));
      }
    }
    lost.emplace_back(
        id, absl::StrFormat("%s of job %s did not register again within %.1f s of the "
                            "coordinator restart",
                            absl::StrJoin(missing, ", "), id, options_.worker_timeout_ms / 1000.0));
  }
  for (const auto& [id, message] : lost) {
    (void)jobs_->RecordEvent(id, JobEventReason::kWorkerLost, message);
    // A lost worker as any other: the job's restart policy decides (restart or fail).
    absl::Status ended = FailOrRestartLocked(id, FailureCause::kWorkerLost, message, now);
    if (!ended.ok()) DAPPLE_LOG_ERROR("failing job {}: {}", id, ended.message());
  }
}

}  // namespace dapple::coordinator
