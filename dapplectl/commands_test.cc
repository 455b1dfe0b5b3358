#include "dapplectl/commands.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "dapplectl/commands_testing.h"
#include "dapplectl/exit_codes.h"
#include "dapplectl/fake_coordinator_test_util.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace dapple::ctl {
namespace {

using ::dapple::ctl::testing::CommandsTest;
using ::dapple::ctl::testing::FakeCoordinator;
using ::dapple::ctl::testing::RefusingPort;
using ::dapple::ctl::testing::Result;
using ::dapple::ctl::testing::RunCtl;
using ::dapple::ctl::testing::Snapshot;
using ::dapple::ctl::testing::TestDir;
using ::dapple::ctl::testing::WriteSpec;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::StartsWith;

// RunCtl, WriteSpec and the CommandsTest fixture: commands_testing.h.

TEST_F(CommandsTest, SubmitPrintsTheNewJob) {
  const std::string spec = WriteSpec("ok.yaml", "name: fmnist-mlp\n");
  Result r = RunCtl({"--coordinator", addr_, "submit", spec});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out, "submitted job-1 (fmnist-mlp)\n");
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(fake_.last_submit().source_name(), spec);
  EXPECT_EQ(fake_.last_submit().spec_yaml(), "name: fmnist-mlp\n");
}

TEST_F(CommandsTest, SubmitJson) {
  const std::string spec = WriteSpec("ok.yaml", "name: fmnist-mlp\n");
  Result r = RunCtl({"submit", spec, "-o", "json", "--coordinator", addr_});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  google::protobuf::Struct job;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &job).ok()) << r.out;
  EXPECT_EQ(job.fields().at("id").string_value(), "job-1");
  EXPECT_EQ(job.fields().at("state").string_value(), "PENDING");
}

TEST_F(CommandsTest, SubmitOfAnInvalidSpecPrintsTheCoordinatorsMessage) {
  const std::string spec = WriteSpec("job.yaml", "bad: [\n");
  Result r = RunCtl({"--coordinator", addr_, "submit", spec});
  EXPECT_EQ(r.code, kExitRefused);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "dapplectl: " + spec + ":4:7: YAML syntax error: end of map not found\n");
}

TEST_F(CommandsTest, SubmitOfAMissingFileNamesIt) {
  Result r = RunCtl({"--coordinator", addr_, "submit", "/nonexistent/dir/job.yaml"});
  EXPECT_EQ(r.code, kExitRefused);
  EXPECT_EQ(r.err,
            "dapplectl: cannot read job spec /nonexistent/dir/job.yaml: No such file or "
            "directory\n");
}

TEST_F(CommandsTest, SubmitWatchEndsWithTheJobsOutcome) {
  struct Case {
    v1::JobState end;
    int code;
    const char* summary;
  };
  for (const Case& c : {Case{v1::JOB_STATE_SUCCEEDED, kExitOk, "job-1 SUCCEEDED: "},
                        Case{v1::JOB_STATE_FAILED, kExitJobFailed, "job-1 FAILED: "},
                        Case{v1::JOB_STATE_CANCELLED, kExitJobCancelled, "job-1 CANCELLED: "}}) {
    FakeCoordinator fake;
    fake.ScriptWatch("job-1", {{.events = {Snapshot("job-1", v1::JOB_STATE_RUNNING, 4, 8),
                                           Snapshot("job-1", c.end, 8, 8)}}});
    const std::string spec = WriteSpec("ok.yaml", "name: fmnist-mlp\n");
    Result r = RunCtl({"--coordinator", fake.address(), "submit", "--watch", spec});
    EXPECT_EQ(r.code, c.code) << r.err;
    EXPECT_THAT(r.out, StartsWith("submitted job-1 (fmnist-mlp)\njob-1 PENDING\n"
                                  "job-1 RUNNING step 4/8 (50%) epoch 1/1 loss 0.2500 "));
    EXPECT_THAT(r.out, EndsWith(std::string(c.summary) + "1000 samples/s, 8/8 steps in 0:01\n"));
    EXPECT_EQ(r.err, "");
  }
}

