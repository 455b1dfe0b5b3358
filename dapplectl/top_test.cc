// dapplectl top and trace: the pure renderers, and both commands against an in-process fake
// coordinator.
#include "dapplectl/top.h"

#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "dapplectl/commands.h"
#include "dapplectl/exit_codes.h"
#include "dapplectl/trace_command.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace dapple::ctl {
namespace {

using ::testing::HasSubstr;

v1::StageMetrics Metrics(int stage, const std::string& worker, int64_t step, double step_s,
                         double fwd, double bwd, double comm, double idle, double opt,
                         int64_t peak) {
  v1::StageMetrics m;
  m.set_stage(stage);
  m.set_worker_id(worker);
  v1::StageStepStats* s = m.mutable_last();
  s->set_step(step);
  s->set_step_seconds(step_s);
  s->set_forward_seconds(fwd);
  s->set_backward_seconds(bwd);
  s->set_comm_seconds(comm);
  s->set_idle_seconds(idle);
  s->set_optimizer_seconds(opt);
  s->set_peak_memory_bytes(peak);
  return m;
}

v1::Job RunningJob() {
  v1::Job job;
  job.set_id("job-3");
  job.set_name("demo");
  job.set_state(v1::JOB_STATE_RUNNING);
  job.mutable_metrics()->set_step(12);
  job.mutable_metrics()->set_total_steps(100);
  job.mutable_metrics()->set_samples_per_second(1234.4);
  // Stage 0: 100 ms step = 30 fwd + 40 bwd + 5 comm + 20 idle + 5 opt.
  *job.add_stage_metrics() = Metrics(0, "w-1", 12, 0.1, 0.03, 0.04, 0.005, 0.02, 0.005, 3 << 20);
  *job.add_stage_metrics() = Metrics(1, "w-2", 12, 0.1, 0.02, 0.03, 0.001, 0.045, 0.004, 2048);
  // Stage 0 on a CPU (no stated peak: MFU "-"), stage 1 on an H200 in bf16.
  job.mutable_stage_metrics(0)->mutable_last()->set_achieved_tflops(0.09123);
  job.mutable_stage_metrics(1)->mutable_last()->set_achieved_tflops(408.46);
  job.mutable_stage_metrics(1)->mutable_last()->set_mfu(0.413);
  // Stage 0's window: 32 samples a step at 290.9 samples/s, a mean step of 110 ms (the newest
  // took 100); stage 1 has no window time yet.
  job.mutable_stage_metrics(0)->mutable_last()->set_samples(32);
  job.mutable_stage_metrics(0)->set_samples_per_second(32 / 0.11);
  return job;
}

TEST(TopTest, RendersOneTablePerJob) {
  const std::string text = RenderTop({RunningJob()});
  EXPECT_EQ(text,
            "job-3 (demo)  RUNNING  step 12/100  1234 samples/s\n"
            "  STAGE   REPLICA   WORKER   STEP   STEP(ms)   MEAN(ms)   FWD    BWD    COMM   IDLE   "
            "BUBBLE%   UTIL%   TFLOP/S   MFU     PEAK-MEM\n"
            "  0       0         w-1      12     100.0      110.0      30.0   40.0   5.0    20.0   "
            "20.0      75.0    0.0912    -       3.0 MiB\n"
            "  1       0         w-2      12     100.0      -          20.0   30.0   1.0    45.0   "
            "45.0      54.0    408       41.3%   2.0 KiB\n");
}

TEST(TopTest, NamesTheStragglersUnderTheTable) {
  v1::Job job = RunningJob();
  job.mutable_stage_metrics(1)->set_straggler(true);
  job.mutable_stage_metrics(1)->set_compute_ratio(2.104);
  const std::string text = RenderTop({job});
  EXPECT_THAT(text,
              ::testing::EndsWith(
                  "  1       0         w-2      12     100.0      -          20.0   30.0   1.0    "
                  "45.0   45.0      54.0    408       41.3%   2.0 KiB\n"
                  "  STRAGGLER stage 1 replica 0 (w-2): 2.10x the compute per step of its "
                  "stage's other replicas\n"));
  absl::StatusOr<std::string> json = TopToJson({job});
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_THAT(*json, HasSubstr("\"straggler\":true"));
}

TEST(TopTest, TextJobHeaderShowsItsValidationLoss) {
  v1::Job job = RunningJob();
  job.mutable_metrics()->set_validation_loss(1.5);
  job.mutable_metrics()->set_validation_bits_per_byte(2.164);
  EXPECT_THAT(RenderTop({job}),
              HasSubstr("job-3 (demo)  RUNNING  step 12/100  1234 samples/s  validation loss "
                        "1.5000 (2.1640 bits/byte)\n"));
  auto json = TopToJson({job});
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_THAT(*json, HasSubstr("\"total_steps\":\"100\",\"validation_loss\":1.5,"
                               "\"validation_bits_per_byte\":2.164,\"samples_per_second\":"));
}

TEST(TopTest, JobsWithoutStepsAndNoJobs) {
  v1::Job job = RunningJob();
  job.clear_stage_metrics();
  job.mutable_metrics()->set_samples_per_second(0);
  EXPECT_EQ(RenderTop({job}), "job-3 (demo)  RUNNING  step 12/100\n  no step reported yet\n");
  EXPECT_EQ(RenderTop({}), "no running jobs\n");
}

TEST(TopTest, JsonHasTheStagesAndDerivedFractions) {
  auto json = TopToJson({RunningJob()});
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_THAT(*json, HasSubstr("{\"jobs\":[{\"id\":\"job-3\",\"name\":\"demo\",\"state\":"
                               "\"RUNNING\",\"step\":\"12\",\"total_steps\":\"100\","
                               "\"samples_per_second\":1234.4,\"stages\":[{"));
  EXPECT_THAT(*json, HasSubstr("\"worker_id\":\"w-2\""));
  EXPECT_THAT(*json, HasSubstr("\"bubble_fraction\":0.45,\"utilization\":0.54}"));
  EXPECT_EQ(json->find('\n'), std::string::npos);
  EXPECT_EQ(*TopToJson({}), "{\"jobs\":[]}");
}

// GetJob, ListJobs and GetJobTrace with scripted answers.
class FakeCoordinator final : public v1::Coordinator::Service {
 public:
  FakeCoordinator() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
  }
  ~FakeCoordinator() override { server_->Shutdown(); }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

