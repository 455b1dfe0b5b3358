// Runs the built dapple-worker as an operator would: exit codes and the one stderr line for bad
// flags and stray arguments, --help, and a SIGTERM while no coordinator answers.
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_split.h"
#include "common/testing/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::worker {
namespace {

using ::testing::HasSubstr;
using Result = ::dapple::testing::ProcessResult;

constexpr auto kDeadline = std::chrono::seconds(20);

::dapple::testing::ProcessOptions Options() {
  ::dapple::testing::ProcessOptions o;
  o.deadline = kDeadline;
  o.unset_env = {"DAPPLE_COORDINATOR"};
  return o;
}

// Options() with a join token in DAPPLE_JOIN_TOKEN (a worker refuses to start without one).
::dapple::testing::ProcessOptions WithJoinToken() {
  ::dapple::testing::ProcessOptions o = Options();
  o.set_env = {{"DAPPLE_JOIN_TOKEN", "dpl_" + std::string(16, '0') + "_" + std::string(64, '0')}};
  return o;
}

Result RunWorker(const std::vector<std::string>& args) {
  return ::dapple::testing::RunProcess(::dapple::testing::BuiltBinaryPath("worker/dapple-worker"),
                                       args, Options());
}

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipWhitespace());
}

// `args` must exit 2 with exactly one stderr line, "dapple-worker: " + `message`.
void ExpectUsageError(const std::vector<std::string>& args, const std::string& message) {
  const Result r = RunWorker(args);
  std::string joined;
  for (const std::string& a : args) joined += "[" + a + "]";
  EXPECT_EQ(r.exit_code, 2) << joined << "\n" << r.err;
  EXPECT_THAT(Lines(r.err), ::testing::ElementsAre("dapple-worker: " + message)) << joined;
}

TEST(WorkerBinaryTest, DevicesEdgeCases) {
  const std::string rule =
      "' has an empty entry: list devices separated by commas, e.g. cpu or cuda:0,cuda:1";
  ExpectUsageError({"--devices", ","}, "--devices '," + rule);
  ExpectUsageError({"--devices", "cpu,"}, "--devices 'cpu," + rule);
  ExpectUsageError({"--devices", ",cpu"}, "--devices ',cpu" + rule);
  ExpectUsageError({"--devices"}, "--devices needs a value (see --help)");
  ExpectUsageError({"--devices", "cpu", "extra"},
                   "unexpected argument 'extra': dapple-worker takes flags only (see --help)");
}

TEST(WorkerBinaryTest, EmptyNameIsRefused) {
  ExpectUsageError({"--name", ""},
                   "--name '' must be 1-63 characters of a-z 0-9 - _ ., starting with a letter or "
                   "digit (leave --name out to get "
                   "an id assigned by the coordinator)");
}

TEST(WorkerBinaryTest, UnknownFlag) {
  ExpectUsageError({"--bogus"}, "unknown flag '--bogus' (see --help)");
}

TEST(WorkerBinaryTest, NoJoinTokenIsRefused) {
  ::dapple::testing::ProcessOptions o = Options();
  o.unset_env.push_back("DAPPLE_JOIN_TOKEN");
  const Result r = ::dapple::testing::RunProcess(
      ::dapple::testing::BuiltBinaryPath("worker/dapple-worker"), {"--devices", "cpu"}, o);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("no join token: give --join-token-file FILE"));
  ExpectUsageError({"--join-token-file", "/no/such/join.token"},
                   "--join-token-file: cannot read token file '/no/such/join.token': No such "
                   "file or directory");
}

TEST(WorkerBinaryTest, Help) {
  const Result r = RunWorker({"--help"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("--devices"));
  EXPECT_THAT(r.out, HasSubstr("--coordinator"));
}

TEST(WorkerBinaryTest, SigtermWithoutCoordinatorExitsPromptly) {
  // Port 1: nothing listens there, so every registration attempt is refused.
  ::dapple::testing::RunningProcess child = ::dapple::testing::StartProcess(
      ::dapple::testing::BuiltBinaryPath("worker/dapple-worker"),
      {"--coordinator", "127.0.0.1:1", "--devices", "cpu", "--log-level", "info"}, WithJoinToken());
  ASSERT_GT(child.pid, 0);
  // Signal only once the worker runs its registration loop; read its stderr until then.
  std::string early;
  const auto start = std::chrono::steady_clock::now();
  while (early.find("cannot register with the coordinator at 127.0.0.1:1") == std::string::npos &&
         std::chrono::steady_clock::now() - start < kDeadline) {
    pollfd pfd{child.err, POLLIN, 0};
    if (poll(&pfd, 1, 100) <= 0) continue;
    char buf[4096];
    const ssize_t n = read(child.err, buf, sizeof(buf));
    if (n <= 0) break;
    early.append(buf, static_cast<size_t>(n));
  }
  ASSERT_THAT(early, HasSubstr("cannot register with the coordinator at 127.0.0.1:1"));
  const auto signalled = std::chrono::steady_clock::now();
  kill(child.pid, SIGTERM);
  const Result r = ::dapple::testing::FinishProcess(child);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - signalled).count();
  EXPECT_EQ(r.exit_code, 0) << early << r.err;
  // Never registered, so there is nothing to deregister and no job to wait for.
  EXPECT_LT(seconds, 2.0) << early << r.err;
  EXPECT_THAT(r.err, HasSubstr("stopped"));
}

}  // namespace
}  // namespace dapple::worker
