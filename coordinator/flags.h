// The command-line flags of dapple-coordinator and their rules (docs/coordinator.md, "Flags").
// main.cc lets CLI11 collect the flags as text and ValidateFlags decide: one place for every
// rule, with messages that name the flag, the rule and the value.
#ifndef DAPPLE_COORDINATOR_FLAGS_H_
#define DAPPLE_COORDINATOR_FLAGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dapple::coordinator {

// Heartbeat interval told to workers, ms.
inline constexpr int64_t kMinHeartbeatIntervalMs = 10;
inline constexpr int64_t kMaxHeartbeatIntervalMs = 60'000;
// Silence after which a worker is DEAD, ms; must also exceed 2x the heartbeat interval, so
// one late heartbeat does not kill a healthy worker.
inline constexpr int64_t kMinWorkerTimeoutMs = 100;
inline constexpr int64_t kMaxWorkerTimeoutMs = 3'600'000;
// How long a DEAD worker stays listed before the coordinator forgets it, s (0: at the next
// background pass after it died).
inline constexpr int64_t kMinDeadWorkerRetentionS = 0;
inline constexpr int64_t kMaxDeadWorkerRetentionS = 604'800;  // one week

// --trace-every-steps: the largest interval (0: no traces).
inline constexpr int64_t kMaxTraceEverySteps = 1'000'000'000;

// Port of the Prometheus endpoint (http://0.0.0.0:PORT/metrics); 0: none. Off unless asked
// for, so that several coordinators on one host (tests, local clusters) never collide; the
// conventional port, used by the Helm chart, Dockerfiles and deploy/local_cluster.sh, is 9400.
inline constexpr int kDefaultMetricsPort = 0;

// Planner defaults (coordinator/planner/planner.h PlanDefaults), as whole numbers of the unit
// in the flag's name.
inline constexpr int64_t kMinPlanFlag = 1;
inline constexpr int64_t kMaxDeviceMemoryMib = int64_t{1} << 30;  // 1 PiB
inline constexpr int64_t kMaxBandwidthMbS = 1'000'000'000;        // 1 PB/s
inline constexpr int64_t kMaxLatencyUs = 10'000'000;              // 10 s
inline constexpr int64_t kMaxGflops = 1'000'000'000;              // 1 EFLOP/s
inline constexpr int64_t kMaxProfileMaxAgeH = 87'600;             // 10 years

// The flags as typed (defaults as in docs/coordinator.md).
struct RawFlags {
  std::string listen = "127.0.0.1:7600";  // loopback: plain text is allowed there alone
  std::string db = "dapple.db";
  std::string heartbeat_interval_ms = "500";
  std::string worker_timeout_ms = "5000";
  std::string dead_worker_retention_s = "600";
  std::string starvation_after_s = "600";
  std::string preemption_checkpoint_timeout_s = "30";
  std::string log_level = "info";
  std::string port_file;           // empty: none
  std::string metrics_port = "0";  // kDefaultMetricsPort
  // Where /metrics listens (empty: loopback for a loopback --listen, else every interface:
  // metrics::DefaultMetricsHost) and the file of the bearer token it requires (empty: none).
  std::string metrics_host;
  std::string metrics_token_file;
  std::string checkpoint_dir;  // empty: "checkpoints" next to --db
  std::string keep_checkpoints = "3";
  std::string trace_every_steps = "50";
  std::string profile_max_age_h = "168";
  std::string default_device_memory_mib = "16384";
  std::string intra_node_bandwidth_mb_s = "10000";
  std::string inter_node_bandwidth_mb_s = "3125";
  std::string intra_node_latency_us = "10";
  std::string inter_node_latency_us = "20";
  std::string cpu_gflops = "50";
  std::string cuda_gflops = "50000";
  // TLS (common/grpc_tls.h): certificate and key of the gRPC port, and a CA whose client
  // certificates are required (mutual TLS); --plaintext: serve without TLS off loopback.
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;
  bool plaintext = false;
  // Where the first start writes the admin's token and the cluster join token (docs/security.md,
  // "Bootstrap"); empty: admin.token / join.token in --db's folder.
  std::string admin_token_file;
  std::string join_token_file;
  // A YAML file of tenants, cohorts and quotas applied at every start (scheduling/tenants_file.h);
  // empty: none.
  std::string tenants_file;
  // The folders whose files jobs may name (--data-root, repeated or comma-separated; empty: the
  // defaults, coordinator/service/data_roots.h DefaultDataRoots).
  std::vector<std::string> data_roots;
};