  void Put(const v1::Job& job) {
    absl::MutexLock l(&mu_);
    jobs_[job.id()] = job;
  }
  void PutTrace(const v1::JobTrace& trace) {
    absl::MutexLock l(&mu_);
    traces_[trace.job_id()] = trace;
  }
  grpc::Status GetJob(grpc::ServerContext*, const v1::GetJobRequest* r, v1::Job* out) override {
    absl::MutexLock l(&mu_);
    auto it = jobs_.find(r->job_id());
    if (it == jobs_.end()) return {grpc::StatusCode::NOT_FOUND, "no job " + r->job_id()};
    *out = it->second;
    return grpc::Status::OK;
  }
  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest*,
                        v1::ListJobsResponse* out) override {
    absl::MutexLock l(&mu_);
    for (auto it = jobs_.rbegin(); it != jobs_.rend(); ++it) *out->add_jobs() = it->second;
    return grpc::Status::OK;
  }
  grpc::Status GetJobTrace(grpc::ServerContext*, const v1::GetJobTraceRequest* r,
                           v1::JobTrace* out) override {
    absl::MutexLock l(&mu_);
    if (!jobs_.count(r->job_id())) return {grpc::StatusCode::NOT_FOUND, "no job " + r->job_id()};
    auto it = traces_.find(r->job_id());
    out->set_job_id(r->job_id());
    if (it != traces_.end()) *out = it->second;
    return grpc::Status::OK;
  }

 private:
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  absl::Mutex mu_;
  std::map<std::string, v1::Job> jobs_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, v1::JobTrace> traces_ ABSL_GUARDED_BY(mu_);
};

struct Result {
  int code;
  std::string out, err;
};

