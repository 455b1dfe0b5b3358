// dapple-worker: one stage replica's daemon. Registers with the coordinator, heartbeats, and runs
// the stage assignments it receives. SIGINT/SIGTERM: aborts a running job, deregisters, exits 0.
// Exit codes: 0 after a signal, 2 for a bad flag (one line on stderr), 1 otherwise.
#include <csignal>
#include <iostream>
#include <thread>

#include "CLI/CLI.hpp"
#include "common/logging.h"
#include "kernels/cpu/blas.h"
#include "worker/daemon/worker_daemon.h"
#include "worker/daemon/worker_options.h"

namespace {

int UsageError(const std::string& message) {
  std::cerr << "dapple-worker: " << message << "\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dapple-worker: runs pipeline stages for a dapple-coordinator"};
  dapple::worker::WorkerOptions opts;
  if (const char* env = std::getenv("DAPPLE_COORDINATOR")) opts.coordinator = env;
  std::string log_level = "info";
  // Seconds as plain integers: range checks with our own messages happen below.
  int64_t transport_timeout_s = 120, rendezvous_timeout_s = 60;
  app.add_option("--coordinator", opts.coordinator,
                 "coordinator address HOST:PORT (env DAPPLE_COORDINATOR)")
      ->capture_default_str();
  app.add_option("--name", opts.name,
                 "stable worker name, 1-63 of a-z 0-9 - _ . (default: assigned by the coordinator)");
  app.add_option("--devices", opts.devices, "devices this worker offers (this build: cpu)")
      ->capture_default_str();
  app.add_option("--dump-dir", opts.dump_dir,
                 "write <job>.stage<s>.params here after each successful job (must exist)");
  app.add_option("--transport-timeout-s", transport_timeout_s,
                 "longest wait for one activation or gradient message, 1..86400")
      ->capture_default_str();
  app.add_option("--rendezvous-timeout-s", rendezvous_timeout_s,
                 "longest wait for the other stages' addresses, 1..86400")
      ->capture_default_str();
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return UsageError(e.what());
  }
  opts.transport_timeout = absl::Seconds(transport_timeout_s);
  opts.rendezvous_timeout = absl::Seconds(rendezvous_timeout_s);
  if (absl::Status s = dapple::worker::ValidateLogLevel(log_level); !s.ok()) {
    return UsageError(std::string(s.message()));
  }
  if (absl::Status s = dapple::worker::ValidateWorkerOptions(opts); !s.ok()) {
    return UsageError(std::string(s.message()));
  }
  dapple::InitLogging("worker", log_level);
  // This machine class gives about one core per process: one compute thread, no spinning pool.
  dapple::kernels::SetComputeThreads(1);

  // Signals are turned into Stop() by a dedicated thread, never inside a handler.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  dapple::worker::WorkerDaemon daemon(opts);
  std::thread signals([&] {
    int sig = 0;
    sigwait(&set, &sig);
    DAPPLE_LOG_INFO("signal {}: stopping", sig);
    daemon.Stop();
  });
  signals.detach();
  absl::Status s = daemon.Run();
  if (!s.ok()) {
    std::cerr << "dapple-worker: " << s.message() << "\n";
    return 1;
  }
  return 0;
}
