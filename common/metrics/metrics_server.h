// MetricsServer: serves a Collectable (a MetricSet) at http://HOST:PORT/metrics in the
// Prometheus text format (version 0.0.4), from one thread of its own.
//
// Why not prometheus-cpp's Exposer: its civetweb starts threads with a fixed 100 KiB stack,
// and in dapple-worker (linked with cuBLAS, NCCL and OpenBLAS, whose static TLS is about
// 160 KiB) pthread_create refuses such a stack (EINVAL), so the Exposer cannot start there.
// A scrape is one short GET; a plain blocking server on a normal std::thread serves it.
//
// Requests: GET /metrics (a query string is ignored) -> 200 with the collected text;
// GET / -> 200 with a link; another path -> 404; another method -> 405. With a bearer token
// (--metrics-token-file), GET /metrics without the header `Authorization: Bearer <token>` ->
// 401 (with `WWW-Authenticate: Bearer`), compared in constant time: the text names every
// tenant's jobs (docs/security.md, "Metrics endpoints"). HTTP/1.0 style (the response closes
// the connection); each connection on a thread of its own, at most 8 at once (more are closed
// at once); a request whose header has not arrived 2 s after the connection is closed
// unanswered, however slowly it trickles in.
//
// Thread safety: thread-safe; the destructor stops accepting, closes the socket and waits for
// the connections in flight (each ends within the deadline and a 5 s send timeout).
#ifndef DAPPLE_COMMON_METRICS_METRICS_SERVER_H_
#define DAPPLE_COMMON_METRICS_METRICS_SERVER_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/collectable.h"

namespace dapple::metrics {

// What a binary's --metrics-port means.
inline constexpr int kMetricsPortOff = 0;

// The --metrics-token-file help of both binaries.
inline constexpr char kMetricsTokenFileHelp[] =
    "file holding a bearer token that /metrics requires (Prometheus: "
    "authorization.credentials_file); default: none";

// The address a binary serves metrics on without --metrics-host: "127.0.0.1" when the cluster
// it belongs to is reached on loopback (`loopback`: the coordinator's --listen, a worker's
// --coordinator is a loopback address: one host, whose Prometheus scrapes it there), else
// "0.0.0.0" (every interface: Prometheus scrapes from another host).
std::string DefaultMetricsHost(bool loopback);

// OK when `host` is an IPv4 address (what MetricsServer binds); kInvalidArgument otherwise:
// "--metrics-host 'localhost' must be an IPv4 address such as 127.0.0.1 or 0.0.0.0".
absl::Status CheckMetricsHost(const std::string& host);

class MetricsServer {
 public:
  // Binds HOST:PORT (HOST an IPv4 address such as "0.0.0.0" or "127.0.0.1"; `port` 0: a free
  // port, for tests: the binaries treat --metrics-port 0 as "no server" and never call this)
  // and serves `collectable` at /metrics. `flag` names the option the port came from.
  // Errors, one line: kUnavailable when the port cannot be bound, e.g. "cannot serve metrics
  // on 0.0.0.0:9400 (--metrics-port 9400): Address already in use"; kInvalidArgument for a
  // port outside 0..65535 or a host that is not an IPv4 address. `bearer_token` non-empty:
  // /metrics answers only requests that carry it (above); the caller checked it
  // (common/token_file.h ReadTokenFile).
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& host, int port, std::shared_ptr<prometheus::Collectable> collectable,
      const std::string& flag = "--metrics-port", const std::string& bearer_token = "");

  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // The port bound (the free one chosen for port 0).
  int port() const { return port_; }

 private:
  MetricsServer(int listen_fd, int port, std::shared_ptr<prometheus::Collectable> collectable,
                std::string bearer_token);
  bool Authorized(const std::string& request) const;
  void Loop();
  void Serve(int fd);

  const int listen_fd_;
  const int port_;
  const std::shared_ptr<prometheus::Collectable> collectable_;
  const std::string bearer_token_;  // "": no check
  std::atomic<bool> stop_{false};
  // The connections being served. Shared with their threads, which touch it after Serve
  // returned: the destructor, which waits for none to be left, must not destroy the mutex a
  // thread is still unlocking.
  struct Connections {
    absl::Mutex mu;
    int active ABSL_GUARDED_BY(mu) = 0;
    // The connections still waiting for their request's header, by socket, with the order they
    // were accepted in: the oldest is evicted for a new one when all slots are taken. A socket
    // leaves this map before it is closed (under mu), so an eviction never reaches a reused fd.
    std::map<int, uint64_t> reading ABSL_GUARDED_BY(mu);
    uint64_t accepted ABSL_GUARDED_BY(mu) = 0;
  };
  const std::shared_ptr<Connections> connections_ = std::make_shared<Connections>();
  std::thread thread_;
};

}  // namespace dapple::metrics

#endif  // DAPPLE_COMMON_METRICS_METRICS_SERVER_H_
