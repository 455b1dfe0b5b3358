#include "dapplectl/client.h"

#include <vector>

#include "dapplectl/exit_codes.h"
#include "dapplectl/fake_coordinator_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::ctl {
namespace {

using ::dapple::ctl::testing::FakeCoordinator;
using ::dapple::ctl::testing::RefusingPort;
using ::dapple::ctl::testing::Snapshot;
using ::testing::HasSubstr;
using ::testing::StartsWith;

ClientOptions Options(const std::string& address, absl::Duration timeout = absl::Seconds(5)) {
  ClientOptions options;
  options.address = address;
  options.timeout = timeout;
  return options;
}

TEST(UnreachableReasonTest, FromGrpcMessages) {
  const absl::Duration t = absl::Seconds(2);
  EXPECT_EQ(UnreachableReason(absl::StatusCode::kUnavailable,
                              "failed to connect to all addresses; last error: UNKNOWN: "
                              "ipv4:127.0.0.1:1: Failed to connect to remote host: Connection "
                              "refused",
                              t),
            "connection refused");
  EXPECT_EQ(UnreachableReason(absl::StatusCode::kUnavailable,
                              "DNS resolution failed for nohost:7600: C-ares status is not "
                              "ARES_SUCCESS",
                              t),
            "cannot resolve the address");
  EXPECT_EQ(UnreachableReason(absl::StatusCode::kUnavailable, "Socket closed", t),
            "connection lost");
  EXPECT_EQ(UnreachableReason(absl::StatusCode::kUnavailable, "keepalive watchdog timeout", t),
            "keepalive timeout");
  EXPECT_EQ(UnreachableReason(absl::StatusCode::kDeadlineExceeded, "Deadline Exceeded", t),
            "no answer within 2 s");
  EXPECT_EQ(UnreachableReason(absl::StatusCode::kDeadlineExceeded, "", absl::Milliseconds(1500)),
            "no answer within 1.5 s");
  EXPECT_EQ(UnreachableReason(absl::StatusCode::kUnavailable, "something new", t), "something new");
  // TLS: what the handshake said, and the likely cause of a connection closed at once.
  EXPECT_EQ(UnreachableReasonWithTls(absl::StatusCode::kUnavailable,
                                     "failed to connect to all addresses; last error: UNKNOWN: "
                                     "ipv4:127.0.0.1:1: Ssl handshake failed: SSL_ERROR_SSL: "
                                     "error:0A000086:SSL routines::certificate verify failed",
                                     t, true, false),
            "TLS: the coordinator's certificate is not signed by the --ca file (certificate "
            "verify failed)");
  EXPECT_EQ(
      UnreachableReasonWithTls(absl::StatusCode::kUnavailable, "Socket closed", t, false, false),
      "connection lost; if the coordinator serves TLS, give --ca FILE or DAPPLE_CA");
  EXPECT_EQ(
      UnreachableReasonWithTls(absl::StatusCode::kUnavailable, "Socket closed", t, true, false),
      "connection lost; if the coordinator requires client certificates (mutual TLS), give "
      "--tls-cert and --tls-key");
  // A client certificate from another CA: the handshake's end reads as a closed socket.
  EXPECT_EQ(
      UnreachableReasonWithTls(absl::StatusCode::kUnavailable, "Socket closed", t, true, true),
      "connection lost; if the coordinator requires client certificates (mutual TLS), check "
      "that --tls-cert is signed by the CA of its --tls-client-ca");
}

TEST(UnreachableReasonTest, TransportMessages) {
  EXPECT_TRUE(IsTransportMessage("failed to connect to all addresses; last error: ..."));
  EXPECT_TRUE(IsTransportMessage("Socket closed"));
  EXPECT_TRUE(IsTransportMessage("Connection reset by peer"));
  EXPECT_FALSE(IsTransportMessage("coordinator is starting; retry"));
  EXPECT_FALSE(IsTransportMessage("Deadline Exceeded"));
}

TEST(UnreachableReasonTest, Message) {
  EXPECT_EQ(UnreachableMessage("127.0.0.1:7600", "connection refused"),
            "cannot reach the coordinator at 127.0.0.1:7600 (connection refused); start "
            "dapple-coordinator or set --coordinator / DAPPLE_COORDINATOR");
}

TEST(CoordinatorClientTest, RefusedConnectionIsReportedAtOnce) {
  RefusingPort refusing;
  ASSERT_NE(refusing.port(), 0);
  CoordinatorClient client(Options(refusing.address(), absl::Seconds(5)));
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::Job> job = client.Get("job-1");
  // Fail-fast: well before the 5 s deadline.
  EXPECT_LT(absl::Now() - start, absl::Seconds(4));
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(job.status().message(), UnreachableMessage(refusing.address(), "connection refused"));
}

TEST(CoordinatorClientTest, WatchOfAnUnreachableCoordinator) {
  RefusingPort refusing;
  ASSERT_NE(refusing.port(), 0);
  CoordinatorClient client(Options(refusing.address(), absl::Seconds(5)));
  int snapshots = 0;
  absl::StatusOr<v1::Job> job = client.Watch("job-1", [&](const v1::Job&) { ++snapshots; });
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(job.status().message()), HasSubstr("(connection refused)"));
  EXPECT_EQ(snapshots, 0);
}

