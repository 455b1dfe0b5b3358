#include "coordinator/flags.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/grpc_tls.h"
#include "common/input_file.h"
#include "common/logging.h"
#include "common/metrics/metrics_server.h"
#include "common/token_file.h"

namespace dapple::coordinator {
namespace {

constexpr int kMaxPort = 65535;

bool AllDigits(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// Parses a decimal count of `unit` ("ms", "s") for `flag` within [min, max].
absl::StatusOr<int64_t> ParseCount(const std::string& flag, const std::string& text, int64_t min,
                                   int64_t max, absl::string_view unit) {
  const absl::string_view unit_name = unit == "s" ? "seconds" : unit;
  int64_t value = 0;
  absl::string_view digits(text);
  const bool negative = !digits.empty() && digits[0] == '-';
  if (negative) digits.remove_prefix(1);
  if (!AllDigits(digits)) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " must be an integer number of ", unit_name, ", got '", text, "'"));
  }
  // Digits beyond int64 are certainly out of range.
  if (!absl::SimpleAtoi(text, &value)) {
    return absl::InvalidArgumentError(
        negative ? absl::StrCat(flag, " must be at least ", min, " (", unit, "), got ", text)
                 : absl::StrCat(flag, " must be at most ", max, " (", unit, "), got ", text));
  }
  if (value < min) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " must be at least ", min, " (", unit, "), got ", value));
  }
  if (value > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " must be at most ", max, " (", unit, "), got ", value));
  }
  return value;
}

absl::StatusOr<int64_t> ParseMs(const std::string& flag, const std::string& text, int64_t min,
                                int64_t max) {
  return ParseCount(flag, text, min, max, "ms");
}

// HOST:PORT: a non-empty host (an IPv6 one in brackets) and a decimal port 0..65535. gRPC
// itself would wrap 99999 to another port silently.
bool ValidListen(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) return false;
  const absl::string_view host = absl::string_view(listen).substr(0, colon);
  const absl::string_view port = absl::string_view(listen).substr(colon + 1);
  if (host.empty() || !AllDigits(port) || port.size() > 5) return false;
  int value = 0;
  if (!absl::SimpleAtoi(port, &value) || value > kMaxPort) return false;
  if (host.front() == '[') return host.size() > 2 && host.back() == ']';
  // An unbracketed IPv6 address would have its last group taken as the port.
  return host.find(':') == absl::string_view::npos && host.find(']') == absl::string_view::npos;
}

}  // namespace

absl::Status CheckPortFile(const std::string& path) {
  return CheckOutputFile("--port-file", path, "port");
}

