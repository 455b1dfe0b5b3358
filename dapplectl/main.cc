// dapplectl: the command-line client of dapple-coordinator. See docs/dapplectl.md.
#include <sys/ioctl.h>
#include <unistd.h>

#include <iostream>

#include "dapplectl/client.h"
#include "dapplectl/commands.h"

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
  return dapple::ctl::RunDapplectl(argc, argv, env);
}