TEST(CoordinatorClientTest, CoordinatorErrorsPassThroughUnchanged) {
  FakeCoordinator fake;
  CoordinatorClient client(Options(fake.address()));
  absl::StatusOr<v1::Job> job = client.Submit("bad: [", "job.yaml");
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(job.status().message(), "job.yaml:4:7: YAML syntax error: end of map not found");

  job = client.Get("job-77");
  EXPECT_EQ(job.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(job.status().message(), "job job-77 not found");
}

TEST(CoordinatorClientTest, SubmitSendsTextAndSourceName) {
  FakeCoordinator fake;
  CoordinatorClient client(Options(fake.address()));
  absl::StatusOr<v1::Job> job = client.Submit("name: x\n", "specs/x.yaml");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->id(), "job-1");
  EXPECT_EQ(fake.last_submit().spec_yaml(), "name: x\n");
  EXPECT_EQ(fake.last_submit().source_name(), "specs/x.yaml");
}

TEST(CoordinatorClientTest, NothingThatIsNotUtf8IsSent) {
  FakeCoordinator fake;
  CoordinatorClient client(Options(fake.address()));
  // A spec that is not UTF-8 is refused before sending (protobuf could not carry it).
  absl::StatusOr<v1::Job> job = client.Submit("name: caf\xE9\n", "job.yaml");
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(job.status().message(),
            "job.yaml: not UTF-8 text (invalid byte 0xE9 at line 1, column 10)");
  EXPECT_EQ(fake.last_submit().spec_yaml(), "");
  // Names and job ids travel with their invalid bytes escaped.
  job = client.Submit("name: x\n", "caf\xE9.yaml");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(fake.last_submit().source_name(), "caf\\xE9.yaml");
  job = client.Get("job-\xE9");
  EXPECT_EQ(job.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(job.status().message(), "job job-\\xE9 not found");
  job = client.Cancel("job-\xFF");
  EXPECT_EQ(job.status().message(), "job job-\\xFF not found");
  job = client.Watch("job-\xC3", [](const v1::Job&) {});
  EXPECT_EQ(job.status().message(), "job job-\\xC3 not found");
}

TEST(CoordinatorClientTest, InternalAndUnknownErrorsNameTheCall) {
  FakeCoordinator fake;
  CoordinatorClient client(Options(fake.address()));
  fake.FailGetJob(grpc::Status(grpc::StatusCode::INTERNAL, "Failed to parse request"));
  absl::StatusOr<v1::Job> job = client.Get("job-1");
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(job.status().message(), "GetJob failed with INTERNAL: Failed to parse request");
  fake.FailGetJob(grpc::Status(grpc::StatusCode::UNKNOWN, "Unexpected error in RPC handling"));
  job = client.Get("job-1");
  EXPECT_EQ(job.status().code(), absl::StatusCode::kUnknown);
  EXPECT_EQ(job.status().message(), "GetJob failed with UNKNOWN: Unexpected error in RPC handling");
  fake.FailGetJob(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                               "Received message larger than max (5 vs. 4)"));
  job = client.Get("job-1");
  EXPECT_EQ(job.status().message(),
            "GetJob failed with RESOURCE_EXHAUSTED: Received message larger than max (5 vs. 4)");
  fake.FailGetJob(grpc::Status(grpc::StatusCode::UNKNOWN, ""));
  job = client.Get("job-1");
  EXPECT_EQ(job.status().message(), "GetJob failed with UNKNOWN");
  // The coordinator's own RESOURCE_EXHAUSTED (a tenant's max_queued_jobs) is its answer.
  fake.FailGetJob(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                               "tenant team-q has 1 queued job (its max_queued_jobs)"));
  job = client.Get("job-1");
  EXPECT_EQ(job.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(job.status().message(), "tenant team-q has 1 queued job (its max_queued_jobs)");
}

