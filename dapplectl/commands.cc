#include "dapplectl/commands.h"

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "common/grpc_tls.h"
#include "common/job_spec.h"
#include "common/version.h"
#include "dapplectl/admin_command.h"
#include "dapplectl/checkpoint_views.h"
#include "dapplectl/client.h"
#include "dapplectl/command_output.h"
#include "dapplectl/config_command.h"
#include "dapplectl/ctl_config.h"
#include "dapplectl/event_views.h"
#include "dapplectl/exit_codes.h"
#include "dapplectl/flag_values.h"
#include "dapplectl/json_output.h"
#include "dapplectl/log_views.h"
#include "dapplectl/logs_command.h"
#include "dapplectl/plan_inputs.h"
#include "dapplectl/spec_file.h"
#include "dapplectl/token_source.h"
#include "dapplectl/top.h"
#include "dapplectl/trace_command.h"
#include "dapplectl/utf8_text.h"
#include "dapplectl/views.h"
#include "dapplectl/watch_printer.h"

namespace dapple::ctl {
namespace {

// The largest --global-batch / --profile-batch: a job spec's training.global_batch limit.
constexpr int64_t kMaxGlobalBatch = int64_t{1} << 20;

struct Flags {
  std::string coordinator = kDefaultCoordinator;
  std::string output = "table";
  std::string timeout = "10";  // checked by ParsePositiveSeconds after parsing
  std::string ca;              // TLS: the CA that signed the coordinator's certificate
  std::string tls_cert;        // mutual TLS: this client's certificate and key
  std::string tls_key;
  bool plaintext = false;
  std::string context;     // --context: a context of the configuration file (ctl_config.h)
  std::string token_file;  // --token-file: the bearer token (token_source.h)
};

constexpr char kCaEnv[] = "DAPPLE_CA";

constexpr char kCoordinatorEnv[] = "DAPPLE_COORDINATOR";

int64_t NowUnixMs(const Environment& env) { return absl::ToUnixMillis(env.now()); }

int Watch(const Environment& env, CoordinatorClient& client, const std::string& job_id,
          Format format) {
  WatchPrinter printer(env.out, {.json = format == Format::kJson,
                                 .terminal = env.stdout_is_terminal,
                                 .columns = env.terminal_columns,
                                 .now = env.now});
  absl::Status print_status;
  absl::StatusOr<v1::Job> last = client.Watch(job_id, [&](const v1::Job& job) {
    if (print_status.ok()) print_status = printer.OnSnapshot(job);
  });
  if (!last.ok()) {
    printer.Finish(nullptr);
    return FailStatus(env, last.status());
  }
  printer.Finish(&*last);
  if (!print_status.ok()) return FailStatus(env, print_status);
  return ExitCodeForJobState(last->state());
}

// The coordinator resolves paths in its own working folder, not the user's: a relative
// --resume-from is made absolute here. "" stays "".
std::string AbsoluteCheckpointPath(const std::string& path) {
  if (path.empty() || path.front() == '/') return path;
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  return ec ? path : absolute.lexically_normal().string();
}

std::string Footer() {
  return absl::StrCat(
      "Environment:\n"
      "  DAPPLE_COORDINATOR  coordinator address when --coordinator is not given\n"
      "                      (default ",
      kDefaultCoordinator, ")\n\n", ExitCodesHelp(),
      "\nErrors are printed on stderr as one line starting \"dapplectl: \".\n"
      "See docs/dapplectl.md for output formats and an example session.");
}

// What the command line gives each command: CLI11 binds these while it parses.
struct Args {
  std::string job_id;
  std::string file;  // submit
  bool submit_watch = false;
  std::string resume_from;
  std::string logs_rank, logs_tail;
  bool logs_follow = false;
  bool logs_collapse = false;
  std::string trace_file;
  std::string top_interval = "1";
  bool top_once = false;
  std::string plan_file, profile_file, cluster_file, planner, plan_schedule, global_batch,
      profile_batch;
  int64_t global_batch_value = 0;  // --global-batch and --profile-batch once checked
  int64_t profile_batch_value = 0;
  ConfigAction config_action;
};

// The commands and the options whose presence matters after parsing.
struct Commands {
  CLI::Option* coordinator = nullptr;
  CLI::App* config = nullptr;
  CLI::App* submit = nullptr;
  CLI::App* get = nullptr;
  CLI::App* describe = nullptr;
  CLI::App* logs = nullptr;
  CLI::App* list = nullptr;
  CLI::App* cancel = nullptr;
  CLI::App* watch = nullptr;
  CLI::App* workers = nullptr;
  CLI::App* checkpoint = nullptr;
  CLI::App* trace = nullptr;
  CLI::App* top = nullptr;
  CLI::Option* top_job = nullptr;
  CLI::App* plan = nullptr;
  CLI::Option* plan_job = nullptr;
};

// The flags every command takes; returns --coordinator's option.
CLI::Option* AddGlobalFlags(CLI::App& app, Flags& flags) {
  // DAPPLE_COORDINATOR is read below rather than with envname(), so that a bad value names
  // the variable instead of the flag.
  CLI::Option* coordinator =
      app.add_option("--coordinator", flags.coordinator,
                     "coordinator address (default: $DAPPLE_COORDINATOR, else " +
                         std::string(kDefaultCoordinator) + ")")
          ->type_name("HOST:PORT");
  app.add_option("-o,--output", flags.output,
                 "output format: table, json (all commands but trace and logs) or yaml (all "
                 "but watch, submit --watch, top, trace and logs: those stream or write files)")
      ->check(CLI::IsMember({"table", "json", "yaml"}))
      ->capture_default_str();
  app.add_option("--ca", flags.ca,
                 "verify the coordinator's TLS certificate against this CA file (default: "
                 "$DAPPLE_CA; without one: plain text, on loopback or with --plaintext only)")
      ->type_name("FILE");
  app.add_option("--tls-cert", flags.tls_cert, "client certificate for mutual TLS")
      ->type_name("FILE");
  app.add_option("--tls-key", flags.tls_key, "key of --tls-cert")->type_name("FILE");
  app.add_flag("--plaintext", flags.plaintext,
               "talk plain text to a coordinator that is not on loopback (unencrypted)");
  app.add_option("--token-file", flags.token_file,
                 "file holding the bearer token (default: $DAPPLE_TOKEN, $DAPPLE_TOKEN_FILE, "
                 "else the context's token-file)")
      ->type_name("FILE");
  app.add_option("--context", flags.context,
                 "use this context of the configuration file (default: its current-context; "
                 "see dapplectl config)")
      ->type_name("NAME");
  app.add_option("--timeout", flags.timeout,
                 "deadline in seconds of each call, connecting included (watch: of connecting "
                 "and of each reconnect after the coordinator went away; the watch itself has "
                 "none)")
      ->type_name("SECONDS")
      ->capture_default_str();
  return coordinator;
}

CLI::App* AddConfigCommand(CLI::App& app, ConfigAction& action) {
  CLI::App* config_app = app.add_subcommand(
      "config", "show and edit the contexts of the configuration file (coordinator, CA)");
  config_app->require_subcommand(1);
  config_app->add_subcommand("view", "list the contexts, the current one marked");
  config_app->add_subcommand("get-contexts", "the same as view");
  CLI::App* use_context = config_app->add_subcommand("use-context", "make NAME the current one");
  use_context->add_option("NAME", action.name, "context name")->required();
  CLI::App* set_context = config_app->add_subcommand(
      "set-context",
      "create or update NAME from --coordinator, --ca, --tls-cert, --tls-key and --token-file "
      "as given");
  set_context->add_option("NAME", action.name, "context name")->required();
  CLI::App* delete_context = config_app->add_subcommand("delete-context", "delete NAME");
  delete_context->add_option("NAME", action.name, "context name")->required();
  return config_app;
}

// submit, get, describe, logs, list, cancel, watch, workers, checkpoint, trace and top.
void AddJobCommands(CLI::App& app, Args& a, Commands& c) {
  c.submit = app.add_subcommand("submit", "submit a job spec (YAML); prints the job id");
  c.submit->add_option("FILE", a.file, "job spec file")->required();
  c.submit->add_flag("-w,--watch", a.submit_watch, "then follow the job like `watch`");
  c.submit
      ->add_option("--resume-from", a.resume_from,
                   "resume from this published checkpoint directory (weights, optimizer, step; "
                   "the pipeline layout may differ)")
      ->type_name("DIR");
  c.get = app.add_subcommand("get", "show one job: state, plan, metrics");
  c.get->add_option("JOB", a.job_id, "job id, e.g. job-3")->required();
  c.describe = app.add_subcommand(
      "describe", "show one job in detail, then its events (submitted ... finished), newest last");
  c.describe->add_option("JOB", a.job_id, "job id, e.g. job-3")->required();
  c.logs = app.add_subcommand(
      "logs", "print the lines a job's ranks logged, each prefixed [stage/replica worker]");
  c.logs->add_option("JOB", a.job_id, "job id")->required();
  c.logs->add_option("--rank", a.logs_rank, "only this rank's lines")->type_name("STAGE/REPLICA");
  c.logs->add_option("--tail", a.logs_tail, "only the newest N lines (then new ones with --follow)")
      ->type_name("N");
  c.logs->add_flag("-f,--follow", a.logs_follow,
                   "print new lines as they arrive until the job ends");
  c.logs->add_flag("--collapse", a.logs_collapse,
                   "print a line that several ranks logged alike once, naming them all");
  c.list = app.add_subcommand("list", "list all jobs");
  c.cancel = app.add_subcommand("cancel", "cancel a pending or running job");
  c.cancel->add_option("JOB", a.job_id, "job id")->required();
  c.watch = app.add_subcommand(
      "watch", "follow a job until it ends; exit code from its outcome (0, 4 FAILED, 5 CANCELLED)");
  c.watch->add_option("JOB", a.job_id, "job id")->required();
  c.workers = app.add_subcommand("workers", "list the registered workers");
  c.checkpoint = app.add_subcommand(
      "checkpoint", "save a checkpoint of a running job a few steps from now; prints the step");
  c.checkpoint->add_option("JOB", a.job_id, "job id")->required();
  c.trace = app.add_subcommand(
      "trace",
      "write a job's pipeline timeline (its traced steps) as Chrome trace-event JSON for "
      "Perfetto or chrome://tracing");
  c.trace->add_option("JOB", a.job_id, "job id")->required();
  c.trace->add_option("-o,--output", a.trace_file, "file to write; - for stdout")
      ->type_name("FILE")
      ->required();
  c.top = app.add_subcommand(
      "top", "live per-stage view of running jobs: step time, forward, backward, idle, bubble");
  c.top_job = c.top->add_option("JOB", a.job_id, "job id (default: every running job)");
  c.top->add_option("--interval", a.top_interval, "seconds between refreshes")
      ->type_name("SECONDS")
      ->capture_default_str();
  c.top->add_flag("--once", a.top_once, "print one snapshot and exit (the default off a terminal)");
}

void AddPlanCommand(CLI::App& app, Args& a, Commands& c) {
  c.plan = app.add_subcommand(
      "plan",
      "plan a job spec, or a --profile, without running it: stages, devices, predicted step "
      "time and memory");
  c.plan_job = c.plan->add_option("SPEC", a.plan_file,
                                  "job spec file (default: plan the --profile's model, global "
                                  "batch --global-batch)");
  c.plan
      ->add_option("--profile", a.profile_file,
                   "layer costs: a profile in PipeDream's graph.txt format (default: the "
                   "coordinator's measured or FLOP-estimated profile of the job's model)")
      ->type_name("FILE");
  c.plan
      ->add_option("--profile-batch", a.profile_batch,
                   "samples the --profile's times are for (default: pbs-N in its file name, "
                   "or its Input node)")
      ->type_name("N");
  c.plan
      ->add_option("--cluster", a.cluster_file,
                   "devices and links: a cluster file (default: the registered workers)")
      ->type_name("FILE");
  c.plan
      ->add_option("--planner", a.planner,
                   "dapple, pipedream, pipedream-code, dp, uniform, balanced (default: the job's "
                   "parallel.planner, or dapple without a job)")
      ->type_name("NAME");
  c.plan
      ->add_option("--schedule", a.plan_schedule,
                   "dapple, gpipe, zb-h1, zb-h2, interleaved (with JOB: its parallel.interleave, "
                   "else 2 chunks per stage), or auto: the planner chooses the schedule and "
                   "recomputation and lists the alternatives (default: the job's "
                   "parallel.schedule, or dapple without a job)")
      ->type_name("NAME");
  c.plan
      ->add_option("--global-batch", a.global_batch,
                   "without JOB: samples per step (default 16 x the profile's batch)")
      ->type_name("N");
}

// `dapplectl config VERB`: edits the configuration file's contexts with the flags given.
int RunConfig(const Environment& env, const CLI::App& app, const Flags& flags,
              const CLI::App& config_app, const std::string& config_path, ConfigAction action) {
  for (const CLI::App* verb : config_app.get_subcommands()) action.verb = verb->get_name();
  auto given = [&](const char* flag, const std::string& value) -> std::optional<std::string> {
    if (app.count(flag) == 0) return std::nullopt;
    return value;
  };
  action.coordinator = given("--coordinator", flags.coordinator);
  action.ca = given("--ca", flags.ca);
  action.tls_cert = given("--tls-cert", flags.tls_cert);
  action.tls_key = given("--tls-key", flags.tls_key);
  action.token_file = given("--token-file", flags.token_file);
  const std::string command = absl::StrCat("config ", action.verb);
  const std::optional<Format> format =
      OutputFormat(env, command, flags.output, /*yaml_allowed=*/true);
  if (!format.has_value()) return kExitUsage;
  if (*format != Format::kTable) {
    // The contexts are data; what the editing verbs print is one line saying what was done.
    if (action.verb != "view" && action.verb != "get-contexts") {
      return Fail(env, kExitUsage,
                  absl::StrCat(command, ": -o ", flags.output,
                               " is not supported: it prints one line saying what it did; "
                               "leave -o out (config view -o ",
                               flags.output, " shows the contexts)"));
    }
    absl::StatusOr<std::string> text = ConfigAsText(config_path, *format == Format::kJson);
    if (!text.ok()) return Fail(env, kExitUsage, std::string(text.status().message()));
    *env.out << *text << std::flush;
    return kExitOk;
  }
  absl::StatusOr<std::string> out = RunConfigAction(config_path, action);
  if (!out.ok()) return Fail(env, kExitUsage, std::string(out.status().message()));
  *env.out << *out << std::flush;
  return kExitOk;
}

// The configuration file at `config_path` ("" : none) into *config, and the context in use
// (--context, else its current-context; none: nullptr) into *context, which points into
// *config. kExitOk, or the exit code after saying what is wrong.
int LoadContext(const Environment& env, const std::string& config_path,
                const std::string& context_flag, CtlConfig* config, const Context** context) {
  if (!config_path.empty()) {
    absl::StatusOr<CtlConfig> loaded = LoadConfig(config_path);
    if (!loaded.ok()) return Fail(env, kExitUsage, std::string(loaded.status().message()));
    *config = *std::move(loaded);
  }
  const std::string name = context_flag.empty() ? config->current_context : context_flag;
  if (name.empty()) return kExitOk;
  *context = FindContext(*config, name);
  if (*context == nullptr) {
    return Fail(env, kExitUsage,
                absl::StrCat("--context ", name, ": no such context in ",
                             config_path.empty() ? "(no configuration file)" : config_path,
                             " (contexts: ", ContextNames(*config), ")"));
  }
  return kExitOk;
}

// The global flags' values, checked before anything is read or sent (a bad one is a usage
// error), and the coordinator's address: --coordinator, else DAPPLE_COORDINATOR, else the
// context's (*from_context then). kExitOk, or the exit code after saying what is wrong.
int CheckGlobalFlags(const Environment& env, const CLI::App& app, const CLI::Option& coordinator,
                     const Context* context, Flags& flags, bool* from_context,
                     absl::Duration* timeout) {
  // An empty file name (a flag or DAPPLE_CA set to "") would silently mean "none".
  for (const auto& [flag, value] : {std::pair<const char*, const std::string*>{"--ca", &flags.ca},
                                    {"--tls-cert", &flags.tls_cert},
                                    {"--tls-key", &flags.tls_key},
                                    {"--token-file", &flags.token_file}}) {
    if (app.count(flag) > 0 && value->empty()) {
      return Fail(env, kExitUsage, absl::StrCat(flag, " needs a file, got an empty value"));
    }
  }
  if (const char* ca = std::getenv(kCaEnv); ca != nullptr && *ca == '\0') {
    return Fail(env, kExitUsage,
                absl::StrCat(kCaEnv, " is set but empty: give a CA file, or unset it"));
  }
  const char* env_address = std::getenv(kCoordinatorEnv);
  const bool from_env = coordinator.count() == 0 && env_address != nullptr;
  if (from_env) flags.coordinator = env_address;
  // A context is a unit: its TLS files go with its coordinator, not with one given otherwise.
  *from_context = coordinator.count() == 0 && env_address == nullptr && context != nullptr;
  if (*from_context) flags.coordinator = context->coordinator;
  if (absl::Status s =
          CheckCoordinatorAddress(from_env ? kCoordinatorEnv : "--coordinator", flags.coordinator);
      !s.ok()) {
    return Fail(env, kExitUsage, std::string(s.message()));
  }
  absl::StatusOr<absl::Duration> parsed = ParsePositiveSeconds("--timeout", flags.timeout);
  if (!parsed.ok()) return Fail(env, kExitUsage, std::string(parsed.status().message()));
  *timeout = *parsed;
  return kExitOk;
}

// plan's arguments; sets a.global_batch_value and a.profile_batch_value.
int CheckPlanArguments(const Environment& env, const Commands& c, Args& a) {
  const CLI::App& plan = *c.plan;
  // An empty value would otherwise mean "not given" (the default) without saying so.
  for (const auto& [flag, value, what] :
       {std::tuple<const char*, const std::string*, const char*>{"--profile", &a.profile_file,
                                                                 "a profile file name"},
        {"--cluster", &a.cluster_file, "a cluster file name"},
        {"--planner", &a.planner,
         "dapple, pipedream, pipedream-code, dp, uniform, balanced or manual"},
        {"--schedule", &a.plan_schedule, "a schedule name or auto"}}) {
    if (plan.count(flag) > 0 && value->empty()) {
      return Fail(env, kExitUsage,
                  absl::StrCat(flag, " must not be empty: give ", what, ", or leave ", flag,
                               " out for the default"));
    }
  }
  if (c.plan_job->count() > 0 && a.plan_file.empty()) {
    return Fail(env, kExitUsage, "a job spec file name must not be empty");
  }
  if (a.plan_file.empty() && a.profile_file.empty()) {
    return Fail(env, kExitUsage,
                "plan needs a job spec file, or --profile FILE to plan a profile's model "
                "(see dapplectl plan --help)");
  }
  if (!a.plan_file.empty() && plan.count("--global-batch") > 0) {
    return Fail(env, kExitUsage,
                "--global-batch is for plans without a job spec; the job's "
                "training.global_batch applies");
  }
  if (a.profile_file.empty() && plan.count("--profile-batch") > 0) {
    return Fail(env, kExitUsage,
                "--profile-batch is the batch size of the --profile file's times; it needs "
                "--profile FILE");
  }
  if (plan.count("--global-batch") > 0) {
    absl::StatusOr<int64_t> v =
        ParsePositiveCount("--global-batch", a.global_batch, kMaxGlobalBatch);
    if (!v.ok()) return Fail(env, kExitUsage, std::string(v.status().message()));
    a.global_batch_value = *v;
  }
  if (plan.count("--profile-batch") > 0) {
    absl::StatusOr<int64_t> v =
        ParsePositiveCount("--profile-batch", a.profile_batch, kMaxGlobalBatch);
    if (!v.ok()) return Fail(env, kExitUsage, std::string(v.status().message()));
    a.profile_batch_value = *v;
  }
  return kExitOk;
}

// The commands' arguments, like the flags checked before anything is read or sent.
int CheckCommandArguments(const Environment& env, const Commands& c, AdminCommands& admin,
                          Args& a) {
  if (c.submit->parsed()) {
    if (absl::Status s = CheckSpecFileName(a.file); !s.ok()) {
      return Fail(env, kExitUsage, std::string(s.message()));
    }
  }
  if (c.get->parsed() || c.describe->parsed() || c.logs->parsed() || c.cancel->parsed() ||
      c.watch->parsed() || c.trace->parsed() || c.checkpoint->parsed() ||
      (c.top->parsed() && c.top_job->count() > 0)) {  // `top ""` is not `top`
    if (absl::Status s = CheckJobId(a.job_id); !s.ok()) {
      return Fail(env, kExitUsage, std::string(s.message()));
    }
  }
  if (admin.parsed()) {
    if (absl::Status s = admin.CheckArguments(); !s.ok()) {
      return Fail(env, kExitUsage, std::string(s.message()));
    }
  }
  return c.plan->parsed() ? CheckPlanArguments(env, c, a) : kExitOk;
}

// How to reach the coordinator: address, deadline, TLS (--ca, DAPPLE_CA or the context's; plain
// text only on loopback or with --plaintext) and the bearer token (token_source.h). kExitOk, or
// the exit code after saying what is wrong.
int ResolveClientOptions(const Environment& env, Flags flags, const Context* context,
                         bool from_context, absl::Duration timeout, ClientOptions* options) {
  options->address = flags.coordinator;
  options->timeout = timeout;
  ClientTlsFiles tls;
  if (flags.ca.empty()) {
    if (const char* ca = std::getenv(kCaEnv); ca != nullptr) {
      flags.ca = ca;
      tls.ca_flag = kCaEnv;  // errors name where the file came from (not --ca, never given)
    }
  }
  if (from_context) {
    const std::string of = absl::StrCat("context ", context->name, "'s ");
    if (flags.ca.empty() && !context->ca.empty()) {
      flags.ca = context->ca;
      tls.ca_flag = of + "ca";
    }
    if (flags.tls_cert.empty() && flags.tls_key.empty() && !context->tls_cert.empty()) {
      flags.tls_cert = context->tls_cert;
      flags.tls_key = context->tls_key;
      tls.cert_flag = of + "tls-cert";
      tls.key_flag = of + "tls-key";
    }
  }
  if (flags.plaintext && !flags.ca.empty()) {
    return Fail(env, kExitUsage,
                absl::StrCat("--plaintext and ", tls.ca_flag,
                             " contradict each other: choose one (DAPPLE_CA counts as --ca)"));
  }
  if (flags.ca.empty()) {
    if (absl::Status s = RequirePlaintextAllowed("coordinator", flags.coordinator, flags.plaintext,
                                                 "--ca FILE (or DAPPLE_CA)", "--plaintext");
        !s.ok()) {
      return Fail(env, kExitUsage, std::string(s.message()));
    }
  }
  tls.ca_file = flags.ca;
  tls.cert_file = flags.tls_cert;
  tls.key_file = flags.tls_key;
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      MakeChannelCredentials(tls);
  if (!credentials.ok()) return Fail(env, kExitUsage, std::string(credentials.status().message()));
  options->credentials = *std::move(credentials);
  options->tls = !flags.ca.empty();
  options->client_certificate = !flags.tls_cert.empty();

  TokenSources sources;
  sources.flag_file = flags.token_file;
  sources.env_token = std::getenv("DAPPLE_TOKEN");
  sources.env_token_file = std::getenv("DAPPLE_TOKEN_FILE");
  // The context's token goes with the context in use, whatever gives the address
  // (token_source.h).
  if (context != nullptr) {
    sources.context_file = context->token_file;
    sources.context_name = context->name;
  }
  absl::StatusOr<std::string> token = ResolveToken(sources);
  if (!token.ok()) return FailStatus(env, token.status());
  options->token = *std::move(token);
  if (options->token.empty()) options->token_search = DescribeTokenSearch(sources);
  return kExitOk;
}

int RunSubmit(const Environment& env, const Commands& c, const Args& a, const std::string& output,
              const ClientOptions& options) {
  std::optional<Format> format =
      OutputFormat(env, "submit", output, /*yaml_allowed=*/!a.submit_watch);
  if (!format) return kExitUsage;
  absl::StatusOr<std::string> spec = ReadSpecFile(a.file);
  if (!spec.ok()) return Fail(env, kExitRefused, std::string(spec.status().message()));
  if (c.submit->count("--resume-from") > 0 && a.resume_from.empty()) {
    return Fail(env, kExitUsage, "--resume-from must name a checkpoint directory");
  }
  CoordinatorClient client(options);
  absl::StatusOr<v1::Job> job = client.Submit(*spec, a.file, AbsoluteCheckpointPath(a.resume_from));
  if (!job.ok()) return FailStatus(env, job.status());
  if (a.submit_watch && *format == Format::kJson) {
    // One JSON object per line, like the snapshots that follow.
    absl::StatusOr<std::string> line = MessageToJson(*job, /*pretty=*/false);
    if (!line.ok()) return FailStatus(env, line.status());
    *env.out << *line << "\n";
  } else {
    const int rc = PrintMessage(env, *format, *job, [&] { return RenderSubmitted(*job); });
    if (rc != kExitOk) return rc;
  }
  if (!a.submit_watch) return kExitOk;
  return Watch(env, client, job->id(), *format);
}

int RunLogsCommand(const Environment& env, const Commands& c, const Args& a,
                   const std::string& output, const ClientOptions& options) {
  // The lines are text: only the table format (the default) prints them.
  if (output != "table") {
    return Fail(
        env, kExitUsage,
        absl::StrCat("logs: -o ", output, " is not supported: the lines are text; leave -o out"));
  }
  LogsOptions logs_options;
  logs_options.job_id = a.job_id;
  logs_options.follow = a.logs_follow;
  logs_options.collapse = a.logs_collapse;
  if (c.logs->count("--rank") > 0) {
    absl::StatusOr<std::pair<int, int>> rank = ParseRank(a.logs_rank);
    if (!rank.ok()) return Fail(env, kExitUsage, std::string(rank.status().message()));
    logs_options.rank = *rank;
  }
  if (c.logs->count("--tail") > 0) {
    absl::StatusOr<int64_t> tail = ParsePositiveCount("--tail", a.logs_tail, 1'000'000);
    if (!tail.ok()) return Fail(env, kExitUsage, std::string(tail.status().message()));
    logs_options.tail = static_cast<int>(*tail);
  }
  CoordinatorClient client(options);
  if (absl::Status s = RunLogs(client, logs_options, env.out); !s.ok()) {
    return FailStatus(env, s);
  }
  return kExitOk;
}

int RunPlanCommand(const Environment& env, const Args& a, const std::string& output,
                   const ClientOptions& options) {
  std::optional<Format> format = OutputFormat(env, "plan", output, true);
  if (!format) return kExitUsage;
  // Every file is read and checked before anything is sent.
  v1::PlanJobRequest request;
  if (!a.plan_file.empty()) {
    absl::StatusOr<std::string> spec = ReadSpecFile(a.plan_file);
    if (!spec.ok()) return Fail(env, kExitRefused, std::string(spec.status().message()));
    // An empty spec_yaml means "no spec" (a plan of --profile alone), so an empty file is
    // judged here, by the coordinator's parser, as submit's coordinator judges it.
    const std::string source = EscapeInvalidUtf8(a.plan_file);
    if (spec->empty()) {
      absl::StatusOr<v1::JobSpec> parsed = ParseJobSpec(*spec, source);
      if (!parsed.ok())
        return FailStatus(env, absl::InvalidArgumentError(parsed.status().message()));
    }
    request.set_spec_yaml(*std::move(spec));
    request.set_source_name(source);
  }
  if (!a.profile_file.empty()) {
    absl::StatusOr<v1::ModelProfile> profile =
        ReadPlanProfile(a.profile_file, a.profile_batch_value);
    if (!profile.ok()) return Fail(env, kExitRefused, std::string(profile.status().message()));
    *request.mutable_profile() = *std::move(profile);
  }
  if (!a.cluster_file.empty()) {
    absl::StatusOr<v1::ClusterTopology> cluster = ReadPlanCluster(a.cluster_file);
    if (!cluster.ok()) return Fail(env, kExitRefused, std::string(cluster.status().message()));
    *request.mutable_cluster() = *std::move(cluster);
  }
  request.set_planner(EscapeInvalidUtf8(a.planner));
  request.set_schedule(EscapeInvalidUtf8(a.plan_schedule));
  request.set_global_batch(a.global_batch_value);
  CoordinatorClient client(options);
  absl::StatusOr<v1::PlanJobResponse> response = client.Plan(std::move(request));
  if (!response.ok()) return FailStatus(env, response.status());
  return PrintMessage(env, *format, response->plan(),
                      [&] { return RenderPlan(response->plan(), response->cluster()); });
}

int RunTraceCommand(const Environment& env, const Args& a, const ClientOptions& options) {
  if (a.trace_file.empty()) {
    return Fail(env, kExitUsage, "trace: -o must name a file, or - for stdout");
  }
  // trace's -o is a file while every other command's is a format: `trace job-3 -o json`
  // would silently write a file called json.
  if (a.trace_file == "table" || a.trace_file == "json" || a.trace_file == "yaml") {
    return Fail(env, kExitUsage,
                absl::StrCat("trace: -o names the file to write (the trace is always Chrome "
                             "trace-event JSON), got '",
                             a.trace_file,
                             "', an output format: use -o trace.json, -o - for "
                             "stdout, or -o ./",
                             a.trace_file, " for a file of that name"));
  }
  CoordinatorClient client(options);
  absl::StatusOr<std::string> summary = WriteJobTrace(client, a.job_id, a.trace_file, env.out);
  if (!summary.ok()) return FailStatus(env, summary.status());
  // With the JSON on stdout, the summary goes to stderr.
  *(a.trace_file == "-" ? env.err : env.out) << *summary << "\n" << std::flush;
  return kExitOk;
}

int RunTopCommand(const Environment& env, const Args& a, const std::string& output,
                  const ClientOptions& options) {
  std::optional<Format> format = OutputFormat(env, "top", output, false);
  if (!format) return kExitUsage;
  absl::StatusOr<absl::Duration> interval = ParsePositiveSeconds("--interval", a.top_interval);
  if (!interval.ok()) return Fail(env, kExitUsage, std::string(interval.status().message()));
  TopOptions top_options;
  top_options.job_id = a.job_id;
  top_options.interval = *interval;
  top_options.once = a.top_once || !env.stdout_is_terminal;
  top_options.json = *format == Format::kJson;
  top_options.terminal = env.stdout_is_terminal;
  CoordinatorClient client(options);
  if (absl::Status s = RunTop(client, top_options, env.out); !s.ok()) return FailStatus(env, s);
  return kExitOk;
}

// get, describe, list, cancel, checkpoint, watch and workers: one call, its answer printed.
int RunQuery(const Environment& env, const Commands& c, const Args& a, const std::string& output,
             const ClientOptions& options) {
  const CLI::App& command = *(c.get->parsed()          ? c.get
                              : c.describe->parsed()   ? c.describe
                              : c.list->parsed()       ? c.list
                              : c.cancel->parsed()     ? c.cancel
                              : c.checkpoint->parsed() ? c.checkpoint
                              : c.watch->parsed()      ? c.watch
                                                       : c.workers);
  const bool streams = &command == c.watch;
  std::optional<Format> format = OutputFormat(env, command.get_name(), output, !streams);
  if (!format) return kExitUsage;
  CoordinatorClient client(options);
  if (streams) return Watch(env, client, a.job_id, *format);
  if (&command == c.get || &command == c.describe) {
    absl::StatusOr<v1::Job> job = client.Get(a.job_id);
    if (!job.ok()) return FailStatus(env, job.status());
    return PrintMessage(env, *format, *job, [&] {
      return &command == c.get ? RenderJobDetails(*job, NowUnixMs(env))
                               : RenderDescribe(*job, NowUnixMs(env));
    });
  }
  if (&command == c.list) {
    absl::StatusOr<v1::ListJobsResponse> jobs = client.List();
    if (!jobs.ok()) return FailStatus(env, jobs.status());
    return PrintMessage(env, *format, *jobs,
                        [&] { return RenderJobList(jobs->jobs(), NowUnixMs(env)); });
  }
  if (&command == c.cancel) {
    absl::StatusOr<v1::Job> job = client.Cancel(a.job_id);
    if (!job.ok()) return FailStatus(env, job.status());
    return PrintMessage(env, *format, *job, [&] { return RenderCancelled(*job); });
  }
  if (&command == c.checkpoint) {
    absl::StatusOr<v1::CheckpointJobResponse> response = client.Checkpoint(a.job_id);
    if (!response.ok()) return FailStatus(env, response.status());
    return PrintMessage(env, *format, *response,
                        [&] { return RenderCheckpointRequested(*response); });
  }
  absl::StatusOr<v1::ListWorkersResponse> response = client.ListWorkers();
  if (!response.ok()) return FailStatus(env, response.status());
  return PrintMessage(env, *format, *response,
                      [&] { return RenderWorkerList(response->workers(), NowUnixMs(env)); });
}

}  // namespace

int RunDapplectl(int argc, const char* const* argv, const Environment& env) {
  Flags flags;
  Args args;
  Commands commands;
  CLI::App app("dapplectl: submit, follow and cancel dapple training jobs.", "dapplectl");
  app.require_subcommand(1);
  // Global flags are accepted after the command too: `dapplectl get job-1 -o json`.
  app.fallthrough();
  app.footer(Footer());
  commands.coordinator = AddGlobalFlags(app, flags);
  commands.config = AddConfigCommand(app, args.config_action);
  AddJobCommands(app, args, commands);
  AddPlanCommand(app, args, commands);
  AdminCommands admin_commands(app);
  app.set_version_flag("--version", VersionString(), "print dapplectl's version and exit");
  // `dapplectl help [COMMAND...]`, as git and kubectl take it: the command's --help. An unknown
  // COMMAND is the usage error `dapplectl COMMAND` gives (exit 2), not the top-level help.
  std::vector<const char*> words(argv, argv + argc);
  if (words.size() >= 2 && std::string(words[1]) == "help") {
    words.erase(words.begin() + 1);
    bool known = words.size() < 2;
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
      known = known || sub->check_name(words[1]);
    }
    if (known) words.push_back("--help");
  }
  try {
    app.parse(static_cast<int>(words.size()), words.data());
  } catch (const CLI::ParseError& e) {
    return ReportParseError(env, app, *commands.config, e);
  }

