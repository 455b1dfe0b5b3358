// Runs a built executable from a test, as a user would: argv, environment and working
// directory in; exit code, stdout and stderr out, with a deadline so a hang fails the test
// instead of stalling it. Test-only (POSIX fork/exec); not for production code.
#ifndef DAPPLE_COMMON_TESTING_SUBPROCESS_H_
#define DAPPLE_COMMON_TESTING_SUBPROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace dapple::testing {

struct ProcessOptions {
  // How long FinishProcess / RunProcess wait for the child to exit and close its stdout and
  // stderr, in ms, counted from when FinishProcess is called; then the child is SIGKILLed.
  std::chrono::milliseconds deadline = std::chrono::seconds(20);
  // Working directory of the child; empty: this process's.
  std::string cwd;
  // Environment of the child: this process's, minus the names in `unset_env` and the names
  // in `set_env`, plus `set_env` (NAME, value) in order (a later pair wins).
  std::vector<std::string> unset_env;
  std::vector<std::pair<std::string, std::string>> set_env;
};

struct ProcessResult {
  // The child's exit status (0..255) when it exited by itself before the deadline; -1 when
  // it was killed at the deadline, ended by a signal (including one the test sent), or could
  // not be started (pipe/fork failed). 126: `cwd` could not be entered; 127: exec failed.
  int exit_code = -1;
  std::string out;     // everything the child wrote to stdout, bytes as written
  std::string err;     // everything the child wrote to stderr, bytes as written
  double seconds = 0;  // wall time from StartProcess to the child being reaped
};

// A started child. Plain value: copies share the pid and pipe fds; pass exactly one copy to
// FinishProcess, which closes the fds and reaps the child.
struct RunningProcess {
  pid_t pid = -1;  // -1: not started
  int out = -1;    // read end of the child's stdout
  int err = -1;    // read end of the child's stderr
  std::chrono::steady_clock::time_point start;
  std::chrono::milliseconds deadline{0};
};

// Starts `path` with argv[0] = `path` and argv[1..] = `args`, its stdout and stderr on pipes.
// Returns at once; pid is -1 when a pipe or fork failed. Thread-compatible: everything the
// child needs is prepared before fork, so it is safe in a process with other threads.
RunningProcess StartProcess(const std::string& path, const std::vector<std::string>& args,
                            const ProcessOptions& options = {});

// Blocks, reading the child's stdout and stderr, until both are closed (normally: the child
// exited) or the deadline passes, when it SIGKILLs the child; then reaps it. The caller may
// signal the child (kill(pid, SIGTERM)) before calling this. Closes `child`'s fds.
ProcessResult FinishProcess(const RunningProcess& child);

// StartProcess then FinishProcess: blocks until the child is done or killed at the deadline.
ProcessResult RunProcess(const std::string& path, const std::vector<std::string>& args,
                         const ProcessOptions& options = {});

// The built executable `relative_path` (for example "dapplectl/dapplectl"):
// $DAPPLE_BUILD_DIR/`relative_path` when DAPPLE_BUILD_DIR is set (ctest sets it) and that file
// is executable; else the file of the same base name in this test binary's directory.
std::string BuiltBinaryPath(const std::string& relative_path);

}  // namespace dapple::testing

#endif  // DAPPLE_COMMON_TESTING_SUBPROCESS_H_