struct Flags {
  std::string listen;  // HOST:PORT, PORT in 0..65535
  std::string db;      // non-empty
  int64_t heartbeat_interval_ms = 0;
  int64_t worker_timeout_ms = 0;
  int64_t dead_worker_retention_s = 0;
  // Scheduling (docs/scheduling.md): a queued job that waited this long holds the devices it
  // needs as they come free, 0..604800; a preempted job's checkpoint is waited for this long
  // before it is stopped anyway, 1..3600.
  int64_t starvation_after_s = 0;
  int64_t preemption_checkpoint_timeout_s = 0;
  std::string log_level;  // trace | debug | info | warn | error | off
  std::string port_file;  // "" or a file the coordinator can create (CheckPortFile)
  int metrics_port = 0;   // 0..65535; 0: no metrics endpoint
  // An IPv4 address: --metrics-host, or its default from --listen (DefaultMetricsHost).
  std::string metrics_host;
  // "" or a readable regular file (CheckInputFile); read at start (common/token_file.h).
  std::string metrics_token_file;
  // Root of the jobs' checkpoint folders; "" as typed: the service's default (a folder
  // "checkpoints" next to --db). Published checkpoints kept per job, 0..1000000 (0: all).
  std::string checkpoint_dir;
  int64_t keep_checkpoints = 3;
  // Workers record a timeline of step 1, of a resumed run's first step and of every this many
  // steps, 0..kMaxTraceEverySteps (0: never).
  int32_t trace_every_steps = 50;
  // A restarted coordinator reuses the model profiles it measured (and refined) at most this
  // long ago, 0..kMaxProfileMaxAgeH hours; older ones are measured again (0: always).
  int64_t profile_max_age_h = 168;
  // Planner defaults: memory of a device no worker reported (and of the one-node topology a
  // job is planned on without enough workers), links between devices, nominal FLOP rates of
  // estimated profiles.
  int64_t default_device_memory_mib = 0;  // 1..2^30
  int64_t intra_node_bandwidth_mb_s = 0;  // 1..1e9 (MB/s = 1e6 bytes/s)
  int64_t inter_node_bandwidth_mb_s = 0;
  int64_t intra_node_latency_us = 0;  // 0..1e7
  int64_t inter_node_latency_us = 0;
  int64_t cpu_gflops = 0;  // 1..1e9
  int64_t cuda_gflops = 0;
  // TLS files as typed (read by MakeServerCredentials at start); all empty: plain text, which
  // needs a loopback --listen or --plaintext.
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;
  bool plaintext = false;
  // As typed: "" means the default next to --db (auth::DefaultTokenFile). Checked like
  // --port-file when given (CheckOutputFile), and never the same file.
  std::string admin_token_file;
  std::string join_token_file;
  // "" or a readable regular file (CheckInputFile); its content is checked when read at start.
  std::string tenants_file;
  // As typed (empty: the defaults); checked by DataRoots::Create at start, with the rule that
  // none of them holds the coordinator's own files (CheckOwnFilesOutside).
  std::vector<std::string> data_roots;
};

// Checks every rule; kInvalidArgument with a one-line message for the first broken one, e.g.
// "--worker-timeout-ms must be at least 100 (ms), got 0",
// "--heartbeat-interval-ms must be an integer number of ms, got '1.5'",
// "--worker-timeout-ms must exceed 2x --heartbeat-interval-ms (2 x 500 = 1000 ms), got 900",
// "--listen must be HOST:PORT with PORT in 0..65535, got '127.0.0.1:99999'",
// "--db must name a file", "--listen 0.0.0.0:7600 is not a loopback address: give --tls-cert
// and --tls-key, or --plaintext to send tokens and jobs unencrypted", "--plaintext and
// --tls-cert contradict each other: choose one", "--tls-cert and --tls-key go together",
// "--log-level must be one of trace, debug, info, warn, error, off; got 'loud'",
// "--dead-worker-retention-s must be at most 604800 (s), got 999999", and CheckPortFile's messages,
// "--metrics-port must be a port number in 0..65535 (0: no metrics endpoint), got '70000'",
// "--metrics-host 'localhost' must be an IPv4 address such as 127.0.0.1 or 0.0.0.0", and for
// the planner defaults "--cpu-gflops must be at least 1 (GFLOP/s), got 0". Looks at the file system
// for --port-file only (nothing is created).
absl::StatusOr<Flags> ValidateFlags(const RawFlags& raw);

// Whether the coordinator will be able to write its port to `path` (through a temporary file
// in the same folder and a rename): `path` is not a folder, and its folder exists and lets us
// create files. Checked before the job database is opened, so a bad path costs nothing.
// kInvalidArgument, one line naming the flag, the path and the system's reason:
//   "--port-file '/tmp/d' is a directory; name a file in it, e.g. '/tmp/d/port'"
//   "--port-file '/no/such/port': cannot use folder '/no/such': No such file or directory"
//   "--port-file '/ro/port': cannot create files in '/ro': Permission denied"
absl::Status CheckPortFile(const std::string& path);
// The same rules for any file the coordinator writes, naming `flag` and suggesting
// '<path>/<example>' for a folder (--admin-token-file, --join-token-file).
absl::Status CheckOutputFile(absl::string_view flag, const std::string& path,
                             absl::string_view example);

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_FLAGS_H_
