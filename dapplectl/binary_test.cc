// Runs the built dapplectl executable, as a user would: exit codes and stderr lines.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/fashion_mnist_files.h"
#include "common/testing/subprocess.h"
#include "dapplectl/exit_codes.h"
#include "dapplectl/fake_coordinator_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::ctl {
namespace {

using ::dapple::ctl::testing::FakeCoordinator;
using ::dapple::ctl::testing::RefusingPort;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

using ::dapple::testing::ProcessResult;

// Runs the built dapplectl with `args`, `env_extra` added to the environment and
// DAPPLE_COORDINATOR removed; kills it after `deadline`.
ProcessResult RunProcess(const std::vector<std::string>& args,
                         const std::vector<std::pair<std::string, std::string>>& env_extra = {},
                         std::chrono::milliseconds deadline = std::chrono::seconds(20)) {
  ::dapple::testing::ProcessOptions options;
  options.deadline = deadline;
  options.unset_env = {"DAPPLE_COORDINATOR"};
  options.set_env = env_extra;
  return ::dapple::testing::RunProcess(::dapple::testing::BuiltBinaryPath("dapplectl/dapplectl"),
                                       args, options);
}

TEST(DapplectlBinaryTest, UnreachableCoordinatorExitsWithThree) {
  RefusingPort refusing;
  ASSERT_NE(refusing.port(), 0);
  const ProcessResult r =
      RunProcess({"--coordinator", refusing.address(), "--timeout", "2", "list"});
  EXPECT_EQ(r.exit_code, kExitUnreachable) << r.err;
  EXPECT_EQ(r.err, "dapplectl: cannot reach the coordinator at " + refusing.address() +
                       " (connection refused); start dapple-coordinator or set --coordinator / "
                       "DAPPLE_COORDINATOR\n");
  EXPECT_EQ(r.out, "");
  EXPECT_LT(r.seconds, 2.0 + 1.0);  // within --timeout, with room for process start
}

TEST(DapplectlBinaryTest, UnreachableCoordinatorWhileWatching) {
  RefusingPort refusing;
  ASSERT_NE(refusing.port(), 0);
  const ProcessResult r =
      RunProcess({"--coordinator", refusing.address(), "--timeout", "2", "watch", "job-1"});
  EXPECT_EQ(r.exit_code, kExitUnreachable) << r.err;
  EXPECT_THAT(r.err, HasSubstr("(connection refused)"));
}

TEST(DapplectlBinaryTest, BadFlagExitsWithTwo) {
  const ProcessResult r = RunProcess({"--no-such-flag", "list"});
  EXPECT_EQ(r.exit_code, kExitUsage) << r.err;
  EXPECT_THAT(r.err, ::testing::StartsWith("dapplectl: "));
  EXPECT_THAT(r.err, HasSubstr("--no-such-flag"));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST(DapplectlBinaryTest, UnknownCommandExitsWithTwo) {
  const ProcessResult r = RunProcess({"frobnicate"});
  EXPECT_EQ(r.exit_code, kExitUsage) << r.err;
  EXPECT_THAT(r.err, HasSubstr("frobnicate"));
}

// `help COMMAND` of an unknown command is the usage error the command itself gives (it printed
// the top-level help and exited 0).
TEST(DapplectlBinaryTest, HelpOfAnUnknownCommandExitsWithTwo) {
  ProcessResult r = RunProcess({"help", "nosuch"});
  EXPECT_EQ(r.exit_code, kExitUsage) << r.err;
  EXPECT_THAT(r.err, HasSubstr("nosuch"));
  EXPECT_EQ(r.out, "");
  r = RunProcess({"help", "list"});
  EXPECT_EQ(r.exit_code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("list"));
}

// Output that cannot be written is an error (exit 1, said on stderr), not a success: a token
// saved to a full disk was lost while dapplectl exited 0.
TEST(DapplectlBinaryTest, OutputThatCannotBeWrittenIsAnError) {
  struct stat st {};
  if (::stat("/dev/full", &st) != 0 || !S_ISCHR(st.st_mode)) GTEST_SKIP() << "no /dev/full";
  ::dapple::testing::ProcessOptions options;
  const std::string ctl = ::dapple::testing::BuiltBinaryPath("dapplectl/dapplectl");
  ProcessResult r =
      ::dapple::testing::RunProcess("/bin/sh", {"-c", ctl + " --version > /dev/full"}, options);
  EXPECT_EQ(r.exit_code, kExitRefused) << r.err;
  EXPECT_THAT(r.err, StartsWith("dapplectl: cannot write the output to stdout"));
  EXPECT_THAT(r.err, HasSubstr("it is lost\n"));
  r = ::dapple::testing::RunProcess("/bin/sh", {"-c", ctl + " --version >&-"}, options);
  EXPECT_EQ(r.exit_code, kExitRefused) << r.err;
  EXPECT_THAT(r.err, HasSubstr("dapplectl: cannot write the output to stdout"));
}

TEST(DapplectlBinaryTest, SubmitOfAMissingFileExitsWithOneNamingIt) {
  RefusingPort refusing;  // the file is read before any connection is made
  const std::string missing = ::testing::TempDir() + "/no-such-job.yaml";
  const ProcessResult r = RunProcess({"--coordinator", refusing.address(), "submit", missing});
  EXPECT_EQ(r.exit_code, kExitRefused) << r.err;
  EXPECT_EQ(r.err, "dapplectl: cannot read job spec " + missing + ": No such file or directory\n");
}

// In a folder of this process's own: ctest runs test cases as parallel processes, and files of
// one name written by two of them race.
std::string TestDir() {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/binary_test.", getpid());
  mkdir(dir.c_str(), 0755);
  return dir;
}

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = TestDir() + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

int Lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

// Files that are not UTF-8 text are refused before any connection, by name, line and column.
TEST(DapplectlBinaryTest, SubmitOfTextThatIsNotUtf8ExitsWithOne) {
  RefusingPort refusing;
  const std::string latin1 =
      WriteFile("latin1.yaml", "name: fmnist-mlp\nmodel:\n  # caf\xE9\n  layers: []\n");
  ProcessResult r = RunProcess({"--coordinator", refusing.address(), "submit", latin1});
  EXPECT_EQ(r.exit_code, kExitRefused) << r.err;
  EXPECT_EQ(r.err,
            "dapplectl: " + latin1 + ": not UTF-8 text (invalid byte 0xE9 at line 3, column 8)\n");
  EXPECT_EQ(r.out, "");

  std::string garbage;
  for (int i = 0; i < 4096; ++i) garbage += static_cast<char>((i * 2654435761u) >> 24);
  const std::string binary = WriteFile("garbage.bin", garbage);
  r = RunProcess({"--coordinator", refusing.address(), "submit", binary});
  EXPECT_EQ(r.exit_code, kExitRefused) << r.err;
  EXPECT_THAT(r.err, StartsWith("dapplectl: " + binary + ": not UTF-8 text ("));
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_THAT(r.err, Not(HasSubstr("libprotobuf")));

  const std::string zeros = WriteFile("zeros.yaml", std::string(64, '\0'));
  r = RunProcess({"--coordinator", refusing.address(), "submit", zeros});
  EXPECT_EQ(r.exit_code, kExitRefused) << r.err;
  EXPECT_EQ(r.err,
            "dapplectl: " + zeros + ": not UTF-8 text (control byte 0x00 at line 1, column 1)\n");
}

TEST(DapplectlBinaryTest, SubmitOfAHugeFileExitsWithOne) {
  RefusingPort refusing;
  const std::string path = ::testing::TempDir() + "/huge.yaml";
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 70 << 20), 0);  // sparse
  close(fd);
  const ProcessResult r = RunProcess({"--coordinator", refusing.address(), "submit", path});
  unlink(path.c_str());
  EXPECT_EQ(r.exit_code, kExitRefused) << r.err;
  EXPECT_EQ(r.err, "dapplectl: " + path +
                       " is 73400320 bytes; a job spec may be at most 1048576 bytes (1 MiB)\n");
}

