// dapple-worker: one stage replica's daemon. Registers with the coordinator, heartbeats, and runs
// the stage assignments it receives. Exits 0 on SIGINT/SIGTERM.
#include <csignal>
#include <iostream>
#include <thread>

#include "CLI/CLI.hpp"
#include "common/logging.h"
#include "kernels/cpu/blas.h"
#include "worker/daemon/worker_daemon.h"

int main(int argc, char** argv) {
  CLI::App app{"dapple-worker: runs pipeline stages for a dapple-coordinator"};
  dapple::worker::WorkerOptions opts;
  if (const char* env = std::getenv("DAPPLE_COORDINATOR")) opts.coordinator = env;
  std::string log_level = "info";
  int transport_timeout_s = 120;
  app.add_option("--coordinator", opts.coordinator,
                 "coordinator address host:port (env DAPPLE_COORDINATOR)")
      ->capture_default_str();
  app.add_option("--name", opts.name, "stable worker name (default: assigned by the coordinator)");
  app.add_option("--devices", opts.devices, "devices this worker offers (this build: cpu)")
      ->capture_default_str();
  app.add_option("--dump-dir", opts.dump_dir,
                 "write <job>.stage<s>.params here after each successful job");
  app.add_option("--transport-timeout-s", transport_timeout_s,
                 "longest wait for one activation or gradient message")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  for (const std::string& d : opts.devices) {
    if (d != "cpu") {
      std::cerr << "dapple-worker: device '" << d
                << "' is not available in this build (CPU only); use --devices cpu\n";
      return 2;
    }
  }
  opts.transport_timeout = absl::Seconds(transport_timeout_s);
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
