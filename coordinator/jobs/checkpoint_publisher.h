// The coordinator's half of checkpoints (docs/operations.md, "Checkpoints"): it collects the
// ranks' PROGRESS_CHECKPOINT reports of each (job, step), and once every stage of the plan wrote
// its shard (replica 0 of each stage: replicas hold identical weights; a shard reported by
// another replica abandons the checkpoint) into <job dir>/step-<N>.partial/ it writes
// manifest.pb there (temporary file, fsync, rename) and renames the folder to step-<N>: the atomic
// publish. A checkpoint that any rank could not write is abandoned: its .partial folder is removed
// (best effort) and the job keeps running.
//
// Retention: published checkpoints beyond the newest `keep` of a job are deleted, but only once
// the job's new list (without them) is recorded in the database (DeleteSuperseded, called by
// whoever records it): until then the database lists them, and a restarted coordinator resumes
// from what its database lists. A publish the database could not record leaves a step-<N> folder
// that no list names; the next publish of the job lists it again (when older than its step) and
// retention counts it, or deletes it (when newer: an earlier run's, that this run restarted
// before), so the folders converge on the newest `keep` once a record succeeds. A listed folder
// that is gone from disk is dropped from the list.
//
// On demand (dapplectl checkpoint): RequestOnDemand picks a step far enough ahead that every
// rank's next progress ack (which carries RequestedStep) reaches it before it gets there.
// Timed (training.checkpoint_every_minutes = T > 0): OnStep requests a step the same way once T
// minutes passed since the job's first step report or its newest published checkpoint
// (periodic, timed or on demand: any of them restarts the clock), unless a request is pending.
// So all ranks save after the same step, chosen by the coordinator; checkpoint_every_steps works
// beside it unchanged.
//
// Pure logic plus the file system; no RPC, no clock (callers pass the time).
// Where a job's folder is (<root>/<tenant>/<job id>) is decided by its caller, CheckpointManager
// (coordinator/checkpoints/checkpoint_manager.h), and handed to OnJobStarted.
// Thread safety: thread-compatible (CheckpointManager calls it under its mutex), but Publish is
// static and thread-safe: the files are written outside that mutex.
#ifndef DAPPLE_COORDINATOR_JOBS_CHECKPOINT_PUBLISHER_H_
#define DAPPLE_COORDINATOR_JOBS_CHECKPOINT_PUBLISHER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "dapple/v1/checkpoint.pb.h"
#include "dapple/v1/job.pb.h"
#include "dapple/v1/worker.pb.h"

namespace dapple::coordinator {

// Published checkpoints a job keeps by default (--keep-checkpoints).
inline constexpr int kDefaultKeepCheckpoints = 3;

// The default checkpoint root: a folder "checkpoints" next to the job database `db_path`
// ("/var/lib/dapple/dapple.db" -> "/var/lib/dapple/checkpoints", "dapple.db" -> "checkpoints").
std::string DefaultCheckpointRoot(const std::string& db_path);

class CheckpointPublisher {
 public:
  // Steps an on-demand checkpoint lies ahead of the newest reported step, at least.
  static constexpr int64_t kMinStepsAhead = 2;
  // ... and enough steps for about this long at the job's current step time.
  static constexpr double kLeadSeconds = 2.0;

  // `keep` >= 1: published checkpoints kept per job (older ones are deleted); 0 keeps all.
  explicit CheckpointPublisher(int keep) : keep_(keep) {}
  int keep() const { return keep_; }

  // The folder OnJobStarted was given for the started job `job_id` ("" for another job).
  std::string JobDir(const std::string& job_id) const;

  // A job starts (RUNNING) with `plan` (its stages' layer ranges and replicas) from step
  // `first_step` (0, or the resumed checkpoint's step); its ranks write into `job_dir`
  // (StageAssignment.checkpoint_dir; created by them when needed) and its checkpoints are
  // published there. Forgets any earlier state of the job.
  void OnJobStarted(const std::string& job_id, const std::string& job_dir, const v1::JobSpec& spec,
                    const v1::ParallelPlanSummary& plan, int64_t first_step);
  // The job ended: its requests and unfinished checkpoints are forgotten (their .partial
  // folders stay, never listed, for an operator to inspect).
  void OnJobEnded(const std::string& job_id);

  // A rank reported completing `step` (1-based) in `step_seconds` (any PROGRESS_STEP report)
  // at `now_unix_ms`. Returns the step of a timed checkpoint this report made due (requested
  // like an on-demand one, reason "timed"; logged), else 0.
  int64_t OnStep(const std::string& job_id, int64_t step, double step_seconds, int64_t now_unix_ms);

  // dapplectl checkpoint: the step after which the checkpoint will be taken: the highest step
  // any rank reported (first_step before any report) plus max(kMinStepsAhead, the steps of
  // kLeadSeconds at the mean reported step time), capped at `last_step` (the job's total). A
  // request still pending (not yet published or abandoned) is returned again. Errors:
  // kFailedPrecondition "job job-3 is not running" (not started here), "job job-3 already
  // reached its last step 100: nothing left to checkpoint".
  absl::StatusOr<int64_t> RequestOnDemand(const std::string& job_id, int64_t last_step);