// A file name that is not UTF-8 travels escaped; the coordinator's errors show it so.
TEST(DapplectlBinaryTest, SubmitOfAFileWhoseNameIsNotUtf8) {
  FakeCoordinator fake;
  const std::string ok = WriteFile("caf\xE9.yaml", "name: fmnist-mlp\n");
  ProcessResult r = RunProcess({"--coordinator", fake.address(), "submit", ok});
  EXPECT_EQ(r.exit_code, kExitOk) << r.err;
  EXPECT_EQ(r.out, "submitted job-1 (fmnist-mlp)\n");
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(fake.last_submit().source_name(), TestDir() + "/caf\\xE9.yaml");

  const std::string bad = WriteFile("caf\xE9-bad.yaml", "bad: [\n");
  r = RunProcess({"--coordinator", fake.address(), "submit", bad});
  EXPECT_EQ(r.exit_code, kExitRefused) << r.err;
  EXPECT_EQ(r.err, "dapplectl: " + TestDir() +
                       "/caf\\xE9-bad.yaml:4:7: YAML syntax error: end of map not found\n");

  const std::string missing = ::testing::TempDir() + "/no-such-caf\xE9.yaml";
  r = RunProcess({"--coordinator", fake.address(), "submit", missing});
  EXPECT_EQ(r.exit_code, kExitRefused) << r.err;
  EXPECT_EQ(r.err, "dapplectl: cannot read job spec " + ::testing::TempDir() +
                       "/no-such-caf\\xE9.yaml: No such file or directory\n");
}

