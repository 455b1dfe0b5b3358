// dapple-coordinator: the job queue, planner, worker registry and rendezvous of a dapple
// cluster, serving the Coordinator (dapplectl) and WorkerControl (workers) gRPC services on one
// port. See docs/coordinator.md.
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "coordinator/service/coordinator_service.h"
#include "coordinator/service/grpc_service.h"

namespace {

// How long open calls (WatchJob streams) may run on after a shutdown signal.
constexpr absl::Duration kShutdownGrace = absl::Seconds(2);

// Writes `port` to `path` through a temporary file and rename, so readers never see a
// partial file.
absl::Status WritePortFile(const std::string& path, int port) {
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << port << "\n";
    out.close();
    if (!out) return absl::UnavailableError(absl::StrCat("cannot write port file '", tmp, "'"));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::UnavailableError(absl::StrCat("cannot rename '", tmp, "' to '", path, "'"));
  }
  return absl::OkStatus();
}

// The host part of "host:port" ("[::]" stays bracketed).
std::string HostOf(const std::string& address) {
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

int Fail(const absl::Status& status) {
  std::cerr << "dapple-coordinator: " << status.message() << std::endl;
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dapple-coordinator: job queue, planner, worker registry and rendezvous"};
  std::string listen = "0.0.0.0:7600";
  std::string db = "dapple.db";
  int64_t heartbeat_interval_ms = 500;
  int64_t worker_timeout_ms = 5000;
  std::string log_level = "info";
  std::string port_file;
  app.add_option("--listen", listen, "gRPC address host:port (port 0 picks a free port)")
      ->capture_default_str();
  app.add_option("--db", db, "SQLite job database (created if missing)")->capture_default_str();
  app.add_option("--heartbeat-interval-ms", heartbeat_interval_ms,
                 "heartbeat interval told to workers")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--worker-timeout-ms", worker_timeout_ms,
                 "a worker silent this long is DEAD and fails its job")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--log-level", log_level, "trace | debug | info | warn | error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
      ->capture_default_str();
  app.add_option("--port-file", port_file, "write the bound port here (atomically) once listening");
  CLI11_PARSE(app, argc, argv);

  dapple::InitLogging("coordinator", log_level);
  if (worker_timeout_ms <= heartbeat_interval_ms) {
    DAPPLE_LOG_WARN(
        "--worker-timeout-ms {} is not above --heartbeat-interval-ms {}: healthy "
        "workers may be declared dead",
        worker_timeout_ms, heartbeat_interval_ms);
  }

  // Signals are taken synchronously by sigwait below; every thread started from here on
  // inherits the mask, so none of them is interrupted.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  dapple::coordinator::CoordinatorOptions options;
  options.db_path = db;
  options.heartbeat_interval_ms = heartbeat_interval_ms;
  options.worker_timeout_ms = worker_timeout_ms;
  auto service = dapple::coordinator::CoordinatorService::Create(options);
  if (!service.ok()) return Fail(service.status());
  (*service)->Start();

  auto server = dapple::coordinator::GrpcServer::Start(listen, service->get());
  if (!server.ok()) return Fail(server.status());
  const int port = (*server)->port();
  if (!port_file.empty()) {
    if (absl::Status s = WritePortFile(port_file, port); !s.ok()) return Fail(s);
  }
  DAPPLE_LOG_INFO("listening on {}:{} (db {})", HostOf(listen), port, db);
  std::cout << "dapple-coordinator listening on " << HostOf(listen) << ":" << port << std::endl;

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  DAPPLE_LOG_INFO("signal {}: shutting down", signal_number);
  // Ending the watches first lets the server drain at once instead of waiting out the grace.
  (*service)->Shutdown();
  (*server)->Shutdown(kShutdownGrace);
  server->reset();
  service->reset();
  DAPPLE_LOG_INFO("stopped");
  return 0;
}
