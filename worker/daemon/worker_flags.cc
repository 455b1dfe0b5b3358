#include "worker/daemon/worker_flags.h"

#include <cstdint>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/grpc_tls.h"
#include "common/input_file.h"
#include "common/metrics/metrics_server.h"
#include "common/token_file.h"
#include "common/version.h"
#include "common/worker_name.h"
#include "worker/daemon/device_memory.h"
#include "worker/daemon/worker_options.h"

namespace dapple::worker {
namespace {

absl::Status InvalidFlag(const std::string& msg) { return absl::InvalidArgumentError(msg); }

// CLI11's ArgumentMismatch reads "--flag: 1 required TEXT missing" or "--flag: At Most 1
// required but received 2"; everything else about the flags is checked here, with our wording.
absl::Status FromParseError(const CLI::ParseError& e) {
  const std::string what = e.what();
  const size_t colon = what.find(": ");
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) != nullptr && colon != std::string::npos &&
      absl::StartsWith(what, "--")) {
    const std::string flag = what.substr(0, colon);
    if (absl::StrContains(what, "missing")) {
      return InvalidFlag(absl::StrCat(flag, " needs a value (see --help)"));
    }
    return InvalidFlag(absl::StrCat(flag, " is given more than once"));
  }
  return InvalidFlag(what);
}

// A flag that takes one value swallows the next argument even when it is another flag
// ("--name --devices cpu"); no valid value of ours starts with "--", so say what happened.
absl::Status CheckNotAFlag(const char* flag, const std::string& value) {
  if (absl::StartsWith(value, "--")) {
    return InvalidFlag(absl::StrFormat("%s needs a value, got the flag '%s'", flag, value));
  }
  return absl::OkStatus();
}

absl::StatusOr<absl::Duration> ParseSeconds(const char* flag, const std::string& text) {
  int64_t seconds = 0;
  if (!absl::SimpleAtoi(text, &seconds)) {
    return InvalidFlag(
        absl::StrFormat("%s '%s' must be a whole number of seconds (1..86400)", flag, text));
  }
  return absl::Seconds(seconds);
}