TEST(QuietProtobufLoggingTest, ProtobufLogsNothing) {
  // What protobuf logs when a string field holds invalid UTF-8, as SubmitJob's did.
  v1::SubmitJobRequest request;
  request.set_source_name("caf\xE9.yaml");
  QuietProtobufLogging();
  ::testing::internal::CaptureStderr();
  std::string wire;
  request.SerializeToString(&wire);
  v1::SubmitJobRequest parsed;
  EXPECT_FALSE(parsed.ParseFromString(wire));
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

TEST(CoordinatorClientTest, UnavailableFromALiveCoordinatorKeepsItsMessage) {
  FakeCoordinator fake;
  fake.FailGetJob(grpc::Status(grpc::StatusCode::UNAVAILABLE, "job store is being recovered"));
  CoordinatorClient client(Options(fake.address()));
  absl::StatusOr<v1::Job> job = client.Get("job-1");
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(job.status().message(), "job store is being recovered");
}

TEST(CoordinatorClientTest, SlowAnswerHitsTheDeadline) {
  FakeCoordinator fake;
  fake.StallListWorkers();
  CoordinatorClient client(Options(fake.address(), absl::Milliseconds(300)));
  // Connect first so the deadline is the call's, not the connection's.
  ASSERT_TRUE(client.List().ok());
  absl::StatusOr<v1::ListWorkersResponse> workers = client.ListWorkers();
  ASSERT_FALSE(workers.ok());
  EXPECT_EQ(workers.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(workers.status().message(), absl::StrCat("the coordinator at ", fake.address(),
                                                     " did not answer ListWorkers within 0.3 s"));
}

TEST(CoordinatorClientTest, WatchFollowsTheJobToItsEnd) {
  FakeCoordinator fake;
  fake.AddJob(Snapshot("job-1", v1::JOB_STATE_PENDING, 0, 0));
  fake.ScriptWatch("job-1", {{.events = {Snapshot("job-1", v1::JOB_STATE_PENDING, 0, 0),
                                         Snapshot("job-1", v1::JOB_STATE_RUNNING, 5, 10),
                                         Snapshot("job-1", v1::JOB_STATE_SUCCEEDED, 10, 10)}}});
  CoordinatorClient client(Options(fake.address()));
  std::vector<v1::JobState> states;
  absl::StatusOr<v1::Job> job =
      client.Watch("job-1", [&](const v1::Job& j) { states.push_back(j.state()); });
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(job->metrics().step(), 10);
  // GetJob's snapshot first, then the stream's.
  EXPECT_EQ(states, (std::vector<v1::JobState>{v1::JOB_STATE_PENDING, v1::JOB_STATE_PENDING,
                                               v1::JOB_STATE_RUNNING, v1::JOB_STATE_SUCCEEDED}));
  EXPECT_EQ(fake.watch_calls(), 1);
}

TEST(CoordinatorClientTest, WatchOfAFinishedJobNeedsNoStream) {
  FakeCoordinator fake;
  fake.AddJob(Snapshot("job-1", v1::JOB_STATE_FAILED, 3, 10));
  CoordinatorClient client(Options(fake.address()));
  absl::StatusOr<v1::Job> job = client.Watch("job-1", [](const v1::Job&) {});
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(fake.watch_calls(), 0);
}

TEST(CoordinatorClientTest, WatchReconnectsAfterABrokenStream) {
  FakeCoordinator fake;
  fake.AddJob(Snapshot("job-1", v1::JOB_STATE_RUNNING, 1, 10));
  fake.ScriptWatch(
      "job-1",
      {{.events = {Snapshot("job-1", v1::JOB_STATE_RUNNING, 2, 10)},
        .end_status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator shutting down")},
       {.events = {Snapshot("job-1", v1::JOB_STATE_RUNNING, 6, 10),
                   Snapshot("job-1", v1::JOB_STATE_CANCELLED, 6, 10)}}});
  CoordinatorClient client(Options(fake.address()));
  std::vector<int64_t> steps;
  absl::StatusOr<v1::Job> job =
      client.Watch("job-1", [&](const v1::Job& j) { steps.push_back(j.metrics().step()); });
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(fake.watch_calls(), 2);
  // GetJob, stream 1, GetJob on reconnecting, stream 2.
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 1, 6, 6}));
}

