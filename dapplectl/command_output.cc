#include "dapplectl/command_output.h"

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "dapplectl/exit_codes.h"
#include "dapplectl/json_output.h"

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

}  // namespace dapple::ctl
