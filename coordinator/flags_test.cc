#include "coordinator/flags.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

// The message of ValidateFlags for `raw`, "" when it is valid.
std::string Error(const RawFlags& raw) {
  auto flags = ValidateFlags(raw);
  if (flags.ok()) return "";
  EXPECT_EQ(flags.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(flags.status().message());
}

TEST(FlagsTest, DefaultsAreValid) {
  auto flags = ValidateFlags(RawFlags{});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->listen, "127.0.0.1:7600");  // loopback: plain text needs no flag there
  EXPECT_EQ(flags->db, "dapple.db");
  EXPECT_EQ(flags->heartbeat_interval_ms, 500);
  EXPECT_EQ(flags->worker_timeout_ms, 5000);
  EXPECT_EQ(flags->log_level, "info");
  EXPECT_EQ(flags->dead_worker_retention_s, 600);
  EXPECT_EQ(flags->starvation_after_s, 600);
  EXPECT_EQ(flags->preemption_checkpoint_timeout_s, 30);
  EXPECT_EQ(flags->port_file, "");
}

TEST(FlagsTest, PlannerDefaults) {
  auto flags = ValidateFlags(RawFlags{});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->default_device_memory_mib, 16384);
  EXPECT_EQ(flags->intra_node_bandwidth_mb_s, 10000);
  EXPECT_EQ(flags->inter_node_bandwidth_mb_s, 3125);
  EXPECT_EQ(flags->intra_node_latency_us, 10);
  EXPECT_EQ(flags->inter_node_latency_us, 20);
  EXPECT_EQ(flags->cpu_gflops, 50);
  EXPECT_EQ(flags->cuda_gflops, 50000);
  RawFlags raw;
  raw.intra_node_latency_us = "0";
  EXPECT_EQ(Error(raw), "");
  raw.cpu_gflops = "0";
  EXPECT_EQ(Error(raw), "--cpu-gflops must be at least 1 (GFLOP/s), got 0");
  raw.cpu_gflops = "50";
  raw.default_device_memory_mib = "16 GiB";
  EXPECT_EQ(Error(raw),
            "--default-device-memory-mib must be an integer number of MiB, got '16 GiB'");
  raw.default_device_memory_mib = "1073741825";
  EXPECT_EQ(Error(raw),
            "--default-device-memory-mib must be at most 1073741824 (MiB), got 1073741825");
  raw.default_device_memory_mib = "1";
  raw.inter_node_latency_us = "-1";
  EXPECT_EQ(Error(raw), "--inter-node-latency-us must be at least 0 (us), got -1");
}

TEST(FlagsTest, MetricsPortIsAPortOrZeroForNone) {
  auto flags = ValidateFlags(RawFlags{});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->metrics_port, kDefaultMetricsPort);
  EXPECT_EQ(kDefaultMetricsPort, 0);
  RawFlags raw;
  for (const char* ok : {"0", "1", "65535", "09400"}) {
    raw.metrics_port = ok;
    flags = ValidateFlags(raw);
    ASSERT_TRUE(flags.ok()) << ok << ": " << flags.status();
  }
  raw.metrics_port = "0";
  EXPECT_EQ(ValidateFlags(raw)->metrics_port, 0);
  for (const char* bad : {"65536", "-1", "", "94OO", "1e3", "999999", " 80"}) {
    raw.metrics_port = bad;
    EXPECT_EQ(Error(raw), std::string("--metrics-port must be a port number in 0..65535 (0: no "
                                      "metrics endpoint), got '") +
                              bad + "'");
  }
}

// /metrics names every tenant's jobs: it listens where --listen does by default (loopback
// for loopback, every interface otherwise), or where --metrics-host says.
TEST(FlagsTest, MetricsHostFollowsListen) {
  RawFlags raw;
  auto flags = ValidateFlags(raw);
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->metrics_host, "127.0.0.1");
  EXPECT_EQ(flags->metrics_token_file, "");
  raw.listen = "0.0.0.0:7600";
  raw.plaintext = true;
  flags = ValidateFlags(raw);
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->metrics_host, "0.0.0.0");
  raw.metrics_host = "127.0.0.1";
  flags = ValidateFlags(raw);
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->metrics_host, "127.0.0.1");
  raw.metrics_host = "localhost";
  EXPECT_EQ(Error(raw),
            "--metrics-host 'localhost' must be an IPv4 address such as 127.0.0.1 or 0.0.0.0");
  raw.metrics_host = "";
  raw.metrics_token_file = "/no/such/metrics.token";
  EXPECT_EQ(Error(raw),
            "--metrics-token-file '/no/such/metrics.token' cannot be read: No such file or "
            "directory");
  // An empty file: refused with the flags, before a first start writes the admin's token
  // (found by a security review).
  const std::string empty = ::testing::TempDir() + "/empty.token";
  std::fclose(std::fopen(empty.c_str(), "w"));
  raw.metrics_token_file = empty;
  EXPECT_EQ(Error(raw), absl::StrCat("--metrics-token-file: token file '", empty, "' is empty"));
}

