#include "coordinator/service/job_data.h"

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/checkpoint_files.h"
#include "common/fashion_mnist_files.h"
#include "common/job_spec.h"
#include "coordinator/auth/test_identities.h"
#include "coordinator/jobs/test_db.h"
#include "coordinator/service/coordinator_service.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// A language model on the bytes of {PATH} (T = 4), 2 stages; {GB} is the global batch. The
// value of data.path is at line 6, column 29; training.global_batch's at line 8, column 17.
constexpr char kTextSpec[] = R"(name: tiny-lm
model:
  layers:
    - {type: embedding, vocab: 256, dim: 8}
    - {type: lm_head, vocab: 256}
data: {dataset: text, path: {PATH}, seq_len: 4}
training:
  global_batch: {GB}
  micro_batch: 2
  epochs: 2
  optimizer: {type: adamw, lr: 0.001}
parallel:
  stages: 2
  devices: 2
)";

std::string TextSpec(const std::string& path, int global_batch = 4) {
  return absl::StrReplaceAll(kTextSpec, {{"{PATH}", path}, {"{GB}", absl::StrCat(global_batch)}});
}

// The data root of these tests: the test folders are in it, the job databases (FreshDbPath)
// are not.
std::string DataFolder() { return absl::StrCat(::testing::TempDir(), "/job_data_test"); }

