// Runs the built dapple-coordinator, as an operator would: exit codes and stderr lines for
// flag errors, a port that is taken, and a database another coordinator holds.
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/fashion_mnist_files.h"
#include "common/testing/subprocess.h"
#include "common/token_file.h"
#include "dapple/v1/coordinator.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr auto kDeadline = std::chrono::seconds(20);

using Child = ::dapple::testing::RunningProcess;
using Result = ::dapple::testing::ProcessResult;

// Starts dapple-coordinator with `args` in directory `cwd`.
Child Spawn(const std::vector<std::string>& args, const std::string& cwd) {
  ::dapple::testing::ProcessOptions options;
  options.deadline = kDeadline;
  options.cwd = cwd;
  return ::dapple::testing::StartProcess(
      ::dapple::testing::BuiltBinaryPath("coordinator/dapple-coordinator"), args, options);
}

// Reads the child's output until it exits; SIGKILLs it at the deadline.
Result Finish(const Child& child) { return ::dapple::testing::FinishProcess(child); }

Result RunCoordinator(const std::vector<std::string>& args, const std::string& cwd) {
  return Finish(Spawn(args, cwd));
}

class CoordinatorBinaryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "/dapple-coordinator-binary-XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    for (Child& c : running_) {
      if (c.pid > 0) kill(c.pid, SIGKILL);  // never kill(-1, ...): a failed start has pid -1
      Finish(c);
    }
    (void)!std::system(absl::StrCat("rm -rf '", dir_, "'").c_str());
  }

  // Starts a coordinator on 127.0.0.1:0 with database `db` and waits for its port.
  int StartCoordinator(const std::string& db, Child* child,
                       const std::vector<std::string>& extra = {}) {
    const std::string port_file = absl::StrCat(dir_, "/port-", started_++);
    std::vector<std::string> args = {"--listen",    "127.0.0.1:0", "--db",        db,
                                     "--port-file", port_file,     "--log-level", "error"};
    args.insert(args.end(), extra.begin(), extra.end());
    *child = Spawn(args, dir_);
    running_.push_back(*child);
    const auto start = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - start < kDeadline) {
      std::ifstream in(port_file);
      int port = 0;
      if (in >> port && port > 0) return port;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ADD_FAILURE() << "no port file from the coordinator within the deadline";
    return 0;
  }

  // SIGTERMs a coordinator started by StartCoordinator and returns its result.
  Result Stop(const Child& child) {
    if (child.pid > 0) kill(child.pid, SIGTERM);
    for (size_t i = 0; i < running_.size(); ++i) {
      if (running_[i].pid == child.pid) running_.erase(running_.begin() + i);
    }
    return Finish(child);
  }

  std::string dir_;
  std::vector<Child> running_;
  int started_ = 0;
};