TEST_F(CommandsTest, WatchOnATerminal) {
  fake_.AddJob(Snapshot("job-7", v1::JOB_STATE_RUNNING, 1, 4));
  fake_.ScriptWatch("job-7", {{.events = {Snapshot("job-7", v1::JOB_STATE_RUNNING, 2, 4),
                                          Snapshot("job-7", v1::JOB_STATE_SUCCEEDED, 4, 4)}}});
  Result r = RunCtl({"--coordinator", addr_, "watch", "job-7"}, /*terminal=*/true);
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, StartsWith("\rjob-7 RUNNING [#####...............] step 1/4 "));
  EXPECT_THAT(r.out, HasSubstr("\rjob-7 RUNNING [##########..........] step 2/4 "));
  EXPECT_THAT(r.out, EndsWith("\r\033[Kjob-7 SUCCEEDED: 1000 samples/s, 4/4 steps in 0:00\n"));
}

TEST_F(CommandsTest, WatchJsonLines) {
  v1::Job first = Snapshot("job-7", v1::JOB_STATE_RUNNING, 1, 4);
  first.add_events()->set_reason("Submitted");  // GetJob's answer carries the events
  fake_.AddJob(first);
  fake_.ScriptWatch("job-7", {{.events = {Snapshot("job-7", v1::JOB_STATE_FAILED, 2, 4)}}});
  Result r = RunCtl({"--coordinator", addr_, "-o", "json", "watch", "job-7"});
  EXPECT_EQ(r.code, kExitJobFailed) << r.err;
  std::istringstream lines(r.out);
  std::string line;
  std::vector<std::string> states;
  while (std::getline(lines, line)) {
    google::protobuf::Struct job;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(line, &job).ok()) << line;
    states.push_back(job.fields().at("state").string_value());
    EXPECT_EQ(job.fields().at("events").list_value().values_size(), 0)
        << "watch leaves the events out: " << line;
  }
  EXPECT_EQ(states, (std::vector<std::string>{"RUNNING", "FAILED"}));
}

TEST_F(CommandsTest, WatchOfAnUnknownJob) {
  Result r = RunCtl({"--coordinator", addr_, "watch", "job-404"});
  EXPECT_EQ(r.code, kExitRefused);
  EXPECT_EQ(r.err, "dapplectl: job job-404 not found\n");
}

TEST_F(CommandsTest, GetTableJsonAndYaml) {
  v1::Job job = Snapshot("job-2", v1::JOB_STATE_SUCCEEDED, 8, 8);
  job.mutable_metrics()->set_test_accuracy(0.875);
  job.set_spec_yaml("name: fmnist-mlp\n");
  fake_.AddJob(job);

  Result table = RunCtl({"--coordinator", addr_, "get", "job-2"});
  EXPECT_EQ(table.code, kExitOk) << table.err;
  EXPECT_THAT(table.out, HasSubstr("STATE         SUCCEEDED\n"));
  EXPECT_THAT(table.out, HasSubstr("TEST ACCURACY 87.50%\n"));

  Result json = RunCtl({"--coordinator", addr_, "get", "job-2", "-o", "json"});
  EXPECT_EQ(json.code, kExitOk) << json.err;
  google::protobuf::Struct parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json.out, &parsed).ok()) << json.out;
  EXPECT_EQ(parsed.fields().at("state").string_value(), "SUCCEEDED");
  EXPECT_EQ(parsed.fields().at("spec_yaml").string_value(), "name: fmnist-mlp\n");
  const auto& metrics = parsed.fields().at("metrics").struct_value().fields();
  EXPECT_DOUBLE_EQ(metrics.at("test_accuracy").number_value(), 0.875);
  EXPECT_DOUBLE_EQ(metrics.at("samples_per_second").number_value(), 1000);

  Result yaml = RunCtl({"--coordinator", addr_, "--output=yaml", "get", "job-2"});
  EXPECT_EQ(yaml.code, kExitOk) << yaml.err;
  EXPECT_THAT(yaml.out, HasSubstr("state: SUCCEEDED\n"));
  EXPECT_THAT(yaml.out, HasSubstr("test_accuracy: 0.875\n"));
}