  // The on-demand step every rank's ProgressAck carries (0: none pending); it is an on-demand
  // or a timed request.
  int64_t RequestedStep(const std::string& job_id) const;

  struct Outcome {
    enum class Kind {
      kWaiting,    // recorded; other ranks' shards are still missing
      kPublished,  // the checkpoint is published: `info`, `checkpoints`
      kAbandoned,  // it cannot complete: `message` says why (logged by the publisher)
      kIgnored,    // a report of an unknown job or of a step already published or abandoned
    };
    Kind kind = Kind::kIgnored;
    v1::CheckpointInfo info;
    // kPublished: the job's list to record in Job.checkpoints (oldest first): the listed ones
    // still on disk, the unrecorded older folders found in the job's folder, and this one; the
    // newest `keep` of them.
    std::vector<v1::CheckpointInfo> checkpoints;
    // kPublished: the ones beyond `keep` (oldest first), still on disk; deleted by
    // DeleteSuperseded once `checkpoints` is recorded, else to stay listed.
    std::vector<v1::CheckpointInfo> superseded;
    // kPublished: unrecorded folders of steps after this one, left by an earlier run of the job;
    // never listed, deleted by DeleteSuperseded too.
    std::vector<v1::CheckpointInfo> stale;
    std::string message;
  };

  // A rank's PROGRESS_CHECKPOINT report (`report.step`, its stage and replica, checkpoint_file
  // and checkpoint_bytes, or an empty file and a message when it could not write). `published`
  // is the job's Job.checkpoints so far (oldest first). Publishing writes
  // step-<N>.partial/manifest.pb (CheckpointManifest of format 1: the job's spec and plan,
  // step, epoch, seed, samples_seen, every shard's entry, reason "on demand" or "timed" when N
  // was requested so, else "periodic", learning rate) and renames the folder to step-<N>
  // (replacing a step-<N> folder an earlier run left). A failure there abandons the checkpoint
  // too (message naming the path and the reason). Collect, then Publish, then Finish, then
  // DeleteSuperseded (as if the list were recorded at once), in one call.
  Outcome OnReport(const v1::ProgressReport& report,
                   const std::vector<v1::CheckpointInfo>& published, int64_t now_unix_ms);

  // OnReport in three parts, so that the files are written without the caller's lock:
  // Collect (the state, no file) records a report; when it completes a checkpoint it returns
  // the PublishTask, which Publish (the files, no state: thread-safe) carries out, and Finish
  // records the outcome in the state. A step being published counts as finished: a report
  // of it delivered again is ignored.
  struct PublishTask {
    std::string job_id;
    std::string dir;  // the job's folder
    int64_t step = 0;
    v1::CheckpointManifest manifest;  // with every shard's entry
    int keep = 0;
  };
  struct Collected {
    Outcome outcome;                  // kWaiting, kIgnored, kAbandoned (without `task`)
    std::optional<PublishTask> task;  // every shard is in: publish it
    std::string remove_dir;           // an abandoned .partial folder, to remove (best effort)
  };
  Collected Collect(const v1::ProgressReport& report, int64_t now_unix_ms);
  static Outcome Publish(const PublishTask& task, const std::vector<v1::CheckpointInfo>& published);
  void Finish(const PublishTask& task, const Outcome& outcome);
  // After `outcome.checkpoints` (kPublished) was recorded durably: deletes the folders of
  // `outcome.superseded` and `outcome.stale` (best effort, logged; `keep` for the log line).
  // Never call it when the record failed: the database still lists the superseded ones.
  // Thread-safe (files only).
  static void DeleteSuperseded(const std::string& job_id, const Outcome& outcome, int keep);

 private:
  struct Shard {
    std::string file;
    int64_t bytes = 0;
  };
  struct JobState {
    std::string dir;  // the job's checkpoint folder
    v1::JobSpec spec;
    v1::ParallelPlanSummary plan;
    int ranks = 0;
    int64_t max_step = 0;
    std::vector<double> recent_step_seconds;  // newest last, at most kWindow
    int64_t requested = 0;                    // pending on-demand or timed step, 0: none
    std::string requested_reason;             // "on demand" | "timed"
    // Since when the timed policy counts: the first step report, then each publish or request.
    int64_t clock_unix_ms = 0;
    bool clock_started = false;
    std::map<int64_t, std::map<std::pair<int, int>, Shard>> shards;  // step -> (stage, replica)
    std::set<int64_t> finished;  // published, publishing, abandoned
  };
  static constexpr size_t kWindow = 20;

  // The step of a new request: max_step + max(kMinStepsAhead, kLeadSeconds of steps), capped.
  static int64_t StepAhead(const JobState& job, int64_t last_step);

  // A checkpoint that cannot complete: logged, its state forgotten, its .partial folder named.
  Collected Abandon(const std::string& job_id, JobState& job, int64_t step, const std::string& why);
  static Outcome Abandoned(const std::string& job_id, int64_t step, const std::string& why);
  // Fills a published `out`'s checkpoints, superseded and stale (Retention, above) from
  // `published` and the folders in task.dir. Reads the file system.
  static void Retain(const PublishTask& task, const std::vector<v1::CheckpointInfo>& published,
                     Outcome& out);

  int keep_;
  std::map<std::string, JobState> jobs_;
};

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_JOBS_CHECKPOINT_PUBLISHER_H_
