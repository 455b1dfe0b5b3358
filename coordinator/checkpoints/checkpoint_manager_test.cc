#include "coordinator/checkpoints/checkpoint_manager.h"

#include <unistd.h>

#include <algorithm>
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
        return absl::OkStatus();
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
                    [&](const CheckpointPublisher::Outcome&) {
                      ++recorded;
                      return absl::OkStatus();
                    },
                    2000)
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

// The job database as CheckpointManager::OnReport's callbacks see it: the list in memory
// (JobManager's) and the list written to the file, which fails while the disk is full (the SRE's
// report: the database's disk filled, the checkpoint disk did not).
class FlakyJobDatabase {
 public:
  std::vector<v1::CheckpointInfo> memory;
  std::vector<v1::CheckpointInfo> file;
  bool full = false;

  std::function<std::vector<v1::CheckpointInfo>()> Published() {
    return [this] { return memory; };
  }
  // The service's record: list the new list; written or not, as the file allows.
  std::function<absl::Status(const CheckpointPublisher::Outcome&)> Record() {
    return [this](const CheckpointPublisher::Outcome& o) -> absl::Status {
      if (o.kind != CheckpointPublisher::Outcome::Kind::kPublished) return absl::OkStatus();
      memory = o.checkpoints;
      if (full) {
        std::vector<v1::CheckpointInfo> all = o.superseded;
        all.insert(all.end(), o.checkpoints.begin(), o.checkpoints.end());
        memory = all;
        return absl::InternalError("database or disk is full");
      }
      file = memory;
      return absl::OkStatus();
    };
  }
  // kill -9 and a restart on the same database: memory is what the file holds.
  void Restart() { memory = file; }

  static std::vector<int64_t> Steps(const std::vector<v1::CheckpointInfo>& list) {
    std::vector<int64_t> steps;
    for (const v1::CheckpointInfo& info : list) steps.push_back(info.step());
    return steps;
  }
};

class CheckpointRetentionTest : public CheckpointManagerTest {
 protected:
  void SetUp() override {
    CheckpointManagerTest::SetUp();
    job_ = jobs_["job-1"];
    job_.mutable_spec()->mutable_training()->set_global_batch(8);
    job_.mutable_spec()->mutable_training()->set_epochs(1000);
    plan_.add_stages()->set_replicas(1);
    dir_ = manager_->JobDir(job_);
    Start(/*keep=*/3, 0);
  }
  // A coordinator (re)started with --keep-checkpoints `keep`, running the job from `first_step`.
  void Start(int keep, int64_t first_step) {
    manager_ = std::make_unique<CheckpointManager>(root_, keep);
    manager_->OnJobStarted(job_, dir_, plan_, first_step);
  }
  // The single rank's report of its shard after `step`, written into step-<N>.partial unless
  // `write` is false (a report replayed after the folder was published).
  CheckpointPublisher::Outcome Report(int64_t step, bool write = true) {
    if (write) {
      fs::create_directories(dir_ + "/" + PartialCheckpointDirName(step));
      std::ofstream(dir_ + "/" + PartialCheckpointDirName(step) + "/" + ShardFileName(0, 0)) << "x";
    }
    v1::ProgressReport r;
    r.set_job_id("job-1");
    r.set_kind(v1::PROGRESS_CHECKPOINT);
    r.set_step(step);
    r.set_checkpoint_file(ShardFileName(0, 0));
    r.set_checkpoint_bytes(1);
    return manager_->OnReport(r, db_.Published(), db_.Record(), step);
  }
  // The step-<N> folders on disk, ascending.
  std::vector<int64_t> OnDisk() const {
    std::vector<int64_t> steps;
    for (const auto& e : fs::directory_iterator(dir_)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("step-", 0) == 0 && name.find('.') == std::string::npos) {
        steps.push_back(std::stoll(name.substr(5)));
      }
    }
    std::sort(steps.begin(), steps.end());
    return steps;
  }
  // Nothing the database lists (in memory or in the file) is missing on disk.
  void ExpectListedOnDisk() const {
    for (const auto* list : {&db_.memory, &db_.file}) {
      for (const v1::CheckpointInfo& info : *list) {
        EXPECT_TRUE(fs::exists(info.path() + "/" + kManifestFile)) << info.path();
      }
    }
  }

  v1::Job job_;
  v1::ParallelPlanSummary plan_;
  std::string dir_;
  FlakyJobDatabase db_;
};

using Steps = std::vector<int64_t>;

