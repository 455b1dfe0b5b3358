#include "common/metrics/metrics_endpoint.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_tls.h"
#include "common/logging.h"
#include "common/token_file.h"

namespace dapple::metrics {

absl::StatusOr<std::unique_ptr<MetricsServer>> StartMetricsServer(
    const std::string& host, int port, const std::string& token_file,
    std::shared_ptr<prometheus::Collectable> collectable) {
  std::string token;
  if (!token_file.empty()) {
    absl::StatusOr<std::string> read = common::ReadTokenFile(token_file);
    if (!read.ok()) {
      return absl::Status(read.status().code(),
                          absl::StrCat("--metrics-token-file: ", read.status().message()));
    }
    token = *std::move(read);
  }
  auto server = MetricsServer::Start(host, port, std::move(collectable), "--metrics-port", token);
  if (!server.ok()) return server.status();
  if (!token.empty()) {
    DAPPLE_LOG_INFO("metrics on http://{}:{}/metrics (bearer token of {})", host, (*server)->port(),
                    token_file);
  } else if (IsLoopbackAddress(host)) {  // the rule --listen and --coordinator follow
    DAPPLE_LOG_INFO("metrics on http://{}:{}/metrics (this host only)", host, (*server)->port());
  } else {
    DAPPLE_LOG_WARN(
        "metrics on http://{}:{}/metrics without --metrics-token-file: anyone who reaches the "
        "port reads every tenant's job ids, names, losses and quotas (docs/security.md, "
        "\"Metrics endpoints\"; --metrics-host 127.0.0.1 keeps it on this host)",
        host, (*server)->port());
  }
  return server;
}

}  // namespace dapple::metrics