Result RunCtl(const FakeCoordinator& fake, std::vector<std::string> args) {
  std::vector<std::string> argv = {"dapplectl", "--coordinator", fake.address()};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<const char*> ptrs;
  for (const std::string& a : argv) ptrs.push_back(a.c_str());
  std::ostringstream out, err;
  Environment env;
  env.out = &out;
  env.err = &err;
  const int code = RunDapplectl(static_cast<int>(ptrs.size()), ptrs.data(), env);
  return {code, out.str(), err.str()};
}

v1::JobTrace OneStepTrace() {
  v1::JobTrace t;
  t.set_job_id("job-3");
  t.set_num_stages(2);
  for (int stage = 0; stage < 2; ++stage) {
    v1::StepTrace* s = t.add_steps();
    s->set_job_id("job-3");
    s->set_stage(stage);
    s->set_step(1);
    s->set_start_us(1000);
    s->set_end_us(2000);
    v1::TraceEvent* e = s->add_events();
    e->set_kind(v1::FORWARD);
    e->set_start_us(1000);
    e->set_end_us(2000);
  }
  return t;
}

TEST(TopCommandTest, OncePrintsEveryStageAndJsonIsOneLine) {
  FakeCoordinator fake;
  fake.Put(RunningJob());
  v1::Job done = RunningJob();
  done.set_id("job-2");
  done.set_state(v1::JOB_STATE_SUCCEEDED);
  fake.Put(done);
  Result r = RunCtl(fake, {"top", "--once"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out, RenderTop({RunningJob()}));       // only RUNNING jobs
  r = RunCtl(fake, {"top", "job-2", "-o", "json"});  // not a terminal: one snapshot
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"id\":\"job-2\""));
  EXPECT_EQ(r.out.back(), '\n');
  EXPECT_EQ(r.out.find('\n'), r.out.size() - 1);
  r = RunCtl(fake, {"top", "job-9"});
  EXPECT_EQ(r.code, kExitRefused);
  EXPECT_EQ(r.err, "dapplectl: no job job-9\n");
  r = RunCtl(fake, {"top", "--interval", "0"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("--interval must be a positive number of seconds"));
  r = RunCtl(fake, {"top", "-o", "yaml"});
  EXPECT_EQ(r.code, kExitUsage);
}

TEST(TopCommandTest, RefreshesUntilTheJobEnds) {
  FakeCoordinator fake;
  fake.Put(RunningJob());
  ClientOptions options;
  options.address = fake.address();
  CoordinatorClient client(options);
  TopOptions top;
  top.job_id = "job-3";
  top.interval = absl::Milliseconds(250);
  int sleeps = 0;
  top.sleep = [&](absl::Duration d) {
    EXPECT_EQ(d, absl::Milliseconds(250));
    if (++sleeps == 2) {
      v1::Job job = RunningJob();
      job.set_state(v1::JOB_STATE_SUCCEEDED);
      fake.Put(job);
    }
  };
  std::ostringstream out;
  ASSERT_TRUE(RunTop(client, top, &out).ok());
  EXPECT_EQ(sleeps, 2);
  // Three snapshots, the last one SUCCEEDED, separated by blank lines.
  const std::string text = out.str();
  EXPECT_EQ(text.find("SUCCEEDED"), text.rfind("SUCCEEDED"));
  EXPECT_NE(text.find("SUCCEEDED"), std::string::npos);
  size_t headers = 0;
  for (size_t at = text.find("job-3 (demo)"); at != std::string::npos;
       at = text.find("job-3 (demo)", at + 1)) {
    ++headers;
  }
  EXPECT_EQ(headers, 3);
}

TEST(TraceCommandTest, WritesTheFileAndSaysWhat) {
  FakeCoordinator fake;
  fake.Put(RunningJob());
  fake.PutTrace(OneStepTrace());
  const std::string path = ::testing::TempDir() + "/dapplectl-trace-test.json";
  std::remove(path.c_str());
  Result r = RunCtl(fake, {"trace", "job-3", "-o", path});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out, "wrote " + path +
                       ": 1 traced step x 2 ranks of job-3 (open it in https://ui.perfetto.dev "
                       "or chrome://tracing)\n");
  std::ifstream f(path);
  std::stringstream text;
  text << f.rdbuf();
  EXPECT_THAT(text.str(), HasSubstr("\"traceEvents\""));
  EXPECT_THAT(text.str(), HasSubstr("\"name\": \"F0\""));
  std::remove(path.c_str());
  // To stdout: the JSON there, the summary on stderr.
  r = RunCtl(fake, {"trace", "job-3", "-o", "-"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out.rfind("{\"traceEvents\": [", 0), 0u);
  EXPECT_EQ(r.err, "wrote 1 traced step x 2 ranks of job-3\n");
}