TEST_F(CommandsTest, GetShowsTheMemoryOfEachRank) {
  v1::Job job = Snapshot("job-3", v1::JOB_STATE_RUNNING, 4, 8);
  for (int stage = 0; stage < 2; ++stage) {
    v1::StageMetrics* m = job.add_stage_metrics();
    m->set_stage(stage);
    m->set_worker_id("w-" + std::to_string(stage + 1));
    v1::StageStepStats* s = m->mutable_last();
    s->set_step(4);
    s->set_peak_in_flight(2 - stage);
    s->set_peak_activation_bytes(int64_t{3} << 20);
    s->set_weight_bytes(2048);
    s->set_peak_memory_bytes((int64_t{3} << 20) + 2048);
    s->set_weight_versions(1);
    s->set_weight_version_bytes(0);
  }
  fake_.AddJob(job);

  Result table = RunCtl({"--coordinator", addr_, "get", "job-3"});
  EXPECT_EQ(table.code, kExitOk) << table.err;
  EXPECT_THAT(table.out, HasSubstr("  STAGE   REPLICA   WORKER   STEP   IN FLIGHT   ACTIVATIONS   "
                                   "WEIGHTS   VERSIONS   VERSION BYTES   PEAK\n"
                                   "  0       0         w-1      4      2           3.0 MiB       "
                                   "2.0 KiB   1          0 bytes         3.0 MiB\n"));

  Result json = RunCtl({"--coordinator", addr_, "get", "job-3", "-o", "json"});
  EXPECT_EQ(json.code, kExitOk) << json.err;
  google::protobuf::Struct parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json.out, &parsed).ok()) << json.out;
  const auto& ranks = parsed.fields().at("stage_metrics").list_value().values();
  ASSERT_EQ(ranks.size(), 2);
  const auto& last = ranks[1].struct_value().fields().at("last").struct_value().fields();
  // int64 fields are JSON strings (proto3 JSON mapping), int32 ones numbers.
  EXPECT_EQ(last.at("peak_activation_bytes").string_value(), "3145728");
  EXPECT_EQ(last.at("weight_bytes").string_value(), "2048");
  EXPECT_EQ(last.at("weight_version_bytes").string_value(), "0");
  EXPECT_EQ(last.at("weight_versions").number_value(), 1);
  EXPECT_EQ(last.at("peak_in_flight").number_value(), 1);
}

TEST_F(CommandsTest, DescribeShowsTheJobThenItsEventsAndGetJsonHasThem) {
  v1::Job job = Snapshot("job-5", v1::JOB_STATE_SUCCEEDED, 8, 8);
  const int64_t now = absl::ToUnixMillis(absl::Now());
  for (const auto& [reason, message] :
       {std::pair<const char*, const char*>{"Submitted", "submitted as PENDING"},
        {"Started", "started: stage 0 on w-1 (cpu), stage 1 on w-2 (cpu)"},
        {"Succeeded", "8/8 steps in 1.0 s, last loss 0.5000"}}) {
    v1::JobEventRecord* e = job.add_events();
    e->set_type("Normal");
    e->set_reason(reason);
    e->set_message(message);
    e->set_count(1);
    e->set_first_unix_ms(now - 120'000);
    e->set_last_unix_ms(now - 120'000);
  }
  fake_.AddJob(job);

  Result table = RunCtl({"--coordinator", addr_, "describe", "job-5"});
  EXPECT_EQ(table.code, kExitOk) << table.err;
  EXPECT_THAT(table.out, HasSubstr("STATE         SUCCEEDED\n"));
  EXPECT_THAT(table.out, HasSubstr("\nEVENTS\n  TYPE     REASON      AGE   MESSAGE\n"
                                   "  Normal   Submitted   2m    submitted as PENDING\n"
                                   "  Normal   Started     2m    started: stage 0 on w-1 (cpu), "
                                   "stage 1 on w-2 (cpu)\n"
                                   "  Normal   Succeeded   2m    8/8 steps in 1.0 s, last loss "
                                   "0.5000\n"));

  Result json = RunCtl({"--coordinator", addr_, "get", "job-5", "-o", "json"});
  EXPECT_EQ(json.code, kExitOk) << json.err;
  google::protobuf::Struct parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json.out, &parsed).ok()) << json.out;
  const auto& events = parsed.fields().at("events").list_value().values();
  ASSERT_EQ(events.size(), 3);
  EXPECT_EQ(events[2].struct_value().fields().at("reason").string_value(), "Succeeded");
  EXPECT_EQ(events[2].struct_value().fields().at("count").string_value(), "1");

  Result missing = RunCtl({"--coordinator", addr_, "describe", "job-9"});
  EXPECT_EQ(missing.code, kExitRefused);
  EXPECT_EQ(missing.err, "dapplectl: job job-9 not found\n");
}