// A fresh folder for the running test's files (ctest runs tests as parallel processes).
class TestDir {
 public:
  TestDir() {
    path_ = absl::StrCat(DataFolder(), "/",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TestDir() { fs::remove_all(path_); }
  // Writes `bytes` to `name` in the folder; returns its path.
  std::string Write(const std::string& name, const std::string& bytes) const {
    const std::string path = path_ + "/" + name;
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// 100 bytes of text: at the default validation fraction 0.05, training bytes [0, 95) hold
// (95 - 1) / 4 = 23 samples of T = 4, validation bytes [95, 100) one.
std::string HundredBytes() { return std::string(100, 'a'); }

absl::StatusOr<v1::JobSpec> Parsed(const std::string& yaml) {
  return ParseJobSpec(yaml, "job.yaml");
}

// The tests' files are under the test folder; "/nonexistent" is a root so that a missing file
// gets the reader's answer; the defaults hold examples/bad's paths.
std::vector<std::string> TestRootList() {
  std::vector<std::string> roots = DefaultDataRoots();
  roots.push_back(DataFolder());
  roots.push_back("/nonexistent");
  return roots;
}

const DataRoots& TestRoots() {
  static const DataRoots* roots = new DataRoots(*DataRoots::Create(TestRootList()));
  return *roots;
}

TEST(ResolveJobDataTest, FillsTheCountsOfATextFile) {
  TestDir dir;
  absl::StatusOr<v1::JobSpec> spec = Parsed(TextSpec(dir.Write("t.txt", HundredBytes())));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->data().train_samples(), 0);  // unknown until the file is read
  ASSERT_TRUE(ResolveJobData(&*spec, TestRoots()).ok());
  EXPECT_EQ(spec->data().train_samples(), 23);
  EXPECT_EQ(spec->data().eval_samples(), 1);
  EXPECT_EQ(spec->data().file_bytes(), 100);
}

// The coordinator checks that the folder has the four files (the workers read them): a folder
// without them is refused at data.path; one with them is left as the parser filled it.
TEST(ResolveJobDataTest, AFashionMnistFolderNeedsItsFourFiles) {
  TestDir dir;
  v1::JobSpec spec;
  spec.mutable_data()->set_dataset("fashion-mnist");
  spec.mutable_data()->set_path(dir.path());
  spec.mutable_data()->set_train_samples(60000);
  absl::Status s = ResolveJobData(&spec, TestRoots());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), absl::StrCat("data.path ", dir.path(),
                                      " is not a Fashion-MNIST folder: it has no "
                                      "train-images-idx3-ubyte.gz (data.dataset fashion-mnist "
                                      "reads the four gzip IDX files of Debian's "
                                      "dataset-fashion-mnist, installed in "
                                      "/usr/share/datasets/fashion-mnist)"));
  for (const bool train : {true, false}) {
    for (const bool images : {true, false}) {
      const std::string file = FashionMnistFile(dir.path(), train, images);
      dir.Write(file.substr(file.rfind('/') + 1), "");  // never read here
    }
  }
  ASSERT_TRUE(ResolveJobData(&spec, TestRoots()).ok());
  EXPECT_EQ(spec.data().train_samples(), 60000);
  EXPECT_EQ(spec.data().file_bytes(), 0);
}

// A folder (or file) that is a link pointing nowhere, or looping, is named as such: a user
// looks at the link, not for files in a folder that is not there.
TEST(ResolveJobDataTest, AFashionMnistPathThatIsABrokenLinkIsNamedAsOne) {
  TestDir dir;
  const auto refusal = [](const std::string& path) {
    v1::JobSpec spec;
    spec.mutable_data()->set_dataset("fashion-mnist");
    spec.mutable_data()->set_path(path);
    absl::Status s = ResolveJobData(&spec, TestRoots());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    const std::string message(s.message());
    return message.substr(0, message.find(" (data.dataset fashion-mnist reads"));
  };
  const std::string dangling = dir.path() + "/dangling";
  fs::create_symlink(dir.path() + "/nowhere", dangling);
  EXPECT_EQ(refusal(dangling), absl::StrCat("data.path ", dangling, " is a link to ", dir.path(),
                                            "/nowhere, which does not exist"));
  const std::string loop = dir.path() + "/loop";
  fs::create_symlink(loop, loop);
  EXPECT_EQ(refusal(loop), absl::StrCat("data.path ", loop,
                                        " is a link that loops (too many levels of symbolic "
                                        "links)"));
  EXPECT_EQ(refusal(dir.path() + "/missing"),
            absl::StrCat("data.path ", dir.path(), "/missing does not exist"));
  const std::string file = dir.Write("a-file", "x");
  EXPECT_EQ(refusal(file), absl::StrCat("data.path ", file, " is not a folder"));
  const std::string folder = dir.path() + "/fm";
  fs::create_directories(folder);
  fs::create_symlink(folder + "/gone.gz", folder + "/train-images-idx3-ubyte.gz");
  EXPECT_EQ(refusal(folder), absl::StrCat("data.path ", folder,
                                          " is not a Fashion-MNIST folder: its "
                                          "train-images-idx3-ubyte.gz is a link to ",
                                          folder, "/gone.gz, which does not exist"));
  fs::remove(folder + "/train-images-idx3-ubyte.gz");
  fs::create_directories(folder + "/train-images-idx3-ubyte.gz");
  EXPECT_EQ(refusal(folder), absl::StrCat("data.path ", folder,
                                          " is not a Fashion-MNIST folder: its "
                                          "train-images-idx3-ubyte.gz is not a regular file"));
}

// Every refusal of the file, with the submitted text, points at the data.path value, as the
// parser's refusals point at their field; the code is kInvalidArgument (the user's input to
// fix) also for a missing file.
TEST(ResolveJobDataTest, RefusesABadFileAtTheDataPathLine) {
  TestDir dir;
  const auto refusal = [](const std::string& path) {
    const std::string yaml = TextSpec(path);
    absl::StatusOr<v1::JobSpec> spec = Parsed(yaml);
    EXPECT_TRUE(spec.ok()) << spec.status();
    const SpecText text{yaml, "job.yaml"};
    absl::Status s = ResolveJobData(&*spec, TestRoots(), &text);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    return std::string(s.message());
  };
  EXPECT_EQ(refusal("/nonexistent/kjv.txt"),
            "job.yaml:6:29: data.path /nonexistent/kjv.txt does not exist (scripts/setup writes "
            "the King James Bible to /var/lib/dapple/datasets/kjv.txt)");
  EXPECT_EQ(refusal(dir.path()), absl::StrCat("job.yaml:6:29: data.path ", dir.path(),
                                              " is a directory; data.dataset text reads one "
                                              "text file"));
  const std::string empty = dir.Write("empty.txt", "");
  EXPECT_EQ(refusal(empty), absl::StrCat("job.yaml:6:29: data.path ", empty,
                                         " is empty; data.dataset text needs a text file"));
  const std::string binary = dir.Write("b.bin", std::string("text\0more", 9));
  EXPECT_EQ(refusal(binary),
            absl::StrCat("job.yaml:6:29: data.path ", binary,
                         " is not text: byte offset 4 is a NUL byte; data.dataset text reads "
                         "UTF-8 text"));
  const std::string small = dir.Write("small.txt", "In the beginning");
  EXPECT_THAT(refusal(small),
              HasSubstr(absl::StrCat("job.yaml:6:29: data.path ", small,
                                     " has 16 bytes: with data.seq_len 4 and "
                                     "data.validation_fraction 0.05 its training split has 15 "
                                     "bytes (3 samples) and its validation split 1 byte (0 "
                                     "samples)")));
}

TEST(ResolveJobDataTest, TheGlobalBatchMustFitTheResolvedTrainingSamples) {
  TestDir dir;
  const std::string path = dir.Write("t.txt", HundredBytes());
  const std::string yaml = TextSpec(path, /*global_batch=*/32);
  absl::StatusOr<v1::JobSpec> spec = Parsed(yaml);
  ASSERT_TRUE(spec.ok()) << spec.status();  // the parser cannot know the file's samples
  const SpecText text{yaml, "job.yaml"};
  absl::Status s = ResolveJobData(&*spec, TestRoots(), &text);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), absl::StrCat("job.yaml:8:17: training.global_batch 32 must be <= 23, "
                                      "the number of training samples of data.path ",
                                      path,
                                      " with data.seq_len 4: a step takes global_batch distinct "
                                      "samples: use a global_batch of at most 23 (or a longer "
                                      "file or a smaller data.seq_len)"));
  // Without the text: the same rule, without a location.
  spec = Parsed(yaml);
  EXPECT_THAT(ResolveJobData(&*spec, TestRoots()).message(),
              HasSubstr("training.global_batch 32 must be <= 23"));
}