TEST(DapplectlBinaryTest, JobIdsThatAreNotUtf8AreSimplyUnknown) {
  FakeCoordinator fake;
  for (const char* command : {"get", "cancel", "watch"}) {
    const ProcessResult r = RunProcess({"--coordinator", fake.address(), command, "job-\xE9"});
    EXPECT_EQ(r.exit_code, kExitRefused) << command << ": " << r.err;
    EXPECT_EQ(r.err, "dapplectl: job job-\\xE9 not found\n") << command;
  }
}

TEST(DapplectlBinaryTest, InternalErrorsAreOneLineNamingTheCall) {
  FakeCoordinator fake;
  fake.FailGetJob(grpc::Status(grpc::StatusCode::INTERNAL, "Failed to parse request"));
  ProcessResult r = RunProcess({"--coordinator", fake.address(), "get", "job-1"});
  EXPECT_EQ(r.exit_code, kExitRefused) << r.err;
  EXPECT_EQ(r.err, "dapplectl: GetJob failed with INTERNAL: Failed to parse request\n");
  fake.FailGetJob(grpc::Status(grpc::StatusCode::UNKNOWN, "line one\nline two"));
  r = RunProcess({"--coordinator", fake.address(), "watch", "job-1"});
  EXPECT_EQ(r.exit_code, kExitRefused) << r.err;
  EXPECT_EQ(r.err, "dapplectl: GetJob failed with UNKNOWN: line one line two\n");
}

TEST(DapplectlBinaryTest, CoordinatorMustBeHostPort) {
  ProcessResult r = RunProcess({"--coordinator", "", "list"});
  EXPECT_EQ(r.exit_code, kExitUsage) << r.err;
  EXPECT_EQ(r.err,
            "dapplectl: --coordinator must be HOST:PORT (e.g. 127.0.0.1:7600), got \"\" "
            "(empty)\n");
  r = RunProcess({"--coordinator", "localhost:0", "list"});
  EXPECT_EQ(r.exit_code, kExitUsage) << r.err;
  EXPECT_EQ(r.err,
            "dapplectl: --coordinator must be HOST:PORT (e.g. 127.0.0.1:7600), got "
            "\"localhost:0\" (port 0 is not in 1..65535)\n");
  r = RunProcess({"list"}, {{"DAPPLE_COORDINATOR", "coordinator"}});
  EXPECT_EQ(r.exit_code, kExitUsage) << r.err;
  EXPECT_EQ(r.err,
            "dapplectl: DAPPLE_COORDINATOR must be HOST:PORT (e.g. 127.0.0.1:7600), got "
            "\"coordinator\" (no port)\n");
  r = RunProcess({"list"}, {{"DAPPLE_COORDINATOR", ""}});
  EXPECT_EQ(r.exit_code, kExitUsage) << r.err;
  EXPECT_THAT(r.err, StartsWith("dapplectl: DAPPLE_COORDINATOR must be HOST:PORT"));
}

TEST(DapplectlBinaryTest, TimeoutMustBeAPositiveNumberOfSeconds) {
  for (const char* bad : {"0", "-1", "abc", "nan", "inf"}) {
    const ProcessResult r = RunProcess({"--timeout", bad, "list"});
    EXPECT_EQ(r.exit_code, kExitUsage) << bad << ": " << r.err;
    EXPECT_EQ(r.err,
              std::string("dapplectl: --timeout must be a positive number of seconds, got \"") +
                  bad + "\"\n");
    EXPECT_EQ(r.out, "");
  }
}

TEST(DapplectlBinaryTest, HelpExitsWithZero) {
  const ProcessResult r = RunProcess({"--help"});
  EXPECT_EQ(r.exit_code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("Exit codes:"));
  EXPECT_EQ(r.err, "");
}