// Each --devices value is one device or a comma-separated list of them; an empty entry ("cpu,",
// ",cpu", ",") is a typo, never a request for the default.
absl::Status SplitDevices(const std::vector<std::string>& values, std::vector<std::string>* out) {
  out->clear();
  for (const std::string& value : values) {
    for (absl::string_view entry : absl::StrSplit(value, ',')) {
      if (entry.empty()) {
        return InvalidFlag(absl::StrFormat(
            "--devices '%s' has an empty entry: list devices separated by commas, e.g. "
            "cpu or cuda:0,cuda:1",
            value));
      }
      out->emplace_back(entry);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<WorkerFlags> ParseWorkerFlags(const std::vector<std::string>& args,
                                             const char* coordinator_env, const char* ca_env,
                                             const char* join_token_env) {
  WorkerFlags f;
  WorkerOptions& o = f.options;
  const bool env_given = coordinator_env != nullptr && *coordinator_env != '\0';
  if (env_given) o.coordinator = coordinator_env;

  CLI::App app{"dapple-worker: runs pipeline stages for a dapple-coordinator", "dapple-worker"};
  // Stray and unknown arguments are reported below in our words, not CLI11's.
  app.allow_extras();
  // Every value is taken as text and converted here, so each error names the flag and value.
  std::vector<std::string> devices;
  std::string transport_timeout = "120", rendezvous_timeout = "60";
  app.add_option("--coordinator", o.coordinator,
                 "coordinator address HOST:PORT (env DAPPLE_COORDINATOR)")
      ->capture_default_str();
  app.add_option("--name", o.name,
                 absl::StrCat("stable worker name, ", kWorkerNameRule,
                              " (default: assigned by the coordinator)"));
  app.add_option("--devices", devices,
                 "devices this worker offers: cpu, cuda:N (repeat or separate with commas; "
                 "default: every CUDA device found, else cpu)")
      ->expected(1)
      ->allow_extra_args(false)
      ->take_all();
  app.add_flag("--cpu-fallback", f.cpu_fallback,
               "offer cpu instead of CUDA devices that cannot be used");
  app.add_flag("--sync-checkpoints", o.sync_checkpoints,
               "write checkpoint shards in the training loop instead of in the background (to "
               "measure what asynchronous saving saves)");
  app.add_option("--dump-dir", o.dump_dir,
                 "write <job>.stage<s>.params (<job>.stage<s>.replica<r>.params for a stage "
                 "with replicas) here after each successful job (must exist)");
  app.add_option("--collective-host", o.collective_host,
                 "address the AllReduce among a stage's replicas (Gloo) binds to and tells the "
                 "other replicas (default: the local address that reaches the coordinator)");
  app.add_option("--transport-timeout-s", transport_timeout,
                 "longest wait for one activation or gradient message, 1..86400")
      ->capture_default_str();
  app.add_option("--rendezvous-timeout-s", rendezvous_timeout,
                 "longest wait for the other stages' addresses, 1..86400")
      ->capture_default_str();
  std::string metrics_port = "0";
  app.add_option("--metrics-port", metrics_port,
                 "serve Prometheus metrics at http://HOST:PORT/metrics, HOST from --metrics-host "
                 "(0: off)")
      ->capture_default_str();
  std::string metrics_host;
  app.add_option("--metrics-host", metrics_host,
                 "IPv4 address the metrics endpoint binds (default: 127.0.0.1 when --coordinator "
                 "is a loopback address, else 0.0.0.0); its text names the jobs this worker runs");
  app.add_option("--metrics-token-file", f.metrics_token_file,
                 dapple::metrics::kMetricsTokenFileHelp);
  std::string comm_delay_max_ms = "0";
  app.add_option("--comm-delay-max-ms", comm_delay_max_ms,
                 "fault injection: wait a random 0..N ms before every send and receive between "
                 "stages, 0..10000 (0: off)")
      ->capture_default_str();
  std::string device_memory;
  app.add_option("--device-memory", device_memory,
                 "memory of the compute device the planner may use, e.g. 8GiB (default: a "
                 "GPU's total memory; cpu: the host's RAM shared by its cpu workers)");
  ClientTlsFiles tls;
  tls.ca_file = ca_env != nullptr ? ca_env : "";
  bool plaintext = false;
  app.add_option("--ca", tls.ca_file,
                 "verify the coordinator's TLS certificate against this CA file (env DAPPLE_CA; "
                 "without one: plain text, to a loopback coordinator or with --plaintext only)");
  app.add_option("--tls-cert", tls.cert_file,
                 "this worker's certificate, for a coordinator that requires client "
                 "certificates (mutual TLS)");
  app.add_option("--tls-key", tls.key_file, "key of --tls-cert");
  app.add_flag("--plaintext", plaintext,
               "talk plain text to a coordinator that is not on loopback (unencrypted)");
  std::string join_token_file;
  app.add_option("--join-token-file", join_token_file,
                 "the cluster's join token (the coordinator writes join.token next to its "
                 "database at its first start; env DAPPLE_JOIN_TOKEN holds the token itself)");
  app.add_option("--log-level", f.log_level, "trace|debug|info|warn|error")->capture_default_str();
  app.set_version_flag("--version", VersionString(), "print the version and exit");
  f.help_text = app.help();

  std::vector<const char*> argv = {"dapple-worker"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::CallForHelp&) {
    f.help = true;
    return f;
  } catch (const CLI::CallForVersion&) {
    f.help = true;  // prints help_text, which is the version then
    f.help_text = absl::StrCat(VersionString(), "\n");
    return f;
  } catch (const CLI::ParseError& e) {
    return FromParseError(e);
  }
  // First, so that "--name --devices cpu" is reported as the missing value it is rather than
  // as the stray argument it leaves behind.
  for (auto [flag, value] :
       {std::pair<const char*, const std::string*>{"--coordinator", &o.coordinator},
        {"--name", &o.name},
        {"--dump-dir", &o.dump_dir},
        {"--collective-host", &o.collective_host},
        {"--transport-timeout-s", &transport_timeout},
        {"--rendezvous-timeout-s", &rendezvous_timeout},
        {"--device-memory", &device_memory},
        {"--metrics-port", &metrics_port},
        {"--metrics-host", &metrics_host},
        {"--metrics-token-file", &f.metrics_token_file},
        {"--comm-delay-max-ms", &comm_delay_max_ms},
        {"--ca", &tls.ca_file},
        {"--tls-cert", &tls.cert_file},
        {"--tls-key", &tls.key_file},
        {"--join-token-file", &join_token_file},
        {"--log-level", &f.log_level}}) {
    if (app.count(flag) > 0) {
      if (absl::Status s = CheckNotAFlag(flag, *value); !s.ok()) return s;
    }
  }
  for (const std::string& value : devices) {
    if (absl::Status s = CheckNotAFlag("--devices", value); !s.ok()) return s;
  }
  for (const std::string& extra : app.remaining()) {
    if (extra == "--") continue;  // end of options: harmless on its own
    if (absl::StartsWith(extra, "-")) {
      return InvalidFlag(absl::StrFormat("unknown flag '%s' (see --help)", extra));
    }
    return InvalidFlag(absl::StrFormat(
        "unexpected argument '%s': dapple-worker takes flags only (see --help)", extra));
  }

  // Empty means "not given" in WorkerOptions; an explicit empty value is a mistake (an unset
  // shell variable, say), not a request for the default.
  if (app.count("--name") > 0 && o.name.empty()) {
    return InvalidFlag(absl::StrCat("--name '' must be ", kWorkerNameRule,
                                    " (leave --name out to get an id assigned by the "
                                    "coordinator)"));
  }
  if (app.count("--dump-dir") > 0 && o.dump_dir.empty()) {
    return InvalidFlag(
        "--dump-dir '' must name an existing directory (leave --dump-dir out to "
        "write no parameters)");
  }
  f.devices_given = app.count("--devices") > 0;
  if (f.devices_given) {
    if (absl::Status s = SplitDevices(devices, &o.devices); !s.ok()) return s;
  }
  if (app.count("--device-memory") > 0) {
    absl::StatusOr<int64_t> bytes = ParseMemorySize(device_memory);
    if (!bytes.ok()) return bytes.status();
    o.device_memory_bytes = *bytes;
  }
  absl::StatusOr<absl::Duration> d = ParseSeconds("--transport-timeout-s", transport_timeout);
  if (!d.ok()) return d.status();
  o.transport_timeout = *d;
  d = ParseSeconds("--rendezvous-timeout-s", rendezvous_timeout);
  if (!d.ok()) return d.status();
  o.rendezvous_timeout = *d;
  if (metrics_port.empty() || metrics_port.size() > 5 ||
      metrics_port.find_first_not_of("0123456789") != std::string::npos ||
      !absl::SimpleAtoi(metrics_port, &f.metrics_port) || f.metrics_port > 65535) {
    return InvalidFlag(absl::StrFormat(
        "--metrics-port '%s' must be a port number in 0..65535 (0: no metrics endpoint)",
        metrics_port));
  }

  int64_t delay_ms = 0;
  if (comm_delay_max_ms.empty() || comm_delay_max_ms.size() > 5 ||
      comm_delay_max_ms.find_first_not_of("0123456789") != std::string::npos ||
      !absl::SimpleAtoi(comm_delay_max_ms, &delay_ms) || delay_ms > 10000) {
    return InvalidFlag(absl::StrFormat(
        "--comm-delay-max-ms '%s' must be a whole number of milliseconds in 0..10000 (0: no "
        "delay)",
        comm_delay_max_ms));
  }
  o.comm_delay_max = absl::Milliseconds(delay_ms);

  if (absl::Status s = ValidateLogLevel(f.log_level); !s.ok()) return s;
  if (absl::Status s = ValidateWorkerOptions(o); !s.ok()) {
    if (env_given && app.count("--coordinator") == 0 &&
        absl::StartsWith(s.message(), "--coordinator")) {
      return InvalidFlag(absl::StrCat(s.message(), " (from $DAPPLE_COORDINATOR)"));
    }
    return s;
  }
  if (plaintext && !tls.ca_file.empty()) {
    return InvalidFlag(
        "--plaintext and --ca contradict each other: choose one (DAPPLE_CA counts "
        "as --ca)");
  }
  if (tls.ca_file.empty()) {
    if (absl::Status s = RequirePlaintextAllowed("--coordinator", o.coordinator, plaintext,
                                                 "--ca FILE (or DAPPLE_CA)", "--plaintext");
        !s.ok()) {
      return s;
    }
  }
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      MakeChannelCredentials(tls);
  if (!credentials.ok()) return credentials.status();
  o.coordinator_credentials = *std::move(credentials);
  o.coordinator_tls = !tls.ca_file.empty();
  o.coordinator_client_certificate = !tls.cert_file.empty();
  if (app.count("--metrics-token-file") > 0 && f.metrics_token_file.empty()) {
    return InvalidFlag(
        "--metrics-token-file '' must name a file (leave the flag out to serve /metrics without "
        "a token)");
  }
  if (!f.metrics_token_file.empty()) {
    // As the coordinator's flags: a wrong path is a usage error at start.
    if (absl::Status s = CheckInputFile("--metrics-token-file", f.metrics_token_file); !s.ok()) {
      return s;
    }
    if (absl::StatusOr<std::string> token = common::ReadTokenFile(f.metrics_token_file);
        !token.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--metrics-token-file: ", token.status().message()));
    }
  }
  f.metrics_host = app.count("--metrics-host") > 0
                       ? metrics_host
                       : metrics::DefaultMetricsHost(IsLoopbackAddress(o.coordinator));
  if (absl::Status s = metrics::CheckMetricsHost(f.metrics_host); !s.ok()) return s;
  if (app.count("--join-token-file") > 0) {
    absl::StatusOr<std::string> token = common::ReadTokenFile(join_token_file);
    if (!token.ok())
      return InvalidFlag(absl::StrCat("--join-token-file: ", token.status().message()));
    o.join_token = *std::move(token);
  } else if (join_token_env != nullptr) {
    o.join_token = std::string(absl::StripAsciiWhitespace(join_token_env));
    o.join_token_source = "DAPPLE_JOIN_TOKEN";
    if (absl::Status s = common::CheckTokenText(o.join_token); !s.ok()) {
      return InvalidFlag(absl::StrCat("DAPPLE_JOIN_TOKEN ", s.message()));
    }
  }
  return f;
}

}  // namespace dapple::worker