TEST(FlagsTest, DeadWorkerRetentionIsWholeSecondsInRange) {
  RawFlags raw;
  raw.dead_worker_retention_s = "0";
  auto flags = ValidateFlags(raw);
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->dead_worker_retention_s, 0);
  raw.dead_worker_retention_s = "604800";
  EXPECT_EQ(Error(raw), "");
  raw.dead_worker_retention_s = "604801";
  EXPECT_EQ(Error(raw), "--dead-worker-retention-s must be at most 604800 (s), got 604801");
  raw.dead_worker_retention_s = "600";
  raw.starvation_after_s = "604801";
  EXPECT_EQ(Error(raw), "--starvation-after-s must be at most 604800 (s), got 604801");
  raw.starvation_after_s = "0";
  raw.preemption_checkpoint_timeout_s = "0";
  EXPECT_EQ(Error(raw), "--preemption-checkpoint-timeout-s must be at least 1 (s), got 0");
  raw.preemption_checkpoint_timeout_s = "30";
  raw.dead_worker_retention_s = "-1";
  EXPECT_EQ(Error(raw), "--dead-worker-retention-s must be at least 0 (s), got -1");
  raw.dead_worker_retention_s = "10m";
  EXPECT_EQ(Error(raw),
            "--dead-worker-retention-s must be an integer number of seconds, got '10m'");
  raw.dead_worker_retention_s = "";
  EXPECT_EQ(Error(raw), "--dead-worker-retention-s must be an integer number of seconds, got ''");
}

class PortFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "/dapple-flags-XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    chmod(dir_.c_str(), 0700);
    (void)!std::system(("rm -rf '" + dir_ + "'").c_str());
  }
  std::string dir_;
};

TEST_F(PortFileTest, AFileInAWritableFolderIsAccepted) {
  RawFlags raw;
  raw.port_file = dir_ + "/port";
  EXPECT_EQ(Error(raw), "");
  std::ofstream(dir_ + "/port") << "1\n";  // an old one is replaced
  EXPECT_EQ(Error(raw), "");
  // A bare name is in the working folder.
  EXPECT_TRUE(CheckPortFile("port-file-in-cwd").ok());
}

TEST_F(PortFileTest, AFolderIsRefusedUpFront) {
  RawFlags raw;
  raw.port_file = dir_;
  EXPECT_EQ(Error(raw), "--port-file '" + dir_ + "' is a directory; name a file in it, e.g. '" +
                            dir_ + "/port'");
  raw.port_file = dir_ + "/";
  EXPECT_EQ(Error(raw), "--port-file '" + dir_ + "/' is a directory; name a file in it, e.g. '" +
                            dir_ + "/port'");
}

TEST_F(PortFileTest, TokenFilesFollowThePortFilesRules) {
  RawFlags raw;
  raw.admin_token_file = dir_;
  EXPECT_EQ(Error(raw), "--admin-token-file '" + dir_ +
                            "' is a directory; name a file in it, e.g. '" + dir_ + "/admin.token'");
  raw.admin_token_file = dir_ + "/t";
  raw.join_token_file = dir_ + "/no/such/join.token";
  EXPECT_EQ(Error(raw), "--join-token-file '" + raw.join_token_file + "': cannot use folder '" +
                            dir_ + "/no/such': No such file or directory");
  raw.join_token_file = dir_ + "/t";
  EXPECT_EQ(Error(raw),
            "--admin-token-file and --join-token-file must differ, both are '" + dir_ + "/t'");
  raw.join_token_file = dir_ + "/j";
  EXPECT_EQ(Error(raw), "");
}