// ------------------------------------------- against the real coordinator, restarted under it

using ::dapple::testing::RunningProcess;

// Children of one test, killed and reaped at the end whatever happens.
class Children {
 public:
  ~Children() {
    for (RunningProcess& c : running_) {
      if (c.pid > 0) kill(c.pid, SIGKILL);
      ::dapple::testing::FinishProcess(c);
    }
  }
  RunningProcess Start(const std::string& binary, const std::vector<std::string>& args) {
    ::dapple::testing::ProcessOptions options;
    options.deadline = std::chrono::seconds(20);
    options.unset_env = {"DAPPLE_COORDINATOR"};
    running_.push_back(::dapple::testing::StartProcess(binary, args, options));
    return running_.back();
  }
  // Reaps `child` (after the caller signalled it, or once it exits by itself).
  ProcessResult Finish(const RunningProcess& child) {
    for (size_t i = 0; i < running_.size(); ++i) {
      if (running_[i].pid == child.pid) running_.erase(running_.begin() + i);
    }
    return ::dapple::testing::FinishProcess(child);
  }

 private:
  std::vector<RunningProcess> running_;
};

// The port a coordinator wrote to `port_file`, waiting up to 10 s; 0 if none came.
int AwaitPort(const std::string& port_file) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < give_up) {
    std::ifstream in(port_file);
    int port = 0;
    if (in >> port && port > 0) return port;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return 0;
}

// Reads from `fd` until a whole line has arrived (up to 10 s); what was read.
std::string AwaitLine(int fd) {
  std::string text;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (text.find('\n') == std::string::npos && std::chrono::steady_clock::now() < give_up) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  return text;
}

// The user's report: `dapplectl watch JOB --timeout 10`, the coordinator stopped (SIGTERM: it
// ends the stream; SIGKILL: the connection drops) and started again 0.5 s later on the same
// port and database. The watch must carry on with the new coordinator and end with the job's
// outcome, not "lost the watch on job-1: CANCELLED".
TEST(DapplectlBinaryTest, WatchCarriesOnAcrossACoordinatorRestart) {
  const std::string coordinator =
      ::dapple::testing::BuiltBinaryPath("coordinator/dapple-coordinator");
  if (access(coordinator.c_str(), X_OK) != 0) {
    GTEST_SKIP() << "dapple-coordinator is not built here (DAPPLE_FOLDERS without coordinator)";
  }
  const std::string dapplectl = ::dapple::testing::BuiltBinaryPath("dapplectl/dapplectl");
  std::string dir = ::testing::TempDir() + "/dapplectl-restart-XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  const std::string spec = dir + "/job.yaml";
  // A Fashion-MNIST folder as submit checks it (its four files; never read: no worker runs).
  const std::string fmnist = dir + "/data/fmnist";
  std::filesystem::create_directories(fmnist);
  for (const bool train : {true, false}) {
    for (const bool images : {true, false}) std::ofstream(FashionMnistFile(fmnist, train, images));
  }
  std::ofstream(spec) << "name: restarted\n"
                         "model: {input_shape: [784], layers: [{type: linear, out: 10}]}\n"
                         "data: {dataset: fashion-mnist, path: "
                      << fmnist
                      << "}\n"
                         "training: {global_batch: 4, micro_batch: 4, epochs: 1,\n"
                         "           optimizer: {type: sgd, lr: 0.1}}\n";
  Children children;
  int started = 0;
  // Starts a coordinator on 127.0.0.1:`port` (0: a free one) and returns it with its port.
  const auto start_coordinator = [&](int port, int* bound) {
    const std::string port_file = absl::StrCat(dir, "/port-", started++);
    RunningProcess child =
        children.Start(coordinator, {"--listen", absl::StrCat("127.0.0.1:", port), "--db",
                                     dir + "/jobs.db", "--port-file", port_file, "--log-level",
                                     "error", "--data-root", dir + "/data"});
    *bound = AwaitPort(port_file);
    return child;
  };
  int port = 0;
  RunningProcess current = start_coordinator(0, &port);
  ASSERT_GT(port, 0);
  const std::string address = absl::StrCat("127.0.0.1:", port);

  for (const int signal_number : {SIGTERM, SIGKILL}) {
    SCOPED_TRACE(signal_number == SIGTERM ? "SIGTERM" : "SIGKILL");
    // A job that stays PENDING (no workers), so only the restart can end its watch early.
    // The admin's token, written by the coordinator's first start next to its database.
    const ProcessResult submitted = RunProcess(
        {"--coordinator", address, "--token-file", dir + "/admin.token", "submit", spec});
    ASSERT_EQ(submitted.exit_code, kExitOk) << submitted.err;
    std::string job = std::string(absl::StripPrefix(submitted.out, "submitted "));
    job = job.substr(0, job.find(' '));

    RunningProcess watch =
        children.Start(dapplectl, {"--coordinator", address, "--token-file", dir + "/admin.token",
                                   "--timeout", "10", "watch", job});
    const std::string first = AwaitLine(watch.out);  // the watch has its first snapshot
    ASSERT_THAT(first, StartsWith(job + " PENDING"));
    // `logs --follow` rides out the restart too, ending when the job does.
    RunningProcess logs =
        children.Start(dapplectl, {"--coordinator", address, "--token-file", dir + "/admin.token",
                                   "--timeout", "10", "logs", job, "--follow"});

    ASSERT_EQ(kill(current.pid, signal_number), 0);
    children.Finish(current);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    int again = 0;
    current = start_coordinator(port, &again);
    ASSERT_EQ(again, port);

    const ProcessResult cancelled =
        RunProcess({"--coordinator", address, "--token-file", dir + "/admin.token", "cancel", job});
    ASSERT_EQ(cancelled.exit_code, kExitOk) << cancelled.err;
    const ProcessResult watched = children.Finish(watch);
    EXPECT_EQ(watched.exit_code, kExitJobCancelled) << watched.err;
    EXPECT_EQ(watched.err, "");
    EXPECT_THAT(first + watched.out, HasSubstr(job + " CANCELLED"));
    const ProcessResult followed = children.Finish(logs);
    EXPECT_EQ(followed.exit_code, kExitOk) << followed.err;
    EXPECT_EQ(followed.err, "");
  }
  kill(current.pid, SIGTERM);
  EXPECT_EQ(children.Finish(current).exit_code, 0);
  (void)!std::system(absl::StrCat("rm -rf '", dir, "'").c_str());
}