v1::GetJobLogsResponse LogsAnswer(
    v1::JobState state, const std::vector<std::tuple<int, int, int64_t, std::string>>& lines) {
  v1::GetJobLogsResponse r;
  r.set_state(state);
  for (const auto& [stage, worker, seq, text] : lines) {
    v1::JobLogLine* l = r.add_lines();
    l->set_stage(stage);
    l->set_worker_id(absl::StrCat("w-", worker));
    l->set_seq(seq);
    l->set_level("info");
    l->set_text(text);
  }
  return r;
}

TEST_F(CommandsTest, LogsPrintsEachLineWithItsRankAndFollowsUntilTheJobEnds) {
  fake_.ScriptLogs({LogsAnswer(v1::JOB_STATE_RUNNING,
                               {{0, 1, 4, "starting stage 0"}, {1, 2, 5, "starting stage 1"}}),
                    LogsAnswer(v1::JOB_STATE_RUNNING, {}),
                    LogsAnswer(v1::JOB_STATE_SUCCEEDED, {{1, 2, 9, "stage 1 done"}})});
  Result r = RunCtl(
      {"--coordinator", addr_, "logs", "job-2", "--follow", "--rank", "1/0", "--tail", "20"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out,
            "[0/0 w-1] starting stage 0\n"
            "[1/0 w-2] starting stage 1\n"
            "[1/0 w-2] stage 1 done\n");
  std::vector<v1::GetJobLogsRequest> requests = fake_.log_requests();
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_TRUE(requests[0].one_rank());
  EXPECT_EQ(requests[0].stage(), 1);
  EXPECT_EQ(requests[0].replica(), 0);
  EXPECT_EQ(requests[0].tail(), 20);
  EXPECT_EQ(requests[0].after_seq(), 0);
  // Later polls ask for what came after the last line printed, all of it.
  EXPECT_EQ(requests[1].after_seq(), 5);
  EXPECT_EQ(requests[1].tail(), 0);
  EXPECT_EQ(requests[2].after_seq(), 5);

  // Without --follow: one call, even while the job runs.
  fake_.ScriptLogs({LogsAnswer(v1::JOB_STATE_RUNNING, {{0, 1, 4, "a"}})});
  r = RunCtl({"--coordinator", addr_, "logs", "job-2"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out, "[0/0 w-1] a\n");
  EXPECT_EQ(fake_.log_requests().size(), 4u);
  EXPECT_FALSE(fake_.log_requests().back().one_rank());
}

TEST_F(CommandsTest, LogsUsageErrors) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"logs", "job-1", "--rank", "x"},
        {"logs", "job-1", "--tail", "0"},
        {"logs", "job-1", "-o", "json"},
        {"logs"}}) {
    std::vector<std::string> full = {"--coordinator", addr_};
    full.insert(full.end(), args.begin(), args.end());
    Result r = RunCtl(full);
    EXPECT_EQ(r.code, kExitUsage) << args.back() << ": " << r.err;
  }
  // Every other format gets the same advice (not "use table or json", which json contradicts).
  for (const char* format : {"json", "yaml"}) {
    Result r = RunCtl({"--coordinator", addr_, "logs", "job-1", "-o", format});
    EXPECT_EQ(r.err, absl::StrCat("dapplectl: logs: -o ", format,
                                  " is not supported: the lines are text; leave -o out\n"));
  }
  EXPECT_TRUE(fake_.log_requests().empty());
}

TEST_F(CommandsTest, GetOfAnUnknownJob) {
  Result r = RunCtl({"--coordinator", addr_, "get", "job-9"});
  EXPECT_EQ(r.code, kExitRefused);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "dapplectl: job job-9 not found\n");
}

TEST_F(CommandsTest, ListTableAndJson) {
  fake_.AddJob(Snapshot("job-1", v1::JOB_STATE_RUNNING, 3, 10));
  fake_.AddJob(Snapshot("job-2", v1::JOB_STATE_PENDING, 0, 0));
  Result r = RunCtl({"--coordinator", addr_, "list"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, StartsWith("ID      NAME         STATE     STEP   LOSS     TEST ACC   AGE\n"
                                "job-1   fmnist-mlp   RUNNING   3/10   0.3333   -          -\n"
                                "job-2   fmnist-mlp   PENDING   -      -        -          -\n"));
  Result json = RunCtl({"--coordinator", addr_, "list", "-o", "json"});
  EXPECT_EQ(json.code, kExitOk) << json.err;
  google::protobuf::Struct parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json.out, &parsed).ok()) << json.out;
  ASSERT_EQ(parsed.fields().at("jobs").list_value().values_size(), 2);
  EXPECT_EQ(parsed.fields()
                .at("jobs")
                .list_value()
                .values(1)
                .struct_value()
                .fields()
                .at("state")
                .string_value(),
            "PENDING");
}

