// CheckpointManager: the coordinator's checkpoints as one concern (issue 16, "Structure"; the
// format and policy: docs/operations.md, "Checkpoints"). It names every job's checkpoint folder
// (one function, JobDir: per tenant, issue 16 "Isolation"), keeps the publishing bookkeeping
// (CheckpointPublisher: periodic, timed and on-demand checkpoints, preemption's checkpoint),
// decides whether a caller may resume from a folder (`submit --resume-from`) and where a job
// resumes from. No gRPC, no database: jobs are looked up through a callback.
//
// Folders: <root>/<tenant>/<job id>/step-<N>/ (auth::TenantCheckpointDir: "_admin" for admins'
// jobs, which have no tenant). A job started by a version before per-tenant folders wrote to
// <root>/<job id>/ (LegacyJobDir); Job.checkpoints records full paths, so its published
// checkpoints are read, resumed from and deleted where they were written, and a RUNNING one
// recovered at a coordinator restart keeps publishing into the folder its ranks write to
// (RecoveredJobDir). A job started again (restart, preemption) writes to JobDir.
//
// Thread safety: thread-safe (mutexes of its own, taken after CoordinatorService's). The
// functions that read or write files say so; OpenResume and PrepareResume are meant to be called
// without the service's mutex.
#ifndef DAPPLE_COORDINATOR_CHECKPOINTS_CHECKPOINT_MANAGER_H_
#define DAPPLE_COORDINATOR_CHECKPOINTS_CHECKPOINT_MANAGER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/auth/identity.h"
#include "coordinator/jobs/checkpoint_publisher.h"
#include "dapple/v1/checkpoint.pb.h"
#include "dapple/v1/job.pb.h"
#include "dapple/v1/worker.pb.h"

namespace dapple::coordinator {

class CheckpointManager {
 public:
  // Looks a job up by id (kNotFound when there is none); JobManager::Get.
  using FindJob = std::function<absl::StatusOr<v1::Job>(const std::string& id)>;

  // `root`: where the tenants' checkpoint folders go (created by the ranks when needed);
  // `keep` >= 1: published checkpoints kept per job (older ones are deleted), 0 keeps all.
  CheckpointManager(std::string root, int keep);

  const std::string& root() const { return root_; }

  // THE checkpoint folder of `job` (its id and tenant): auth::TenantCheckpointDir(root,
  // job.tenant()) + "/" + job.id(). Every new checkpoint of the job (periodic, timed, on
  // demand, preemption's) goes there. Pure.
  std::string JobDir(const v1::Job& job) const;
  // <root>/<job id>: where versions before per-tenant folders put a job's checkpoints. Pure.
  std::string LegacyJobDir(const std::string& job_id) const;
  // The folder the ranks of RUNNING `job`, recovered at a coordinator restart, write to: the
  // folder of its newest published checkpoint when it has one, else LegacyJobDir when that
  // exists on disk and JobDir does not (an older version started it), else JobDir. Reads the
  // file system (call at start-up or outside the service's mutex).
  std::string RecoveredJobDir(const v1::Job& job) const;

  // --- Publishing (CheckpointPublisher's contracts; the service's ranks' reports) ---
  // Job `job` starts (RUNNING) with `plan` from `first_step`; its ranks write into `dir`
  // (JobDir, or RecoveredJobDir for a recovered job).
  void OnJobStarted(const v1::Job& job, const std::string& dir, const v1::ParallelPlanSummary& plan,
                    int64_t first_step);
  void OnJobEnded(const std::string& job_id);
  // The folder OnJobStarted was given for running job `job_id` ("" for another job).
  std::string RunningJobDir(const std::string& job_id) const;
  int64_t OnStep(const std::string& job_id, int64_t step, double step_seconds, int64_t now_unix_ms);
  absl::StatusOr<int64_t> RequestOnDemand(const std::string& job_id, int64_t last_step);
  int64_t RequestedStep(const std::string& job_id) const;
  // A rank's PROGRESS_CHECKPOINT report (CheckpointPublisher::OnReport). When it completes a
  // checkpoint, the manifest is written and the folder renamed without the manager's state
  // mutex (RequestedStep, OnStep... do not wait for the disk), one publish at a time: under
  // that one, `published` gives the job's Job.checkpoints now and `record` is handed the
  // outcome (kPublished: record outcome.checkpoints in the job, durably; kAbandoned: nothing to
  // list), so two publishes of one job never record over each other; RequestedStep stays the
  // step until `record` returned. Only when `record` returns OK for a published outcome are the
  // superseded folders deleted (CheckpointPublisher::DeleteSuperseded); otherwise they stay, and
  // `record` must keep listing them (the database it could not write still does). Reads and
  // writes files: call without the service's mutex.
  CheckpointPublisher::Outcome OnReport(
      const v1::ProgressReport& report,
      const std::function<std::vector<v1::CheckpointInfo>()>& published,
      const std::function<absl::Status(const CheckpointPublisher::Outcome&)>& record,
      int64_t now_unix_ms);