// ---------------------------------------------------------------------------------- plan

// The repository root: $DAPPLE_SOURCE_DIR (ctest sets it), else found from this file's path or
// by walking up from the test binary (build folders sit inside the repository).
std::string SourceDir() {
  namespace fs = std::filesystem;
  const auto has_profiles = [](const fs::path& dir) {
    std::error_code ec;
    return fs::exists(dir / "examples" / "profiles", ec);
  };
  if (const char* dir = std::getenv("DAPPLE_SOURCE_DIR"); dir != nullptr && *dir != '\0') {
    return dir;
  }
  const fs::path from_file = fs::path(__FILE__).parent_path().parent_path();
  if (from_file.is_absolute() && has_profiles(from_file)) return from_file.string();
  std::error_code ec;
  for (fs::path dir = fs::read_symlink("/proc/self/exe", ec).parent_path(); !ec && !dir.empty();
       dir = dir.parent_path()) {
    if (has_profiles(dir)) return dir.string();
    if (dir == dir.root_path()) break;
  }
  return from_file.string();
}

TEST(DapplectlBinaryTest, PlanOfABadProfileFileExitsWithOneNamingFileAndLine) {
  RefusingPort refusing;  // the file is read before any connection is made
  const std::string bad = WriteFile(
      "bad-pbs-2.txt",
      "node1 -- Linear -- forward_compute_time=1, backward_compute_time=2, activation_size=8, "
      "parameter_size=0\n"
      "node2 -- Linear -- forward_compute_time=-3, backward_compute_time=2, activation_size=8, "
      "parameter_size=0\n");
  ProcessResult r = RunProcess({"--coordinator", refusing.address(), "plan", "--profile", bad});
  EXPECT_EQ(r.exit_code, kExitRefused) << r.err;
  EXPECT_THAT(r.err, StartsWith("dapplectl: " + bad + ":2:"));
  EXPECT_THAT(r.err, HasSubstr("forward_compute_time"));
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_EQ(r.out, "");

  const std::string profile = SourceDir() + "/examples/profiles/dapple/bert-48-pbs-2.txt";
  r = RunProcess(
      {"--coordinator", refusing.address(), "--timeout", "2", "plan", "--profile", profile});
  EXPECT_EQ(r.exit_code, kExitUnreachable) << r.err;
  EXPECT_THAT(r.err, HasSubstr("(connection refused)"));
}

