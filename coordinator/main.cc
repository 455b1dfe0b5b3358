// dapple-coordinator: the job queue, planner, worker registry and rendezvous of a dapple
// cluster, serving the Coordinator (dapplectl) and WorkerControl (workers) gRPC services on one
// port. See docs/coordinator.md.
#include <grpc/support/log.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/grpc_tls.h"
#include "common/logging.h"
#include "common/metrics/metrics_endpoint.h"
#include "common/tls_file_guard.h"
#include "common/version.h"
#include "coordinator/auth/audit_log.h"
#include "coordinator/auth/authenticator.h"
#include "coordinator/auth/bootstrap.h"
#include "coordinator/auth/credential_store.h"
#include "coordinator/flags.h"
#include "coordinator/metrics/coordinator_metrics.h"
#include "coordinator/scheduling/tenants_file.h"
#include "coordinator/service/coordinator_service.h"
#include "coordinator/service/grpc_service.h"

namespace {

// How long open calls (WatchJob streams) may run on after a shutdown signal.
constexpr absl::Duration kShutdownGrace = absl::Seconds(2);

// Writes `port` to `path` through a temporary file and rename, so readers never see a
// partial file. ValidateFlags checked the folder up front; this still names the system's
// reason should it fail anyway (the folder changed meanwhile, a full disk).
absl::Status WritePortFile(const std::string& path, int port) {
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  FILE* out = std::fopen(tmp.c_str(), "w");
  if (out == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot write port file '", tmp, "': ", std::strerror(errno)));
  }
  const bool written = std::fprintf(out, "%d\n", port) > 0;
  const int write_errno = errno;
  if (std::fclose(out) != 0 || !written) {
    const int e = written ? errno : write_errno;
    std::remove(tmp.c_str());
    return absl::UnavailableError(
        absl::StrCat("cannot write port file '", tmp, "': ", std::strerror(e)));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    return absl::UnavailableError(
        absl::StrCat("cannot rename '", tmp, "' to '", path, "': ", std::strerror(e)));
  }
  return absl::OkStatus();
}

// The host part of "host:port" ("[::]" stays bracketed).
std::string HostOf(const std::string& address) {
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

// Runtime failure (database, port): one line, exit 1.
// gRPC's own error lines go through the dapple log. While the server binds they are held
// back: a failed bind is reported once, by us, in one line naming the reason; after a
// successful one they are written as warnings.
std::mutex grpc_log_mu;
bool grpc_log_held = false;
std::vector<std::string> grpc_log_backlog;

void ForwardGrpcLog(gpr_log_func_args* args) {
  std::string line = absl::StrCat("grpc: ", args->message);
  std::replace(line.begin(), line.end(), '\n', ' ');
  {
    std::lock_guard<std::mutex> lock(grpc_log_mu);
    if (grpc_log_held) {
      grpc_log_backlog.push_back(std::move(line));
      return;
    }
  }
  if (args->severity == GPR_LOG_SEVERITY_ERROR) {
    DAPPLE_LOG_WARN("{}", line);
  } else {
    DAPPLE_LOG_DEBUG("{}", line);
  }
}

// Holds gRPC's error lines back (true), or releases them: dropped or written as warnings.
void HoldGrpcLog(bool hold, bool drop = false) {
  std::vector<std::string> backlog;
  {
    std::lock_guard<std::mutex> lock(grpc_log_mu);
    grpc_log_held = hold;
    if (!hold) backlog.swap(grpc_log_backlog);
  }
  if (!drop) {
    for (const std::string& line : backlog) DAPPLE_LOG_WARN("{}", line);
  }
}

int Fail(const absl::Status& status) {
  std::cerr << "dapple-coordinator: " << status.message() << std::endl;
  return 1;
}

// A flag or usage error: one line, exit 2 (CLI11's own codes, 105 / 114 ..., would say
// nothing to a script).
// --tenants-file: read, validated and applied as the system (an admin identity no token
// proves; every change is in the audit log as user "_system"). kInvalidArgument for a file that
// does not parse or break a rule (with its line and column); the apply's errors otherwise.
absl::Status ApplyTenantsFileAtStart(const std::string& path,
                                     dapple::coordinator::auth::CredentialStore& credentials,
                                     dapple::coordinator::CoordinatorService& service,
                                     dapple::coordinator::auth::AuditLog& audit) {
  namespace auth = dapple::coordinator::auth;
  namespace scheduling = dapple::coordinator::scheduling;
  std::ifstream in(path, std::ios::binary);
  std::string text;
  text.resize(scheduling::kMaxTenantsFileBytes + 1);
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tenants-file '", path, "' cannot be read: ", std::strerror(errno)));
  }
  text.resize(static_cast<size_t>(in.gcount()));
  absl::StatusOr<scheduling::TenantsFile> file = scheduling::ParseTenantsFile(text, path);
  if (!file.ok()) return file.status();
  const auth::Identity system{"_system", "", auth::Role::kAdmin, ""};
  auto audited = [&](const char* action, const std::string& target, absl::Status s) {
    if (absl::Status a = audit.Record(system, action, target, s, "--tenants-file " + path);
        !a.ok()) {
      DAPPLE_LOG_WARN("audit log: {}", a.message());
    }
    return s;
  };
  auto describe = [&]() -> absl::StatusOr<dapple::v1::ListTenantsResponse> {
    absl::StatusOr<std::vector<dapple::v1::Tenant>> tenants = credentials.ListTenants();
    if (!tenants.ok()) return tenants.status();
    dapple::v1::ListTenantsResponse response;
    for (const dapple::v1::Tenant& t : *tenants) response.add_tenants()->set_name(t.name());
    if (absl::Status s = service.DescribeTenants(system, &response); !s.ok()) return s;
    return response;
  };
  scheduling::TenantsTarget target;
  target.list_tenants = [&]() -> absl::StatusOr<std::vector<std::string>> {
    absl::StatusOr<std::vector<dapple::v1::Tenant>> tenants = credentials.ListTenants();
    if (!tenants.ok()) return tenants.status();
    std::vector<std::string> names;
    for (const dapple::v1::Tenant& t : *tenants) names.push_back(t.name());
    return names;
  };
  target.create_tenant = [&](const std::string& name) {
    return audited("CreateTenant", "tenant " + name, credentials.CreateTenant(name));
  };
  target.quotas = [&]() -> absl::StatusOr<std::map<std::string, dapple::v1::TenantQuota>> {
    absl::StatusOr<dapple::v1::ListTenantsResponse> all = describe();
    if (!all.ok()) return all.status();
    std::map<std::string, dapple::v1::TenantQuota> out;
    for (const dapple::v1::Tenant& t : all->tenants()) {
      if (t.has_quota()) out[t.name()] = t.quota();
    }
    return out;
  };
  target.cohorts = [&]() -> absl::StatusOr<std::map<std::string, dapple::v1::Cohort>> {
    absl::StatusOr<dapple::v1::ListTenantsResponse> all = describe();
    if (!all.ok()) return all.status();
    std::map<std::string, dapple::v1::Cohort> out;
    for (const dapple::v1::Cohort& c : all->cohorts()) out[c.name()] = c;
    return out;
  };
  target.set_cohort = [&](const dapple::v1::Cohort& cohort) {
    dapple::v1::SetCohortRequest request;
    *request.mutable_cohort() = cohort;
    dapple::v1::Cohort response;
    return audited("SetCohort", "cohort " + cohort.name(),
                   service.SetCohort(system, request, &response));
  };
  target.set_quota = [&](const std::string& tenant, const dapple::v1::TenantQuota& quota) {
    dapple::v1::SetTenantQuotaRequest request;
    request.set_tenant(tenant);
    *request.mutable_quota() = quota;
    dapple::v1::Tenant response;
    return audited("SetTenantQuota", "tenant " + tenant,
                   service.SetTenantQuota(system, request, &response));
  };
  absl::StatusOr<scheduling::TenantsApplied> applied = ApplyTenantsFile(*file, target);
  if (!applied.ok()) return applied.status();
  DAPPLE_LOG_INFO(
      "--tenants-file {}: {} tenants ({} created), {} cohorts; {} quotas and {} cohorts changed",
      path, file->tenants.size(), applied->tenants_created, file->cohorts.size(),
      applied->quotas_set, applied->cohorts_set);
  return absl::OkStatus();
}

constexpr int kUsageExit = 2;
int UsageError(absl::string_view message) {
  std::string line(message);
  std::replace(line.begin(), line.end(), '\n', ' ');
  std::cerr << "dapple-coordinator: " << line << " (see --help)" << std::endl;
  return kUsageExit;
}

// Numbers are taken as text: ValidateFlags checks them, with messages naming the rule
// (CLI11's range checks print "Value 0 not in range 0.000000 to 1.79769e+308").
// The service: address, database, liveness, scheduling, logs, metrics, checkpoints, traces.
void AddServiceFlags(CLI::App& app, dapple::coordinator::RawFlags& raw) {
  app.add_option("--listen", raw.listen, "gRPC address HOST:PORT (port 0 picks a free port)")
      ->capture_default_str();
  app.add_option("--db", raw.db, "SQLite job database (created if missing)")->capture_default_str();
  app.add_option("--heartbeat-interval-ms", raw.heartbeat_interval_ms,
                 "heartbeat interval told to workers (10..60000)")
      ->capture_default_str();
  app.add_option("--worker-timeout-ms", raw.worker_timeout_ms,
                 "a worker silent this long is DEAD and fails its job (100..3600000, more than "
                 "2x the heartbeat interval)")
      ->capture_default_str();
  app.add_option("--dead-worker-retention-s", raw.dead_worker_retention_s,
                 "a DEAD worker is listed this long, then forgotten (0..604800)")
      ->capture_default_str();
  app.add_option("--starvation-after-s", raw.starvation_after_s,
                 "a queued job that waited this long holds the devices it needs as they come "
                 "free: no job after it takes them (0..604800; docs/scheduling.md)")
      ->capture_default_str();
  app.add_option("--preemption-checkpoint-timeout-s", raw.preemption_checkpoint_timeout_s,
                 "a preempted job saves a checkpoint first; after this long without it, it is "
                 "stopped anyway (1..3600)")
      ->capture_default_str();
  app.add_option("--log-level", raw.log_level, "trace | debug | info | warn | error | off")
      ->capture_default_str();
  app.add_option("--metrics-port", raw.metrics_port,
                 "serve Prometheus metrics at http://HOST:PORT/metrics, HOST from --metrics-host "
                 "(0: off)")
      ->capture_default_str();
  app.add_option("--metrics-host", raw.metrics_host,
                 "IPv4 address the metrics endpoint binds (default: 127.0.0.1 for a loopback "
                 "--listen, else 0.0.0.0); its text names every tenant's jobs");
  app.add_option("--metrics-token-file", raw.metrics_token_file,
                 dapple::metrics::kMetricsTokenFileHelp);
  app.add_option("--checkpoint-dir", raw.checkpoint_dir,
                 "root of the jobs' checkpoint folders, <dir>/<tenant>/<job id>/step-<N> "
                 "(_admin for admins' jobs; default: \"checkpoints\" next to --db)");
  app.add_option("--keep-checkpoints", raw.keep_checkpoints,
                 "published checkpoints kept per job; older ones are deleted (0: all)")
      ->capture_default_str();
  app.add_option("--trace-every-steps", raw.trace_every_steps,
                 "workers record a timeline of step 1, a resumed run's first step and every N-th "
                 "step for dapplectl trace "
                 "(0: never)")
      ->capture_default_str();
  app.add_option("--profile-max-age-h", raw.profile_max_age_h,
                 "after a restart, reuse the model profiles measured (and refined by the jobs) "
                 "at most this many hours ago; older ones are measured again (0: always)")
      ->capture_default_str();
}

// TLS, tokens, tenants, the folders jobs may read, the port file.
void AddSecurityAndFileFlags(CLI::App& app, dapple::coordinator::RawFlags& raw) {
  app.add_option("--tls-cert", raw.tls_cert,
                 "PEM certificate chain of the gRPC port (TLS; re-read when it changes)")
      ->type_name("FILE");
  app.add_option("--tls-key", raw.tls_key, "PEM private key of --tls-cert")->type_name("FILE");
  app.add_option("--tls-client-ca", raw.tls_client_ca,
                 "require client certificates signed by this CA (mutual TLS for workers)")
      ->type_name("FILE");
  app.add_flag("--plaintext", raw.plaintext,
               "serve without TLS on a non-loopback --listen (tokens and jobs unencrypted)");
  app.add_option("--admin-token-file", raw.admin_token_file,
                 "first start, and a start that finds no valid admin token: write the admin's "
                 "token here, mode 0600 (default: admin.token next to --db)")
      ->type_name("FILE");
  app.add_option("--join-token-file", raw.join_token_file,
                 "first start only: write the cluster's join token for workers here, mode 0600 "
                 "(default: join.token next to --db)")
      ->type_name("FILE");
  app.add_option("--tenants-file", raw.tenants_file,
                 "YAML file of tenants, cohorts and quotas applied at every start: creates "
                 "missing tenants, sets changed quotas, never deletes (docs/scheduling.md)")
      ->type_name("FILE");
  app.add_option("--data-root", raw.data_roots,
                 "a folder whose files jobs may name in data.path and "
                 "parallel.emulation.profile; repeat it or separate with commas (default: "
                 "/usr/share/datasets,/var/lib/dapple/datasets); must not hold --db, the tokens "
                 "or the checkpoints")
      ->delimiter(',')
      ->type_name("DIR");
  app.add_option("--port-file", raw.port_file,
                 "write the bound port here (atomically) once listening; its folder must "
                 "exist and be writable");
}

// Planner defaults (docs/coordinator.md, "Planning").
void AddPlannerFlags(CLI::App& app, dapple::coordinator::RawFlags& raw) {
  app.add_option("--default-device-memory-mib", raw.default_device_memory_mib,
                 "device memory assumed for a worker that reports none, and for the one-node "
                 "topology a job is planned on without enough workers (MiB)")
      ->capture_default_str();
  app.add_option("--intra-node-bandwidth-mb-s", raw.intra_node_bandwidth_mb_s,
                 "planner: bandwidth between devices of one host (MB/s)")
      ->capture_default_str();
  app.add_option("--inter-node-bandwidth-mb-s", raw.inter_node_bandwidth_mb_s,
                 "planner: bandwidth between hosts (MB/s; 3125 = 25 Gbit/s)")
      ->capture_default_str();
  app.add_option("--intra-node-latency-us", raw.intra_node_latency_us,
                 "planner: latency between devices of one host (us)")
      ->capture_default_str();
  app.add_option("--inter-node-latency-us", raw.inter_node_latency_us,
                 "planner: latency between hosts (us)")
      ->capture_default_str();
  app.add_option("--cpu-gflops", raw.cpu_gflops,
                 "planner: nominal FLOP rate of a cpu device for estimated profiles (GFLOP/s)")
      ->capture_default_str();
  app.add_option("--cuda-gflops", raw.cuda_gflops,
                 "planner: nominal FLOP rate of a cuda device for estimated profiles (GFLOP/s)")
      ->capture_default_str();
}

// An empty value given explicitly (an unset shell variable in a template, say) is a mistake,
// not a request for the default: `--metrics-token-file ""` served /metrics without a token.
// 0, or the usage error's exit code.
int CheckNoEmptyValues(const CLI::App& app) {
  for (const CLI::Option* option : app.get_options()) {
    if (option->count() == 0 || option->get_type_size() == 0) continue;  // absent, or a switch
    for (const std::string& value : option->results()) {
      if (value.empty()) {
        return UsageError(
            absl::StrCat(option->get_name(), " '' is empty: leave the flag out for its default"));
      }
    }
  }
  return 0;
}

// The service's options from the validated flags. An error (a usage error) when a data root is
// unusable or holds one of the coordinator's own files.
absl::StatusOr<dapple::coordinator::CoordinatorOptions> OptionsFromFlags(
    const dapple::coordinator::Flags& flags, const std::string& admin_token_file,
    const std::string& join_token_file) {
  dapple::coordinator::CoordinatorOptions options;
  if (!flags.data_roots.empty()) options.data_roots = flags.data_roots;
  {
    absl::StatusOr<dapple::coordinator::DataRoots> roots =
        dapple::coordinator::DataRoots::Create(options.data_roots);
    if (!roots.ok()) return roots.status();
    const std::string checkpoint_root = flags.checkpoint_dir.empty()
                                            ? dapple::coordinator::DefaultCheckpointRoot(flags.db)
                                            : flags.checkpoint_dir;
    if (absl::Status s = dapple::coordinator::CheckOwnFilesOutside(
            *roots, {{"--db", flags.db},
                     {"--admin-token-file", admin_token_file},
                     {"--join-token-file", join_token_file},
                     {"--checkpoint-dir", checkpoint_root}});
        !s.ok()) {
      return s;
    }
  }
  options.db_path = flags.db;
  options.checkpoint_dir = flags.checkpoint_dir;
  options.keep_checkpoints = static_cast<int>(flags.keep_checkpoints);
  options.heartbeat_interval_ms = flags.heartbeat_interval_ms;
  options.worker_timeout_ms = flags.worker_timeout_ms;
  options.dead_worker_retention_ms = flags.dead_worker_retention_s * 1000;
  options.starvation_after_ms = flags.starvation_after_s * 1000;
  options.preemption_checkpoint_timeout_ms = flags.preemption_checkpoint_timeout_s * 1000;
  options.trace_every_steps = flags.trace_every_steps;
  options.profile_max_age_ms = flags.profile_max_age_h * 3'600'000;
  dapple::coordinator::PlanDefaults& plan = options.plan_defaults;
  plan.device_memory_bytes = flags.default_device_memory_mib << 20;
  plan.intra_node_bandwidth_bytes_per_s =
      static_cast<double>(flags.intra_node_bandwidth_mb_s) * 1e6;
  plan.inter_node_bandwidth_bytes_per_s =
      static_cast<double>(flags.inter_node_bandwidth_mb_s) * 1e6;
  plan.intra_node_latency_ms = static_cast<double>(flags.intra_node_latency_us) / 1000.0;
  plan.inter_node_latency_ms = static_cast<double>(flags.inter_node_latency_us) / 1000.0;
  plan.cpu_flops_per_second = static_cast<double>(flags.cpu_gflops) * 1e9;
  plan.cuda_flops_per_second = static_cast<double>(flags.cuda_gflops) * 1e9;
  return options;
}

// First start: the admin 'admin' and the workers' join token, written to their files; a later
// start that finds no valid admin token issues the admin a new one. Logs which happened.
absl::Status BootstrapAdmin(dapple::coordinator::auth::CredentialStore& store,
                            const std::string& admin_token_file,
                            const std::string& join_token_file) {
  namespace auth = dapple::coordinator::auth;
  absl::StatusOr<bool> bootstrapped = auth::Bootstrap(store, admin_token_file, join_token_file);
  if (!bootstrapped.ok()) return bootstrapped.status();
  if (*bootstrapped) {
    DAPPLE_LOG_INFO(
        "first start: created admin 'admin'; its token is in {}, the workers' join token in {} "
        "(docs/security.md)",
        admin_token_file, join_token_file);
  } else {
    absl::StatusOr<std::optional<std::string>> recovered =
        auth::RecoverAdminToken(store, admin_token_file);
    if (!recovered.ok()) return recovered.status();
    if (recovered->has_value()) {
      DAPPLE_LOG_WARN(
          "no admin token was valid (all revoked or expired): issued a new token for admin "
          "'{}' in {} (docs/security.md, \"Recovering the admin token\")",
          **recovered, admin_token_file);
    }
  }
  return absl::OkStatus();
}

// How often the coordinator looks at its certificate files for a change (tls_file_guard.h).
constexpr int kTlsPollS = 2;

// Says how the gRPC port serves: plain text (and why that is allowed) or TLS.
void LogTransport(const dapple::coordinator::Flags& flags, int port) {
  if (flags.tls_cert.empty()) {
    DAPPLE_LOG_WARN(
        "serving plain text on {} ({}): tokens and jobs travel unencrypted; give "
        "--tls-cert and --tls-key for TLS",
        absl::StrCat(HostOf(flags.listen), ":", port),
        flags.plaintext ? "--plaintext" : "loopback only");
  } else {
    DAPPLE_LOG_INFO(
        "TLS with {} (a renewed certificate and key are served within {} s once they form a "
        "pair){}",
        flags.tls_cert, kTlsPollS + static_cast<int>(dapple::kTlsReloadIntervalS),
        flags.tls_client_ca.empty()
            ? ""
            : absl::StrCat("; client certificates required, signed by ", flags.tls_client_ca));
  }
}

// Names the folders jobs may read, warning of those that are not folders (yet).
void LogDataRoots(const std::vector<std::string>& roots) {
  DAPPLE_LOG_INFO("jobs may read files under: {} (--data-root)", absl::StrJoin(roots, ", "));
  for (const std::string& root : roots) {
    struct stat st {};
    if (stat(root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      DAPPLE_LOG_WARN(
          "--data-root {} is not a folder here (yet): files jobs name under it do not "
          "exist until it does",
          root);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Everything the coordinator writes (the database with token hashes and every tenant's specs
  // and logs, checkpoint folders, token files) is its owner's alone: tenant isolation must not
  // end at the API for another local user (docs/security.md).
  ::umask(077);
  CLI::App app{"dapple-coordinator: job queue, planner, worker registry and rendezvous"};
  dapple::coordinator::RawFlags raw;
  AddServiceFlags(app, raw);
  AddSecurityAndFileFlags(app, raw);
  AddPlannerFlags(app, raw);
  app.set_version_flag("--version", dapple::VersionString(), "print the version and exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    return UsageError(e.what());
  }
  if (const int rc = CheckNoEmptyValues(app); rc != 0) return rc;
  absl::StatusOr<dapple::coordinator::Flags> flags = dapple::coordinator::ValidateFlags(raw);
  if (!flags.ok()) return UsageError(flags.status().message());

  dapple::InitLogging("coordinator", flags->log_level);
  gpr_set_log_function(ForwardGrpcLog);

  // Signals are taken synchronously by sigwait below; every thread started from here on
  // inherits the mask, so none of them is interrupted.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  // The certificate files are read before anything is opened: a wrong path costs nothing.
  // After the signal mask: making credentials starts gRPC, whose threads must not take SIGTERM.
  absl::StatusOr<dapple::ServerTls> tls =
      dapple::MakeGuardedServerCredentials({flags->tls_cert, flags->tls_key, flags->tls_client_ca});
  if (!tls.ok()) return UsageError(tls.status().message());

  namespace auth = dapple::coordinator::auth;
  const std::string admin_token_file = flags->admin_token_file.empty()
                                           ? auth::DefaultTokenFile(flags->db, "admin.token")
                                           : flags->admin_token_file;
  const std::string join_token_file = flags->join_token_file.empty()
                                          ? auth::DefaultTokenFile(flags->db, "join.token")
                                          : flags->join_token_file;
  absl::StatusOr<dapple::coordinator::CoordinatorOptions> from_flags =
      OptionsFromFlags(*flags, admin_token_file, join_token_file);
  if (!from_flags.ok()) return UsageError(from_flags.status().message());
  dapple::coordinator::CoordinatorOptions options = *std::move(from_flags);
  // Observes the jobs from the database's recovery on, so restarted coordinators count them.
  auto metrics = std::make_shared<dapple::coordinator::CoordinatorMetrics>();
  options.job_observer = metrics;
  options.worker_observer = metrics;
  options.scheduling_observer = metrics;
  // Quotas only for tenants that exist: the credential store owns them. It is opened after the
  // service (which locks the database first), so the hook reads it through this slot, which
  // outlives the service.
  dapple::coordinator::auth::CredentialStore* tenants = nullptr;
  options.tenant_exists = [&tenants](const std::string& name) -> absl::Status {
    if (tenants == nullptr) return absl::UnavailableError("the credential store is not open yet");
    return tenants->CheckTenant(name);
  };
  auto service = dapple::coordinator::CoordinatorService::Create(options);
  if (!service.ok()) return Fail(service.status());
  // After Create: the database is locked against a second coordinator before anything is
  // bootstrapped in it.
  auto credential_store = auth::CredentialStore::Open(flags->db, options.now_unix_ms);
  if (!credential_store.ok()) return Fail(credential_store.status());
  tenants = credential_store->get();
  auto audit = auth::AuditLog::Open(flags->db, options.now_unix_ms);
  if (!audit.ok()) return Fail(audit.status());
  const auth::Authenticator authenticator(
      credential_store->get(),
      [metrics](absl::string_view reason) { metrics->OnAuthFailure(reason); });
  (*service)->Start();

  LogDataRoots(options.data_roots);
  HoldGrpcLog(true);
  auto server = dapple::coordinator::GrpcServer::Start(
      flags->listen, service->get(),
      dapple::coordinator::GrpcAuth{&authenticator, credential_store->get(), audit->get()},
      tls->credentials);
  HoldGrpcLog(false, /*drop=*/!server.ok());
  if (!server.ok()) return Fail(server.status());
  if (tls->guard != nullptr) {
    // Renewed certificate files are taken when they work, and said either way
    // (tls_file_guard.h); gRPC re-reads the guard's copies every kTlsReloadIntervalS.
    tls->guard->Start(absl::Seconds(kTlsPollS), [](const dapple::TlsReloadEvent& event) {
      if (event.loaded) {
        DAPPLE_LOG_INFO("{} (within {} s)", event.message, dapple::kTlsReloadIntervalS);
      } else {
        DAPPLE_LOG_WARN("{}", event.message);
      }
    });
  }
  // After the bind: a coordinator refused its port (another one serves there) writes nothing.
  // Calls arriving meanwhile find no admin yet and are refused as unauthenticated.
  if (absl::Status s = BootstrapAdmin(**credential_store, admin_token_file, join_token_file);
      !s.ok()) {
    return Fail(s);
  }
  if (!flags->tenants_file.empty()) {
    if (absl::Status s =
            ApplyTenantsFileAtStart(flags->tenants_file, **credential_store, **service, **audit);
        !s.ok()) {
      (*server)->Shutdown(kShutdownGrace);
      (*service)->Shutdown();
      return Fail(s);
    }
  }
  const int port = (*server)->port();
  // After the bind: with --listen HOST:0 the port it names is the one chosen.
  LogTransport(*flags, port);
  // After the gRPC bind, so that a second coordinator on the same address or database is
  // refused for that reason first.
  std::unique_ptr<dapple::metrics::MetricsServer> metrics_server;
  if (flags->metrics_port != dapple::metrics::kMetricsPortOff) {
    auto started = dapple::metrics::StartMetricsServer(
        flags->metrics_host, flags->metrics_port, flags->metrics_token_file, metrics->metric_set());
    if (!started.ok()) return Fail(started.status());
    metrics_server = *std::move(started);
  }
  if (!flags->port_file.empty()) {
    if (absl::Status s = WritePortFile(flags->port_file, port); !s.ok()) return Fail(s);
  }
  DAPPLE_LOG_INFO("listening on {}:{} (db {})", HostOf(flags->listen), port, flags->db);
  std::cout << "dapple-coordinator listening on " << HostOf(flags->listen) << ":" << port
            << std::endl;

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  DAPPLE_LOG_INFO("signal {}: shutting down", signal_number);
  // The server first: it sends GOAWAY, ends the open WatchJob streams with UNAVAILABLE (so
  // `dapplectl watch` reconnects) and drains; the service stops once no call can reach it.
  (*server)->Shutdown(kShutdownGrace);
  (*service)->Shutdown();
  metrics_server.reset();
  server->reset();
  service->reset();
  DAPPLE_LOG_INFO("stopped");
  return 0;
}
