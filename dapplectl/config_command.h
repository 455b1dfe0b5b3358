// `dapplectl config ...`: shows and edits the configuration file of ctl_config.h. Nothing here
// talks to the coordinator.
#ifndef DAPPLE_DAPPLECTL_CONFIG_COMMAND_H_
#define DAPPLE_DAPPLECTL_CONFIG_COMMAND_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace dapple::ctl {

struct ConfigAction {
  // "view" | "get-contexts" | "use-context" | "set-context" | "delete-context"
  std::string verb;
  std::string name;  // the context, for use-, set- and delete-context
  // set-context: the fields to set (unset: kept; a new context needs a coordinator).
  std::optional<std::string> coordinator, ca, tls_cert, tls_key, token_file;
};

// Runs `action` on the file at `path` and returns what to print:
//   view / get-contexts: "CURRENT   NAME   COORDINATOR   CA\n*  prod  ..." then "FILE  <path>"
//   use-context prod:    "switched to context prod\n"
//   set-context prod:    "context prod created\n" | "context prod updated\n" (and the file is
//                        written, 0600, atomically)
//   delete-context prod: "context prod deleted\n" (the current context too: then none is)
// kInvalidArgument for an unknown context (naming the ones there are), a new context without
// --coordinator, a bad name or address; LoadConfig / SaveConfig's errors as they are;
// kFailedPrecondition "no configuration file: set DAPPLE_CONFIG or HOME" for an empty path.
absl::StatusOr<std::string> RunConfigAction(const std::string& path, const ConfigAction& action);

// The file at `path` as data, for `config view -o json|yaml` (`json` false: YAML): {"file": path,
// "current_context": name or "", "contexts": [{"name", "coordinator", "ca", "tls_cert",
// "tls_key", "token_file"}]}, every field ("" when unset), keys in this order on every run (a
// protobuf Struct printed them in its hash map's order, which changed from run to run). Errors
// as RunConfigAction's.
absl::StatusOr<std::string> ConfigAsText(const std::string& path, bool json);

}  // namespace dapple::ctl

#endif  // DAPPLE_DAPPLECTL_CONFIG_COMMAND_H_
