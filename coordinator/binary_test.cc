// Runs the built dapple-coordinator, as an operator would: exit codes and stderr lines for
// flag errors, a port that is taken, and a database another coordinator holds.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr auto kDeadline = std::chrono::seconds(20);

// $DAPPLE_BUILD_DIR/coordinator/dapple-coordinator (set by ctest), else next to this binary.
std::string CoordinatorPath() {
  if (const char* dir = std::getenv("DAPPLE_BUILD_DIR"); dir != nullptr && *dir != '\0') {
    const std::string path = std::string(dir) + "/coordinator/dapple-coordinator";
    if (access(path.c_str(), X_OK) == 0) return path;
  }
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return "./dapple-coordinator";
  const std::string exe(self, static_cast<size_t>(n));
  return exe.substr(0, exe.rfind('/')) + "/dapple-coordinator";
}

struct Child {
  pid_t pid = -1;
  int out = -1;  // read ends
  int err = -1;
};

// Starts dapple-coordinator with `args` in directory `cwd`.
Child Spawn(const std::vector<std::string>& args, const std::string& cwd) {
  Child child;
  const std::string path = CoordinatorPath();
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) return child;
  child.pid = fork();
  if (child.pid == 0) {
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    if (chdir(cwd.c_str()) != 0) _exit(126);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(path.c_str()));
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(path.c_str(), argv.data());
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  child.out = out_pipe[0];
  child.err = err_pipe[0];
  return child;
}

struct Result {
  int exit_code = -1;  // -1: killed at the deadline
  std::string out;
  std::string err;
};

// Reads the child's output until it exits; SIGKILLs it at the deadline.
Result Finish(Child child) {
  Result result;
  const auto start = std::chrono::steady_clock::now();
  pollfd fds[2] = {{child.out, POLLIN, 0}, {child.err, POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_fds = 2;
  while (open_fds > 0) {
    const auto left = kDeadline - (std::chrono::steady_clock::now() - start);
    if (left <= std::chrono::milliseconds(0)) {
      kill(child.pid, SIGKILL);
      break;
    }
    const int ms =
        static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(left).count());
    if (poll(fds, 2, ms) < 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP)) == 0) continue;
      char buf[4096];
      const ssize_t n = read(fds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        sinks[i]->append(buf, static_cast<size_t>(n));
      } else {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (const pollfd& f : fds) {
    if (f.fd >= 0) close(f.fd);
  }
  int status = 0;
  waitpid(child.pid, &status, 0);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

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
      kill(c.pid, SIGKILL);
      Finish(c);
    }
    (void)!std::system(absl::StrCat("rm -rf '", dir_, "'").c_str());
  }

  // Starts a coordinator on 127.0.0.1:0 with database `db` and waits for its port.
  int StartCoordinator(const std::string& db, Child* child) {
    const std::string port_file = absl::StrCat(dir_, "/port-", started_++);
    *child = Spawn(
        {"--listen", "127.0.0.1:0", "--db", db, "--port-file", port_file, "--log-level", "error"},
        dir_);
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
    kill(child.pid, SIGTERM);
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
      {{"--db", ""}, "--db must name a file"},
      {{"--log-level", "loud"}, "--log-level must be one of"},
      {{"--no-such-flag"}, "no-such-flag"},
      {{"--worker-timeout-ms"}, "--worker-timeout-ms"},
      {{"stray"}, "stray"},
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

}  // namespace
}  // namespace dapple::coordinator
