#include "dapplectl/commands.h"

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "common/grpc_tls.h"
#include "common/job_spec.h"
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
#include "dapplectl/usage_errors.h"
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

}  // namespace

int RunDapplectl(int argc, const char* const* argv, const Environment& env) {
  Flags flags;
  CLI::App app("dapplectl: submit, follow and cancel dapple training jobs.", "dapplectl");
  app.require_subcommand(1);
  // Global flags are accepted after the command too: `dapplectl get job-1 -o json`.
  app.fallthrough();
  app.footer(Footer());
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

  CLI::App* config_app = app.add_subcommand(
      "config", "show and edit the contexts of the configuration file (coordinator, CA)");
  config_app->require_subcommand(1);
  ConfigAction config_action;
  config_app->add_subcommand("view", "list the contexts, the current one marked");
  config_app->add_subcommand("get-contexts", "the same as view");
  CLI::App* use_context = config_app->add_subcommand("use-context", "make NAME the current one");
  use_context->add_option("NAME", config_action.name, "context name")->required();
  CLI::App* set_context = config_app->add_subcommand(
      "set-context",
      "create or update NAME from --coordinator, --ca, --tls-cert, --tls-key and --token-file "
      "as given");
  set_context->add_option("NAME", config_action.name, "context name")->required();
  CLI::App* delete_context = config_app->add_subcommand("delete-context", "delete NAME");
  delete_context->add_option("NAME", config_action.name, "context name")->required();

  std::string file;
  bool submit_watch = false;
  CLI::App* submit = app.add_subcommand("submit", "submit a job spec (YAML); prints the job id");
  submit->add_option("FILE", file, "job spec file")->required();
  submit->add_flag("-w,--watch", submit_watch, "then follow the job like `watch`");
  std::string resume_from;
  submit
      ->add_option("--resume-from", resume_from,
                   "resume from this published checkpoint directory (weights, optimizer, step; "
                   "the pipeline layout may differ)")
      ->type_name("DIR");

  std::string job_id;
  CLI::App* get = app.add_subcommand("get", "show one job: state, plan, metrics");
  get->add_option("JOB", job_id, "job id, e.g. job-3")->required();
  CLI::App* describe = app.add_subcommand(
      "describe", "show one job in detail, then its events (submitted ... finished), newest last");
  describe->add_option("JOB", job_id, "job id, e.g. job-3")->required();
  std::string logs_rank, logs_tail;
  bool logs_follow = false;
  bool logs_collapse = false;
  CLI::App* logs = app.add_subcommand(
      "logs", "print the lines a job's ranks logged, each prefixed [stage/replica worker]");
  logs->add_option("JOB", job_id, "job id")->required();
  logs->add_option("--rank", logs_rank, "only this rank's lines")->type_name("STAGE/REPLICA");
  logs->add_option("--tail", logs_tail, "only the newest N lines (then new ones with --follow)")
      ->type_name("N");
  logs->add_flag("-f,--follow", logs_follow, "print new lines as they arrive until the job ends");
  logs->add_flag("--collapse", logs_collapse,
                 "print a line that several ranks logged alike once, naming them all");
  CLI::App* list = app.add_subcommand("list", "list all jobs");
  CLI::App* cancel = app.add_subcommand("cancel", "cancel a pending or running job");
  cancel->add_option("JOB", job_id, "job id")->required();
  CLI::App* watch = app.add_subcommand(
      "watch", "follow a job until it ends; exit code from its outcome (0, 4 FAILED, 5 CANCELLED)");
  watch->add_option("JOB", job_id, "job id")->required();
  CLI::App* workers = app.add_subcommand("workers", "list the registered workers");
  CLI::App* checkpoint = app.add_subcommand(
      "checkpoint", "save a checkpoint of a running job a few steps from now; prints the step");
  checkpoint->add_option("JOB", job_id, "job id")->required();
  std::string trace_file;
  CLI::App* trace = app.add_subcommand(
      "trace",
      "write a job's pipeline timeline (its traced steps) as Chrome trace-event JSON for "
      "Perfetto or chrome://tracing");
  trace->add_option("JOB", job_id, "job id")->required();
  trace->add_option("-o,--output", trace_file, "file to write; - for stdout")
      ->type_name("FILE")
      ->required();
  std::string top_interval = "1";
  bool top_once = false;
  CLI::App* top = app.add_subcommand(
      "top", "live per-stage view of running jobs: step time, forward, backward, idle, bubble");
  CLI::Option* top_job = top->add_option("JOB", job_id, "job id (default: every running job)");
  top->add_option("--interval", top_interval, "seconds between refreshes")
      ->type_name("SECONDS")
      ->capture_default_str();
  top->add_flag("--once", top_once, "print one snapshot and exit (the default off a terminal)");

  std::string plan_file, profile_file, cluster_file, planner, plan_schedule, global_batch,
      profile_batch;
  CLI::App* plan = app.add_subcommand(
      "plan",
      "plan a job spec, or a --profile, without running it: stages, devices, predicted step "
      "time and memory");
  CLI::Option* plan_job =
      plan->add_option("SPEC", plan_file,
                       "job spec file (default: plan the --profile's model, global batch "
                       "--global-batch)");
  plan->add_option("--profile", profile_file,
                   "layer costs: a profile in PipeDream's graph.txt format (default: the "
                   "coordinator's measured or FLOP-estimated profile of the job's model)")
      ->type_name("FILE");
  plan->add_option("--profile-batch", profile_batch,
                   "samples the --profile's times are for (default: pbs-N in its file name, "
                   "or its Input node)")
      ->type_name("N");
  plan->add_option("--cluster", cluster_file,
                   "devices and links: a cluster file (default: the registered workers)")
      ->type_name("FILE");
  plan->add_option("--planner", planner,
                   "dapple, pipedream, pipedream-code, dp, uniform, balanced (default: the job's "
                   "parallel.planner, or dapple without a job)")
      ->type_name("NAME");
  plan->add_option("--schedule", plan_schedule,
                   "dapple, gpipe, zb-h1, zb-h2, interleaved (with JOB: its parallel.interleave, "
                   "else 2 chunks per stage), or auto: the planner chooses the schedule and "
                   "recomputation and lists the alternatives (default: the job's "
                   "parallel.schedule, or dapple without a job)")
      ->type_name("NAME");
  plan->add_option("--global-batch", global_batch,
                   "without JOB: samples per step (default 16 x the profile's batch)")
      ->type_name("N");

  AdminCommands admin_commands(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --help-all are "errors" with exit code 0; every other parse error is a usage
    // error (CLI11's own exit codes, 100-127, are not dapplectl's).
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {
      return app.exit(e, *env.out, *env.err);
    }
    // CLI11 reports `dapplectl frobnicate` as "A subcommand is required"; name the word.
    const std::vector<std::string> rest = app.remaining();
    if (app.get_subcommands().empty() && !rest.empty() && !rest.front().empty() &&
        rest.front()[0] != '-') {
      return Fail(
          env, kExitUsage,
          absl::StrCat(
              "unknown command \"", rest.front(),
              "\"; commands: submit, get, describe, logs, list, cancel, watch, workers, plan, "
              "trace, top, checkpoint, config, admin, auth (see dapplectl --help)"));
    }
    // The command being parsed, for the message and the help it points to.
    const std::string command = ParsedCommandPath(app);
    // By type: CLI11 names some errors after the subcommand that raised them.
    const char* kind = dynamic_cast<const CLI::ExtrasError*>(&e)        ? "ExtrasError"
                       : dynamic_cast<const CLI::ArgumentMismatch*>(&e) ? "ArgumentMismatch"
                       : dynamic_cast<const CLI::RequiredError*>(&e)    ? "RequiredError"
                                                                        : "";
    if (command == "config" && config_app->get_subcommands().empty()) {
      std::vector<std::string> stray = config_app->remaining();
      if (stray.empty()) stray = app.remaining();
      return Fail(env, kExitUsage,
                  absl::StrCat(stray.empty()
                                   ? "config needs a subcommand"
                                   : absl::StrCat("config has no subcommand '", stray.front(), "'"),
                               ": view, get-contexts, use-context NAME, set-context NAME, "
                               "delete-context NAME (see dapplectl config --help)"));
    }
    // A command group (admin, admin tenant, auth ...) without its subcommand, or with a word
    // that is none of them.
    const CLI::App& deepest = DeepestParsedCommand(app);
    if (kind == std::string("RequiredError") &&
        !deepest.get_subcommands(std::function<bool(const CLI::App*)>()).empty() &&
        deepest.get_subcommands().empty()) {
      std::vector<std::string> stray = deepest.remaining();
      if (stray.empty()) stray = app.remaining();
      std::vector<std::string> names;
      for (const CLI::App* sub : deepest.get_subcommands(std::function<bool(const CLI::App*)>())) {
        names.push_back(sub->get_name());
      }
      const std::string closest = stray.empty() ? "" : SuggestFlag(stray.front(), names);
      if (command.empty() && stray.empty()) {
        return Fail(env, kExitUsage,
                    absl::StrCat("no command given; commands: ", SubcommandNames(deepest),
                                 " (see dapplectl --help)"));
      }
      return Fail(
          env, kExitUsage,
          absl::StrCat(stray.empty()
                           ? absl::StrCat(command, " needs a subcommand")
                           : absl::StrCat(command, " has no subcommand '", stray.front(), "'"),
                       closest.empty() ? "" : absl::StrCat(" (did you mean ", closest, "?)"), ": ",
                       SubcommandNames(deepest), " (see dapplectl ", command, " --help)"));
    }
    // One unknown flag: the closest flag of the command (or a global one), if any is close.
    std::string suggestion;
    if (kind == std::string("ExtrasError")) {
      std::vector<std::string> unknown_flags;
      for (const std::string& word : app.remaining()) {
        if (absl::StartsWith(word, "-")) unknown_flags.push_back(word);
      }
      if (unknown_flags.size() == 1) {
        std::vector<std::string> known = FlagNames(deepest);
        if (&deepest != &app) {
          for (std::string& name : FlagNames(app)) known.push_back(std::move(name));
        }
        suggestion = SuggestFlag(unknown_flags.front(), known);
      }
    }
    return Fail(env, kExitUsage, UsageErrorText(kind, e.what(), command, suggestion));
  }

  // The configuration file's contexts: `config` edits them; every other command may take its
  // coordinator and TLS files from one (below the flags and environment variables).
  const std::string config_path = ConfigPath();
  if (config_app->parsed()) {
    for (const CLI::App* verb : config_app->get_subcommands())
      config_action.verb = verb->get_name();
    auto given = [&](const char* flag, const std::string& value) -> std::optional<std::string> {
      if (app.count(flag) == 0) return std::nullopt;
      return value;
    };
    config_action.coordinator = given("--coordinator", flags.coordinator);
    config_action.ca = given("--ca", flags.ca);
    config_action.tls_cert = given("--tls-cert", flags.tls_cert);
    config_action.tls_key = given("--tls-key", flags.tls_key);
    config_action.token_file = given("--token-file", flags.token_file);
    absl::StatusOr<std::string> out = RunConfigAction(config_path, config_action);
    if (!out.ok()) return Fail(env, kExitUsage, std::string(out.status().message()));
    *env.out << *out << std::flush;
    return kExitOk;
  }
  const Context* context = nullptr;
  CtlConfig config;
  if (!config_path.empty()) {
    absl::StatusOr<CtlConfig> loaded = LoadConfig(config_path);
    if (!loaded.ok()) return Fail(env, kExitUsage, std::string(loaded.status().message()));
    config = *std::move(loaded);
  }
  const std::string context_name = flags.context.empty() ? config.current_context : flags.context;
  if (!context_name.empty()) {
    context = FindContext(config, context_name);
    if (context == nullptr) {
      return Fail(env, kExitUsage,
                  absl::StrCat("--context ", context_name, ": no such context in ",
                               config_path.empty() ? "(no configuration file)" : config_path,
                               " (contexts: ", ContextNames(config), ")"));
    }
  }

  // Flag values are checked before anything is read or sent: a bad one is a usage error. An
  // empty file name (a flag or DAPPLE_CA set to "") would silently mean "none".
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
  const bool from_env = coordinator->count() == 0 && env_address != nullptr;
  if (from_env) flags.coordinator = env_address;
  // A context is a unit: its TLS files go with its coordinator, not with one given otherwise.
  const bool from_context =
      coordinator->count() == 0 && env_address == nullptr && context != nullptr;
  if (from_context) flags.coordinator = context->coordinator;
  if (absl::Status s =
          CheckCoordinatorAddress(from_env ? kCoordinatorEnv : "--coordinator", flags.coordinator);
      !s.ok()) {
    return Fail(env, kExitUsage, std::string(s.message()));
  }
  absl::StatusOr<absl::Duration> timeout = ParsePositiveSeconds("--timeout", flags.timeout);
  if (!timeout.ok()) return Fail(env, kExitUsage, std::string(timeout.status().message()));
  // Arguments, like flags, are checked before anything is read or sent.
  if (submit->parsed()) {
    if (absl::Status s = CheckSpecFileName(file); !s.ok()) {
      return Fail(env, kExitUsage, std::string(s.message()));
    }
  }
  if (get->parsed() || describe->parsed() || logs->parsed() || cancel->parsed() ||
      watch->parsed() || trace->parsed() || checkpoint->parsed() ||
      (top->parsed() && top_job->count() > 0)) {  // `top ""` is not `top`
    if (absl::Status s = CheckJobId(job_id); !s.ok()) {
      return Fail(env, kExitUsage, std::string(s.message()));
    }
  }

  if (admin_commands.parsed()) {
    if (absl::Status s = admin_commands.CheckArguments(); !s.ok()) {
      return Fail(env, kExitUsage, std::string(s.message()));
    }
  }

  int64_t global_batch_value = 0;
  int64_t profile_batch_value = 0;
  if (plan->parsed()) {
    // An empty value would otherwise mean "not given" (the default) without saying so.
    for (const auto& [flag, value, what] :
         {std::tuple<const char*, const std::string*, const char*>{"--profile", &profile_file,
                                                                   "a profile file name"},
          {"--cluster", &cluster_file, "a cluster file name"},
          {"--planner", &planner,
           "dapple, pipedream, pipedream-code, dp, uniform, balanced or manual"},
          {"--schedule", &plan_schedule, "a schedule name or auto"}}) {
      if (plan->count(flag) > 0 && value->empty()) {
        return Fail(env, kExitUsage,
                    absl::StrCat(flag, " must not be empty: give ", what, ", or leave ", flag,
                                 " out for the default"));
      }
    }
    if (plan_job->count() > 0 && plan_file.empty()) {
      return Fail(env, kExitUsage, "a job spec file name must not be empty");
    }
    if (plan_file.empty() && profile_file.empty()) {
      return Fail(env, kExitUsage,
                  "plan needs a job spec file, or --profile FILE to plan a profile's model "
                  "(see dapplectl plan --help)");
    }
    if (!plan_file.empty() && plan->count("--global-batch") > 0) {
      return Fail(env, kExitUsage,
                  "--global-batch is for plans without a job spec; the job's "
                  "training.global_batch applies");
    }
    if (profile_file.empty() && plan->count("--profile-batch") > 0) {
      return Fail(env, kExitUsage,
                  "--profile-batch is the batch size of the --profile file's times; it needs "
                  "--profile FILE");
    }
    if (plan->count("--global-batch") > 0) {
      absl::StatusOr<int64_t> v =
          ParsePositiveCount("--global-batch", global_batch, kMaxGlobalBatch);
      if (!v.ok()) return Fail(env, kExitUsage, std::string(v.status().message()));
      global_batch_value = *v;
    }
    if (plan->count("--profile-batch") > 0) {
      absl::StatusOr<int64_t> v =
          ParsePositiveCount("--profile-batch", profile_batch, kMaxGlobalBatch);
      if (!v.ok()) return Fail(env, kExitUsage, std::string(v.status().message()));
      profile_batch_value = *v;
    }
  }

  ClientOptions options;
  options.address = flags.coordinator;
  options.timeout = *timeout;
  if (flags.ca.empty()) {
    if (const char* ca = std::getenv(kCaEnv); ca != nullptr) flags.ca = ca;
  }
  ClientTlsFiles tls;
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
  {
    tls.ca_file = flags.ca;
    tls.cert_file = flags.tls_cert;
    tls.key_file = flags.tls_key;
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
        MakeChannelCredentials(tls);
    if (!credentials.ok())
      return Fail(env, kExitUsage, std::string(credentials.status().message()));
    options.credentials = *std::move(credentials);
    options.tls = !flags.ca.empty();
    options.client_certificate = !flags.tls_cert.empty();
  }
  {
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
    options.token = *std::move(token);
    if (options.token.empty()) options.token_search = DescribeTokenSearch(sources);
  }

  if (admin_commands.parsed()) return admin_commands.Run(options, flags.output, env);
  if (submit->parsed()) {
    std::optional<Format> format =
        OutputFormat(env, "submit", flags.output, /*yaml_allowed=*/!submit_watch);
    if (!format) return kExitUsage;
    absl::StatusOr<std::string> spec = ReadSpecFile(file);
    if (!spec.ok()) return Fail(env, kExitRefused, std::string(spec.status().message()));
    if (submit->count("--resume-from") > 0 && resume_from.empty()) {
      return Fail(env, kExitUsage, "--resume-from must name a checkpoint directory");
    }
    CoordinatorClient client(options);
    absl::StatusOr<v1::Job> job = client.Submit(*spec, file, AbsoluteCheckpointPath(resume_from));
    if (!job.ok()) return FailStatus(env, job.status());
    if (submit_watch && *format == Format::kJson) {
      // One JSON object per line, like the snapshots that follow.
      absl::StatusOr<std::string> line = MessageToJson(*job, /*pretty=*/false);
      if (!line.ok()) return FailStatus(env, line.status());
      *env.out << *line << "\n";
    } else {
      const int rc = PrintMessage(env, *format, *job, [&] { return RenderSubmitted(*job); });
      if (rc != kExitOk) return rc;
    }
    if (!submit_watch) return kExitOk;
    return Watch(env, client, job->id(), *format);
  }
  if (get->parsed()) {
    std::optional<Format> format = OutputFormat(env, "get", flags.output, true);
    if (!format) return kExitUsage;
    CoordinatorClient client(options);
    absl::StatusOr<v1::Job> job = client.Get(job_id);
    if (!job.ok()) return FailStatus(env, job.status());
    return PrintMessage(env, *format, *job, [&] { return RenderJobDetails(*job, NowUnixMs(env)); });
  }
  if (describe->parsed()) {
    std::optional<Format> format = OutputFormat(env, "describe", flags.output, true);
    if (!format) return kExitUsage;
    CoordinatorClient client(options);
    absl::StatusOr<v1::Job> job = client.Get(job_id);
    if (!job.ok()) return FailStatus(env, job.status());
    return PrintMessage(env, *format, *job, [&] { return RenderDescribe(*job, NowUnixMs(env)); });
  }
  if (logs->parsed()) {
    // The lines are text: only the table format (the default) prints them.
    if (flags.output != "table") {
      return Fail(env, kExitUsage,
                  absl::StrCat("logs: -o ", flags.output,
                               " is not supported: the lines are text; leave -o out"));
    }
    LogsOptions logs_options;
    logs_options.job_id = job_id;
    logs_options.follow = logs_follow;
    logs_options.collapse = logs_collapse;
    if (logs->count("--rank") > 0) {
      absl::StatusOr<std::pair<int, int>> rank = ParseRank(logs_rank);
      if (!rank.ok()) return Fail(env, kExitUsage, std::string(rank.status().message()));
      logs_options.rank = *rank;
    }
    if (logs->count("--tail") > 0) {
      absl::StatusOr<int64_t> tail = ParsePositiveCount("--tail", logs_tail, 1'000'000);
      if (!tail.ok()) return Fail(env, kExitUsage, std::string(tail.status().message()));
      logs_options.tail = static_cast<int>(*tail);
    }
    CoordinatorClient client(options);
    if (absl::Status s = RunLogs(client, logs_options, env.out); !s.ok()) {
      return FailStatus(env, s);
    }
    return kExitOk;
  }
  if (list->parsed()) {
    std::optional<Format> format = OutputFormat(env, "list", flags.output, true);
    if (!format) return kExitUsage;
    CoordinatorClient client(options);
    absl::StatusOr<v1::ListJobsResponse> jobs = client.List();
    if (!jobs.ok()) return FailStatus(env, jobs.status());
    return PrintMessage(env, *format, *jobs,
                        [&] { return RenderJobList(jobs->jobs(), NowUnixMs(env)); });
  }
  if (cancel->parsed()) {
    std::optional<Format> format = OutputFormat(env, "cancel", flags.output, true);
    if (!format) return kExitUsage;
    CoordinatorClient client(options);
    absl::StatusOr<v1::Job> job = client.Cancel(job_id);
    if (!job.ok()) return FailStatus(env, job.status());
    return PrintMessage(env, *format, *job, [&] { return RenderCancelled(*job); });
  }
  if (checkpoint->parsed()) {
    std::optional<Format> format = OutputFormat(env, "checkpoint", flags.output, true);
    if (!format) return kExitUsage;
    CoordinatorClient client(options);
    absl::StatusOr<v1::CheckpointJobResponse> response = client.Checkpoint(job_id);
    if (!response.ok()) return FailStatus(env, response.status());
    return PrintMessage(env, *format, *response,
                        [&] { return RenderCheckpointRequested(*response); });
  }
  if (watch->parsed()) {
    std::optional<Format> format = OutputFormat(env, "watch", flags.output, false);
    if (!format) return kExitUsage;
    CoordinatorClient client(options);
    return Watch(env, client, job_id, *format);
  }
  if (workers->parsed()) {
    std::optional<Format> format = OutputFormat(env, "workers", flags.output, true);
    if (!format) return kExitUsage;
    CoordinatorClient client(options);
    absl::StatusOr<v1::ListWorkersResponse> response = client.ListWorkers();
    if (!response.ok()) return FailStatus(env, response.status());
    return PrintMessage(env, *format, *response,
                        [&] { return RenderWorkerList(response->workers(), NowUnixMs(env)); });
  }
  if (plan->parsed()) {
    std::optional<Format> format = OutputFormat(env, "plan", flags.output, true);
    if (!format) return kExitUsage;
    // Every file is read and checked before anything is sent.
    v1::PlanJobRequest request;
    if (!plan_file.empty()) {
      absl::StatusOr<std::string> spec = ReadSpecFile(plan_file);
      if (!spec.ok()) return Fail(env, kExitRefused, std::string(spec.status().message()));
      // An empty spec_yaml means "no spec" (a plan of --profile alone), so an empty file is
      // judged here, by the coordinator's parser, as submit's coordinator judges it.
      const std::string source = EscapeInvalidUtf8(plan_file);
      if (spec->empty()) {
        absl::StatusOr<v1::JobSpec> parsed = ParseJobSpec(*spec, source);
        if (!parsed.ok())
          return FailStatus(env, absl::InvalidArgumentError(parsed.status().message()));
      }
      request.set_spec_yaml(*std::move(spec));
      request.set_source_name(source);
    }
    if (!profile_file.empty()) {
      absl::StatusOr<v1::ModelProfile> profile = ReadPlanProfile(profile_file, profile_batch_value);
      if (!profile.ok()) return Fail(env, kExitRefused, std::string(profile.status().message()));
      *request.mutable_profile() = *std::move(profile);
    }
    if (!cluster_file.empty()) {
      absl::StatusOr<v1::ClusterTopology> cluster = ReadPlanCluster(cluster_file);
      if (!cluster.ok()) return Fail(env, kExitRefused, std::string(cluster.status().message()));
      *request.mutable_cluster() = *std::move(cluster);
    }
    request.set_planner(EscapeInvalidUtf8(planner));
    request.set_schedule(EscapeInvalidUtf8(plan_schedule));
    request.set_global_batch(global_batch_value);
    CoordinatorClient client(options);
    absl::StatusOr<v1::PlanJobResponse> response = client.Plan(std::move(request));
    if (!response.ok()) return FailStatus(env, response.status());
    return PrintMessage(env, *format, response->plan(),
                        [&] { return RenderPlan(response->plan(), response->cluster()); });
  }
  if (trace->parsed()) {
    if (trace_file.empty()) {
      return Fail(env, kExitUsage, "trace: -o must name a file, or - for stdout");
    }
    // trace's -o is a file while every other command's is a format: `trace job-3 -o json`
    // would silently write a file called json.
    if (trace_file == "table" || trace_file == "json" || trace_file == "yaml") {
      return Fail(env, kExitUsage,
                  absl::StrCat("trace: -o names the file to write (the trace is always Chrome "
                               "trace-event JSON), got '",
                               trace_file,
                               "', an output format: use -o trace.json, -o - for "
                               "stdout, or -o ./",
                               trace_file, " for a file of that name"));
    }
    CoordinatorClient client(options);
    absl::StatusOr<std::string> summary = WriteJobTrace(client, job_id, trace_file, env.out);
    if (!summary.ok()) return FailStatus(env, summary.status());
    // With the JSON on stdout, the summary goes to stderr.
    *(trace_file == "-" ? env.err : env.out) << *summary << "\n" << std::flush;
    return kExitOk;
  }
  if (top->parsed()) {
    std::optional<Format> format = OutputFormat(env, "top", flags.output, false);
    if (!format) return kExitUsage;
    absl::StatusOr<absl::Duration> interval = ParsePositiveSeconds("--interval", top_interval);
    if (!interval.ok()) return Fail(env, kExitUsage, std::string(interval.status().message()));
    TopOptions top_options;
    top_options.job_id = job_id;
    top_options.interval = *interval;
    top_options.once = top_once || !env.stdout_is_terminal;
    top_options.json = *format == Format::kJson;
    top_options.terminal = env.stdout_is_terminal;
    CoordinatorClient client(options);
    if (absl::Status s = RunTop(client, top_options, env.out); !s.ok()) return FailStatus(env, s);
    return kExitOk;
  }
  return Fail(env, kExitUsage, "no command given (see dapplectl --help)");
}

}  // namespace dapple::ctl
