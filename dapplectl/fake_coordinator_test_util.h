// Test only: an in-process dapple.v1.Coordinator on 127.0.0.1 with scripted answers, for the
// client and command tests. Thread-safe (gRPC calls it from its own threads).
#ifndef DAPPLE_DAPPLECTL_FAKE_COORDINATOR_TEST_UTIL_H_
#define DAPPLE_DAPPLECTL_FAKE_COORDINATOR_TEST_UTIL_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "dapple/v1/coordinator.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace dapple::ctl::testing {

class FakeCoordinator final : public v1::Coordinator::Service {
 public:
  // Starts serving on 127.0.0.1 and a free port.
  FakeCoordinator() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
  }
  ~FakeCoordinator() override { Stop(); }

  // Stops serving (the coordinator "dies"): open streams end, new connections are refused.
  // Safe to call from any thread, more than once.
  void Stop() {
    absl::MutexLock lock(&stop_mu_);
    if (stopped_) return;
    stopped_ = true;
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  }

  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

  void AddJob(const v1::Job& job) {
    absl::MutexLock lock(&mu_);
    jobs_[job.id()] = job;
  }
  // The snapshots WatchJob(job_id) sends, in order, on its next calls: one script per call
  // (the last one repeats). A script ends with `end_status` after its events.
  struct StreamScript {
    std::vector<v1::Job> events;
    grpc::Status end_status = grpc::Status::OK;
  };
  void ScriptWatch(const std::string& job_id, std::vector<StreamScript> scripts) {
    absl::MutexLock lock(&mu_);
    watch_scripts_[job_id] = std::move(scripts);
  }
  // After the `calls`-th WatchJob call, GetJob shows `job_id` in `state`.
  void EndJobAfterWatchCalls(const std::string& job_id, int calls, v1::JobState state) {
    absl::MutexLock lock(&mu_);
    end_job_id_ = job_id;
    end_after_calls_ = calls;
    end_state_ = state;
  }
  void AddWorker(const v1::WorkerInfo& worker) {
    absl::MutexLock lock(&mu_);
    workers_.push_back(worker);
  }
  // Every GetJob answers this status while it is not OK.
  void FailGetJob(grpc::Status status) {
    absl::MutexLock lock(&mu_);
    get_status_ = std::move(status);
  }
  // The next `times` GetJob calls answer `status` (before FailGetJob's); then they work.
  void FailNextGetJobs(int times, grpc::Status status) {
    absl::MutexLock lock(&mu_);
    get_failures_left_ = times;
    next_get_status_ = std::move(status);
  }
  int get_calls() const {
    absl::MutexLock lock(&mu_);
    return get_calls_;
  }
  // ListWorkers waits until the caller gives up (at most 5 s) before answering.
  void StallListWorkers() {
    absl::MutexLock lock(&mu_);
    stall_list_workers_ = true;
  }
  int watch_calls() const {
    absl::MutexLock lock(&mu_);
    return watch_calls_;
  }
  v1::SubmitJobRequest last_submit() const {
    absl::MutexLock lock(&mu_);
    return last_submit_;
  }
  // What PlanJob answers (an empty response until set), or `status` when it is not OK.
  void SetPlanResponse(v1::PlanJobResponse response, grpc::Status status = grpc::Status::OK) {
    absl::MutexLock lock(&mu_);
    plan_response_ = std::move(response);
    plan_status_ = std::move(status);
  }
  v1::PlanJobRequest last_plan() const {
    absl::MutexLock lock(&mu_);
    return last_plan_;
  }
  int plan_calls() const {
    absl::MutexLock lock(&mu_);
    return plan_calls_;
  }

  grpc::Status SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest* request,
                         v1::SubmitJobResponse* response) override {
    absl::MutexLock lock(&mu_);
    last_submit_ = *request;
    if (absl::StrContains(request->spec_yaml(), "bad")) {
      return grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat(request->source_name(), ":4:7: YAML syntax error: end of map not found"));
    }
    v1::Job job;
    job.set_id(absl::StrCat("job-", ++next_id_));
    job.set_name("fmnist-mlp");
    job.set_state(v1::JOB_STATE_PENDING);
    job.set_spec_yaml(request->spec_yaml());
    jobs_[job.id()] = job;
    *response->mutable_job() = job;
    return grpc::Status::OK;
  }

  grpc::Status GetJob(grpc::ServerContext*, const v1::GetJobRequest* request,
                      v1::Job* response) override {
    absl::MutexLock lock(&mu_);
    ++get_calls_;
    if (get_failures_left_ > 0) {
      --get_failures_left_;
      return next_get_status_;
    }
    if (!get_status_.ok()) return get_status_;
    auto it = jobs_.find(request->job_id());
    if (it == jobs_.end()) return NotFound(request->job_id());
    *response = it->second;
    return grpc::Status::OK;
  }

  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest*,
                        v1::ListJobsResponse* response) override {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, job] : jobs_) *response->add_jobs() = job;
    return grpc::Status::OK;
  }

  grpc::Status CancelJob(grpc::ServerContext*, const v1::CancelJobRequest* request,
                         v1::Job* response) override {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(request->job_id());
    if (it == jobs_.end()) return NotFound(request->job_id());
    const v1::JobState s = it->second.state();
    if (s == v1::JOB_STATE_SUCCEEDED || s == v1::JOB_STATE_FAILED || s == v1::JOB_STATE_CANCELLED) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          absl::StrCat("job ", request->job_id(), " already ended (",
                                       v1::JobState_Name(s), "); nothing to cancel"));
    }
    it->second.set_state(v1::JOB_STATE_CANCELLED);
    it->second.set_message("cancelled by user");
    *response = it->second;
    return grpc::Status::OK;
  }

  grpc::Status WatchJob(grpc::ServerContext*, const v1::WatchJobRequest* request,
                        grpc::ServerWriter<v1::JobEvent>* writer) override {
    StreamScript script;
    {
      absl::MutexLock lock(&mu_);
      const int call = watch_calls_++;
      if (request->job_id() == end_job_id_ && watch_calls_ == end_after_calls_) {
        jobs_[end_job_id_].set_state(end_state_);
      }
      auto it = watch_scripts_.find(request->job_id());
      if (it == watch_scripts_.end()) {
        if (jobs_.count(request->job_id()) == 0) return NotFound(request->job_id());
        return grpc::Status(grpc::StatusCode::INTERNAL, "no script");
      }
      script = it->second[std::min<size_t>(call, it->second.size() - 1)];
    }
    for (const v1::Job& job : script.events) {
      v1::JobEvent event;
      *event.mutable_job() = job;
      if (!writer->Write(event)) return grpc::Status::CANCELLED;
    }
    return script.end_status;
  }

  grpc::Status ListWorkers(grpc::ServerContext* context, const v1::ListWorkersRequest*,
                           v1::ListWorkersResponse* response) override {
    bool stall;
    {
      absl::MutexLock lock(&mu_);
      stall = stall_list_workers_;
    }
    if (stall) {
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (!context->IsCancelled() && std::chrono::steady_clock::now() < give_up) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
    absl::MutexLock lock(&mu_);
    for (const v1::WorkerInfo& w : workers_) *response->add_workers() = w;
    return grpc::Status::OK;
  }

  grpc::Status PlanJob(grpc::ServerContext*, const v1::PlanJobRequest* request,
                       v1::PlanJobResponse* response) override {
    absl::MutexLock lock(&mu_);
    ++plan_calls_;
    last_plan_ = *request;
    if (!plan_status_.ok()) return plan_status_;
    *response = plan_response_;
    return grpc::Status::OK;
  }

  // GetJobLogs answers these in turn (the last one repeats; none: NOT_FOUND) and records the
  // requests.
  void ScriptLogs(std::vector<v1::GetJobLogsResponse> responses) {
    absl::MutexLock lock(&mu_);
    log_responses_ = std::move(responses);
  }
  std::vector<v1::GetJobLogsRequest> log_requests() const {
    absl::MutexLock lock(&mu_);
    return log_requests_;
  }
  grpc::Status GetJobLogs(grpc::ServerContext*, const v1::GetJobLogsRequest* request,
                          v1::GetJobLogsResponse* response) override {
    absl::MutexLock lock(&mu_);
    log_requests_.push_back(*request);
    if (log_responses_.empty()) return NotFound(request->job_id());
    const size_t i = std::min(log_requests_.size(), log_responses_.size()) - 1;
    *response = log_responses_[i];
    return grpc::Status::OK;
  }

  // What WhoAmI answers (an empty response until set), and the `authorization` metadata of its
  // last call ("" without one).
  void SetWhoAmI(v1::WhoAmIResponse response) {
    absl::MutexLock lock(&mu_);
    who_ = std::move(response);
  }
  std::string last_whoami_authorization() const {
    absl::MutexLock lock(&mu_);
    return whoami_authorization_;
  }
  grpc::Status WhoAmI(grpc::ServerContext* context, const v1::WhoAmIRequest*,
                      v1::WhoAmIResponse* response) override {
    absl::MutexLock lock(&mu_);
    const auto& metadata = context->client_metadata();
    auto it = metadata.find("authorization");
    whoami_authorization_ =
        it == metadata.end() ? "" : std::string(it->second.data(), it->second.size());
    *response = who_;
    return grpc::Status::OK;
  }

 private:
  static grpc::Status NotFound(const std::string& id) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, absl::StrCat("job ", id, " not found"));
  }

  int port_ = 0;
  absl::Mutex stop_mu_;
  bool stopped_ ABSL_GUARDED_BY(stop_mu_) = false;
  std::string end_job_id_ ABSL_GUARDED_BY(mu_);
  int end_after_calls_ ABSL_GUARDED_BY(mu_) = 0;
  v1::JobState end_state_ ABSL_GUARDED_BY(mu_) = v1::JOB_STATE_UNSPECIFIED;
  std::unique_ptr<grpc::Server> server_;
  mutable absl::Mutex mu_;
  std::map<std::string, v1::Job> jobs_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::vector<StreamScript>> watch_scripts_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::WorkerInfo> workers_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::GetJobLogsResponse> log_responses_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::GetJobLogsRequest> log_requests_ ABSL_GUARDED_BY(mu_);
  grpc::Status get_status_ ABSL_GUARDED_BY(mu_);
  int get_failures_left_ ABSL_GUARDED_BY(mu_) = 0;
  grpc::Status next_get_status_ ABSL_GUARDED_BY(mu_);
  int get_calls_ ABSL_GUARDED_BY(mu_) = 0;
  bool stall_list_workers_ ABSL_GUARDED_BY(mu_) = false;
  int watch_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int next_id_ ABSL_GUARDED_BY(mu_) = 0;
  v1::SubmitJobRequest last_submit_ ABSL_GUARDED_BY(mu_);
  v1::PlanJobResponse plan_response_ ABSL_GUARDED_BY(mu_);
  grpc::Status plan_status_ ABSL_GUARDED_BY(mu_);
  v1::PlanJobRequest last_plan_ ABSL_GUARDED_BY(mu_);
  int plan_calls_ ABSL_GUARDED_BY(mu_) = 0;
  v1::WhoAmIResponse who_ ABSL_GUARDED_BY(mu_);
  std::string whoami_authorization_ ABSL_GUARDED_BY(mu_);
};

