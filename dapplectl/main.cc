// dapplectl: the command-line client of dapple-coordinator. See docs/dapplectl.md.
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include "absl/strings/str_cat.h"
#include "dapplectl/client.h"
#include "dapplectl/commands.h"
#include "dapplectl/exit_codes.h"

int main(int argc, char** argv) {
  dapple::ctl::QuietGrpcLogging();
  dapple::ctl::QuietProtobufLogging();
  dapple::ctl::Environment env;
  env.out = &std::cout;
  env.err = &std::cerr;
  env.stdout_is_terminal = isatty(STDOUT_FILENO) == 1;
  if (env.stdout_is_terminal) {
    winsize ws{};
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0) env.terminal_columns = ws.ws_col;
  }
  const int code = dapple::ctl::RunDapplectl(argc, argv, env);
  // Output lost to a full disk or a closed stdout is an error, not a success: a script that
  // saved `dapplectl admin token issue` to a full disk was told 0 and lost a token shown once.
  errno = 0;
  std::cout.flush();
  if (std::fflush(stdout) != 0 || std::ferror(stdout) != 0 || !std::cout) {
    const int error = errno;
    std::cerr << "dapplectl: cannot write the output to stdout"
              << (error != 0 ? absl::StrCat(" (", std::strerror(error), ")") : std::string())
              << ": it is lost" << std::endl;
    return code == dapple::ctl::kExitOk ? dapple::ctl::kExitRefused : code;
  }
  return code;
}