absl::Status CheckOutputFile(absl::string_view flag, const std::string& path,
                             absl::string_view example) {
  const auto fail = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " '", path, "'", what));
  };
  struct stat st {};
  if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    const bool slash = !path.empty() && path.back() == '/';
    return fail(absl::StrCat(" is a directory; name a file in it, e.g. '", path, slash ? "" : "/",
                             example, "'"));
  }
  // The temporary file goes next to `path`, then is renamed over it: both need the folder.
  const size_t slash = path.rfind('/');
  const std::string folder =
      slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  if (stat(folder.c_str(), &st) != 0) {
    return fail(absl::StrCat(": cannot use folder '", folder, "': ", std::strerror(errno)));
  }
  if (!S_ISDIR(st.st_mode)) {
    return fail(absl::StrCat(": cannot use folder '", folder, "': ", std::strerror(ENOTDIR)));
  }
  if (access(folder.c_str(), W_OK | X_OK) != 0) {
    return fail(absl::StrCat(": cannot create files in '", folder, "': ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<Flags> ValidateFlags(const RawFlags& raw) {
  Flags flags;
  if (!ValidListen(raw.listen)) {
    return absl::InvalidArgumentError(absl::StrCat("--listen must be HOST:PORT with PORT in 0..",
                                                   kMaxPort, ", got '", raw.listen, "'"));
  }
  flags.listen = raw.listen;
  if (absl::Status s = CheckServerTlsFlags({raw.tls_cert, raw.tls_key, raw.tls_client_ca},
                                           raw.plaintext, raw.listen);
      !s.ok()) {
    return s;
  }
  flags.tls_cert = raw.tls_cert;
  flags.tls_key = raw.tls_key;
  flags.tls_client_ca = raw.tls_client_ca;
  flags.plaintext = raw.plaintext;
  if (raw.db.empty()) return absl::InvalidArgumentError("--db must name a file");
  flags.db = raw.db;
  auto heartbeat = ParseMs("--heartbeat-interval-ms", raw.heartbeat_interval_ms,
                           kMinHeartbeatIntervalMs, kMaxHeartbeatIntervalMs);
  if (!heartbeat.ok()) return heartbeat.status();
  flags.heartbeat_interval_ms = *heartbeat;
  auto timeout = ParseMs("--worker-timeout-ms", raw.worker_timeout_ms, kMinWorkerTimeoutMs,
                         kMaxWorkerTimeoutMs);
  if (!timeout.ok()) return timeout.status();
  flags.worker_timeout_ms = *timeout;
  if (flags.worker_timeout_ms <= 2 * flags.heartbeat_interval_ms) {
    return absl::InvalidArgumentError(
        absl::StrCat("--worker-timeout-ms must exceed 2x --heartbeat-interval-ms (2 x ",
                     flags.heartbeat_interval_ms, " = ", 2 * flags.heartbeat_interval_ms,
                     " ms), got ", flags.worker_timeout_ms));
  }
  auto retention = ParseCount("--dead-worker-retention-s", raw.dead_worker_retention_s,
                              kMinDeadWorkerRetentionS, kMaxDeadWorkerRetentionS, "s");
  if (!retention.ok()) return retention.status();
  flags.dead_worker_retention_s = *retention;
  auto starvation = ParseCount("--starvation-after-s", raw.starvation_after_s, 0, 604800, "s");
  if (!starvation.ok()) return starvation.status();
  flags.starvation_after_s = *starvation;
  auto preemption = ParseCount("--preemption-checkpoint-timeout-s",
                               raw.preemption_checkpoint_timeout_s, 1, 3600, "s");
  if (!preemption.ok()) return preemption.status();
  flags.preemption_checkpoint_timeout_s = *preemption;
  bool known_level = false;
  for (const char* level : kLogLevels) known_level = known_level || raw.log_level == level;
  if (!known_level) {
    return absl::InvalidArgumentError(
        absl::StrCat("--log-level must be one of ", kLogLevelList, "; got '", raw.log_level, "'"));
  }
  flags.log_level = raw.log_level;
  if (!raw.port_file.empty()) {
    if (absl::Status s = CheckPortFile(raw.port_file); !s.ok()) return s;
  }
  flags.port_file = raw.port_file;
  // Written only at the first start (bootstrap); checked like --port-file whenever given.
  if (!raw.admin_token_file.empty()) {
    if (absl::Status s = CheckOutputFile("--admin-token-file", raw.admin_token_file, "admin.token");
        !s.ok()) {
      return s;
    }
  }
  if (!raw.join_token_file.empty()) {
    if (absl::Status s = CheckOutputFile("--join-token-file", raw.join_token_file, "join.token");
        !s.ok()) {
      return s;
    }
  }
  if (!raw.admin_token_file.empty() && raw.admin_token_file == raw.join_token_file) {
    return absl::InvalidArgumentError(
        absl::StrCat("--admin-token-file and --join-token-file must differ, both are '",
                     raw.admin_token_file, "'"));
  }
  flags.admin_token_file = raw.admin_token_file;
  flags.join_token_file = raw.join_token_file;
  if (!raw.tenants_file.empty()) {
    if (absl::Status s = CheckInputFile("--tenants-file", raw.tenants_file); !s.ok()) return s;
  }
  flags.tenants_file = raw.tenants_file;
  flags.data_roots = raw.data_roots;
  if (!AllDigits(raw.metrics_port) || raw.metrics_port.size() > 5 ||
      !absl::SimpleAtoi(raw.metrics_port, &flags.metrics_port) || flags.metrics_port > kMaxPort) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics-port must be a port number in 0..65535 (0: no metrics endpoint), got '",
        raw.metrics_port, "'"));
  }
  flags.metrics_host = raw.metrics_host.empty()
                           ? metrics::DefaultMetricsHost(IsLoopbackAddress(flags.listen))
                           : raw.metrics_host;
  if (absl::Status s = metrics::CheckMetricsHost(flags.metrics_host); !s.ok()) return s;
  if (!raw.metrics_token_file.empty()) {
    if (absl::Status s = CheckInputFile("--metrics-token-file", raw.metrics_token_file); !s.ok()) {
      return s;
    }
    // Its content too, before the first start writes any token file (an empty one was refused
    // only after the admin's token had been issued).
    if (absl::StatusOr<std::string> token = common::ReadTokenFile(raw.metrics_token_file);
        !token.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--metrics-token-file: ", token.status().message()));
    }
  }
  flags.metrics_token_file = raw.metrics_token_file;
  flags.checkpoint_dir = raw.checkpoint_dir;
  absl::StatusOr<int64_t> keep =
      ParseCount("--keep-checkpoints", raw.keep_checkpoints, 0, 1'000'000, "checkpoints");
  if (!keep.ok()) return keep.status();
  flags.keep_checkpoints = *keep;
  absl::StatusOr<int64_t> trace_every =
      ParseCount("--trace-every-steps", raw.trace_every_steps, 0, kMaxTraceEverySteps, "steps");
  if (!trace_every.ok()) return trace_every.status();
  flags.trace_every_steps = static_cast<int32_t>(*trace_every);
  absl::StatusOr<int64_t> profile_age =
      ParseCount("--profile-max-age-h", raw.profile_max_age_h, 0, kMaxProfileMaxAgeH, "hours");
  if (!profile_age.ok()) return profile_age.status();
  flags.profile_max_age_h = *profile_age;
  struct PlanFlag {
    const char* name;
    const std::string* text;
    int64_t min, max;
    const char* unit;
    int64_t* out;
  };
  for (const PlanFlag& f : {
           PlanFlag{"--default-device-memory-mib", &raw.default_device_memory_mib, kMinPlanFlag,
                    kMaxDeviceMemoryMib, "MiB", &flags.default_device_memory_mib},
           PlanFlag{"--intra-node-bandwidth-mb-s", &raw.intra_node_bandwidth_mb_s, kMinPlanFlag,
                    kMaxBandwidthMbS, "MB/s", &flags.intra_node_bandwidth_mb_s},
           PlanFlag{"--inter-node-bandwidth-mb-s", &raw.inter_node_bandwidth_mb_s, kMinPlanFlag,
                    kMaxBandwidthMbS, "MB/s", &flags.inter_node_bandwidth_mb_s},
           PlanFlag{"--intra-node-latency-us", &raw.intra_node_latency_us, 0, kMaxLatencyUs, "us",
                    &flags.intra_node_latency_us},
           PlanFlag{"--inter-node-latency-us", &raw.inter_node_latency_us, 0, kMaxLatencyUs, "us",
                    &flags.inter_node_latency_us},
           PlanFlag{"--cpu-gflops", &raw.cpu_gflops, kMinPlanFlag, kMaxGflops, "GFLOP/s",
                    &flags.cpu_gflops},
           PlanFlag{"--cuda-gflops", &raw.cuda_gflops, kMinPlanFlag, kMaxGflops, "GFLOP/s",
                    &flags.cuda_gflops},
       }) {
    absl::StatusOr<int64_t> value = ParseCount(f.name, *f.text, f.min, f.max, f.unit);
    if (!value.ok()) return value.status();
    *f.out = *value;
  }
  return flags;
}

}  // namespace dapple::coordinator
