#include "common/metrics/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "prometheus/text_serializer.h"

namespace dapple::metrics {
namespace {

constexpr size_t kMaxRequestBytes = 16 * 1024;
constexpr int kPollMs = 100;  // how often the accept loop looks at the stop flag
// A request's whole header must arrive within this, however it trickles in: a client sending a
// byte every few seconds held the one-at-a-time server, and every scrape behind it, for as long
// as it liked.
constexpr int kRequestDeadlineMs = 2000;
// Connections served at once. When all are taken, a new one evicts the connection that has
// waited longest for its request's header (12 clients that each held a connection open without
// asking blinded Prometheus: 9 of 10 scrapes failed); a scrape sends its header at once, so
// idle connections make way for it. Beyond twice this many (sockets not yet closed after an
// eviction) new connections are closed at once.
constexpr int kMaxConnections = 8;

void WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the client went away: nothing to tell anyone
    done += static_cast<size_t>(n);
  }
}

// `extra_headers`: "" or header lines, each ending in \r\n.
std::string Response(const std::string& status, const std::string& type, const std::string& body,
                     const std::string& extra_headers = "") {
  return absl::StrCat("HTTP/1.1 ", status, "\r\n", extra_headers, "Content-Type: ", type,
                      "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
}

// The value of header `name` (case-insensitive, as HTTP says) in `request`'s header lines, its
// surrounding blanks removed; "" when absent.
std::string HeaderValue(const std::string& request, absl::string_view name) {
  const size_t end = request.find("\r\n\r\n");
  const std::vector<absl::string_view> lines =
      absl::StrSplit(absl::string_view(request).substr(0, end), "\r\n");
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t colon = lines[i].find(':');
    if (colon == absl::string_view::npos) continue;
    if (absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(lines[i].substr(0, colon)), name)) {
      return std::string(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
    }
  }
  return "";
}

// Compares every byte whatever the first difference, so that the answer's timing does not tell
// a caller how much of a guessed token was right.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  }
  return diff == 0;
}

}  // namespace

std::string DefaultMetricsHost(bool loopback) { return loopback ? "127.0.0.1" : "0.0.0.0"; }

absl::Status CheckMetricsHost(const std::string& host) {
  in_addr addr{};
  if (inet_pton(AF_INET, host.c_str(), &addr) == 1) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "--metrics-host '", host, "' must be an IPv4 address such as 127.0.0.1 or 0.0.0.0"));
}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& host, int port, std::shared_ptr<prometheus::Collectable> collectable,
    const std::string& flag, const std::string& bearer_token) {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " must be a port in 0..65535, got ", port));
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics host '", host, "' is not an IPv4 address"));
  }
  const std::string address = absl::StrCat(host, ":", port);
  const auto fail = [&](int fd, int error) {
    if (fd >= 0) close(fd);
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", address, " (", flag, " ",
                                               port, "): ", std::strerror(error)));
  };
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return fail(-1, errno);
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return fail(fd, errno);
  if (listen(fd, 16) != 0) return fail(fd, errno);
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return fail(fd, errno);
  return std::unique_ptr<MetricsServer>(
      new MetricsServer(fd, ntohs(addr.sin_port), std::move(collectable), bearer_token));
}

MetricsServer::MetricsServer(int listen_fd, int port,
                             std::shared_ptr<prometheus::Collectable> collectable,
                             std::string bearer_token)
    : listen_fd_(listen_fd),
      port_(port),
      collectable_(std::move(collectable)),
      bearer_token_(std::move(bearer_token)) {
  thread_ = std::thread([this] { Loop(); });
}

MetricsServer::~MetricsServer() {
  stop_.store(true);
  thread_.join();
  close(listen_fd_);
  // Connections in flight end within the request deadline and the send timeout.
  Connections& c = *connections_;
  absl::MutexLock lock(&c.mu);
  c.mu.Await(absl::Condition(
      +[](int* active) { return *active == 0; }, &c.active));
}