TEST_F(CommandsTest, CancelAndCancelOfAFinishedJob) {
  fake_.AddJob(Snapshot("job-1", v1::JOB_STATE_RUNNING, 3, 10));
  fake_.AddJob(Snapshot("job-2", v1::JOB_STATE_SUCCEEDED, 10, 10));
  Result r = RunCtl({"--coordinator", addr_, "cancel", "job-1"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out, "cancelled job-1\n");
  r = RunCtl({"--coordinator", addr_, "cancel", "job-2"});
  EXPECT_EQ(r.code, kExitRefused);
  EXPECT_EQ(r.err, "dapplectl: job job-2 already ended (JOB_STATE_SUCCEEDED); nothing to cancel\n");
}

TEST_F(CommandsTest, Workers) {
  v1::WorkerInfo w;
  w.set_id("w-1");
  w.set_hostname("node-a");
  w.set_state(v1::WORKER_STATE_IDLE);
  fake_.AddWorker(w);
  Result r = RunCtl({"--coordinator", addr_, "workers"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("w-1   node-a"));
  r = RunCtl({"--coordinator", addr_, "workers", "-o", "json"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"state\": \"IDLE\""));
}

TEST_F(CommandsTest, CoordinatorFromTheEnvironment) {
  setenv("DAPPLE_COORDINATOR", addr_.c_str(), 1);
  Result r = RunCtl({"list"});
  unsetenv("DAPPLE_COORDINATOR");
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out, "no jobs\n");
}

TEST_F(CommandsTest, FlagBeatsTheEnvironment) {
  RefusingPort refusing;
  setenv("DAPPLE_COORDINATOR", refusing.address().c_str(), 1);
  Result r = RunCtl({"--coordinator", addr_, "list"});
  unsetenv("DAPPLE_COORDINATOR");
  EXPECT_EQ(r.code, kExitOk) << r.err;
}

TEST_F(CommandsTest, UnreachableCoordinator) {
  RefusingPort refusing;
  Result r = RunCtl({"--coordinator", refusing.address(), "--timeout", "2", "list"});
  EXPECT_EQ(r.code, kExitUnreachable);
  EXPECT_EQ(r.err, "dapplectl: cannot reach the coordinator at " + refusing.address() +
                       " (connection refused); start dapple-coordinator or set --coordinator / "
                       "DAPPLE_COORDINATOR\n");
}

TEST_F(CommandsTest, UsageErrorsExitWithTwo) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{},
                                             {"--bogus"},
                                             {"frobnicate"},
                                             {"get"},
                                             {"submit"},
                                             {"list", "-o", "xml"},
                                             {"watch", "job-1", "-o", "yaml"},
                                             {"submit", "--watch", "x.yaml", "-o", "yaml"},
                                             {"--timeout", "0", "list"},
                                             {"--timeout", "soon", "list"}}) {
    Result r = RunCtl(args);
    EXPECT_EQ(r.code, kExitUsage) << ::testing::PrintToString(args) << r.err;
    EXPECT_THAT(r.err, MatchesRegex("dapplectl: [^\n]+\n")) << ::testing::PrintToString(args);
    EXPECT_EQ(r.out, "");
  }
}