// A job snapshot for scripts.
inline v1::Job Snapshot(const std::string& id, v1::JobState state, int64_t step,
                        int64_t total_steps) {
  v1::Job job;
  job.set_id(id);
  job.set_name("fmnist-mlp");
  job.set_state(state);
  v1::JobMetrics* m = job.mutable_metrics();
  m->set_step(step);
  m->set_total_steps(total_steps);
  m->set_epochs(1);
  m->set_epoch(step > 0 ? 1 : 0);
  if (step > 0) {
    m->set_loss(1.0 / static_cast<double>(step));
    m->set_samples_per_second(1000);
    m->set_elapsed_seconds(static_cast<double>(step) * 0.1);
  }
  return job;
}

// A TCP port on 127.0.0.1 that refuses connections for as long as this object lives: the
// socket is bound (so nobody else gets the port) but never listens.
class RefusingPort {
 public:
  RefusingPort() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    if (fd_ >= 0 && bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      socklen_t len = sizeof(addr);
      if (getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
        port_ = ntohs(addr.sin_port);
      }
    }
  }
  ~RefusingPort() {
    if (fd_ >= 0) close(fd_);
  }
  RefusingPort(const RefusingPort&) = delete;
  RefusingPort& operator=(const RefusingPort&) = delete;
  int port() const { return port_; }  // 0 if no port could be bound
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
};

}  // namespace dapple::ctl::testing

#endif  // DAPPLE_DAPPLECTL_FAKE_COORDINATOR_TEST_UTIL_H_
