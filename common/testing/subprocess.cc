#include "common/testing/subprocess.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

extern char** environ;

namespace dapple::testing {
namespace {

std::string EnvName(const char* entry) {
  const char* eq = std::strchr(entry, '=');
  return eq == nullptr ? std::string(entry) : std::string(entry, eq - entry);
}

// Built in the parent: after fork in a threaded test only async-signal-safe calls are allowed.
std::vector<std::string> ChildEnvironment(const ProcessOptions& options) {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string name = EnvName(*e);
    const bool dropped = std::find(options.unset_env.begin(), options.unset_env.end(), name) !=
                             options.unset_env.end() ||
                         std::any_of(options.set_env.begin(), options.set_env.end(),
                                     [&](const auto& kv) { return kv.first == name; });
    if (!dropped) env.emplace_back(*e);
  }
  for (const auto& [name, value] : options.set_env) {
    std::erase_if(env, [&](const std::string& e) { return EnvName(e.c_str()) == name; });
    env.push_back(name + "=" + value);
  }
  return env;
}

std::vector<char*> CStrings(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (const std::string& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

}  // namespace

RunningProcess StartProcess(const std::string& path, const std::vector<std::string>& args,
                            const ProcessOptions& options) {
  RunningProcess child;
  child.deadline = options.deadline;
  std::vector<std::string> argv_strings = {path};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  const std::vector<std::string> env_strings = ChildEnvironment(options);
  std::vector<char*> argv = CStrings(argv_strings);
  std::vector<char*> envp = CStrings(env_strings);

  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return child;
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    close(out_pipe[0]);
    close(out_pipe[1]);
    return child;
  }
  child.start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    if (!options.cwd.empty() && chdir(options.cwd.c_str()) != 0) _exit(126);
    execve(path.c_str(), argv.data(), envp.data());
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (pid < 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    return child;
  }
  child.pid = pid;
  child.out = out_pipe[0];
  child.err = err_pipe[0];
  return child;
}

ProcessResult FinishProcess(const RunningProcess& child) {
  ProcessResult result;
  if (child.pid <= 0) return result;  // never kill(-1, ...) or wait for a child we lack
  const auto start = std::chrono::steady_clock::now();
  pollfd fds[2] = {{child.out, POLLIN, 0}, {child.err, POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_fds = 2;
  bool killed = false;
  while (open_fds > 0) {
    const auto left = child.deadline - (std::chrono::steady_clock::now() - start);
    if (left <= std::chrono::milliseconds(0)) {
      kill(child.pid, SIGKILL);
      killed = true;
      break;
    }
    const int ms =
        static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(left).count());
    if (poll(fds, 2, ms) < 0) {
      if (errno == EINTR) continue;
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
  while (waitpid(child.pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - child.start).count();
  if (!killed && WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  return result;
}

ProcessResult RunProcess(const std::string& path, const std::vector<std::string>& args,
                         const ProcessOptions& options) {
  return FinishProcess(StartProcess(path, args, options));
}

std::string BuiltBinaryPath(const std::string& relative_path) {
  if (const char* dir = std::getenv("DAPPLE_BUILD_DIR"); dir != nullptr && *dir != '\0') {
    const std::string path = std::string(dir) + "/" + relative_path;
    if (access(path.c_str(), X_OK) == 0) return path;
  }
  const std::string base = relative_path.substr(relative_path.rfind('/') + 1);
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return "./" + base;
  const std::string exe(self, static_cast<size_t>(n));
  return exe.substr(0, exe.rfind('/')) + "/" + base;
}

}  // namespace dapple::testing