  // --- Resuming ---
  // A checkpoint named by `submit --resume-from path`: its folder (without trailing '/') and
  // its manifest.
  struct ResumeSource {
    std::string dir;
    v1::CheckpointManifest manifest;
  };
  // `submit --resume-from path` by `caller`: the checkpoint when the caller may resume from it.
  // Ownership is decided first, before any file is read (docs/security.md, "Isolation"): an
  // admin may name any folder; a user only one inside their tenant's folder
  // (<root>/<tenant>/<job id>/<checkpoint>, by the path's text, made absolute against the
  // working directory and normalised) or in the LegacyJobDir of a job of their tenant
  // (<root>/<job id>/<checkpoint>), which after resolving symbolic links still lies there and
  // is a directory; and whose manifest names that job. Each of these failures is the same
  // kNotFound "--resume-from '<path>': no checkpoint of tenant <t> there", so another
  // tenant's checkpoint reads exactly as one that does not exist. A manifest that does not
  // read (a .partial folder, say): kInvalidArgument "--resume-from (resume_from): '<path>' is
  // not a published checkpoint: ..." (ReadCheckpointManifest's message). The spec's checks
  // are the caller's (SubmitJob's). Reads files: call without the service's mutex. Caches the
  // manifest's step for ResumeStep.
  absl::StatusOr<ResumeSource> OpenResume(const auth::Identity& caller, const std::string& path,
                                          const FindJob& find_job);

  // The step of the checkpoint in folder `dir` (a job's Job.resumed_from), from the cache that
  // OpenResume and PrepareResume fill; kNotFound when neither read it, else the manifest's
  // read error as it was. Reads no file.
  absl::StatusOr<int64_t> ResumeStep(const std::string& dir) const;
  // Reads and caches the manifest of `dir` unless cached (a job resumed from it that a
  // coordinator restart found PENDING). Reads files: call without the service's mutex.
  void PrepareResume(const std::string& dir);

  // Where a restart of `job` resumes: its newest published checkpoint whose manifest reads
  // (older ones when the newest is unreadable; logged), else the checkpoint it was submitted to
  // resume from (Job.resumed_from), else {0, ""}: from scratch. kFailedPrecondition naming the
  // checkpoint and why when the job was resumed from a checkpoint and neither it nor a newer one
  // reads (starting again from scratch would silently drop the steps it was resumed with).
  // Reads files.
  struct ResumePoint {
    int64_t step = 0;
    std::string dir;
  };
  static absl::StatusOr<ResumePoint> NewestCheckpoint(const v1::Job& job);

 private:
  // Ownership of `dir` by its path alone, for a user: the id of the job whose folder holds it
  // (a job of the caller's tenant), or the kNotFound above. Reads no file before the path is
  // known to be the caller's; then resolves symbolic links.
  absl::StatusOr<std::string> OwnerOfPath(const auth::Identity& caller, const std::string& dir,
                                          const FindJob& find_job) const;

  const std::string root_;
  absl::Mutex publish_mu_ ABSL_ACQUIRED_BEFORE(mu_);  // one publish at a time (OnReport)
  mutable absl::Mutex mu_;
  CheckpointPublisher publisher_ ABSL_GUARDED_BY(mu_);
  // Folder -> its manifest's step, or why it did not read.
  absl::flat_hash_map<std::string, absl::StatusOr<int64_t>> resume_steps_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_CHECKPOINTS_CHECKPOINT_MANAGER_H_