// The SRE's report: --keep-checkpoints 3, the database's disk full from step 400 to 600, kill
// -9, a restart on the same database. Before: steps 100 and 200 were deleted although the
// database still listed them (`get` showed a deleted step-100), and 400, 500 and 600 stayed on
// disk forever.
TEST_F(CheckpointRetentionTest, AnUnrecordedCheckpointDeletesNothingAndRetentionConverges) {
  for (int64_t step : {100, 200, 300}) {
    ASSERT_EQ(Report(step).kind, CheckpointPublisher::Outcome::Kind::kPublished);
  }
  EXPECT_EQ(FlakyJobDatabase::Steps(db_.file), (Steps{100, 200, 300}));
  db_.full = true;
  for (int64_t step : {400, 500, 600}) {
    ASSERT_EQ(Report(step).kind, CheckpointPublisher::Outcome::Kind::kPublished);
    ExpectListedOnDisk();
  }
  // Nothing the file lists was deleted: a restart now resumes from a folder that is there.
  EXPECT_EQ(FlakyJobDatabase::Steps(db_.file), (Steps{100, 200, 300}));
  EXPECT_EQ(OnDisk(), (Steps{100, 200, 300, 400, 500, 600}));

  db_.Restart();
  db_.full = false;
  Start(/*keep=*/3, 600);
  ASSERT_EQ(Report(700).kind, CheckpointPublisher::Outcome::Kind::kPublished);
  EXPECT_EQ(FlakyJobDatabase::Steps(db_.file), (Steps{500, 600, 700}));
  EXPECT_EQ(OnDisk(), (Steps{500, 600, 700}));
  ExpectListedOnDisk();
}

// Without a restart the next recorded publish converges as well, and the list kept in memory
// while the disk was full never names a deleted folder.
TEST_F(CheckpointRetentionTest, TheNextRecordedPublishDeletesWhatWasKept) {
  for (int64_t step : {10, 20, 30}) Report(step);
  db_.full = true;
  Report(40);
  Report(50);
  EXPECT_EQ(FlakyJobDatabase::Steps(db_.memory), (Steps{10, 20, 30, 40, 50}));
  EXPECT_EQ(OnDisk(), (Steps{10, 20, 30, 40, 50}));
  db_.full = false;
  Report(60);
  EXPECT_EQ(FlakyJobDatabase::Steps(db_.file), (Steps{40, 50, 60}));
  EXPECT_EQ(OnDisk(), (Steps{40, 50, 60}));
  ExpectListedOnDisk();
}

// The ranks replay their last checkpoint report after a coordinator restart; a checkpoint
// published before it but never recorded is recorded then (not "abandoned: no .partial").
TEST_F(CheckpointRetentionTest, AReplayedReportRecordsAPublishedUnrecordedCheckpoint) {
  for (int64_t step : {100, 200}) Report(step);
  db_.full = true;
  Report(300);
  db_.Restart();
  db_.full = false;
  Start(/*keep=*/3, 300);
  CheckpointPublisher::Outcome o = Report(300, /*write=*/false);
  ASSERT_EQ(o.kind, CheckpointPublisher::Outcome::Kind::kPublished) << o.message;
  EXPECT_EQ(o.info.path(), dir_ + "/step-300");
  EXPECT_EQ(FlakyJobDatabase::Steps(db_.file), (Steps{100, 200, 300}));
}

// A database that listed folders already gone (written by a version that deleted before
// recording) stops listing them at the next publish.
TEST_F(CheckpointRetentionTest, AListedFolderGoneFromDiskIsNoLongerListed) {
  for (int64_t step : {100, 200}) Report(step);
  fs::remove_all(dir_ + "/step-100");
  Report(300);
  EXPECT_EQ(FlakyJobDatabase::Steps(db_.file), (Steps{200, 300}));
  ExpectListedOnDisk();
}

// A job restarted from an older checkpoint than folders an unrecorded run left: the new run's
// step-<N> replaces the old folder, and folders of later steps from the abandoned run go once the
// new list is recorded.
TEST_F(CheckpointRetentionTest, AnEarlierRunsUnrecordedFoldersAreReplacedOrDeleted) {
  for (int64_t step : {100, 200, 300}) Report(step);
  db_.full = true;
  for (int64_t step : {400, 500, 600}) Report(step);
  db_.Restart();  // the file lists 100, 200, 300: the job restarts from 300
  db_.full = false;
  Start(/*keep=*/3, 300);
  CheckpointPublisher::Outcome o = Report(400);
  ASSERT_EQ(o.kind, CheckpointPublisher::Outcome::Kind::kPublished) << o.message;
  EXPECT_EQ(FlakyJobDatabase::Steps(o.stale), (Steps{500, 600}));
  EXPECT_EQ(FlakyJobDatabase::Steps(db_.file), (Steps{200, 300, 400}));
  EXPECT_EQ(OnDisk(), (Steps{200, 300, 400}));
  EXPECT_FALSE(fs::exists(dir_ + "/step-400.replaced"));
  EXPECT_EQ(ReadCheckpointManifest(dir_ + "/step-400")->created_unix_ms(), 400);
}

// A rank still writing an abandoned checkpoint made its .partial folder again after the abandon
// removed it (a fresh SRE found an empty step-200.partial minutes later): the next published
// checkpoint removes it; a later step's .partial (one being written) stays.
TEST_F(CheckpointRetentionTest, AnAbandonedCheckpointsFolderMadeAgainIsRemovedLater) {
  Report(100);
  fs::create_directories(dir_ + "/" + PartialCheckpointDirName(200));
  fs::create_directories(dir_ + "/" + PartialCheckpointDirName(400));
  Report(300);
  EXPECT_FALSE(fs::exists(dir_ + "/" + PartialCheckpointDirName(200)));
  EXPECT_TRUE(fs::exists(dir_ + "/" + PartialCheckpointDirName(400)));
  EXPECT_EQ(OnDisk(), (Steps{100, 300}));
}

}  // namespace
}  // namespace dapple::coordinator