TEST(CoordinatorClientTest, WatchKeepsGoingWhileStreamsEndEmpty) {
  // A live coordinator whose streams end without a snapshot (e.g. GOAWAY while PENDING): the
  // watch re-reads the job between streams and backs off, until the job ends.
  FakeCoordinator fake;
  fake.AddJob(Snapshot("job-1", v1::JOB_STATE_PENDING, 0, 0));
  fake.ScriptWatch(
      "job-1",
      {{.events = {}, .end_status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "Socket closed")}});
  fake.EndJobAfterWatchCalls("job-1", 3, v1::JOB_STATE_SUCCEEDED);
  CoordinatorClient client(Options(fake.address()));
  int snapshots = 0;
  absl::StatusOr<v1::Job> job = client.Watch("job-1", [&](const v1::Job&) { ++snapshots; });
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(fake.watch_calls(), 3);
  EXPECT_EQ(snapshots, 4);  // the first GetJob and one after each stream
}

TEST(CoordinatorClientTest, WatchEndsWhenTheCoordinatorDies) {
  FakeCoordinator fake;
  fake.AddJob(Snapshot("job-1", v1::JOB_STATE_RUNNING, 1, 10));
  fake.ScriptWatch("job-1",
                   {{.events = {Snapshot("job-1", v1::JOB_STATE_RUNNING, 2, 10)},
                     .end_status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "Socket closed")}});
  CoordinatorClient client(Options(fake.address(), absl::Milliseconds(500)));
  absl::StatusOr<v1::Job> job = client.Watch("job-1", [&](const v1::Job& j) {
    if (j.metrics().step() == 2) fake.Stop();
  });
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(ExitCodeForStatusCode(job.status().code()), kExitUnreachable);
  EXPECT_THAT(std::string(job.status().message()),
              StartsWith(absl::StrCat("lost the watch on job-1: cannot reach the coordinator at ",
                                      fake.address(), " (")));
}

TEST(IsLostConnectionTest, ConnectionEndingsReconnectAnswersDoNot) {
  // A stream that ends with these before a terminal state: reconnect.
  for (absl::StatusCode code : {absl::StatusCode::kOk, absl::StatusCode::kUnavailable,
                                absl::StatusCode::kCancelled, absl::StatusCode::kDeadlineExceeded,
                                absl::StatusCode::kInternal, absl::StatusCode::kUnknown}) {
    EXPECT_TRUE(IsLostConnection(code)) << absl::StatusCodeToString(code);
  }
  // The coordinator's answers end the watch.
  for (absl::StatusCode code :
       {absl::StatusCode::kNotFound, absl::StatusCode::kInvalidArgument,
        absl::StatusCode::kFailedPrecondition, absl::StatusCode::kUnimplemented,
        absl::StatusCode::kPermissionDenied, absl::StatusCode::kResourceExhausted,
        absl::StatusCode::kAlreadyExists, absl::StatusCode::kUnauthenticated}) {
    EXPECT_FALSE(IsLostConnection(code)) << absl::StatusCodeToString(code);
  }
}

