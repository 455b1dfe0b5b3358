#include "worker/daemon/worker_flags.h"

#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/daemon/worker_daemon.h"

namespace dapple::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

absl::StatusOr<WorkerFlags> Parse(const std::vector<std::string>& args, const char* env = nullptr) {
  return ParseWorkerFlags(args, env);
}

// `args` must be refused with kInvalidArgument and exactly `message` (one line).
void ExpectError(const std::vector<std::string>& args, const std::string& message) {
  absl::StatusOr<WorkerFlags> f = Parse(args);
  std::string joined;
  for (const std::string& a : args) joined += "[" + a + "]";
  ASSERT_FALSE(f.ok()) << joined << " was accepted";
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << joined;
  EXPECT_EQ(f.status().message(), message) << joined;
  EXPECT_EQ(std::string(f.status().message()).find('\n'), std::string::npos) << joined;
}

TEST(WorkerFlagsTest, Defaults) {
  absl::StatusOr<WorkerFlags> f = Parse({});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->options.coordinator, "127.0.0.1:7600");
  EXPECT_EQ(f->options.name, "");
  EXPECT_FALSE(f->devices_given);
  EXPECT_THAT(f->options.devices, ElementsAre("cpu"));
  EXPECT_EQ(f->options.transport_timeout, absl::Seconds(120));
  EXPECT_EQ(f->options.rendezvous_timeout, absl::Seconds(60));
  EXPECT_EQ(f->log_level, "info");
  EXPECT_FALSE(f->cpu_fallback);
  EXPECT_FALSE(f->help);
}

TEST(WorkerFlagsTest, AllFlags) {
  absl::StatusOr<WorkerFlags> f = Parse(
      {"--coordinator", "10.0.0.1:7601", "--name", "node-1", "--devices", "cpu,cuda:0", "--devices",
       "cuda:3", "--cpu-fallback", "--dump-dir", ::testing::TempDir(), "--transport-timeout-s", "7",
       "--rendezvous-timeout-s", "9", "--log-level", "debug", "--plaintext"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->options.coordinator, "10.0.0.1:7601");
  EXPECT_EQ(f->options.name, "node-1");
  EXPECT_TRUE(f->devices_given);
  EXPECT_THAT(f->options.devices, ElementsAre("cpu", "cuda:0", "cuda:3"));
  EXPECT_TRUE(f->cpu_fallback);
  EXPECT_EQ(f->options.dump_dir, ::testing::TempDir());
  EXPECT_EQ(f->options.transport_timeout, absl::Seconds(7));
  EXPECT_EQ(f->options.rendezvous_timeout, absl::Seconds(9));
  EXPECT_EQ(f->log_level, "debug");
}

TEST(WorkerFlagsTest, CoordinatorFromEnvironment) {
  absl::StatusOr<WorkerFlags> f = Parse({"--plaintext"}, "coord:7000");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->options.coordinator, "coord:7000");
  f = Parse({"--coordinator", "other:7001", "--plaintext"}, "coord:7000");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->options.coordinator, "other:7001");
  f = Parse({}, "");  // set but empty: as if unset
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->options.coordinator, "127.0.0.1:7600");
  f = Parse({}, "nonsense");
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(std::string(f.status().message()),
              HasSubstr("--coordinator 'nonsense' must be HOST:PORT"));
  EXPECT_THAT(std::string(f.status().message()), HasSubstr("(from $DAPPLE_COORDINATOR)"));
}

// $DAPPLE_JOIN_TOKEN is named as the token's source; bytes gRPC would abort on are refused
// without echoing the token.
TEST(WorkerFlagsTest, JoinTokenFromEnvironment) {
  absl::StatusOr<WorkerFlags> f = ParseWorkerFlags({}, nullptr, nullptr, " dpl_x \n");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->options.join_token, "dpl_x");
  EXPECT_EQ(f->options.join_token_source, "DAPPLE_JOIN_TOKEN");
  f = ParseWorkerFlags({}, nullptr, nullptr, "dpl_secret\tx");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().message(),
            "DAPPLE_JOIN_TOKEN holds byte 0x09 at offset 10: a token is one word of printable "
            "characters (dpl_...); is there a second line or a stray character?");
}

