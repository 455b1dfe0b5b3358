#include "dapplectl/command_output.h"

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "dapplectl/exit_codes.h"
#include "dapplectl/json_output.h"
#include "dapplectl/usage_errors.h"

namespace dapple::ctl {

int Fail(const Environment& env, int exit_code, const std::string& message) {
  std::string line = absl::StrReplaceAll(message, {{"\r\n", " "}, {"\n", " "}});
  absl::StripTrailingAsciiWhitespace(&line);
  *env.err << "dapplectl: " << line << "\n" << std::flush;
  return exit_code;
}

int FailStatus(const Environment& env, const absl::Status& status) {
  return Fail(env, ExitCodeForStatusCode(status.code()), std::string(status.message()));
}

std::optional<Format> OutputFormat(const Environment& env, const std::string& command,
                                   const std::string& output, bool yaml_allowed) {
  if (output == "table") return Format::kTable;
  if (output == "json") return Format::kJson;
  if (output == "yaml" && yaml_allowed) return Format::kYaml;
  Fail(env, kExitUsage,
       absl::StrCat(command, ": -o ", output, " is not supported; use table or json",
                    yaml_allowed ? " or yaml" : ""));
  return std::nullopt;
}

int PrintMessage(const Environment& env, Format format, const google::protobuf::Message& message,
                 const std::function<std::string()>& table) {
  if (format == Format::kTable) {
    *env.out << table() << std::flush;
    return kExitOk;
  }
  absl::StatusOr<std::string> text =
      format == Format::kJson ? MessageToJson(message, /*pretty=*/true) : MessageToYaml(message);
  if (!text.ok()) return FailStatus(env, text.status());
  *env.out << *text << std::flush;
  return kExitOk;
}

const CLI::App& DeepestParsedCommand(const CLI::App& app) {
  const CLI::App* at = &app;
  while (true) {
    const std::vector<CLI::App*> subs = at->get_subcommands();
    if (subs.empty()) return *at;
    at = subs.back();
  }
}

std::string ParsedCommandPath(const CLI::App& app) {
  std::vector<std::string> words;
  const CLI::App* at = &app;
  while (true) {
    const std::vector<CLI::App*> subs = at->get_subcommands();
    if (subs.empty()) break;
    at = subs.back();
    words.push_back(at->get_name());
  }
  return absl::StrJoin(words, " ");
}

std::vector<std::string> FlagNames(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* option : app.get_options()) {
    for (const std::string& l : option->get_lnames()) names.push_back("--" + l);
    for (const std::string& s : option->get_snames()) names.push_back("-" + s);
  }
  return names;
}

std::string SubcommandNames(const CLI::App& app) {
  std::vector<std::string> names;
  const std::function<bool(const CLI::App*)> all;
  for (const CLI::App* sub : app.get_subcommands(all)) names.push_back(sub->get_name());
  return absl::StrJoin(names, ", ");
}

// The commands in the order a user meets them (the parser's order puts config first).
constexpr char kCommands[] =
    "submit, get, describe, logs, list, cancel, watch, workers, plan, trace, top, checkpoint, "
    "config, admin, auth";

int ReportParseError(const Environment& env, CLI::App& app, const CLI::App& config_app,
                     const CLI::ParseError& e) {
  // --help and --help-all are "errors" with exit code 0; every other parse error is a usage
  // error (CLI11's own exit codes, 100-127, are not dapplectl's).
  if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {
    return app.exit(e, *env.out, *env.err);
  }
  // CLI11 reports `dapplectl frobnicate` as "A subcommand is required"; name the word.
  const std::vector<std::string> rest = app.remaining();
  if (app.get_subcommands().empty() && !rest.empty() && !rest.front().empty() &&
      rest.front()[0] != '-') {
    return Fail(env, kExitUsage,
                absl::StrCat("unknown command \"", rest.front(), "\"; commands: ", kCommands,
                             " (see dapplectl --help)"));
  }
  // The command being parsed, for the message and the help it points to.
  const std::string command = ParsedCommandPath(app);
  // By type: CLI11 names some errors after the subcommand that raised them.
  const char* kind = dynamic_cast<const CLI::ExtrasError*>(&e)        ? "ExtrasError"
                     : dynamic_cast<const CLI::ArgumentMismatch*>(&e) ? "ArgumentMismatch"
                     : dynamic_cast<const CLI::RequiredError*>(&e)    ? "RequiredError"
                                                                      : "";
  if (command == "config" && config_app.get_subcommands().empty()) {
    std::vector<std::string> stray = config_app.remaining();
    if (stray.empty()) stray = app.remaining();
    return Fail(
        env, kExitUsage,
        absl::StrCat(stray.empty() ? "config needs a subcommand"
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
    if (command.empty()) {
      // `dapplectl --bogus`: a flag no command has (the global ones parsed already).
      const std::string flag_hint = SuggestFlag(stray.front(), FlagNames(app));
      return Fail(
          env, kExitUsage,
          absl::StrCat("unknown flag ", stray.front(),
                       flag_hint.empty() ? "" : absl::StrCat(" (did you mean ", flag_hint, "?)"),
                       " and no command; commands: ", kCommands, " (see dapplectl --help)"));
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

}  // namespace dapple::ctl
