// dapplectl's configuration file, like kubeconfig: named contexts (a coordinator address and
// the TLS files to reach it with) and the current one, so that `dapplectl --context prod list`
// or `dapplectl config use-context prod` replaces typing --coordinator and --ca each time.
//
// File: $DAPPLE_CONFIG, else $HOME/.config/dapple/config.yaml. Format (docs/dapplectl.md,
// "Contexts"):
//   current-context: prod
//   contexts:
//     - name: prod
//       coordinator: coordinator.example:7600
//       ca: /home/me/dapple/ca.pem          # optional: TLS
//       tls-cert: /home/me/dapple/me.pem    # optional: mutual TLS
//       tls-key: /home/me/dapple/me.key
//       token-file: /home/me/dapple/prod.token  # optional: the bearer token (docs/security.md)
//
// Precedence of each setting: the flag, then its environment variable (DAPPLE_COORDINATOR,
// DAPPLE_CA), then the context (--context NAME, else current-context), then the default. The
// token: --token-file, DAPPLE_TOKEN, DAPPLE_TOKEN_FILE, the context's token-file (token_source.h).
//
// Thread safety: the functions are thread-compatible (they read and write files).
#ifndef DAPPLE_DAPPLECTL_CTL_CONFIG_H_
#define DAPPLE_DAPPLECTL_CTL_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dapple::ctl {

struct Context {
  std::string name;         // 1-63 of a-z 0-9 - _ .
  std::string coordinator;  // HOST:PORT
  std::string ca;           // "" : plain text
  std::string tls_cert;
  std::string tls_key;
  std::string token_file;  // "" : none
};

struct CtlConfig {
  std::string current_context;  // "" : none
  std::vector<Context> contexts;
};

// $DAPPLE_CONFIG, else $HOME/.config/dapple/config.yaml; "" when neither is set.
std::string ConfigPath();

// The file's configuration; a missing file is an empty configuration. kInvalidArgument
// "<path>:<line>:<column>: <what>" for YAML that does not parse, and "<path>: ..." for an unknown
// key (named), a context without a name or coordinator, a repeated name, or a current-context
// that names no context; kFailedPrecondition "cannot read <path>: <reason>".
absl::StatusOr<CtlConfig> LoadConfig(const std::string& path);

// Writes `config` to `path` atomically (a temporary file renamed over it), creating its folder,
// readable by the user alone (0600). kFailedPrecondition "cannot write <path>: <reason>".
absl::Status SaveConfig(const std::string& path, const CtlConfig& config);

// kInvalidArgument "context name 'X' must be 1-63 characters of a-z 0-9 - _ ." unless valid.
absl::Status CheckContextName(const std::string& name);

// The context named `name`, or null.
const Context* FindContext(const CtlConfig& config, const std::string& name);

// "prod, staging" (the names, in file order), or "none" for no context.
std::string ContextNames(const CtlConfig& config);

}  // namespace dapple::ctl

#endif  // DAPPLE_DAPPLECTL_CTL_CONFIG_H_