// --version, `help COMMAND` and a flag without a command (a fresh user's `dapplectl --version`
// read "dapplectl:  has no subcommand '--version'"; `help submit` said "submit needs FILE").
TEST_F(CommandsTest, VersionHelpAndAFlagWithoutACommand) {
  Result r = RunCtl({"--version"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, MatchesRegex("dapple [0-9]+\\.[0-9]+\\.[0-9]+( \\(git [0-9a-f]+(, "
                                  "modified)?\\))?\n"));
  r = RunCtl({"help", "submit"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("dapplectl submit"));
  EXPECT_THAT(r.out, HasSubstr("--watch"));
  r = RunCtl({"help"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("Subcommands:"));
  r = RunCtl({"--verison"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_THAT(r.err, StartsWith("dapplectl: unknown flag --verison (did you mean --version?) and "
                                "no command; commands: submit, "));
}

// The parser's errors in dapplectl's words, naming the command and its help.
TEST_F(CommandsTest, ParseErrorsNameTheCommand) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"get", "job-1", "job-2"},
       "dapplectl: get: unexpected argument job-2 (see dapplectl get --help)\n"},
      {{"list", "--bogus"}, "dapplectl: list: unknown flag --bogus (see dapplectl list --help)\n"},
      {{"logs", "job-1", "--tail", "3", "--tail", "4"},
       "dapplectl: --tail given 2 times: give it once (see dapplectl logs --help)\n"},
      {{"logs", "job-1", "--rank"},
       "dapplectl: --rank needs a value: --rank STAGE/REPLICA (see dapplectl logs --help)\n"},
      {{"submit"}, "dapplectl: submit needs FILE (see dapplectl submit --help)\n"},
  };
  for (const auto& [args, err] : cases) {
    Result r = RunCtl(args);
    EXPECT_EQ(r.code, kExitUsage) << ::testing::PrintToString(args);
    EXPECT_EQ(r.err, err) << ::testing::PrintToString(args);
  }
}

// A context of the configuration file gives the coordinator (below the flag and environment);
// an unknown one is a usage error that names the ones there are.
TEST_F(CommandsTest, ContextsGiveTheCoordinator) {
  const std::string path = ::testing::TempDir() + "/dapple-ctx-commands/config.yaml";
  std::remove(path.c_str());
  setenv("DAPPLE_CONFIG", path.c_str(), 1);
  Result r = RunCtl({"config", "set-context", "here", "--coordinator", addr_});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out, "context here created\n");
  r = RunCtl({"config", "set-context", "far", "--coordinator", "10.9.9.9:7600"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  r = RunCtl({"--context", "here", "list"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  r = RunCtl({"config", "use-context", "far"});
  EXPECT_EQ(r.out, "switched to context far\n");
  r = RunCtl({"list"});  // far is not on loopback and has no CA
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("coordinator 10.9.9.9:7600 is not a loopback address"));
  r = RunCtl({"--coordinator", addr_, "list"});  // the flag wins
  EXPECT_EQ(r.code, kExitOk) << r.err;
  // The contexts as data (a fresh user's `-o json config view` printed the table).
  // In field order on every run (a fresh user's md5sum of it changed from run to run).
  r = RunCtl({"-o", "json", "config", "view"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  auto context = [](const std::string& name, const std::string& coordinator) {
    return absl::StrCat("  {\n   \"name\": \"", name, "\",\n   \"coordinator\": \"", coordinator,
                        "\",\n   \"ca\": \"\",\n   \"tls_cert\": \"\",\n   \"tls_key\": \"\",\n"
                        "   \"token_file\": \"\"\n  }");
  };
  EXPECT_EQ(r.out, absl::StrCat("{\n \"file\": \"", path,
                                "\",\n \"current_context\": \"far\",\n \"contexts\": [\n",
                                context("here", addr_), ",\n", context("far", "10.9.9.9:7600"),
                                "\n ]\n}\n"));
  r = RunCtl({"config", "get-contexts", "-o", "yaml"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out,
              HasSubstr("current_context: far\ncontexts:\n  - name: here\n    coordinator: "));
  r = RunCtl({"config", "use-context", "here", "-o", "json"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("config use-context: -o json is not supported: it prints one line"));
  r = RunCtl({"config"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("config needs a subcommand: view, get-contexts, use-context NAME"));
  r = RunCtl({"config", "frob"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("config has no subcommand 'frob': view, "));
  r = RunCtl({"--context", "nope", "list"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_EQ(r.err,
            "dapplectl: --context nope: no such context in " + path + " (contexts: here, far)\n");
  unsetenv("DAPPLE_CONFIG");
}

// Off loopback, plain text only when asked for; a CA file is read before anything is sent.
TEST_F(CommandsTest, PlainTextOnlyToLoopbackOrWhenAskedFor) {
  Result r = RunCtl({"--coordinator", "10.1.2.3:7600", "list"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_EQ(r.err,
            "dapplectl: coordinator 10.1.2.3:7600 is not a loopback address: give --ca FILE (or "
            "DAPPLE_CA), or --plaintext to send tokens and jobs unencrypted\n");
  r = RunCtl({"--coordinator", "10.1.2.3:7600", "--ca", "/no/ca.pem", "list"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_EQ(r.err, "dapplectl: --ca /no/ca.pem: No such file or directory\n");
  // From the environment: named as such (a power user's DAPPLE_CA was reported as --ca).
  setenv("DAPPLE_CA", "/no/ca.pem", 1);
  r = RunCtl({"--coordinator", "10.1.2.3:7600", "list"});
  unsetenv("DAPPLE_CA");
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_EQ(r.err, "dapplectl: DAPPLE_CA /no/ca.pem: No such file or directory\n");
  r = RunCtl({"--coordinator", addr_, "--tls-cert", "c.pem", "list"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("--tls-cert and --tls-key go together"));
  // An empty file name is no file (it once silently meant "no CA").
  r = RunCtl({"--coordinator", addr_, "--ca", "", "list"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_EQ(r.err, "dapplectl: --ca needs a file, got an empty value\n");
  r = RunCtl({"--coordinator", addr_, "--token-file", "", "list"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_EQ(r.err, "dapplectl: --token-file needs a file, got an empty value\n");
  setenv("DAPPLE_CA", "", 1);
  r = RunCtl({"--coordinator", addr_, "list"});
  unsetenv("DAPPLE_CA");
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_EQ(r.err, "dapplectl: DAPPLE_CA is set but empty: give a CA file, or unset it\n");
}

TEST_F(CommandsTest, EmptyArgumentsAreUsageErrorsAndNothingIsSent) {
  for (const char* command : {"get", "cancel", "watch", "top"}) {
    Result r = RunCtl({"--coordinator", addr_, command, ""});
    EXPECT_EQ(r.code, kExitUsage) << command;
    EXPECT_EQ(r.err, "dapplectl: a job id must not be empty (e.g. job-3; see dapplectl list)\n")
        << command;
    EXPECT_EQ(r.out, "");
  }
  Result r = RunCtl({"--coordinator", addr_, "submit", ""});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_EQ(r.err, "dapplectl: a job spec file name must not be empty\n");
  EXPECT_EQ(fake_.watch_calls(), 0);
  EXPECT_EQ(fake_.get_calls(), 0);
  EXPECT_EQ(fake_.last_submit().source_name(), "");
}

TEST_F(CommandsTest, TimeoutMustBeAPositiveNumberOfSeconds) {
  for (const char* bad : {"0", "-1", "abc", "nan", "inf", "-inf", "1e-400", ""}) {
    Result r = RunCtl({"--coordinator", addr_, "--timeout", bad, "list"});
    EXPECT_EQ(r.code, kExitUsage) << bad;
    EXPECT_EQ(r.err,
              absl::StrCat("dapplectl: --timeout must be a positive number of seconds, got \"", bad,
                           "\"\n"));
    EXPECT_EQ(r.out, "");
  }
  Result r = RunCtl({"--coordinator", addr_, "--timeout=1e300", "list"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_EQ(r.err, "dapplectl: --timeout must be at most 86400 seconds (one day), got \"1e300\"\n");
  r = RunCtl({"--coordinator", addr_, "--timeout", "0.5", "list"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
}

TEST_F(CommandsTest, CoordinatorMustBeHostPort) {
  struct Case {
    const char* value;
    const char* reason;
  };
  for (const Case& c : {Case{"", "empty"}, Case{"localhost", "no port"},
                        Case{"localhost:0", "port 0 is not in 1..65535"},
                        Case{"localhost:99999", "port 99999 is not in 1..65535"}}) {
    Result r = RunCtl({"--coordinator", c.value, "list"});
    EXPECT_EQ(r.code, kExitUsage) << c.value;
    EXPECT_EQ(r.err, absl::StrCat("dapplectl: --coordinator must be HOST:PORT (e.g. "
                                  "127.0.0.1:7600), got \"",
                                  c.value, "\" (", c.reason, ")\n"));
    EXPECT_EQ(r.out, "");
  }
}

TEST_F(CommandsTest, TheEnvironmentVariableIsCheckedByName) {
  for (const char* bad : {"", "nohost", "h:70000"}) {
    setenv("DAPPLE_COORDINATOR", bad, 1);
    Result r = RunCtl({"list"});
    unsetenv("DAPPLE_COORDINATOR");
    EXPECT_EQ(r.code, kExitUsage) << bad;
    EXPECT_THAT(r.err, StartsWith(absl::StrCat(
                           "dapplectl: DAPPLE_COORDINATOR must be HOST:PORT (e.g. 127.0.0.1:7600), "
                           "got \"",
                           bad, "\" (")));
  }
  // The flag wins, so a bad variable does not matter when it is given.
  setenv("DAPPLE_COORDINATOR", "", 1);
  Result r = RunCtl({"--coordinator", addr_, "list"});
  unsetenv("DAPPLE_COORDINATOR");
  EXPECT_EQ(r.code, kExitOk) << r.err;
  // A good variable is used.
  setenv("DAPPLE_COORDINATOR", addr_.c_str(), 1);
  r = RunCtl({"list"});
  unsetenv("DAPPLE_COORDINATOR");
  EXPECT_EQ(r.code, kExitOk) << r.err;
}

TEST_F(CommandsTest, SubmitRefusesTextThatIsNotUtf8WithoutSending) {
  const std::string spec = WriteSpec("latin1.yaml", "name: x\nmodel: y\n# caf\xE9\n");
  Result r = RunCtl({"--coordinator", addr_, "submit", spec});
  EXPECT_EQ(r.code, kExitRefused);
  EXPECT_EQ(r.err,
            "dapplectl: " + spec + ": not UTF-8 text (invalid byte 0xE9 at line 3, column 6)\n");
  EXPECT_EQ(fake_.last_submit().spec_yaml(), "");  // nothing was sent
}

TEST_F(CommandsTest, SubmitSendsANonUtf8FileNameEscaped) {
  const std::string spec = WriteSpec("caf\xE9.yaml", "name: fmnist-mlp\n");
  const std::string escaped = TestDir() + "/caf\\xE9.yaml";
  Result r = RunCtl({"--coordinator", addr_, "submit", spec});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(fake_.last_submit().source_name(), escaped);
  const std::string bad = WriteSpec("caf\xE9-bad.yaml", "bad: [\n");
  r = RunCtl({"--coordinator", addr_, "submit", bad});
  EXPECT_EQ(r.code, kExitRefused);
  EXPECT_EQ(r.err, "dapplectl: " + TestDir() +
                       "/caf\\xE9-bad.yaml:4:7: YAML syntax error: end of map not found\n");
}

TEST_F(CommandsTest, InternalErrorsNameTheCall) {
  fake_.FailGetJob(grpc::Status(grpc::StatusCode::INTERNAL, "boom"));
  Result r = RunCtl({"--coordinator", addr_, "get", "job-1"});
  EXPECT_EQ(r.code, kExitRefused);
  EXPECT_EQ(r.err, "dapplectl: GetJob failed with INTERNAL: boom\n");
  fake_.FailGetJob(grpc::Status(grpc::StatusCode::UNKNOWN, "exception: bad_alloc"));
  r = RunCtl({"--coordinator", addr_, "watch", "job-1"});
  EXPECT_EQ(r.code, kExitRefused);
  EXPECT_EQ(r.err, "dapplectl: GetJob failed with UNKNOWN: exception: bad_alloc\n");
  fake_.FailGetJob(grpc::Status(grpc::StatusCode::INTERNAL, ""));
  r = RunCtl({"--coordinator", addr_, "get", "job-1"});
  EXPECT_EQ(r.err, "dapplectl: GetJob failed with INTERNAL\n");
}

TEST_F(CommandsTest, HelpListsCommandsAndExitCodes) {
  Result r = RunCtl({"--help"});
  EXPECT_EQ(r.code, kExitOk);
  for (const char* word : {"submit", "get", "list", "cancel", "watch", "workers", "--coordinator",
                           "--timeout", "DAPPLE_COORDINATOR", "Exit codes:", "CANCELLED", "130"}) {
    EXPECT_THAT(r.out, HasSubstr(word));
  }
  r = RunCtl({"submit", "--help"});
  EXPECT_EQ(r.code, kExitOk);
  EXPECT_THAT(r.out, HasSubstr("--watch"));
}

}  // namespace
}  // namespace dapple::ctl
