#include "common/metrics/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/metrics/metric_set.h"
#include "gtest/gtest.h"

namespace dapple::metrics {
namespace {

constexpr char kPromtool[] = "/usr/bin/promtool";

// GET http://127.0.0.1:port/path; the whole response (status line, headers, body), or "" when
// the connection failed. 5 s receive timeout, so a hung server fails the test.
// A TCP connection to 127.0.0.1:port with a 5 s receive timeout, or -1.
int ConnectLoopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  timeval timeout{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

std::string HttpGet(int port, const std::string& path, const std::string& headers = "") {
  const int fd = ConnectLoopback(port);
  if (fd < 0) return "";
  const std::string request = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\n",
                                           headers, "Connection: close\r\n\r\n");
  if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return "";
  }
  std::string response;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) response.append(buf, n);
  close(fd);
  return response;
}

std::string Body(const std::string& response) {
  const size_t at = response.find("\r\n\r\n");
  return at == std::string::npos ? "" : response.substr(at + 4);
}

// Runs `promtool check metrics` on `text`; returns its exit code (0 clean, 3 lint problems,
// 1 parse error) and its output in `out`.
int PromtoolCheckMetrics(const std::string& text, std::string* out) {
  char path[] = "/tmp/dapple-metrics-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return -1;
  const bool written = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  if (!written) return -1;
  const std::string command =
      absl::StrCat("timeout 20 ", kPromtool, " check metrics < ", path, " 2>&1");
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return -1;
  char buf[512];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), pipe)) > 0;) out->append(buf, n);
  const int status = pclose(pipe);
  unlink(path);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Every family of `set` with one series (labels filled with sample values).
void FillEverySeries(MetricSet* set) {
  for (const MetricDef& def : MetricList()) {
    if (def.binary != set->binary()) continue;
    prometheus::Labels labels;
    for (const std::string& label : def.labels) labels[label] = "x-1";
    if (def.type == MetricType::kGauge) {
      set->Gauge(def.name, labels).Set(1.5);
    } else {
      set->Counter(def.name, labels).Increment(2);
    }
  }
}

TEST(MetricsServerTest, ServesTheSetOverHttp) {
  auto set = std::make_shared<MetricSet>(Binary::kCoordinator);
  set->Gauge(kJobQueueLength).Set(4);
  auto server = MetricsServer::Start("127.0.0.1", 0, set);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);
  const std::string response = HttpGet((*server)->port(), "/metrics");
  EXPECT_TRUE(absl::StartsWith(response, "HTTP/1.1 200")) << response;
  EXPECT_TRUE(absl::StrContains(response, "text/plain")) << response;
  EXPECT_TRUE(absl::StrContains(Body(response), "\ndapple_job_queue_length 4\n")) << response;
  // Served live: a later value shows in the next scrape.
  set->Gauge(kJobQueueLength).Set(5);
  EXPECT_TRUE(
      absl::StrContains(HttpGet((*server)->port(), "/metrics"), "\ndapple_job_queue_length 5\n"));
}

TEST(MetricsServerTest, OtherPathsAndMethods) {
  auto set = std::make_shared<MetricSet>(Binary::kWorker);
  auto server = MetricsServer::Start("127.0.0.1", 0, set);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  EXPECT_TRUE(absl::StartsWith(HttpGet(port, "/metrics?x=1"), "HTTP/1.1 200")) << "query ignored";
  EXPECT_TRUE(absl::StartsWith(HttpGet(port, "/"), "HTTP/1.1 200"));
  EXPECT_TRUE(absl::StartsWith(HttpGet(port, "/nope"), "HTTP/1.1 404"));
  // A client that connects and leaves at once does not stop the server.
  const int fd = ConnectLoopback(port);
  ASSERT_GE(fd, 0);
  close(fd);
  EXPECT_TRUE(absl::StartsWith(HttpGet(port, "/metrics"), "HTTP/1.1 200"));
}

// With a token (--metrics-token-file), /metrics is served only to a request that carries it:
// the text names every tenant's jobs.
TEST(MetricsServerTest, ATokenGuardsTheMetrics) {
  auto set = std::make_shared<MetricSet>(Binary::kCoordinator);
  set->Gauge(kJobQueueLength).Set(4);
  const std::string token = "dpl_metrics_0123456789";
  auto server = MetricsServer::Start("127.0.0.1", 0, set, "--metrics-port", token);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  for (const std::string& headers :
       {std::string(""), std::string("Authorization: Bearer dpl_metrics_012345678\r\n"),
        std::string("Authorization: Bearer dpl_metrics_01234567890\r\n"),
        std::string("Authorization: Basic ZHBsOng=\r\n"), std::string("Authorization: Bearer\r\n"),
        std::string("X-Token: dpl_metrics_0123456789\r\n")}) {
    const std::string response = HttpGet(port, "/metrics", headers);
    EXPECT_TRUE(absl::StartsWith(response, "HTTP/1.1 401")) << headers << response;
    EXPECT_TRUE(absl::StrContains(response, "WWW-Authenticate: Bearer")) << response;
    EXPECT_FALSE(absl::StrContains(response, "dapple_job_queue_length")) << response;
  }
  // The header's name and scheme in any case, as HTTP allows.
  for (const std::string& headers :
       {std::string("Authorization: Bearer dpl_metrics_0123456789\r\n"),
        std::string("authorization:bearer  dpl_metrics_0123456789 \r\n")}) {
    const std::string response = HttpGet(port, "/metrics", headers);
    EXPECT_TRUE(absl::StartsWith(response, "HTTP/1.1 200")) << headers << response;
    EXPECT_TRUE(absl::StrContains(Body(response), "\ndapple_job_queue_length 4\n")) << response;
  }
  EXPECT_TRUE(absl::StartsWith(HttpGet(port, "/"), "HTTP/1.1 200"))
      << "the link page holds no data";
}