// ---- text jobs through the service's handlers, by direct calls ----

constexpr int64_t kStart = 1'700'000'000'000;

class TextJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorOptions options;
    options.measure_profiles = false;
    options.db_path = FreshDbPath();
    options.now_unix_ms = [this] { return now_.load(); };
    options.data_roots = TestRootList();
    auto svc = CoordinatorService::Create(options);
    ASSERT_TRUE(svc.ok()) << svc.status();
    svc_ = std::move(*svc);
  }

  std::string Register() {
    v1::RegisterWorkerRequest req;
    req.set_hostname("localhost");
    req.set_pid(next_pid_++);
    req.add_devices("cpu");
    v1::RegisterWorkerResponse resp;
    EXPECT_TRUE(svc_->RegisterWorker(auth::TestJoin(), req, &resp).ok());
    return resp.worker_id();
  }

  absl::StatusOr<v1::Job> Submit(const std::string& yaml, const std::string& resume_from = "") {
    v1::SubmitJobRequest req;
    req.set_spec_yaml(yaml);
    req.set_source_name("job.yaml");
    req.set_resume_from(resume_from);
    v1::SubmitJobResponse resp;
    absl::Status s = svc_->SubmitJob(auth::TestAdmin(), req, &resp);
    if (!s.ok()) return s;
    return resp.job();
  }

  absl::Status Plan(const std::string& yaml) {
    v1::PlanJobRequest req;
    req.set_spec_yaml(yaml);
    req.set_source_name("job.yaml");
    v1::PlanJobResponse resp;
    return svc_->PlanJob(auth::TestAdmin(), req, &resp);
  }

  int Jobs() {
    v1::ListJobsResponse list;
    EXPECT_TRUE(svc_->ListJobs(auth::TestAdmin(), v1::ListJobsRequest(), &list).ok());
    return list.jobs_size();
  }

  TestDir dir_;
  std::atomic<int64_t> now_{kStart};
  int next_pid_ = 100;
  std::unique_ptr<CoordinatorService> svc_;
};