  // The configuration file's contexts: `config` edits them; every other command may take its
  // coordinator and TLS files from one (below the flags and environment variables).
  const std::string config_path = ConfigPath();
  if (commands.config->parsed()) {
    return RunConfig(env, app, flags, *commands.config, config_path, args.config_action);
  }
  CtlConfig config;
  const Context* context = nullptr;
  bool from_context = false;
  absl::Duration timeout;
  ClientOptions options;
  if (const int rc = LoadContext(env, config_path, flags.context, &config, &context);
      rc != kExitOk) {
    return rc;
  }
  if (const int rc = CheckGlobalFlags(env, app, *commands.coordinator, context, flags,
                                      &from_context, &timeout);
      rc != kExitOk) {
    return rc;
  }
  if (const int rc = CheckCommandArguments(env, commands, admin_commands, args); rc != kExitOk) {
    return rc;
  }
  if (const int rc = ResolveClientOptions(env, flags, context, from_context, timeout, &options);
      rc != kExitOk) {
    return rc;
  }

  if (admin_commands.parsed()) return admin_commands.Run(options, flags.output, env);
  if (commands.submit->parsed()) return RunSubmit(env, commands, args, flags.output, options);
  if (commands.logs->parsed()) return RunLogsCommand(env, commands, args, flags.output, options);
  if (commands.plan->parsed()) return RunPlanCommand(env, args, flags.output, options);
  if (commands.trace->parsed()) return RunTraceCommand(env, args, options);
  if (commands.top->parsed()) return RunTopCommand(env, args, flags.output, options);
  for (const CLI::App* query : {commands.get, commands.describe, commands.list, commands.cancel,
                                commands.checkpoint, commands.watch, commands.workers}) {
    if (query->parsed()) return RunQuery(env, commands, args, flags.output, options);
  }
  return Fail(env, kExitUsage, "no command given (see dapplectl --help)");
}

}  // namespace dapple::ctl