TEST(WorkerFlagsTest, Help) {
  absl::StatusOr<WorkerFlags> f = Parse({"--help"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE(f->help);
  EXPECT_THAT(f->help_text, HasSubstr("--devices"));
  EXPECT_THAT(f->help_text, HasSubstr("--version"));
  f = Parse({"--version"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE(f->help);
  EXPECT_THAT(f->help_text, ::testing::StartsWith("dapple 0."));
}

TEST(WorkerFlagsTest, DevicesWithEmptyEntriesAreRefusedNamingTheValue) {
  const std::string rule =
      "' has an empty entry: list devices separated by commas, e.g. cpu or cuda:0,cuda:1";
  for (const char* bad : {",", "cpu,", ",cpu", "cpu,,cuda:0", ""}) {
    ExpectError({"--devices", bad}, "--devices '" + std::string(bad) + rule);
  }
  ExpectError({"--devices", "cpu", "--devices", "cuda:0,"}, "--devices 'cuda:0," + rule);
}

TEST(WorkerFlagsTest, DevicesEntriesAreValidated) {
  ExpectError({"--devices", "cpu,gpu"},
              "--devices 'gpu' is not a device: use \"cpu\" or \"cuda:N\" with N in 0..1023");
  ExpectError({"--devices", "cpu", "--devices", "cpu"}, "--devices lists 'cpu' twice");
}

TEST(WorkerFlagsTest, FlagWithoutValue) {
  ExpectError({"--devices"}, "--devices needs a value (see --help)");
  ExpectError({"--devices="}, "--devices needs a value (see --help)");
  ExpectError({"--name"}, "--name needs a value (see --help)");
  ExpectError({"--coordinator"}, "--coordinator needs a value (see --help)");
  // A one-value flag takes the next argument even when it is a flag.
  ExpectError({"--name", "--devices", "cpu"}, "--name needs a value, got the flag '--devices'");
  ExpectError({"--devices", "--name", "x"}, "--devices needs a value, got the flag '--name'");
}

TEST(WorkerFlagsTest, FlagGivenTwice) {
  ExpectError({"--name", "a", "--name", "b"}, "--name is given more than once");
}

TEST(WorkerFlagsTest, StrayArgumentsAreReportedAsSuch) {
  ExpectError({"--devices", "cpu", "extra"},
              "unexpected argument 'extra': dapple-worker takes flags only (see --help)");
  ExpectError({"extra"},
              "unexpected argument 'extra': dapple-worker takes flags only (see --help)");
  ExpectError({"--name", "a", "b"},
              "unexpected argument 'b': dapple-worker takes flags only (see --help)");
  ExpectError({"--bogus"}, "unknown flag '--bogus' (see --help)");
  ExpectError({"--bogus=3"}, "unknown flag '--bogus=3' (see --help)");
  ExpectError({"--", "x"}, "unexpected argument 'x': dapple-worker takes flags only (see --help)");
}

TEST(WorkerFlagsTest, ExplicitEmptyValuesAreRefused) {
  ExpectError({"--name", ""},
              "--name '' must be 1-63 characters of a-z 0-9 - _ ., starting with a letter or digit "
              "(leave --name out to get an id "
              "assigned by the coordinator)");
  ExpectError({"--dump-dir", ""},
              "--dump-dir '' must name an existing directory (leave --dump-dir out to write no "
              "parameters)");
  ExpectError({"--coordinator", ""},
              "--coordinator '' must be HOST:PORT with PORT in 1..65535 (e.g. 127.0.0.1:7600)");
  ExpectError({"--log-level", ""},
              "--log-level '' must be one of trace, debug, info, warn, error, off");
  ExpectError({"--transport-timeout-s", ""},
              "--transport-timeout-s '' must be a whole number of seconds (1..86400)");
}

TEST(WorkerFlagsTest, Timeouts) {
  ExpectError({"--transport-timeout-s", "abc"},
              "--transport-timeout-s 'abc' must be a whole number of seconds (1..86400)");
  ExpectError({"--rendezvous-timeout-s", "1.5"},
              "--rendezvous-timeout-s '1.5' must be a whole number of seconds (1..86400)");
  ExpectError({"--transport-timeout-s", "0"},
              "--transport-timeout-s 0 must be between 1 s and 24 h");
  ExpectError({"--rendezvous-timeout-s", "-5"},
              "--rendezvous-timeout-s -5s must be between 1 s and 24 h");
}

TEST(WorkerFlagsTest, MetricsPortIsOffByDefault) {
  absl::StatusOr<WorkerFlags> f = Parse({});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->metrics_port, 0);
  f = Parse({"--metrics-port", "9401"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->metrics_port, 9401);
  f = Parse({"--metrics-port=65535"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->metrics_port, 65535);
  for (const char* bad : {"65536", "-1", "", "abc", "94O1", "1234567"}) {
    ExpectError({"--metrics-port", bad},
                std::string("--metrics-port '") + bad +
                    "' must be a port number in 0..65535 (0: no metrics endpoint)");
  }
  ExpectError({"--metrics-port", "--name", "x"},
              "--metrics-port needs a value, got the flag '--name'");
}

// /metrics names the jobs the worker runs: on loopback for a one-host cluster (a loopback
// --coordinator), every interface otherwise, or where --metrics-host says.
TEST(WorkerFlagsTest, MetricsHostFollowsTheCoordinatorsAddress) {
  absl::StatusOr<WorkerFlags> f = Parse({"--coordinator", "127.0.0.1:7600"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->metrics_host, "127.0.0.1");
  EXPECT_EQ(f->metrics_token_file, "");
  f = Parse({"--coordinator", "localhost:7600"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->metrics_host, "127.0.0.1");
  f = Parse({"--coordinator", "10.0.0.1:7600", "--plaintext"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->metrics_host, "0.0.0.0");
  const std::string token = ::testing::TempDir() + "/worker-flags-metrics.token";
  std::ofstream(token) << "s3cret\n";
  f = Parse({"--coordinator", "10.0.0.1:7600", "--plaintext", "--metrics-host", "10.0.0.2",
             "--metrics-token-file", token});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->metrics_host, "10.0.0.2");
  EXPECT_EQ(f->metrics_token_file, token);
  // A path that cannot be read is a usage error, worded as the coordinator's.
  ExpectError({"--metrics-token-file", "/no/such.token"},
              "--metrics-token-file '/no/such.token' cannot be read: No such file or directory");
  ExpectError({"--metrics-host", "localhost"},
              "--metrics-host 'localhost' must be an IPv4 address such as 127.0.0.1 or 0.0.0.0");
  ExpectError({"--metrics-host", ""},
              "--metrics-host '' must be an IPv4 address such as 127.0.0.1 or 0.0.0.0");
  ExpectError({"--metrics-token-file", ""},
              "--metrics-token-file '' must name a file (leave the flag out to serve /metrics "
              "without a token)");
  ExpectError({"--metrics-host", "--name", "x"},
              "--metrics-host needs a value, got the flag '--name'");
}

TEST(WorkerFlagsTest, DeviceMemory) {
  absl::StatusOr<WorkerFlags> f = Parse({});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->options.device_memory_bytes, 0);  // probed at registration
  f = Parse({"--device-memory", "8GiB"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->options.device_memory_bytes, int64_t{8} << 30);
  ExpectError({"--device-memory", "8GB"},
              "--device-memory '8GB' must be a whole number of bytes, KiB, MiB, GiB or TiB "
              "(e.g. 16GiB), more than 0 and at most 1 EiB");
}

TEST(WorkerFlagsTest, CommDelayIsOffByDefaultAndBounded) {
  absl::StatusOr<WorkerFlags> f = Parse({});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->options.comm_delay_max, absl::ZeroDuration());
  f = Parse({"--comm-delay-max-ms", "50"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->options.comm_delay_max, absl::Milliseconds(50));
  f = Parse({"--comm-delay-max-ms=10000"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->options.comm_delay_max, absl::Seconds(10));
  for (const char* bad : {"10001", "-1", "1.5", "", "abc", "999999999999"}) {
    ExpectError({"--comm-delay-max-ms", bad},
                std::string("--comm-delay-max-ms '") + bad +
                    "' must be a whole number of milliseconds in 0..10000 (0: no delay)");
  }
  ExpectError({"--comm-delay-max-ms", "--name", "x"},
              "--comm-delay-max-ms needs a value, got the flag '--name'");
}

TEST(WorkerFlagsTest, BadNameIsRefused) {
  ExpectError({"--name", "Bad Name"},
              "--name 'Bad Name' must be 1-63 characters of a-z 0-9 - _ ., starting with a letter "
              "or digit");
  ExpectError({"--name", ".."},
              "--name '..' must be 1-63 characters of a-z 0-9 - _ ., starting with a letter or "
              "digit");
}

// A fresh user's --collective-host 8.8.8.8 registered fine and failed every replicated job sent
// to the worker; it is refused at start now.
TEST(CheckCollectiveHostTest, OnlyAnAddressOfThisHostIsTaken) {
  EXPECT_TRUE(CheckCollectiveHost("127.0.0.1").ok());
  EXPECT_TRUE(CheckCollectiveHost("localhost").ok());
  const absl::Status other = CheckCollectiveHost("192.0.2.1");  // TEST-NET-1: nobody's
  EXPECT_EQ(other.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(other.message(),
            "--collective-host 192.0.2.1: cannot bind to it (Cannot assign requested address): "
            "give an address of this host, or leave the flag out");
  EXPECT_THAT(std::string(CheckCollectiveHost("no-such-host.invalid").message()),
              ::testing::StartsWith("--collective-host no-such-host.invalid: cannot bind to it ("));
}

TEST(NameTakenWarningTest, WarnsOnlyWhenTheRequestedNameWasNotGiven) {
  EXPECT_EQ(NameTakenWarning("cpu-a", "w-1"),
            "--name cpu-a is taken by a live worker; registered as w-1");
  EXPECT_EQ(NameTakenWarning("cpu-a", "cpu-a"), "");
  EXPECT_EQ(NameTakenWarning("", "w-1"), "");
}

// Plain text to the coordinator only on loopback or when asked for; the CA is read at start.
TEST(WorkerFlagsTest, TlsOrPlaintextToTheCoordinator) {
  EXPECT_TRUE(Parse({"--coordinator", "127.0.0.1:7600"}).ok());
  absl::StatusOr<WorkerFlags> far = Parse({"--coordinator", "10.0.0.5:7600"});
  EXPECT_EQ(far.status().message(),
            "--coordinator 10.0.0.5:7600 is not a loopback address: give --ca FILE (or "
            "DAPPLE_CA), or --plaintext to send tokens and jobs unencrypted");
  EXPECT_TRUE(Parse({"--coordinator", "10.0.0.5:7600", "--plaintext"}).ok());
  EXPECT_EQ(Parse({"--coordinator", "10.0.0.5:7600", "--ca", "/no/ca.pem"}).status().message(),
            "--ca /no/ca.pem: No such file or directory");
  EXPECT_EQ(ParseWorkerFlags({"--coordinator", "10.0.0.5:7600"}, nullptr, "/no/env-ca.pem")
                .status()
                .message(),
            "--ca /no/env-ca.pem: No such file or directory");
  EXPECT_THAT(Parse({"--tls-key", "k.pem"}).status().message(),
              HasSubstr("--tls-cert and --tls-key go together"));
  EXPECT_THAT(Parse({"--ca"}).status().message(), HasSubstr("--ca"));
}

}  // namespace
}  // namespace dapple::worker