// The stored spec carries the counts: the job's step count is 2 epochs of floor(23 / 4) = 5
// steps, and every rank's assignment has the file size the worker checks its copy against.
TEST_F(TextJobTest, SubmitStoresTheResolvedDataAndAssignmentsCarryIt) {
  const std::string w[2] = {Register(), Register()};
  absl::StatusOr<v1::Job> job = Submit(TextSpec(dir_.Write("t.txt", HundredBytes())));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->spec().data().train_samples(), 23);
  EXPECT_EQ(job->spec().data().eval_samples(), 1);
  EXPECT_EQ(job->spec().data().file_bytes(), 100);
  svc_->Tick();
  v1::GetJobRequest get;
  get.set_job_id(job->id());
  v1::Job running;
  ASSERT_TRUE(svc_->GetJob(auth::TestAdmin(), get, &running).ok());
  ASSERT_EQ(running.state(), v1::JOB_STATE_RUNNING) << running.message();
  EXPECT_EQ(running.metrics().total_steps(), 10);
  for (const std::string& worker : w) {
    v1::HeartbeatRequest hb;
    hb.set_worker_id(worker);
    v1::HeartbeatResponse resp;
    ASSERT_TRUE(svc_->Heartbeat(auth::TestWorker((hb).worker_id()), hb, &resp).ok());
    ASSERT_TRUE(resp.has_assignment()) << worker;
    EXPECT_EQ(resp.assignment().spec().data().file_bytes(), 100);
    EXPECT_EQ(resp.assignment().spec().data().train_samples(), 23);
  }
}

