#include "coordinator/checkpoints/checkpoint_manager.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "common/checkpoint_files.h"
#include "coordinator/auth/test_identities.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

v1::Job JobOf(const std::string& id, const std::string& tenant) {
  v1::Job job;
  job.set_id(id);
  job.set_tenant(tenant);
  return job;
}

class CheckpointManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ckpt-mgr-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    manager_ = std::make_unique<CheckpointManager>(root_, 2);
    jobs_["job-1"] = JobOf("job-1", "a");
    jobs_["job-2"] = JobOf("job-2", "b");
    jobs_["job-3"] = JobOf("job-3", "");
  }
  void TearDown() override { fs::remove_all(root_); }

  // A published checkpoint of `job_id` after `step` in folder `dir`.
  static void Publish(const std::string& dir, const std::string& job_id, int64_t step) {
    fs::create_directories(dir);
    v1::CheckpointManifest m;
    m.set_format_version(kCheckpointFormatVersion);
    m.set_job_id(job_id);
    m.set_step(step);
    ASSERT_TRUE(WriteFileAtomically(dir + "/" + kManifestFile, m.SerializeAsString()).ok());
  }

  absl::StatusOr<CheckpointManager::ResumeSource> Open(const auth::Identity& who,
                                                       const std::string& path) {
    return manager_->OpenResume(who, path, [&](const std::string& id) -> absl::StatusOr<v1::Job> {
      auto it = jobs_.find(id);
      if (it == jobs_.end()) return absl::NotFoundError("no job " + id);
      return it->second;
    });
  }

  std::string root_;
  std::unique_ptr<CheckpointManager> manager_;
  std::map<std::string, v1::Job> jobs_;
};

TEST_F(CheckpointManagerTest, JobDirIsPerTenant) {
  EXPECT_EQ(manager_->JobDir(jobs_["job-1"]), root_ + "/a/job-1");
  EXPECT_EQ(manager_->JobDir(jobs_["job-2"]), root_ + "/b/job-2");
  EXPECT_EQ(manager_->JobDir(jobs_["job-3"]), root_ + "/_admin/job-3");
  EXPECT_EQ(manager_->LegacyJobDir("job-1"), root_ + "/job-1");
}

TEST_F(CheckpointManagerTest, PublishesIntoTheFolderItWasGiven) {
  v1::Job job = jobs_["job-1"];
  job.mutable_spec()->mutable_training()->set_global_batch(8);
  job.mutable_spec()->mutable_training()->set_epochs(1);
  v1::ParallelPlanSummary plan;
  plan.add_stages()->set_replicas(1);
  const std::string dir = manager_->JobDir(job);
  manager_->OnJobStarted(job, dir, plan, 0);
  EXPECT_EQ(manager_->RunningJobDir("job-1"), dir);
  fs::create_directories(dir + "/" + PartialCheckpointDirName(4));
  { std::ofstream(dir + "/" + PartialCheckpointDirName(4) + "/" + ShardFileName(0, 0)) << "x"; }
  v1::ProgressReport r;
  r.set_job_id("job-1");
  r.set_kind(v1::PROGRESS_CHECKPOINT);
  r.set_step(4);
  r.set_checkpoint_file(ShardFileName(0, 0));
  r.set_checkpoint_bytes(1);
  int recorded = 0;
  CheckpointPublisher::Outcome o = manager_->OnReport(
      r, [] { return std::vector<v1::CheckpointInfo>{}; },
      [&](const CheckpointPublisher::Outcome& out) {
        ++recorded;
        EXPECT_EQ(out.checkpoints.size(), 1u);
      },
      1000);
  ASSERT_EQ(o.kind, CheckpointPublisher::Outcome::Kind::kPublished) << o.message;
  EXPECT_EQ(o.info.path(), root_ + "/a/job-1/step-4");
  EXPECT_EQ(recorded, 1);
  EXPECT_TRUE(fs::exists(root_ + "/a/job-1/step-4/" + kManifestFile));
  // Delivered again: ignored, nothing recorded twice.
  EXPECT_EQ(manager_
                ->OnReport(
                    r, [] { return std::vector<v1::CheckpointInfo>{}; },
                    [&](const CheckpointPublisher::Outcome&) { ++recorded; }, 2000)
                .kind,
            CheckpointPublisher::Outcome::Kind::kIgnored);
  EXPECT_EQ(recorded, 1);
  manager_->OnJobEnded("job-1");
  EXPECT_EQ(manager_->RunningJobDir("job-1"), "");
}