TEST_F(CoordinatorBinaryTest, FlagErrorsExit2WithOneLine) {
  // Paths in messages are lexically normal (the test folder may be "/tmp//...").
  const std::string dir = std::filesystem::path(dir_).lexically_normal().string();
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--worker-timeout-ms", "0"}, "--worker-timeout-ms must be at least 100 (ms), got 0"},
      {{"--heartbeat-interval-ms", "abc"},
       "--heartbeat-interval-ms must be an integer number of ms, got 'abc'"},
      {{"--heartbeat-interval-ms", "500", "--worker-timeout-ms", "900"},
       "--worker-timeout-ms must exceed 2x --heartbeat-interval-ms"},
      {{"--listen", "127.0.0.1:99999"},
       "--listen must be HOST:PORT with PORT in 0..65535, got '127.0.0.1:99999'"},
      {{"--db", ""}, "--db '' is empty: leave the flag out for its default"},
      // Any option's explicit empty value (an unset variable in a template): not the default.
      {{"--metrics-token-file", ""},
       "--metrics-token-file '' is empty: leave the flag out for its default"},
      {{"--tenants-file", ""}, "--tenants-file '' is empty"},
      {{"--log-level", "loud"}, "--log-level must be one of"},
      {{"--no-such-flag"}, "no-such-flag"},
      {{"--worker-timeout-ms"}, "--worker-timeout-ms"},
      {{"stray"}, "stray"},
      {{"--dead-worker-retention-s", "-5"},
       "--dead-worker-retention-s must be at least 0 (s), got -5"},
      // A folder as --port-file is refused before the job database is opened.
      {{"--port-file", dir_}, "--port-file '" + dir_ + "' is a directory"},
      {{"--port-file", dir_ + "/none/port"},
       "cannot use folder '" + dir_ + "/none': No such file or directory"},
      // Jobs' files: no relative root, not "/", none holding the coordinator's own files (the
      // database is dapple.db in the working folder here).
      {{"--data-root", "datasets"}, "--data-root 'datasets' must be an absolute path"},
      {{"--data-root", "/usr/share/datasets,/"}, "--data-root / would let every job read"},
      {{"--data-root", dir_}, "--data-root " + dir + " contains --db " + dir + "/dapple.db"},
      {{"--data-root", "/usr/share/datasets", "--data-root", dir_ + "/ck", "--checkpoint-dir",
        dir_ + "/ck/"},
       "contains --checkpoint-dir " + dir + "/ck"},
  };
  for (const Case& c : cases) {
    const std::string what = absl::StrJoin(c.args, " ");
    Result r = RunCoordinator(c.args, dir_);
    EXPECT_EQ(r.exit_code, 2) << what << "\n" << r.err;
    EXPECT_THAT(r.err, StartsWith("dapple-coordinator: ")) << what;
    EXPECT_THAT(r.err, HasSubstr(c.message)) << what;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << what << "\n" << r.err;
    EXPECT_EQ(r.out, "") << what;
  }
  // Nothing was started, so no database was created.
  EXPECT_NE(access((dir_ + "/dapple.db").c_str(), F_OK), 0);
}

TEST_F(CoordinatorBinaryTest, HelpExits0) {
  Result r = RunCoordinator({"--help"}, dir_);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("--worker-timeout-ms"));
  EXPECT_THAT(r.out, HasSubstr("--dead-worker-retention-s"));
  EXPECT_EQ(r.err, "");
}

TEST_F(CoordinatorBinaryTest, ASecondCoordinatorOnATakenPortExits1) {
  Child first;
  const int port = StartCoordinator(dir_ + "/a.db", &first);
  ASSERT_GT(port, 0);
  const std::string address = absl::StrCat("127.0.0.1:", port);
  Result second =
      RunCoordinator({"--listen", address, "--db", dir_ + "/b.db", "--log-level", "error"}, dir_);
  EXPECT_EQ(second.exit_code, 1);
  EXPECT_EQ(second.err, absl::StrCat("dapple-coordinator: cannot listen on ", address,
                                     ": address already in use\n"));
  EXPECT_EQ(Stop(first).exit_code, 0);
}

TEST_F(CoordinatorBinaryTest, ASecondCoordinatorOnTheSameDatabaseExits1AndTheFirstKeepsIt) {
  const std::string db = dir_ + "/d.db";
  Child first;
  ASSERT_GT(StartCoordinator(db, &first), 0);
  // The first one is idle: the lock must hold all the same.
  Result second =
      RunCoordinator({"--listen", "127.0.0.1:0", "--db", db, "--log-level", "error"}, dir_);
  EXPECT_EQ(second.exit_code, 1);
  EXPECT_EQ(second.err,
            absl::StrCat("dapple-coordinator: database ", db,
                         " is in use by another dapple-coordinator (pid ", first.pid, ")\n"));
  EXPECT_EQ(Stop(first).exit_code, 0);
  // Released with its process: the next coordinator starts.
  Child third;
  ASSERT_GT(StartCoordinator(db, &third), 0);
  EXPECT_EQ(Stop(third).exit_code, 0);
}