TEST(RetryReconnectTest, FastFailuresAreRetriedTheTimeoutIsNot) {
  EXPECT_TRUE(RetryReconnect(absl::StatusCode::kUnavailable));
  EXPECT_TRUE(RetryReconnect(absl::StatusCode::kCancelled));
  EXPECT_TRUE(RetryReconnect(absl::StatusCode::kInternal));
  EXPECT_FALSE(RetryReconnect(absl::StatusCode::kDeadlineExceeded));
  EXPECT_FALSE(RetryReconnect(absl::StatusCode::kOk));
  EXPECT_FALSE(RetryReconnect(absl::StatusCode::kNotFound));
}

// The user's case: SIGTERM to the coordinator ends the stream (UNAVAILABLE, or CANCELLED when
// gRPC cancels it), and the first calls after it reach the closing coordinator, which cancels
// them. The watch must reconnect, not end with "lost the watch on job-1: CANCELLED".
TEST(CoordinatorClientTest, WatchReconnectsAfterACancelledStreamAndCancelledCalls) {
  FakeCoordinator fake;
  fake.AddJob(Snapshot("job-1", v1::JOB_STATE_RUNNING, 1, 10));
  fake.ScriptWatch("job-1", {{.events = {Snapshot("job-1", v1::JOB_STATE_RUNNING, 2, 10)},
                              .end_status = grpc::Status(grpc::StatusCode::CANCELLED, "CANCELLED")},
                             {.events = {Snapshot("job-1", v1::JOB_STATE_SUCCEEDED, 10, 10)}}});
  CoordinatorClient client(Options(fake.address()));
  std::vector<int64_t> steps;
  absl::StatusOr<v1::Job> job = client.Watch("job-1", [&](const v1::Job& j) {
    steps.push_back(j.metrics().step());
    // The next two GetJob calls (the reconnect's) are cancelled by a "closing" coordinator.
    if (j.metrics().step() == 2) fake.FailNextGetJobs(2, grpc::Status::CANCELLED);
  });
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(fake.watch_calls(), 2);
  EXPECT_EQ(fake.get_calls(), 4);  // the first, two cancelled, the one that worked
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 1, 10}));
}

TEST(CoordinatorClientTest, CancelledCallsUntilTheTimeoutAreALostCoordinator) {
  FakeCoordinator fake;
  fake.AddJob(Snapshot("job-1", v1::JOB_STATE_RUNNING, 1, 10));
  fake.ScriptWatch("job-1",
                   {{.events = {Snapshot("job-1", v1::JOB_STATE_RUNNING, 2, 10)},
                     .end_status = grpc::Status(grpc::StatusCode::CANCELLED, "CANCELLED")}});
  CoordinatorClient client(Options(fake.address(), absl::Milliseconds(500)));
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::Job> job = client.Watch("job-1", [&](const v1::Job& j) {
    if (j.metrics().step() == 2) fake.FailGetJob(grpc::Status::CANCELLED);
  });
  ASSERT_FALSE(job.ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(ExitCodeForStatusCode(job.status().code()), kExitUnreachable);
  EXPECT_EQ(job.status().message(),
            absl::StrCat("lost the watch on job-1: ",
                         UnreachableMessage(fake.address(), "connection lost")));
}

TEST(WatchReconnectDelayTest, DoublesUpToTheCap) {
  EXPECT_EQ(WatchReconnectDelay(0), absl::ZeroDuration());
  EXPECT_EQ(WatchReconnectDelay(1), absl::Milliseconds(100));
  EXPECT_EQ(WatchReconnectDelay(2), absl::Milliseconds(200));
  EXPECT_EQ(WatchReconnectDelay(3), absl::Milliseconds(400));
  EXPECT_EQ(WatchReconnectDelay(7), absl::Seconds(5));
  EXPECT_EQ(WatchReconnectDelay(1000), kMaxWatchReconnectDelay);
}

TEST(CoordinatorClientTest, WatchOfAnUnknownJob) {
  FakeCoordinator fake;
  CoordinatorClient client(Options(fake.address()));
  absl::StatusOr<v1::Job> job = client.Watch("job-404", [](const v1::Job&) {});
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(job.status().message(), "job job-404 not found");
}

}  // namespace
}  // namespace dapple::ctl