// A job an older version started keeps its folder over a coordinator restart.
TEST_F(CheckpointManagerTest, RecoveredJobsKeepTheirFolder) {
  v1::Job job = jobs_["job-1"];
  EXPECT_EQ(manager_->RecoveredJobDir(job), root_ + "/a/job-1");  // nothing on disk yet
  fs::create_directories(root_ + "/job-1/step-2.partial");
  EXPECT_EQ(manager_->RecoveredJobDir(job), root_ + "/job-1");  // written by an older version
  job.add_checkpoints()->set_path(root_ + "/elsewhere/job-1/step-6");
  EXPECT_EQ(manager_->RecoveredJobDir(job), root_ + "/elsewhere/job-1");  // its newest, as stored
  v1::Job fresh = jobs_["job-2"];
  fs::create_directories(root_ + "/b/job-2");
  fs::create_directories(root_ + "/job-2");
  EXPECT_EQ(manager_->RecoveredJobDir(fresh), root_ + "/b/job-2");
}

TEST_F(CheckpointManagerTest, OwnersAndAdminsResume) {
  const std::string a = root_ + "/a/job-1/step-4";
  Publish(a, "job-1", 4);
  absl::StatusOr<CheckpointManager::ResumeSource> own = Open(auth::TestUser("a", "alice"), a + "/");
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_EQ(own->dir, a);
  EXPECT_EQ(own->manifest.step(), 4);
  EXPECT_EQ(*manager_->ResumeStep(a), 4);
  // Another spelling of the same folder.
  EXPECT_TRUE(Open(auth::TestUser("a", "alice"), root_ + "/a/./job-1/../job-1/step-4").ok());
  EXPECT_TRUE(Open(auth::TestAdmin(), a).ok());
  // An admin may name any folder.
  const std::string moved = root_ + "/saved/step-4";
  Publish(moved, "job-1", 4);
  EXPECT_TRUE(Open(auth::TestAdmin(), moved).ok());
  // A checkpoint an older version wrote to <root>/<job id>/.
  const std::string legacy = root_ + "/job-1/step-2";
  Publish(legacy, "job-1", 2);
  EXPECT_TRUE(Open(auth::TestUser("a", "alice"), legacy).ok());
}