// Submit and the dry run refuse a bad file alike, at the data.path line; nothing is stored.
TEST_F(TextJobTest, SubmitAndPlanRefuseABadFile) {
  const std::string yaml = TextSpec("/nonexistent/kjv.txt");
  const std::string expected =
      "job.yaml:6:29: data.path /nonexistent/kjv.txt does not exist (scripts/setup writes the "
      "King James Bible to /var/lib/dapple/datasets/kjv.txt)";
  absl::StatusOr<v1::Job> job = Submit(yaml);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(job.status().message(), expected);
  absl::Status plan = Plan(yaml);
  EXPECT_EQ(plan.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(plan.message(), expected);
  const std::string too_big = TextSpec(dir_.Write("t.txt", HundredBytes()), 32);
  EXPECT_THAT(Submit(too_big).status().message(),
              HasSubstr("job.yaml:8:17: training.global_batch 32 must be <= 23"));
  EXPECT_THAT(Plan(too_big).message(),
              HasSubstr("job.yaml:8:17: training.global_batch 32 must be <= 23"));
  EXPECT_EQ(Jobs(), 0);
  EXPECT_TRUE(Plan(TextSpec(dir_.Write("t.txt", HundredBytes()))).ok());
}

// A path outside the data roots (here the coordinator's own database, readable by the
// coordinator) is refused by submit and the dry run alike before anything reads it, at the
// data.path line, with the same words whether the file exists or not; nothing is stored.
TEST_F(TextJobTest, SubmitAndPlanRefuseAPathOutsideTheDataRoots) {
  const std::string db = FreshDbPath();
  { std::ofstream(db) << "secret"; }
  for (const std::string& path : {db, db + ".missing"}) {
    const std::string yaml = TextSpec(path);
    const std::string expected = absl::StrCat(
        "job.yaml:6:29: data.path ", path, " is outside the coordinator's data roots (",
        absl::StrJoin(TestRoots().roots(), ", "),
        "): a job may read files under them only; put the file there or ask an admin to add its "
        "folder with --data-root");
    EXPECT_EQ(Submit(yaml).status().message(), expected);
    EXPECT_EQ(Plan(yaml).message(), expected);
  }
  // Fashion-MNIST's folder is read by the workers only; it is checked at submit all the same.
  const std::string fmnist = absl::StrCat(R"(name: fmnist
model:
  input_shape: [1, 28, 28]
  layers:
    - {type: flatten}
    - {type: linear, out: 10}
data: {dataset: fashion-mnist, path: )",
                                          fs::path(db).parent_path().string(), R"(}
training: {global_batch: 8, micro_batch: 4, epochs: 1, optimizer: {type: sgd, lr: 0.1}}
parallel: {stages: 1}
)");
  EXPECT_THAT(Submit(fmnist).status().message(),
              HasSubstr("is outside the coordinator's data roots"));
  EXPECT_EQ(Jobs(), 0);
}

// The data files of examples/bad are refused at submit (the parser cannot know them), each with
// its one line: the data.path value's line and column, the path and the rule.
TEST_F(TextJobTest, SubmitRefusesTheBadDataExamples) {
  const char* env = std::getenv("DAPPLE_SOURCE_DIR");
  const std::string root = env != nullptr && *env != '\0' ? env : DAPPLE_SOURCE_ROOT;
  const auto submit = [&](const std::string& name) {
    std::ifstream in(absl::StrCat(root, "/examples/bad/", name));
    EXPECT_TRUE(in.good()) << name;
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    v1::SubmitJobRequest req;
    req.set_spec_yaml(text);
    req.set_source_name(absl::StrCat("examples/bad/", name));
    v1::SubmitJobResponse resp;
    return svc_->SubmitJob(auth::TestAdmin(), req, &resp);
  };
  absl::Status missing = submit("missing_text_file.yaml");
  EXPECT_EQ(missing.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(missing.message(),
            "examples/bad/missing_text_file.yaml:10:29: data.path "
            "/var/lib/dapple/datasets/no-such-file.txt does not exist (scripts/setup writes the "
            "King James Bible to /var/lib/dapple/datasets/kjv.txt)");
  // Fashion-MNIST's gzip'd labels, which scripts/setup installs.
  const std::string labels = "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz";
  if (fs::exists(labels)) {
    absl::Status binary = submit("not_text_file.yaml");
    EXPECT_EQ(binary.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(binary.message(),
              absl::StrCat("examples/bad/not_text_file.yaml:10:29: data.path ", labels,
                           " is not text: byte offset 1 (0x8b) does not start a valid UTF-8 "
                           "sequence; data.dataset text reads UTF-8 text"));
  }
  EXPECT_EQ(Jobs(), 0);
}

// A resumed text job counts its steps on the resolved samples (10 here): a checkpoint after
// step 6 resumes, one after step 10 has nothing left to run; a bad file is refused first.
TEST_F(TextJobTest, ResumeCountsTheStepsOfTheResolvedData) {
  const std::string yaml = TextSpec(dir_.Write("t.txt", HundredBytes()));
  absl::StatusOr<v1::JobSpec> spec = Parsed(yaml);
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(ResolveJobData(&*spec, TestRoots()).ok());
  auto checkpoint = [&](int64_t step) {
    const std::string ckpt = absl::StrCat(dir_.path(), "/", CheckpointDirName(step));
    fs::create_directories(ckpt);
    v1::CheckpointManifest manifest;
    manifest.set_format_version(kCheckpointFormatVersion);
    manifest.set_job_id("job-0");
    manifest.set_step(step);
    *manifest.mutable_spec() = *spec;
    EXPECT_TRUE(WriteFileAtomically(ckpt + "/" + kManifestFile, manifest.SerializeAsString()).ok());
    return ckpt;
  };
  absl::StatusOr<v1::Job> resumed = Submit(yaml, checkpoint(6));
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->spec().data().train_samples(), 23);
  const std::string done = checkpoint(10);
  EXPECT_THAT(Submit(yaml, done).status().message(),
              HasSubstr("it was taken after step 10 and the job runs 10 steps "
                        "(training.epochs 2 x 5 steps per epoch): nothing left to run: raise "
                        "training.epochs to at least 3"));
  // Only the limit that ends the job names itself: here max_steps, not the epochs.
  const std::string capped =
      absl::StrReplaceAll(yaml, {{"  epochs: 2\n", "  epochs: 9\n  max_steps: 10\n"}});
  ASSERT_NE(capped, yaml);
  EXPECT_THAT(Submit(capped, done).status().message(),
              HasSubstr("(training.epochs 9 x 5 steps per epoch, at most training.max_steps 10): "
                        "nothing left to run: raise training.max_steps to more than 10"));
  EXPECT_THAT(Submit(TextSpec("/nonexistent/kjv.txt"), done).status().message(),
              HasSubstr("job.yaml:6:29: data.path /nonexistent/kjv.txt does not exist"));
}

}  // namespace
}  // namespace dapple::coordinator
