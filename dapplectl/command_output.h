// What every dapplectl command shares when it reports: the -o format, the one-line error on
// stderr with its exit code, printing a message as a table or as JSON / YAML, and the name of
// the (sub)command being run for usage errors. Used by commands.cc and the command files
// (admin_command.cc). Thread-compatible (they write to the Environment's streams).
#ifndef DAPPLE_DAPPLECTL_COMMAND_OUTPUT_H_
#define DAPPLE_DAPPLECTL_COMMAND_OUTPUT_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "dapplectl/commands.h"
#include "google/protobuf/message.h"

namespace dapple::ctl {

enum class Format { kTable, kJson, kYaml };

// Prints "dapplectl: <message>" on one line (newlines become spaces) and returns `exit_code`.
int Fail(const Environment& env, int exit_code, const std::string& message);

// Fail with the exit code of status.code() (exit_codes.h) and its message.
int FailStatus(const Environment& env, const absl::Status& status);

// The -o value `output` for `command`, or nullopt after printing the usage error "<command>:
// -o xml is not supported; use table or json or yaml".
std::optional<Format> OutputFormat(const Environment& env, const std::string& command,
                                   const std::string& output, bool yaml_allowed);

// Prints `message` in `format`: table text from `table`, else MessageToJson (pretty) or
// MessageToYaml (json_output.h). Returns the exit code.
int PrintMessage(const Environment& env, Format format, const google::protobuf::Message& message,
                 const std::function<std::string()>& table);

// The words of the deepest subcommand the parser reached, from the top: "get", "admin tenant
// create", "" before any.
std::string ParsedCommandPath(const CLI::App& app);

// The deepest subcommand the parser reached (`app` itself before any).
const CLI::App& DeepestParsedCommand(const CLI::App& app);

// The flags `app` itself defines, as typed: "--tail", "-f", "--follow" (not its parents').
std::vector<std::string> FlagNames(const CLI::App& app);

// The names of `app`'s subcommands, in the order added: "create, list".
std::string SubcommandNames(const CLI::App& app);

// A command line CLI11 refused (`e`), or --help: prints the help (exit code 0) or one line
// saying what is wrong in the user's terms (usage_errors.h), naming the command or flag closest
// to an unknown one, and returns the exit code (kExitUsage but for --help). `config_app` is the
// `config` command, whose verbs get a message of their own.
int ReportParseError(const Environment& env, CLI::App& app, const CLI::App& config_app,
                     const CLI::ParseError& e);

}  // namespace dapple::ctl

#endif  // DAPPLE_DAPPLECTL_COMMAND_OUTPUT_H_