// Issue 16: a user of tenant b learns nothing about tenant a's checkpoints: each answer is the
// one for a checkpoint that does not exist.
TEST_F(CheckpointManagerTest, AnotherTenantsCheckpointReadsAsNoCheckpoint) {
  const auth::Identity bob = auth::TestUser("b", "bob");
  const std::string a = root_ + "/a/job-1/step-4";
  Publish(a, "job-1", 4);
  const absl::Status theirs = Open(bob, a).status();
  EXPECT_EQ(theirs.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(theirs.message(), "--resume-from '" + a + "': no checkpoint of tenant b there");
  fs::remove_all(root_ + "/a");
  EXPECT_EQ(Open(bob, a).status(), theirs);  // the same path, now nothing there

  // No checkpoint in the caller's own folder, through "..", a symbolic link, a legacy folder
  // of another tenant's job, a manifest copied from another job: the same answer.
  Publish(a, "job-1", 4);
  auto same = [&](const std::string& path) {
    const absl::Status s = Open(bob, path).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << path;
    std::string p = path;
    while (p.size() > 1 && p.back() == '/') p.pop_back();
    EXPECT_EQ(s.message(), "--resume-from '" + p + "': no checkpoint of tenant b there") << path;
  };
  same(root_ + "/b/job-2/step-4");
  same(root_ + "/b/../a/job-1/step-4");
  same(root_ + "/b/job-2/../../a/job-1/step-4/");
  fs::create_directories(root_ + "/b/job-2");
  fs::create_directory_symlink(a, root_ + "/b/job-2/step-4");
  same(root_ + "/b/job-2/step-4");
  Publish(root_ + "/job-1/step-2", "job-1", 2);
  same(root_ + "/job-1/step-2");
  Publish(root_ + "/b/job-2/step-6", "job-1", 6);  // names job-1, which is a's
  same(root_ + "/b/job-2/step-6");
  same(root_ + "/b/job-9/step-6");  // no such job
  same("/etc");
  same("");
  // Its own folder, unpublished: the manifest's own message.
  fs::create_directories(root_ + "/b/job-2/step-8.partial");
  const absl::Status partial = Open(bob, root_ + "/b/job-2/step-8.partial").status();
  EXPECT_EQ(partial.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(partial.message(), HasSubstr("is not a published checkpoint"));
}

TEST_F(CheckpointManagerTest, ResumeStepIsReadOnceOutsideTheLock) {
  const std::string dir = root_ + "/a/job-1/step-4";
  EXPECT_EQ(manager_->ResumeStep(dir).status().code(), absl::StatusCode::kNotFound);
  manager_->PrepareResume(dir);  // nothing there
  EXPECT_THAT(manager_->ResumeStep(dir).status().message(), HasSubstr("not a published"));
  const std::string other = root_ + "/a/job-1/step-6";
  Publish(other, "job-1", 6);
  manager_->PrepareResume(other);
  EXPECT_EQ(*manager_->ResumeStep(other), 6);
}

TEST_F(CheckpointManagerTest, NewestReadableCheckpoint) {
  v1::Job job = jobs_["job-1"];
  EXPECT_EQ(CheckpointManager::NewestCheckpoint(job)->step, 0);
  Publish(root_ + "/a/job-1/step-2", "job-1", 2);
  job.add_checkpoints()->set_path(root_ + "/a/job-1/step-2");
  job.add_checkpoints()->set_path(root_ + "/a/job-1/step-4");  // deleted meanwhile
  absl::StatusOr<CheckpointManager::ResumePoint> p = CheckpointManager::NewestCheckpoint(job);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->step, 2);
  EXPECT_EQ(p->dir, root_ + "/a/job-1/step-2");
}

// A job submitted with --resume-from that has published nothing since restarts from that
// checkpoint, not from scratch (a new user's restart threw 600 resumed steps away); when it
// cannot be read any more the restart fails saying so.
TEST_F(CheckpointManagerTest, AResumedJobRestartsFromItsResumeCheckpoint) {
  v1::Job job = jobs_["job-1"];
  const std::string from = root_ + "/a/job-0/step-6";
  Publish(from, "job-0", 6);
  job.set_resumed_from(from);
  absl::StatusOr<CheckpointManager::ResumePoint> p = CheckpointManager::NewestCheckpoint(job);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->step, 6);
  EXPECT_EQ(p->dir, from);
  // A newer checkpoint of its own wins.
  Publish(root_ + "/a/job-1/step-8", "job-1", 8);
  job.add_checkpoints()->set_path(root_ + "/a/job-1/step-8");
  EXPECT_EQ(CheckpointManager::NewestCheckpoint(job)->step, 8);
  // Neither readable: an error naming the resume checkpoint.
  job.clear_checkpoints();
  job.set_resumed_from(root_ + "/a/job-0/step-9");
  p = CheckpointManager::NewestCheckpoint(job);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(p.status().message(), HasSubstr("the checkpoint the job was resumed from, " + root_ +
                                              "/a/job-0/step-9, cannot be read ("));
}

}  // namespace
}  // namespace dapple::coordinator