TEST_F(PortFileTest, TenantsFileMustBeAReadableFile) {
  RawFlags raw;
  raw.tenants_file = dir_ + "/tenants.yaml";
  EXPECT_EQ(Error(raw),
            "--tenants-file '" + raw.tenants_file + "' cannot be read: No such file or directory");
  std::ofstream(raw.tenants_file) << "tenants: []\n";
  EXPECT_EQ(Error(raw), "");
  EXPECT_EQ(ValidateFlags(raw)->tenants_file, raw.tenants_file);
  raw.tenants_file = dir_;
  EXPECT_EQ(Error(raw), "--tenants-file '" + dir_ + "' is a directory; name the file");
}

TEST_F(PortFileTest, AMissingOrUnwritableFolderIsRefusedWithTheReason) {
  RawFlags raw;
  raw.port_file = dir_ + "/no/such/port";
  EXPECT_EQ(Error(raw), "--port-file '" + raw.port_file + "': cannot use folder '" + dir_ +
                            "/no/such': No such file or directory");
  std::ofstream(dir_ + "/file") << "x";
  raw.port_file = dir_ + "/file/port";
  EXPECT_EQ(Error(raw), "--port-file '" + raw.port_file + "': cannot use folder '" + dir_ +
                            "/file': Not a directory");
}

TEST_F(PortFileTest, AFolderWithoutWritePermissionIsRefused) {
  if (geteuid() == 0) GTEST_SKIP() << "root may write in any folder: no permission to refuse";
  ASSERT_EQ(chmod(dir_.c_str(), 0500), 0);
  RawFlags raw;
  raw.port_file = dir_ + "/port";
  EXPECT_EQ(Error(raw), "--port-file '" + raw.port_file + "': cannot create files in '" + dir_ +
                            "': Permission denied");
}

TEST(FlagsTest, NumbersHaveRangesWithClearMessages) {
  RawFlags raw;
  raw.worker_timeout_ms = "0";
  EXPECT_EQ(Error(raw), "--worker-timeout-ms must be at least 100 (ms), got 0");
  raw.worker_timeout_ms = "3600001";
  EXPECT_EQ(Error(raw), "--worker-timeout-ms must be at most 3600000 (ms), got 3600001");
  raw.worker_timeout_ms = "99999999999999999999999";
  EXPECT_EQ(Error(raw),
            "--worker-timeout-ms must be at most 3600000 (ms), got 99999999999999999999999");
  raw.worker_timeout_ms = "5000";
  raw.heartbeat_interval_ms = "-5";
  EXPECT_EQ(Error(raw), "--heartbeat-interval-ms must be at least 10 (ms), got -5");
  raw.heartbeat_interval_ms = "1.5";
  EXPECT_EQ(Error(raw), "--heartbeat-interval-ms must be an integer number of ms, got '1.5'");
  raw.heartbeat_interval_ms = "";
  EXPECT_EQ(Error(raw), "--heartbeat-interval-ms must be an integer number of ms, got ''");
  raw.heartbeat_interval_ms = "60001";
  EXPECT_EQ(Error(raw), "--heartbeat-interval-ms must be at most 60000 (ms), got 60001");
  raw.heartbeat_interval_ms = "10";
  raw.worker_timeout_ms = "100";
  EXPECT_EQ(Error(raw), "");  // both at their minimum, 100 > 2 x 10
}

TEST(FlagsTest, ProfileMaxAgeIsWholeHoursInRange) {
  RawFlags raw;
  auto flags = ValidateFlags(raw);
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->profile_max_age_h, 168);
  raw.profile_max_age_h = "0";
  EXPECT_EQ(Error(raw), "");
  raw.profile_max_age_h = "87601";
  EXPECT_EQ(Error(raw), "--profile-max-age-h must be at most 87600 (hours), got 87601");
  raw.profile_max_age_h = "1.5";
  EXPECT_EQ(Error(raw), "--profile-max-age-h must be an integer number of hours, got '1.5'");
}

TEST(FlagsTest, WorkerTimeoutMustExceedTwiceTheHeartbeatInterval) {
  RawFlags raw;
  raw.heartbeat_interval_ms = "500";
  raw.worker_timeout_ms = "1000";
  EXPECT_EQ(Error(raw),
            "--worker-timeout-ms must exceed 2x --heartbeat-interval-ms (2 x 500 = 1000 ms), got "
            "1000");
  raw.worker_timeout_ms = "1001";
  EXPECT_EQ(Error(raw), "");
}