void MetricsServer::Loop() {
  while (!stop_.load()) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (poll(&p, 1, kPollMs) <= 0) continue;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    {
      Connections& c = *connections_;
      absl::MutexLock lock(&c.mu);
      if (c.active >= kMaxConnections) {
        auto oldest =
            std::min_element(c.reading.begin(), c.reading.end(),
                             [](const auto& a, const auto& b) { return a.second < b.second; });
        if (oldest == c.reading.end() || c.active >= 2 * kMaxConnections) {
          close(fd);
          continue;
        }
        // Its thread sees the socket end and closes it; the slot frees then.
        shutdown(oldest->first, SHUT_RDWR);
        c.reading.erase(oldest);
      }
      ++c.active;
      c.reading[fd] = c.accepted++;
    }
    // Each connection on its own thread, so that a slow one delays no other.
    std::thread([this, fd, connections = connections_] {
      Serve(fd);
      absl::MutexLock lock(&connections->mu);
      connections->reading.erase(fd);
      close(fd);
      --connections->active;
    }).detach();
  }
}

bool MetricsServer::Authorized(const std::string& request) const {
  if (bearer_token_.empty()) return true;
  const std::string value = HeaderValue(request, "authorization");
  constexpr absl::string_view kScheme = "bearer ";
  if (value.size() <= kScheme.size() ||
      !absl::EqualsIgnoreCase(absl::string_view(value).substr(0, kScheme.size()), kScheme)) {
    return false;
  }
  return ConstantTimeEquals(
      absl::StripAsciiWhitespace(absl::string_view(value).substr(kScheme.size())), bearer_token_);
}

void MetricsServer::Serve(int fd) {
  timeval timeout{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(kRequestDeadlineMs);
  std::string request;
  char buf[2048];
  while (request.find("\r\n\r\n") == std::string::npos && request.size() < kMaxRequestBytes) {
    const int64_t left = std::chrono::duration_cast<std::chrono::milliseconds>(
                             deadline - std::chrono::steady_clock::now())
                             .count();
    if (left <= 0) return;  // too slow: closed unanswered
    pollfd ready{fd, POLLIN, 0};
    const int polled = poll(&ready, 1, static_cast<int>(left));
    if (polled < 0 && errno == EINTR) continue;
    if (polled <= 0) return;
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    request.append(buf, static_cast<size_t>(n));
  }
  {
    absl::MutexLock lock(&connections_->mu);
    connections_->reading.erase(fd);  // asked: no longer one to evict
  }
  const size_t line_end = request.find("\r\n");
  if (line_end == std::string::npos) return;  // not HTTP: just close
  const std::string line = request.substr(0, line_end);
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string::npos ? std::string::npos : line.find(' ', sp1 + 1);
  if (sp2 == std::string::npos) {
    WriteAll(fd, Response("400 Bad Request", "text/plain", "bad request\n"));
    return;
  }
  const std::string method = line.substr(0, sp1);
  std::string path = line.substr(sp1 + 1, sp2 - sp1 - 1);
  path = path.substr(0, path.find('?'));
  if (method != "GET") {
    WriteAll(fd, Response("405 Method Not Allowed", "text/plain", "only GET\n"));
  } else if (path == "/metrics" && !Authorized(request)) {
    WriteAll(fd, Response("401 Unauthorized", "text/plain",
                          "/metrics needs the bearer token of the server's --metrics-token-file\n",
                          "WWW-Authenticate: Bearer realm=\"dapple metrics\"\r\n"));
  } else if (path == "/metrics") {
    const std::string body = prometheus::TextSerializer().Serialize(collectable_->Collect());
    WriteAll(fd, Response("200 OK", "text/plain; version=0.0.4; charset=utf-8", body));
  } else if (path == "/") {
    WriteAll(fd, Response("200 OK", "text/html",
                          "<html><body><a href=\"/metrics\">/metrics</a></body></html>\n"));
  } else {
    WriteAll(fd, Response("404 Not Found", "text/plain", "not found; see /metrics\n"));
  }
}

}  // namespace dapple::metrics
