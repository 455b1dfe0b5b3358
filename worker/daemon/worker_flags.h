// dapple-worker's command line: turns argv into WorkerOptions, with one-line errors that name
// the flag and the value, so main only prints them.
#ifndef DAPPLE_WORKER_DAEMON_WORKER_FLAGS_H_
#define DAPPLE_WORKER_DAEMON_WORKER_FLAGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/daemon/worker_daemon.h"

namespace dapple::worker {

struct WorkerFlags {
  WorkerOptions options;
  std::string log_level = "info";
  bool devices_given = false;  // --devices appeared; otherwise main offers DefaultDevices()
  bool cpu_fallback = false;
  // --metrics-port: serve Prometheus metrics at http://HOST:PORT/metrics; 0 (the default,
  // since several workers often share a host): no endpoint. HOST: --metrics-host, by default
  // 127.0.0.1 for a loopback --coordinator (a one-host cluster), else 0.0.0.0
  // (metrics::DefaultMetricsHost). --metrics-token-file: "" or the file of the bearer token
  // /metrics requires (read when the endpoint starts: metrics_endpoint.h).
  int metrics_port = 0;
  std::string metrics_host;
  std::string metrics_token_file;
  // --help / -h, or --version: print help_text to stdout and exit 0, nothing else set.
  bool help = false;
  std::string help_text;  // CLI11's usage text (always filled); the version line for --version
};

// Parses dapple-worker's arguments `args` (argv[1..]) and checks them with ValidateLogLevel and
// ValidateWorkerOptions (worker_options.h). `coordinator_env` is $DAPPLE_COORDINATOR (null or
// empty: unset), used when --coordinator is absent; `ca_env` $DAPPLE_CA, used when --ca is.
// The coordinator is reached over TLS with --ca (the CA files are read here: a missing file is
// "--ca /x.pem: No such file or directory"), else in plain text, which needs a loopback
// --coordinator or --plaintext ("--coordinator 10.0.0.5:7600 is not a loopback address: give
// --ca FILE (or DAPPLE_CA), or --plaintext ...").
//
// kInvalidArgument, with one line naming the flag and the value, for:
//  - a flag without a value ("--devices needs a value ..."), one given twice (other than
//    --devices, which may repeat), an unknown flag ("unknown flag '--bogus'"), and a positional
//    argument ("unexpected argument 'extra'": dapple-worker takes flags only);
//  - --name '' and --dump-dir '' (leave the flag out for the default instead);
//  - a --devices value with an empty entry ("--devices 'cpu,' has an empty entry ...");
//  - --transport-timeout-s / --rendezvous-timeout-s that are not whole numbers;
//  - --metrics-port that is not a port number 0..65535 ("--metrics-port '70000' must be a
//    port number in 0..65535 (0: no metrics endpoint)"); --metrics-host that is not an IPv4
//    address; --metrics-token-file '';
//  - whatever ValidateWorkerOptions / ValidateLogLevel reject (a bad $DAPPLE_COORDINATOR says
//    "(from $DAPPLE_COORDINATOR)").
// Does not look at the machine's GPUs: ResolveDevices (device.h) does that afterwards.
// `join_token_env` is $DAPPLE_JOIN_TOKEN (the token itself), used when --join-token-file is
// absent; the file is read here ("--join-token-file: cannot read token file '/x': No such file
// or directory"). Neither: options.join_token stays empty (main refuses to start).
absl::StatusOr<WorkerFlags> ParseWorkerFlags(const std::vector<std::string>& args,
                                             const char* coordinator_env,
                                             const char* ca_env = nullptr,
                                             const char* join_token_env = nullptr);

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_DAEMON_WORKER_FLAGS_H_
