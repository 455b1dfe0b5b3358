// Runs the built dapplectl executable, as a user would: exit codes and stderr lines.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "dapplectl/exit_codes.h"
#include "dapplectl/fake_coordinator_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::ctl {
namespace {

using ::dapple::ctl::testing::RefusingPort;
using ::testing::HasSubstr;

struct ProcessResult {
  int exit_code = -1;  // -1: killed at the deadline or did not start
  std::string out;
  std::string err;
  double seconds = 0;
};

// The dapplectl binary: $DAPPLE_BUILD_DIR/dapplectl/dapplectl (set by ctest), else next to
// this test binary.
std::string DapplectlPath() {
  if (const char* dir = std::getenv("DAPPLE_BUILD_DIR"); dir != nullptr && *dir != '\0') {
    const std::string path = std::string(dir) + "/dapplectl/dapplectl";
    if (access(path.c_str(), X_OK) == 0) return path;
  }
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return "./dapplectl";
  std::string dir(self, static_cast<size_t>(n));
  return dir.substr(0, dir.rfind('/')) + "/dapplectl";
}

// Runs `path args...` with `env_extra` added to the environment and DAPPLE_COORDINATOR
// removed; kills it after `deadline`.
ProcessResult RunProcess(const std::vector<std::string>& args,
                         std::chrono::milliseconds deadline = std::chrono::seconds(20)) {
  ProcessResult result;
  const std::string path = DapplectlPath();
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) return result;
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    unsetenv("DAPPLE_COORDINATOR");
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(path.c_str()));
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(path.c_str(), argv.data());
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_fds = 2;
  bool killed = false;
  while (open_fds > 0) {
    const auto left = deadline - (std::chrono::steady_clock::now() - start);
    if (left <= std::chrono::milliseconds(0)) {
      kill(pid, SIGKILL);
      killed = true;
      break;
    }
    if (poll(fds, 2,
             static_cast<int>(
                 std::chrono::duration_cast<std::chrono::milliseconds>(left).count())) < 0) {
      break;
    }
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
  waitpid(pid, &status, 0);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!killed && WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  return result;
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

TEST(DapplectlBinaryTest, SubmitOfAMissingFileExitsWithOneNamingIt) {
  RefusingPort refusing;  // the file is read before any connection is made
  const std::string missing = ::testing::TempDir() + "/no-such-job.yaml";
  const ProcessResult r = RunProcess({"--coordinator", refusing.address(), "submit", missing});
  EXPECT_EQ(r.exit_code, kExitRefused) << r.err;
  EXPECT_EQ(r.err, "dapplectl: cannot read job spec " + missing + ": No such file or directory\n");
}

TEST(DapplectlBinaryTest, HelpExitsWithZero) {
  const ProcessResult r = RunProcess({"--help"});
  EXPECT_EQ(r.exit_code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("Exit codes:"));
  EXPECT_EQ(r.err, "");
}

}  // namespace
}  // namespace dapple::ctl