// A client that trickles its request in (a byte every few seconds) neither delays another
// scrape nor holds its connection past the request deadline (2 s).
TEST(MetricsServerTest, ASlowClientDelaysNoScrape) {
  auto set = std::make_shared<MetricSet>(Binary::kCoordinator);
  set->Gauge(kJobQueueLength).Set(4);
  auto server = MetricsServer::Start("127.0.0.1", 0, set);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  const int slow = ConnectLoopback(port);
  ASSERT_GE(slow, 0);
  ASSERT_EQ(write(slow, "G", 1), 1);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(absl::StartsWith(HttpGet(port, "/metrics"), "HTTP/1.1 200"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  // The slow one is closed unanswered once its 2 s are up, though it keeps sending.
  ASSERT_EQ(write(slow, "E", 1), 1);
  timeval timeout{10, 0};
  setsockopt(slow, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  char c;
  EXPECT_EQ(read(slow, &c, 1), 0) << "closed without an answer";
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  close(slow);
}

// Found by a security review: 12 clients holding connections open without finishing their
// request took every slot, and 9 of 10 scrapes failed. A new connection evicts the one that has
// waited longest for its request: the scrape gets through while they keep holding on.
TEST(MetricsServerTest, IdleConnectionsMakeWayForAScrape) {
  auto set = std::make_shared<MetricSet>(Binary::kCoordinator);
  set->Gauge(kJobQueueLength).Set(4);
  auto server = MetricsServer::Start("127.0.0.1", 0, set);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  std::vector<int> idle;
  for (int i = 0; i < 12; ++i) {
    const int fd = ConnectLoopback(port);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(write(fd, "GET / HTTP/1.1\r\n", 16), 16);
    idle.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // all accepted
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(absl::StartsWith(HttpGet(port, "/metrics"), "HTTP/1.1 200")) << "scrape " << i;
  }
  for (int fd : idle) close(fd);
}

TEST(MetricsServerTest, MetricsHostDefaultsAndChecks) {
  EXPECT_EQ(DefaultMetricsHost(true), "127.0.0.1");
  EXPECT_EQ(DefaultMetricsHost(false), "0.0.0.0");
  EXPECT_TRUE(CheckMetricsHost("10.1.2.3").ok());
  EXPECT_EQ(CheckMetricsHost("localhost").message(),
            "--metrics-host 'localhost' must be an IPv4 address such as 127.0.0.1 or 0.0.0.0");
  EXPECT_FALSE(CheckMetricsHost("").ok());
  EXPECT_FALSE(CheckMetricsHost("127.0.0.1:9400").ok());
}

TEST(MetricsServerTest, BusyPortIsAnErrorNamingThePort) {
  auto set = std::make_shared<MetricSet>(Binary::kWorker);
  set->Gauge(kWorkerBusy).Set(1);
  auto first = MetricsServer::Start("127.0.0.1", 0, set);
  ASSERT_TRUE(first.ok()) << first.status();
  const int port = (*first)->port();
  auto second = MetricsServer::Start("127.0.0.1", port, set);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(second.status().message(),
            absl::StrCat("cannot serve metrics on 127.0.0.1:", port, " (--metrics-port ", port,
                         "): Address already in use"));
  // The first one still serves.
  EXPECT_TRUE(absl::StrContains(HttpGet(port, "/metrics"), "\ndapple_worker_busy 1\n"));
}

TEST(MetricsServerTest, RejectsBadPortAndHost) {
  auto set = std::make_shared<MetricSet>(Binary::kWorker);
  EXPECT_EQ(MetricsServer::Start("127.0.0.1", 70000, set).status().message(),
            "--metrics-port must be a port in 0..65535, got 70000");
  EXPECT_EQ(MetricsServer::Start("", 0, set).status().message(),
            "metrics host '' is not an IPv4 address");
  EXPECT_EQ(MetricsServer::Start("localhost", 0, set).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The served text of both binaries, every metric with a series, passes promtool's parser and
// linter (names, units, help, counters' _total).
TEST(MetricsServerTest, PromtoolAcceptsTheServedText) {
  if (access(kPromtool, X_OK) != 0) GTEST_SKIP() << kPromtool << " missing (Debian: prometheus)";
  for (Binary binary : {Binary::kCoordinator, Binary::kWorker}) {
    SCOPED_TRACE(BinaryName(binary));
    auto set = std::make_shared<MetricSet>(binary);
    FillEverySeries(set.get());
    auto server = MetricsServer::Start("127.0.0.1", 0, set);
    ASSERT_TRUE(server.ok()) << server.status();
    const std::string body = Body(HttpGet((*server)->port(), "/metrics"));
    ASSERT_FALSE(body.empty());
    std::string out;
    EXPECT_EQ(PromtoolCheckMetrics(body, &out), 0) << out << "\n" << body;
    // Also with no series at all (a freshly started binary).
    MetricSet empty(binary);
    out.clear();
    EXPECT_EQ(PromtoolCheckMetrics(empty.Serialize(), &out), 0) << out;
  }
}

}  // namespace
}  // namespace dapple::metrics