TEST(FlagsTest, ListenIsHostColonPortWithAPortThatFits) {
  RawFlags raw;
  raw.plaintext = true;  // the form alone here; TlsOrPlaintextOffLoopback has the rest
  for (const char* good :
       {"127.0.0.1:0", "0.0.0.0:65535", "localhost:7600", "[::]:7600", "[::1]:1"}) {
    raw.listen = good;
    EXPECT_EQ(Error(raw), "") << good;
  }
  for (const char* bad :
       {"127.0.0.1:99999", "127.0.0.1:65536", "127.0.0.1", "127.0.0.1:", ":7600", "127.0.0.1:-1",
        "127.0.0.1:http", "::1:7600", "[::]7600", "[]:7600", "127.0.0.1:000007600"}) {
    raw.listen = bad;
    EXPECT_EQ(Error(raw),
              std::string("--listen must be HOST:PORT with PORT in 0..65535, got '") + bad + "'")
        << bad;
  }
}

TEST(FlagsTest, DbAndLogLevel) {
  RawFlags raw;
  raw.db = "";
  EXPECT_EQ(Error(raw), "--db must name a file");
  raw.db = "x.db";
  raw.log_level = "loud";
  EXPECT_EQ(Error(raw),
            "--log-level must be one of trace, debug, info, warn, error, off; got 'loud'");
  raw.log_level = "off";
  EXPECT_EQ(Error(raw), "");
}

TEST(FlagsTest, Checkpoints) {
  RawFlags raw;
  absl::StatusOr<Flags> flags = ValidateFlags(raw);
  ASSERT_TRUE(flags.ok());
  EXPECT_EQ(flags->checkpoint_dir, "");  // the service puts it next to --db
  EXPECT_EQ(flags->keep_checkpoints, 3);
  raw.checkpoint_dir = "/data/ckpt";
  raw.keep_checkpoints = "0";
  flags = ValidateFlags(raw);
  ASSERT_TRUE(flags.ok());
  EXPECT_EQ(flags->checkpoint_dir, "/data/ckpt");
  EXPECT_EQ(flags->keep_checkpoints, 0);
  raw.keep_checkpoints = "-1";
  EXPECT_EQ(Error(raw), "--keep-checkpoints must be at least 0 (checkpoints), got -1");
  raw.keep_checkpoints = "two";
  EXPECT_EQ(Error(raw), "--keep-checkpoints must be an integer number of checkpoints, got 'two'");
}

TEST(FlagsTest, TraceEverySteps) {
  RawFlags raw;
  absl::StatusOr<Flags> flags = ValidateFlags(raw);
  ASSERT_TRUE(flags.ok());
  EXPECT_EQ(flags->trace_every_steps, 50);
  raw.trace_every_steps = "0";
  EXPECT_EQ(ValidateFlags(raw)->trace_every_steps, 0);
  raw.trace_every_steps = "3";
  EXPECT_EQ(ValidateFlags(raw)->trace_every_steps, 3);
  raw.trace_every_steps = "-2";
  EXPECT_EQ(Error(raw), "--trace-every-steps must be at least 0 (steps), got -2");
  raw.trace_every_steps = "1000000001";
  EXPECT_EQ(Error(raw), "--trace-every-steps must be at most 1000000000 (steps), got 1000000001");
  raw.trace_every_steps = "often";
  EXPECT_EQ(Error(raw), "--trace-every-steps must be an integer number of steps, got 'often'");
}

// Off loopback the port serves TLS, or plain text when asked for; the TLS flags' own rules.
TEST(FlagsTest, TlsOrPlaintextOffLoopback) {
  RawFlags raw;
  raw.listen = "0.0.0.0:7600";
  EXPECT_EQ(Error(raw),
            "--listen 0.0.0.0:7600 is not a loopback address: give --tls-cert and --tls-key, or "
            "--plaintext to send tokens and jobs unencrypted");
  raw.plaintext = true;
  EXPECT_EQ(Error(raw), "");
  raw.tls_cert = "c.pem";
  EXPECT_EQ(Error(raw), "--tls-cert and --tls-key go together: give both or neither");
  raw.tls_key = "k.pem";
  EXPECT_EQ(Error(raw), "--plaintext and --tls-cert contradict each other: choose one");
  raw.plaintext = false;
  EXPECT_EQ(Error(raw), "");  // the files are read at start (common/grpc_tls.h)
  raw.tls_cert = raw.tls_key = "";
  raw.tls_client_ca = "ca.pem";
  raw.listen = "127.0.0.1:7600";
  EXPECT_EQ(Error(raw), "--tls-client-ca needs --tls-cert and --tls-key: mutual TLS is TLS first");
}

}  // namespace
}  // namespace dapple::coordinator