// `dapplectl plan` against the real coordinator: a published profile on a two-node cluster.
TEST(DapplectlBinaryTest, PlanAPublishedProfileWithTheRealCoordinator) {
  const std::string coordinator =
      ::dapple::testing::BuiltBinaryPath("coordinator/dapple-coordinator");
  if (access(coordinator.c_str(), X_OK) != 0) {
    GTEST_SKIP() << "dapple-coordinator is not built here (DAPPLE_FOLDERS without coordinator)";
  }
  std::string dir = ::testing::TempDir() + "/dapplectl-plan-XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  Children children;
  const std::string port_file = dir + "/port";
  children.Start(coordinator, {"--listen", "127.0.0.1:0", "--db", dir + "/jobs.db", "--port-file",
                               port_file, "--log-level", "error"});
  const int port = AwaitPort(port_file);
  ASSERT_GT(port, 0);
  const std::string address = absl::StrCat("127.0.0.1:", port);
  const std::string profile = SourceDir() + "/examples/profiles/dapple/bert-48-pbs-2.txt";
  const std::string cluster = WriteFile("two-nodes.yaml",
                                        "nodes: 2\n"
                                        "devices_per_node: 8\n"
                                        "device_memory: 16 GiB\n"
                                        "intra_node: {bandwidth: 130 GB/s, latency: 5 us}\n"
                                        "inter_node: {bandwidth: 25 Gbit/s, latency: 10 us}\n");

  ProcessResult r = RunProcess({"--coordinator", address, "--token-file", dir + "/admin.token",
                                "plan", "--profile", profile, "--cluster", cluster, "-o", "json"});
  ASSERT_EQ(r.exit_code, kExitOk) << r.err;
  for (const char* key :
       {"\"planner\": \"dapple\"", "\"stages\": [",
        "\"first_layer\": ", "\"last_layer\": ", "\"replicas\": ", "\"devices\": [",
        "\"micro_batches\": ", "\"predicted_step_ms\": ", "\"peak_memory_bytes\": "}) {
    EXPECT_THAT(r.out, HasSubstr(key)) << r.out;
  }

  r = RunProcess({"--coordinator", address, "--token-file", dir + "/admin.token", "plan",
                  "--profile", profile, "--cluster", cluster, "--planner", "pipedream"});
  ASSERT_EQ(r.exit_code, kExitOk) << r.err;
  EXPECT_THAT(r.out, StartsWith("STAGE   LAYERS   REPLICAS   DEVICES"));
  EXPECT_THAT(r.out, HasSubstr("\nSAMPLES/S "));
  EXPECT_THAT(r.out, HasSubstr("\nPLANNER       pipedream"));
  EXPECT_THAT(r.out, HasSubstr("\nCLUSTER       "));
  EXPECT_THAT(r.out, HasSubstr("two-nodes.yaml"));

  // Without --cluster the coordinator plans on its workers, and it has none.
  r = RunProcess({"--coordinator", address, "--token-file", dir + "/admin.token", "plan",
                  "--profile", profile});
  EXPECT_EQ(r.exit_code, kExitRefused) << r.err;
  EXPECT_EQ(r.err,
            "dapplectl: no registered workers to plan on: start workers, or give a cluster file "
            "(dapplectl plan --cluster CLUSTER.yaml)\n");

  // An empty or comment-only JOB is the empty spec it is, as submit says, also with --profile.
  for (const auto& [name, text] : {std::pair<std::string, std::string>{"empty.yaml", ""},
                                   {"comments.yaml", "# nothing yet\n\n"}}) {
    const std::string path = WriteFile(name, text);
    const std::string expected =
        absl::StrCat("dapplectl: ", path,
                     ": the job spec is empty; expected a map with name, model, data, training and "
                     "parallel\n");
    for (const std::vector<std::string>& args : {std::vector<std::string>{"plan", path},
                                                 {"plan", path, "--profile", profile},
                                                 {"submit", path}}) {
      std::vector<std::string> full = {"--coordinator", address, "--token-file",
                                       dir + "/admin.token"};
      full.insert(full.end(), args.begin(), args.end());
      r = RunProcess(full);
      EXPECT_EQ(r.exit_code, kExitRefused) << name << " " << args[0] << ": " << r.err;
      EXPECT_EQ(r.err, expected) << name << " " << args[0];
    }
  }
  (void)!std::system(absl::StrCat("rm -rf '", dir, "'").c_str());
}

}  // namespace
}  // namespace dapple::ctl
