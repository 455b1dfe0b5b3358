// dapple-worker: one stage replica's daemon. Registers with the coordinator, heartbeats, and runs
// the stage assignments it receives. SIGINT/SIGTERM: aborts a running job, deregisters, exits 0.
// Exit codes: 0 after a signal, 2 for a bad flag (one line on stderr), 1 otherwise (also one
// line on stderr, e.g. --devices cuda:0 on a machine without a usable GPU).
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <iostream>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "kernels/cpu/blas.h"
#include "worker/daemon/worker_daemon.h"
#include "worker/daemon/worker_options.h"
#include "worker/device/device.h"

namespace {

int g_signal_pipe[2] = {-1, -1};

void OnSignal(int sig) {
  const char c = static_cast<char>(sig);
  (void)!write(g_signal_pipe[1], &c, 1);  // async-signal-safe
}

int UsageError(const std::string& message) {
  std::cerr << "dapple-worker: " << message << "\n";
  return 2;
}

// Turns --devices (or, without it, every CUDA device found, else cpu) into the devices this
// machine can offer. Asks the CUDA runtime, so it runs after the flags are known to be valid.
absl::Status ResolveDevices(bool devices_given, bool cpu_fallback,
                            dapple::worker::WorkerOptions* opts) {
  const dapple::worker::CudaProbe& probe = dapple::worker::ProbeCuda();
  if (!devices_given) {
    opts->devices = dapple::worker::DefaultDevices();
    if (probe.count == 0) DAPPLE_LOG_INFO("no usable GPU, offering cpu: {}", probe.reason);
  }
  std::string warning;
  absl::StatusOr<std::vector<std::string>> devices =
      dapple::worker::ResolveDevices(opts->devices, cpu_fallback, &warning);
  if (!devices.ok()) return devices.status();
  if (!warning.empty()) DAPPLE_LOG_WARN("{}", warning);
  opts->devices = *std::move(devices);
  std::vector<std::string> described;
  for (const std::string& d : opts->devices) {
    absl::StatusOr<dapple::worker::DeviceId> id = dapple::worker::ParseDevice(d);
    described.push_back(id.ok() && id->is_cuda() && id->index < probe.count
                            ? d + " = " + probe.names[id->index]
                            : d);
  }
  DAPPLE_LOG_INFO("offering {}", absl::StrJoin(described, ", "));
  return absl::OkStatus();
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
  app.add_option(
      "--name", opts.name,
      "stable worker name, 1-63 of a-z 0-9 - _ . (default: assigned by the coordinator)");
  app.add_option("--devices", opts.devices,
                 "devices this worker offers: cpu, cuda:N (repeat or separate with commas; "
                 "default: every CUDA device found, else cpu)")
      ->delimiter(',');
  bool cpu_fallback = false;
  app.add_flag("--cpu-fallback", cpu_fallback,
               "offer cpu instead of CUDA devices that cannot be used");
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
  if (absl::Status s = ResolveDevices(app.count("--devices") > 0, cpu_fallback, &opts); !s.ok()) {
    std::cerr << "dapple-worker: " << s.message() << "\n";
    return 1;
  }
  // This machine class gives about one core per process: one compute thread, no spinning pool.
  dapple::kernels::SetComputeThreads(1);

  // A signal may land on any thread (OpenBLAS starts its own before main), so the handler only
  // writes to a pipe; a dedicated thread turns that into Stop().
  if (pipe(g_signal_pipe) != 0) return 1;
  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  dapple::worker::WorkerDaemon daemon(opts);
  std::thread signals([&] {
    char sig = 0;
    while (read(g_signal_pipe[0], &sig, 1) < 0 && errno == EINTR) {
    }
    DAPPLE_LOG_INFO("signal {}: stopping", static_cast<int>(sig));
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