// A path that is not a regular file is written in place: the file beside it renamed over it
// replaced /dev/full with a regular file when a fresh user ran as root.
TEST(TraceCommandTest, ADeviceIsWrittenInPlace) {
  FakeCoordinator fake;
  fake.Put(RunningJob());
  fake.PutTrace(OneStepTrace());
  Result r = RunCtl(fake, {"trace", "job-3", "-o", "/dev/null"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out, "wrote /dev/null: 1 traced step x 2 ranks of job-3\n");
  struct stat st {};
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  if (::stat("/dev/full", &st) == 0 && S_ISCHR(st.st_mode)) {
    r = RunCtl(fake, {"trace", "job-3", "-o", "/dev/full"});
    EXPECT_EQ(r.code, kExitRefused);
    EXPECT_EQ(r.err, "dapplectl: cannot write /dev/full: No space left on device\n");
    ASSERT_EQ(::stat("/dev/full", &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode));
  }
}

TEST(TraceCommandTest, ClearErrors) {
  FakeCoordinator fake;
  v1::Job job = RunningJob();
  fake.Put(job);
  Result r = RunCtl(fake, {"trace", "job-3", "-o", ::testing::TempDir() + "/never.json"});
  EXPECT_EQ(r.code, kExitRefused);
  EXPECT_EQ(r.err,
            "dapplectl: job job-3 has no traced steps yet (workers trace a run's first step and "
            "every --trace-every-steps-th step; 0 turns tracing off)\n");
  // A job resumed after a restart: the coordinator serves the resumed run's steps.
  v1::Job resumed = job;
  resumed.set_id("job-5");
  resumed.add_restart_history()->set_resumed_unix_ms(1000);
  fake.Put(resumed);
  r = RunCtl(fake, {"trace", "job-5", "-o", ::testing::TempDir() + "/never.json"});
  EXPECT_EQ(r.code, kExitRefused);
  EXPECT_EQ(r.err,
            "dapplectl: job job-5 has no traced steps since its restart (workers trace a run's "
            "first step and every --trace-every-steps-th step; 0 turns tracing off)\n");
  // A job cancelled before its first step never will have one.
  v1::Job cancelled = job;
  cancelled.set_id("job-4");
  cancelled.set_state(v1::JOB_STATE_CANCELLED);
  fake.Put(cancelled);
  r = RunCtl(fake, {"trace", "job-4", "-o", ::testing::TempDir() + "/never.json"});
  EXPECT_EQ(r.code, kExitRefused);
  EXPECT_EQ(r.err,
            "dapplectl: job job-4 has no traced steps: it ended (CANCELLED) before its ranks "
            "traced a step\n");
  r = RunCtl(fake, {"trace", "job-9", "-o", "x.json"});
  EXPECT_EQ(r.code, kExitRefused);
  EXPECT_EQ(r.err, "dapplectl: no job job-9\n");
  r = RunCtl(fake, {"trace", "job-3"});
  EXPECT_EQ(r.code, kExitUsage);
  fake.PutTrace(OneStepTrace());
  r = RunCtl(fake, {"trace", "job-3", "-o", "/no/such/dir/t.json"});
  EXPECT_EQ(r.code, kExitRefused);
  EXPECT_EQ(r.err, "dapplectl: cannot write /no/such/dir/t.json: No such file or directory\n");
  for (const std::string format : {"json", "yaml", "table"}) {
    r = RunCtl(fake, {"trace", "job-3", "-o", format});
    EXPECT_EQ(r.code, kExitUsage) << format;
    EXPECT_THAT(r.err, HasSubstr("got '" + format +
                                 "', an output format: use -o trace.json, -o - "
                                 "for stdout, or -o ./" +
                                 format));
  }
}

}  // namespace
}  // namespace dapple::ctl
