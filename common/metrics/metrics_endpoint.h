// The /metrics endpoint of dapple-coordinator and dapple-worker as their flags describe it
// (--metrics-port, --metrics-host, --metrics-token-file): one place that reads the token file,
// starts the MetricsServer and says in the log where it serves and who can read it.
#ifndef DAPPLE_COMMON_METRICS_METRICS_ENDPOINT_H_
#define DAPPLE_COMMON_METRICS_METRICS_ENDPOINT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/metrics/metrics_server.h"
#include "prometheus/collectable.h"

namespace dapple::metrics {

// Serves `collectable` at http://HOST:PORT/metrics (`host` an IPv4 address, `port` 1..65535),
// requiring the bearer token in `token_file` when it is not "" (common/token_file.h
// ReadTokenFile). Logs "metrics on http://HOST:PORT/metrics" (and whether a token guards it);
// a warning when `host` is not a loopback address and there is no token: the text names every
// tenant's jobs, to anyone who reaches the port (docs/security.md, "Metrics endpoints").
// Errors, one line: "--metrics-token-file: cannot read token file '/x': No such file or
// directory" (and ReadTokenFile's other messages), MetricsServer::Start's.
absl::StatusOr<std::unique_ptr<MetricsServer>> StartMetricsServer(
    const std::string& host, int port, const std::string& token_file,
    std::shared_ptr<prometheus::Collectable> collectable);

}  // namespace dapple::metrics

#endif  // DAPPLE_COMMON_METRICS_METRICS_ENDPOINT_H_
