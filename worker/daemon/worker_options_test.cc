#include "worker/daemon/worker_options.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::worker {
namespace {

using ::testing::HasSubstr;

WorkerOptions Good() {
  WorkerOptions o;
  o.coordinator = "127.0.0.1:7600";
  return o;
}

void ExpectInvalid(const WorkerOptions& o, const std::string& part) {
  absl::Status s = ValidateWorkerOptions(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << part;
  EXPECT_THAT(std::string(s.message()), HasSubstr(part));
}

TEST(WorkerOptionsTest, DefaultsAreValid) { EXPECT_TRUE(ValidateWorkerOptions(Good()).ok()); }

TEST(WorkerOptionsTest, CoordinatorMustBeHostPort) {
  for (const char* bad : {"", "nonsense:xx", ":7600", "host", "host:0", "host:99999", "h:-1"}) {
    WorkerOptions o = Good();
    o.coordinator = bad;
    ExpectInvalid(o, "--coordinator '" + std::string(bad) + "' must be HOST:PORT");
  }
  WorkerOptions o = Good();
  o.coordinator = "coordinator.dapple.svc:7600";
  EXPECT_TRUE(ValidateWorkerOptions(o).ok());
}

TEST(WorkerOptionsTest, NameCharacters) {
  for (const char* bad : {"bad name", "UPPER", "a/b"}) {
    WorkerOptions o = Good();
    o.name = bad;
    ExpectInvalid(o, "--name");
  }
  WorkerOptions o = Good();
  o.name = "node-3.gpu_0";
  EXPECT_TRUE(ValidateWorkerOptions(o).ok());
  o.name = std::string(64, 'a');
  ExpectInvalid(o, "1-63 characters");
}

TEST(WorkerOptionsTest, Devices) {
  WorkerOptions o = Good();
  o.devices = {"cpu", "cpu"};
  ExpectInvalid(o, "lists 'cpu' twice");
  o.devices = {"cuda:1", "cpu", "cuda:1"};
  ExpectInvalid(o, "lists 'cuda:1' twice");
  for (const char* bad : {"gpu", "cuda", "cuda:01", "cuda:1024", "CUDA:0", "cuda:0 "}) {
    o.devices = {"cpu", bad};
    ExpectInvalid(o, "--devices '" + std::string(bad) +
                         "' is not a device: use \"cpu\" or \"cuda:N\" with N in 0..1023");
  }
  o.devices = {};
  ExpectInvalid(o, "at least one device");
  // Only the syntax is checked here: whether a GPU exists is ResolveDevices' job (main), so
  // these are valid on any machine.
  for (const std::vector<std::string>& ok :
       std::vector<std::vector<std::string>>{{"cuda:0"}, {"cpu", "cuda:0", "cuda:7"}}) {
    o.devices = ok;
    EXPECT_TRUE(ValidateWorkerOptions(o).ok()) << ok.size();
  }
}

TEST(WorkerOptionsTest, DumpDirMustBeWritable) {
  WorkerOptions o = Good();
  o.dump_dir = "/nonexistent/x";
  ExpectInvalid(o, "--dump-dir /nonexistent/x: cannot create files there (No such file");
  o.dump_dir = ::testing::TempDir();
  EXPECT_TRUE(ValidateWorkerOptions(o).ok());
}

TEST(WorkerOptionsTest, Timeouts) {
  WorkerOptions o = Good();
  o.transport_timeout = absl::ZeroDuration();
  ExpectInvalid(o, "--transport-timeout-s 0 must be between 1 s and 24 h");
  o = Good();
  o.rendezvous_timeout = absl::Hours(48);
  ExpectInvalid(o, "--rendezvous-timeout-s 48h must be between");
}

TEST(WorkerOptionsTest, CommDelay) {
  WorkerOptions o = Good();
  o.comm_delay_max = absl::Seconds(10);
  EXPECT_TRUE(ValidateWorkerOptions(o).ok());
  o.comm_delay_max = absl::Milliseconds(10001);
  ExpectInvalid(o, "--comm-delay-max-ms 10001 must be in 0..10000 (0: no delay)");
  o.comm_delay_max = absl::Milliseconds(-1);
  ExpectInvalid(o, "--comm-delay-max-ms -1 must be in 0..10000");
}

TEST(WorkerOptionsTest, LogLevel) {
  EXPECT_TRUE(ValidateLogLevel("debug").ok());
  EXPECT_THAT(std::string(ValidateLogLevel("bogus").message()),
              HasSubstr("--log-level 'bogus' must be one of"));
}

}  // namespace
}  // namespace dapple::worker
