// dapple-worker: one stage replica's daemon. Registers with the coordinator, heartbeats, and runs
// the stage assignments it receives. SIGINT/SIGTERM: deregisters (the coordinator fails a running
// job as "shut down"), aborts that job and exits 0.
// Exit codes: 0 after a signal (or --help), 2 for a bad flag or a stray argument (one line on
// stderr, worker_flags.h), 1 otherwise (also one line on stderr, e.g. --devices cuda:0 on a
// machine without a usable GPU).
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/metrics/metrics_endpoint.h"
#include "kernels/cpu/blas.h"
#include "worker/daemon/device_memory.h"
#include "worker/daemon/worker_daemon.h"
#include "worker/daemon/worker_flags.h"
#include "worker/daemon/worker_metrics.h"
#include "worker/device/device.h"
#include "worker/runtime/allocator_tuning.h"

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
  // Checkpoint shards (a tenant's weights) and every other file the worker writes are its
  // owner's alone; the coordinator runs as the same user (the Helm chart: uid 10001) and reads
  // them (docs/security.md).
  ::umask(077);
  dapple::worker::TuneAllocatorForTraining();
  // A signal may land on any thread (OpenBLAS starts its own before main), so the handler only
  // writes to a pipe; a dedicated thread turns that into Stop(). Installed first, so that a
  // SIGTERM during start-up (probing CUDA takes a while) still ends in an orderly exit 0.
  if (pipe(g_signal_pipe) != 0) return 1;
  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  absl::StatusOr<dapple::worker::WorkerFlags> flags = dapple::worker::ParseWorkerFlags(
      std::vector<std::string>(argv + 1, argv + argc), std::getenv("DAPPLE_COORDINATOR"),
      std::getenv("DAPPLE_CA"), std::getenv("DAPPLE_JOIN_TOKEN"));
  if (!flags.ok()) return UsageError(std::string(flags.status().message()));
  if (flags->help) {
    std::cout << flags->help_text;
    return 0;
  }
  if (flags->options.join_token.empty()) {
    return UsageError(
        "no join token: give --join-token-file FILE (the coordinator writes join.token next to "
        "its database at its first start) or set DAPPLE_JOIN_TOKEN");
  }
  dapple::worker::WorkerOptions opts = flags->options;
  const std::string log_level = flags->log_level;
  const bool cpu_fallback = flags->cpu_fallback;
  dapple::InitLogging("worker", log_level);
  if (absl::Status s = ResolveDevices(flags->devices_given, cpu_fallback, &opts); !s.ok()) {
    std::cerr << "dapple-worker: " << s.message() << "\n";
    return 1;
  }
  if (!opts.devices.empty()) {
    const std::string memory_warning =
        dapple::worker::DeviceMemoryWarning(opts.devices.front(), opts.device_memory_bytes);
    if (!memory_warning.empty()) DAPPLE_LOG_WARN("{}", memory_warning);
  }
  if (!opts.collective_host.empty()) {
    if (absl::Status s = dapple::worker::CheckCollectiveHost(opts.collective_host); !s.ok()) {
      return UsageError(std::string(s.message()));
    }
  }
  // This machine class gives about one core per process: one compute thread, no spinning pool.
  dapple::kernels::SetComputeThreads(1);

  std::unique_ptr<dapple::metrics::MetricsServer> metrics_server;
  if (flags->metrics_port != dapple::metrics::kMetricsPortOff) {
    auto metrics = std::make_shared<dapple::worker::WorkerMetrics>();
    auto started = dapple::metrics::StartMetricsServer(
        flags->metrics_host, flags->metrics_port, flags->metrics_token_file, metrics->metric_set());
    if (!started.ok()) {
      std::cerr << "dapple-worker: " << started.status().message() << "\n";
      return 1;
    }
    metrics_server = *std::move(started);
    opts.observer = metrics;
  }
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
