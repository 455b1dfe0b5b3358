// The dapplectl program: parses the command line (CLI11) and runs one command against the
// coordinator. main.cc only fills in the process's environment; tests call RunDapplectl with
// string streams.
#ifndef DAPPLE_DAPPLECTL_COMMANDS_H_
#define DAPPLE_DAPPLECTL_COMMANDS_H_

#include <functional>
#include <ostream>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace dapple::ctl {

struct Environment {
  std::ostream* out = nullptr;  // results, progress, summaries
  std::ostream* err = nullptr;  // errors: one line each, starting "dapplectl: "
  bool stdout_is_terminal = false;
  int terminal_columns = 0;  // 0 = unknown
  std::function<absl::Time()> now = [] { return absl::Now(); };
};

// Runs `dapplectl argv[1..]` and returns the process exit code (exit_codes.h). Global flags:
// --coordinator ADDR (default: $DAPPLE_COORDINATOR, else 127.0.0.1:7600), -o/--output
// table|json|yaml, --timeout SECONDS (unary calls, default 10). Commands: submit, get, list,
// describe, logs, cancel, watch, workers, plan, trace, top, checkpoint, config, admin ... and
// auth whoami (admin_command.h) (see docs/dapplectl.md).
// --help prints to env.out and returns 0.
int RunDapplectl(int argc, const char* const* argv, const Environment& env);

}  // namespace dapple::ctl

#endif  // DAPPLE_DAPPLECTL_COMMANDS_H_