// The first start creates the admin and the join token and writes their files (0600) where the
// flags say; later starts write nothing.
TEST_F(CoordinatorBinaryTest, TheFirstStartWritesTheTokenFilesOnce) {
  const std::string db = dir_ + "/boot.db";
  const std::string admin = dir_ + "/boot-admin.token";
  const std::string join = dir_ + "/boot-join.token";
  for (int start = 0; start < 2; ++start) {
    Child child;
    ASSERT_GT(
        StartCoordinator(db, &child, {"--admin-token-file", admin, "--join-token-file", join}), 0);
    Result stopped = Stop(child);
    EXPECT_EQ(stopped.exit_code, 0) << stopped.err;
    struct stat st {};
    // The database (token hashes, every tenant's specs) is the owner's alone (umask 077).
    ASSERT_EQ(stat(db.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 077, 0);
    if (start == 0) {
      ASSERT_EQ(stat(admin.c_str(), &st), 0);
      EXPECT_EQ(st.st_mode & 0777, 0600);
      ASSERT_EQ(stat(join.c_str(), &st), 0);
      EXPECT_EQ(st.st_mode & 0777, 0600);
      EXPECT_TRUE(absl::StartsWith(*common::ReadTokenFile(admin), "dpl_"));
      std::remove(admin.c_str());
      std::remove(join.c_str());
    } else {
      EXPECT_NE(stat(admin.c_str(), &st), 0);  // not written again
      EXPECT_NE(stat(join.c_str(), &st), 0);
    }
  }
}

// SIGTERM with a `dapplectl watch` open: the stream must end UNAVAILABLE (clients reconnect on
// it), not CANCELLED, and the coordinator must exit 0 well within its 2 s grace.
TEST_F(CoordinatorBinaryTest, SigtermEndsAnOpenWatchWithUnavailable) {
  Child coordinator;
  // A Fashion-MNIST folder as submit checks it (its four files; never read: no worker runs).
  const std::string fmnist = dir_ + "/data/fmnist";
  std::filesystem::create_directories(fmnist);
  for (const bool train : {true, false}) {
    for (const bool images : {true, false}) std::ofstream(FashionMnistFile(fmnist, train, images));
  }
  const int port = StartCoordinator(dir_ + "/w.db", &coordinator, {"--data-root", dir_ + "/data"});
  ASSERT_GT(port, 0);
  auto stub = v1::Coordinator::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  v1::SubmitJobRequest submit;
  submit.set_spec_yaml(absl::StrCat(R"(name: watched
model: {input_shape: [784], layers: [{type: linear, out: 10}]}
data: {dataset: fashion-mnist, path: )",
                                    fmnist, R"(}
training: {global_batch: 4, micro_batch: 4, epochs: 1, optimizer: {type: sgd, lr: 0.1}}
)"));
  v1::SubmitJobResponse submitted;
  // The first start wrote the admin's token next to the database (docs/security.md).
  absl::StatusOr<std::string> token = common::ReadTokenFile(dir_ + "/admin.token");
  ASSERT_TRUE(token.ok()) << token.status();
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + kDeadline);
    grpc::Status s = stub->SubmitJob(&ctx, submit, &submitted);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);  // no token
  }
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + kDeadline);
    ctx.AddMetadata("authorization", "Bearer " + *token);
    grpc::Status s = stub->SubmitJob(&ctx, submit, &submitted);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  grpc::ClientContext watch_ctx;
  watch_ctx.set_deadline(std::chrono::system_clock::now() + kDeadline);
  watch_ctx.AddMetadata("authorization", "Bearer " + *token);
  v1::WatchJobRequest watch;
  watch.set_job_id(submitted.job().id());
  auto reader = stub->WatchJob(&watch_ctx, watch);
  v1::JobEvent event;
  ASSERT_TRUE(reader->Read(&event));  // PENDING: no worker

  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(kill(coordinator.pid, SIGTERM), 0);
  while (reader->Read(&event)) {
  }
  const grpc::Status s = reader->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_EQ(s.error_message(), "coordinator is shutting down");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1000));
  Result stopped = Stop(coordinator);
  EXPECT_EQ(stopped.exit_code, 0) << stopped.err;
  // The grace is 2 s; with the watch ended first nothing waits for it.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1500));
}

}  // namespace
}  // namespace dapple::coordinator
