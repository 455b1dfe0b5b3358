#include "worker/daemon/worker_daemon.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/grpc_tls.h"
#include "common/logging.h"
#include "common/status.h"
#include "grpcpp/grpcpp.h"
#include "worker/daemon/device_memory.h"
#include "worker/daemon/host_capacity.h"
#include "worker/daemon/physical_device.h"
#include "worker/daemon/profile_runner.h"
#include "worker/daemon/progress_reporter.h"
#include "worker/daemon/stage_links.h"
#include "worker/daemon/worker_daemon_internal.h"

namespace dapple::worker {
namespace {

using daemon_internal::DeadlineIn;
using daemon_internal::Hostname;
using daemon_internal::kLastTryDeadline;
using daemon_internal::kRpcDeadline;

// RegisterWorkerRequest.instance_key: 16 bytes of the kernel's random source as 32 hex digits;
// "" when it fails (the coordinator then takes no registration of this process for a retry).
std::string DrawInstanceKey() {
  unsigned char raw[16];
  if (getrandom(raw, sizeof(raw), 0) != static_cast<ssize_t>(sizeof(raw))) {
    DAPPLE_LOG_WARN(
        "cannot draw an instance key ({}): a lost registration reply leaves an "
        "orphan worker until its heartbeat timeout",
        std::strerror(errno));
    return "";
  }
  std::string key;
  for (unsigned char b : raw) absl::StrAppendFormat(&key, "%02x", b);
  return key;
}

// When a cpu worker measures its host's capacity again after the first registration
// (RefineHostCapacity): within its first seconds, when workers started together with it and
// the coordinator have settled (their start is what spoils a measurement at registration), and
// a few times, so that the median outvotes one spoiled by a job starting elsewhere on the host.
// Not later: a measurement takes both cores for about 0.2 s, which a running job of another
// worker on the host would feel (within the first seconds, one is skipped while such a job runs:
// HostRunsJob).
// Four, so that with the first there are five and the median is one of them.
constexpr absl::Duration kCapacityRefinements[] = {absl::Seconds(3), absl::Seconds(5),
                                                   absl::Seconds(7), absl::Seconds(10)};
// gRPC's default reconnect backoff grows to 120 s, so after a few coordinator restarts a worker
// could stay away for minutes while the coordinator listens. Bounding it by the default heartbeat
// interval keeps the promise of worker.md: the worker retries every interval.
constexpr int kInitialReconnectBackoffMs = 100;  // gRPC's floor
// How long a retried registration waits for the coordinator (Register): two reconnect backoffs,
// short enough that a stopping worker is not held up.
constexpr absl::Duration kRetryRegisterDeadline = absl::Seconds(1);
constexpr int kMaxReconnectBackoffMs = 500;  // the default heartbeat interval
// Shortest time one connection attempt may take (gRPC names it MIN_RECONNECT_BACKOFF): a
// refused connection fails at once anyway, this only bounds an unanswered one.
constexpr int kMinConnectTimeoutMs = 1000;
// A coordinator restarted elsewhere (a new pod IP behind the same name) is found within a second
// instead of gRPC's default 30 s between DNS resolutions.
constexpr int kMinDnsResolutionIntervalMs = 1000;
// How long the final report of a job (and the reports queued before it) may wait for delivery.
// A rank that finished while the coordinator is away keeps them (its steps' losses, the
// evaluation, the DONE) until the coordinator is back and takes the rank back (Replay): dropped
// after 30 s, a coordinator down for longer ended the job SUCCEEDED with the steps it had seen
// before the outage (5 of 150) and no test accuracy. Shorter while shutting down, so a SIGTERM
// with an unreachable coordinator still exits within seconds.
constexpr absl::Duration kFinalReportTimeout = absl::Minutes(10);
constexpr absl::Duration kFinalReportTimeoutStopping = absl::Seconds(2);

}  // namespace

std::string CollectiveHost(const std::string& coordinator) {
  const size_t colon = coordinator.rfind(':');
  const std::string host = colon == std::string::npos ? coordinator : coordinator.substr(0, colon);
  const std::string port = colon == std::string::npos ? "7600" : coordinator.substr(colon + 1);
  addrinfo hints = {};
  hints.ai_family = AF_INET;  // Gloo's TCP transport binds IPv4 here
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0 || found == nullptr) {
    return "127.0.0.1";
  }
  std::string address = "127.0.0.1";
  // connect() on a UDP socket sends nothing: it only picks the route and the local address.
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd >= 0 && connect(fd, found->ai_addr, found->ai_addrlen) == 0) {
    sockaddr_in local = {};
    socklen_t len = sizeof(local);
    char buf[INET_ADDRSTRLEN] = {};
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
        inet_ntop(AF_INET, &local.sin_addr, buf, sizeof(buf)) != nullptr) {
      address = buf;
    }
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(found);
  return address;
}

absl::Status CheckCollectiveHost(const std::string& host) {
  const auto refused = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--collective-host %s: cannot bind to it (%s): give an address of this "
                        "host, or leave the flag out",
                        host, why));
  };
  addrinfo hints = {};
  hints.ai_family = AF_INET;  // as CollectiveHost: Gloo's TCP transport binds IPv4
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), "0", &hints, &found); rc != 0 || found == nullptr) {
    return refused(rc != 0 ? gai_strerror(rc) : "no IPv4 address");
  }
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  const bool bound = fd >= 0 && bind(fd, found->ai_addr, found->ai_addrlen) == 0;
  const int error = errno;
  if (fd >= 0) close(fd);
  freeaddrinfo(found);
  if (!bound) return refused(std::strerror(error));
  return absl::OkStatus();
}

std::string NameTakenWarning(const std::string& requested_name, const std::string& worker_id) {
  if (requested_name.empty() || requested_name == worker_id) return "";
  return absl::StrFormat("--name %s is taken by a live worker; registered as %s", requested_name,
                         worker_id);
}

WorkerDaemon::WorkerDaemon(WorkerOptions options)
    : options_(std::move(options)), instance_key_(DrawInstanceKey()) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(64 << 20);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, kInitialReconnectBackoffMs);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, kMaxReconnectBackoffMs);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, kMinConnectTimeoutMs);
  args.SetInt(GRPC_ARG_DNS_MIN_TIME_BETWEEN_RESOLUTIONS_MS, kMinDnsResolutionIntervalMs);
  channel_ = grpc::CreateCustomChannel(options_.coordinator,
                                       options_.coordinator_credentials != nullptr
                                           ? options_.coordinator_credentials
                                           : grpc::InsecureChannelCredentials(),
                                       args);
  stub_ = v1::WorkerControl::NewStub(channel_);
}

WorkerDaemon::~WorkerDaemon() {
  abort_.store(true);
  ReapJob(/*wait=*/true);
  JoinProfile();
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  if (capacity_thread_.joinable()) capacity_thread_.join();
}

bool WorkerDaemon::IsCpuWorker() const {
  return !options_.devices.empty() && options_.devices.front() == "cpu";
}

void WorkerDaemon::RefineHostCapacity() {
  const absl::Time start = absl::Now();
  for (const absl::Duration after : kCapacityRefinements) {
    {
      absl::MutexLock l(&mu_);
      auto stopped = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; };
      if (mu_.AwaitWithDeadline(absl::Condition(&stopped), start + after)) return;
      // A measurement during a job would compete with its stages (and see them): skipped, also
      // for another worker's job on this host.
      if (!job_id_.empty() || profiling_.load()) continue;
    }
    if (HostRunsJob()) continue;
    MeasureHost();
  }
}

void WorkerDaemon::MeasureHost() {
  const double capacity = MeasureHostComputeCapacity();
  absl::StatusOr<LinkEstimate> link;
  {
    const HostMeasurementLock lock;  // another worker's measurement would halve this one
    link = MeasureLoopbackAllReduce();
  }
  absl::MutexLock l(&mu_);
  capacity_estimate_.Add(capacity);
  if (link.ok()) {
    link_estimate_.Add(*link);
  } else {
    DAPPLE_LOG_WARN("measuring the host's loopback link: {}", link.status().message());
  }
  const LinkEstimate median = link_estimate_.Median();
  DAPPLE_LOG_DEBUG(
      "host measured: compute capacity {:.2f}, loopback link {:.0f} MB/s {:.3f} ms; estimates "
      "{:.2f}, {:.0f} MB/s {:.3f} ms of {} measurements",
      capacity, link.ok() ? link->bandwidth_bytes_per_s / 1e6 : 0.0,
      link.ok() ? link->latency_ms : 0.0, capacity_estimate_.Median(),
      median.bandwidth_bytes_per_s / 1e6, median.latency_ms, capacity_estimate_.count());
}

template <typename Request>
void WorkerDaemon::SetHostEstimates(Request* request) {
  request->set_host_compute_capacity(capacity_estimate_.Median());
  if (link_estimate_.count() > 0) {
    const LinkEstimate link = link_estimate_.Median();
    request->mutable_loopback_link()->set_latency_ms(link.latency_ms);
    request->mutable_loopback_link()->set_bandwidth_bytes_per_s(link.bandwidth_bytes_per_s);
  }
}

void WorkerDaemon::Stop() {
  // The running job is aborted by Run after it deregistered, so that the coordinator hears
  // "shut down" before it hears this rank (or a peer that loses its connection) abort.
  stopping_.store(true);
  absl::MutexLock l(&mu_);
  stop_ = true;
}

std::string WorkerDaemon::WorkerId() {
  absl::MutexLock l(&mu_);
  return worker_id_;
}

absl::Status WorkerDaemon::Register(bool wait_for_coordinator) {
  v1::RegisterWorkerRequest req;
  req.set_hostname(Hostname());
  req.set_pid(getpid());
  req.set_instance_key(instance_key_);
  req.set_name(options_.name);
  req.set_measuring_request_id(MeasuringRequestId());
  for (const auto& d : options_.devices) req.add_devices(d);
  if (!options_.devices.empty()) {
    const DeviceMemory memory =
        ProbeDeviceMemory(options_.devices.front(), options_.device_memory_bytes);
    req.set_device_memory_bytes(memory.bytes);
    const std::string physical = PhysicalDevice(options_.devices.front());
    req.set_physical_device(physical);
    // A GPU's memory is split only among workers known to be on that GPU (an unknown one would
    // be counted with the host's cpu workers' RAM).
    req.set_device_memory_shared(memory.shared && (IsCpuWorker() || !physical.empty()));
    if (IsCpuWorker()) {
      bool first = false;
      {
        absl::MutexLock l(&mu_);
        first = capacity_estimate_.count() == 0;
      }
      if (first) MeasureHost();
      absl::MutexLock l(&mu_);
      SetHostEstimates(&req);
      if (first && !capacity_thread_.joinable()) {
        capacity_thread_ = std::thread([this] { RefineHostCapacity(); });
      }
    }
  }
  {
    absl::MutexLock l(&mu_);
    if (!previous_id_.empty() && !rank_.job_id().empty()) {
      // The coordinator forgot this worker (it restarted) while it ran a rank: claim it back.
      *req.mutable_reattach() = rank_;
      req.mutable_reattach()->set_worker_id(previous_id_);
      req.mutable_reattach()->set_last_step(last_step_.load());
    }
  }
  grpc::ClientContext ctx;
  // The first attempt fails fast, with the reason (connection refused, a DNS error) to log; the
  // retries wait for the connection (Register's contract in the header), which the bounded
  // reconnect backoff makes within an interval of the coordinator's return.
  if (wait_for_coordinator) {
    ctx.set_wait_for_ready(true);
    ctx.set_deadline(DeadlineIn(kRetryRegisterDeadline));
  } else {
    ctx.set_deadline(DeadlineIn(kRpcDeadline));
  }
  // A rank claim needs this worker's own credential (the coordinator honours it only then);
  // a registration as a new worker uses the join token.
  const bool with_credential = req.has_reattach() && auth_.HasCredential();
  if (with_credential) {
    auth_.Attach(&ctx);
  } else {
    auth_.AttachJoin(&ctx);
  }
  v1::RegisterWorkerResponse resp;
  grpc::Status s = stub_->RegisterWorker(&ctx, req, &resp);
  if (s.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
      s.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
    if (with_credential) {
      // The credential is gone (revoked, or a new database): register anew with the join token.
      DAPPLE_LOG_WARN(
          "the coordinator refused this worker's credential ({}): registering with "
          "the join token",
          s.error_message());
      auth_.SetCredential("");
      return absl::UnavailableError(
          absl::StrCat("re-registering with the coordinator at ", options_.coordinator));
    }
    return absl::UnauthenticatedError(
        absl::StrCat("the coordinator refused the join token: ", s.error_message(), "; check ",
                     options_.join_token_source));
  }
  if (!s.ok()) {
    // What TLS explains is said plainly: these retries never succeed until the operator acts.
    std::string reason = TlsFailureReason(s.error_message());
    if (reason.empty() && IsClosedByPeer(s.error_message())) {
      reason = absl::StrCat(
          "connection closed; ",
          ClosedByCoordinatorHint(options_.coordinator_tls, options_.coordinator_client_certificate,
                                  "--ca FILE (or DAPPLE_CA)"));
    }
    return absl::UnavailableError(absl::StrCat("cannot register with the coordinator at ",
                                               options_.coordinator, ": ",
                                               reason.empty() ? s.error_message() : reason));
  }
  if (resp.worker_id().empty()) {
    return absl::UnavailableError(absl::StrCat("the coordinator at ", options_.coordinator,
                                               " answered the registration without a worker id"));
  }
  if (!resp.worker_credential().empty()) auth_.SetCredential(resp.worker_credential());
  absl::MutexLock l(&mu_);
  worker_id_ = resp.worker_id();
  previous_id_.clear();
  if (req.has_reattach()) {
    const v1::RankClaim& claim = req.reattach();
    if (resp.reattached()) {
      DAPPLE_LOG_INFO(
          "re-attached to {} as stage {} replica {} after the coordinator restarted "
          "(step {}{})",
          claim.job_id(), claim.stage(), claim.replica(), claim.last_step(),
          claim.done() ? ", done" : "");
      if (reporter_ != nullptr && claim.job_id() == job_id_) reporter_->Replay();
    } else if (claim.done()) {
      // Kept until the next job in case the previous coordinator's acknowledgement of the DONE
      // report died with it; usually the job has simply ended.
      DAPPLE_LOG_INFO("the coordinator did not take back finished {} stage {} replica {}: {}",
                      claim.job_id(), claim.stage(), claim.replica(), resp.reattach_refused());
    } else {
      // The coordinator forgot this worker because it restarted, or because it declared the
      // worker dead (a stalled process, a network partition) and moved the rank elsewhere.
      DAPPLE_LOG_WARN(
          "the coordinator (restarted, or having declared this worker dead) did not give back "
          "{} stage {} replica {}: {}",
          claim.job_id(), claim.stage(), claim.replica(), resp.reattach_refused());
      if (claim.job_id() == job_id_ && !job_finished_) {
        DAPPLE_LOG_INFO("aborting {}: the coordinator no longer runs this rank here", job_id_);
        abort_.store(true);
      }
    }
    // A rank taken back stays claimed: should the coordinator restart again, it is claimed
    // again (cleared, a second restart found no claim and failed the job for a worker that
    // "did not register again").
    if (!resp.reattached()) rank_.clear_job_id();
  }
  if (resp.heartbeat_interval_ms() > 0) {
    heartbeat_interval_ = absl::Milliseconds(resp.heartbeat_interval_ms());
  }
  const std::string warning = NameTakenWarning(options_.name, worker_id_);
  if (!warning.empty()) DAPPLE_LOG_WARN("{}", warning);
  DAPPLE_LOG_INFO("registered as {} with {}", worker_id_, options_.coordinator);
  if (options_.observer) options_.observer->OnRegistered(worker_id_, req.hostname());
  return absl::OkStatus();
}

absl::Status WorkerDaemon::TryRegister(bool* warned) {
  absl::Status s = Register(/*wait_for_coordinator=*/*warned);
  // A refused join token does not get better by retrying: the operator must fix it.
  if (absl::IsUnauthenticated(s)) {
    DAPPLE_LOG_ERROR("{}", s.message());
    return s;
  }
  if (s.ok()) {
    if (*warned) DAPPLE_LOG_INFO("the coordinator at {} is reachable again", options_.coordinator);
    *warned = false;
  } else if (!*warned) {
    DAPPLE_LOG_WARN("{} (retrying every {})", s.message(),
                    absl::FormatDuration(heartbeat_interval_));
    *warned = true;
  }
  return absl::OkStatus();
}

absl::Status WorkerDaemon::Run() {
  bool warned = false;
  while (true) {
    {
      absl::MutexLock l(&mu_);
      if (stop_) break;
    }
    ReapJob(/*wait=*/false);
    absl::Status registered = absl::OkStatus();
    if (WorkerId().empty()) {
      registered = TryRegister(&warned);
    } else if (!HeartbeatOnce()) {
      // The coordinator forgot this worker (it restarted): register now, not an interval later.
      registered = TryRegister(&warned);
    }
    if (!registered.ok()) {
      abort_.store(true);
      ReapJob(/*wait=*/true);
      JoinProfile();
      return registered;
    }
    absl::MutexLock l(&mu_);
    auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || reregister_now_; };
    mu_.AwaitWithTimeout(absl::Condition(&woken), heartbeat_interval_);
    reregister_now_ = false;
  }
  // Deregister before aborting the running job: the coordinator then fails it with "worker W
  // (stage S of job J) shut down" rather than with this rank's abort or a peer's lost connection,
  // which would otherwise reach it first.
  Deregister();
  abort_.store(true);
  ReapJob(/*wait=*/true);
  JoinProfile();
  DAPPLE_LOG_INFO("stopped");
  return absl::OkStatus();
}

void WorkerDaemon::Deregister() {
  std::string id;
  {
    absl::MutexLock l(&mu_);
    id = worker_id_;
  }
  if (id.empty()) return;
  // Tell the coordinator now rather than letting it wait out the heartbeat timeout; best effort.
  v1::DeregisterWorkerRequest req;
  req.set_worker_id(id);
  v1::DeregisterWorkerResponse resp;
  grpc::ClientContext ctx;
  auth_.Attach(&ctx);
  if (heartbeat_failing_.load()) {
    // The coordinator answered no heartbeat lately (it is down): a last try, not a wait (a
    // worker stopped after its coordinator died took 3 s to exit); it times the worker out.
    ctx.set_deadline(DeadlineIn(kLastTryDeadline));
  } else {
    ctx.set_deadline(DeadlineIn(kRpcDeadline));
    // The last call of this process: wait out a reconnect in progress (the channel may still be
    // backing off after the coordinator restarted) instead of failing with its last error.
    ctx.set_wait_for_ready(true);
  }
  grpc::Status s = stub_->DeregisterWorker(&ctx, req, &resp);
  if (s.ok()) {
    DAPPLE_LOG_INFO("deregistered {}", id);
  } else {
    DAPPLE_LOG_WARN("could not deregister {}: {}", id, s.error_message());
  }
}

bool WorkerDaemon::HeartbeatOnce() {
  v1::HeartbeatRequest req;
  {
    absl::MutexLock l(&mu_);
    req.set_worker_id(worker_id_);
    req.set_running_job_id(job_id_);
    SetHostEstimates(&req);
  }
  req.set_measuring_request_id(MeasuringRequestId());
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(kRpcDeadline));
  auth_.Attach(&ctx);
  // Sent as soon as a connection being re-established (a restarted coordinator) is up, instead
  // of failing now and trying again an interval later.
  ctx.set_wait_for_ready(true);
  v1::HeartbeatResponse resp;
  grpc::Status s = stub_->Heartbeat(&ctx, req, &resp);
  if (s.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
      s.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
    // The credential no longer works (revoked; a coordinator on a new database): register again
    // with the join token, as a worker the coordinator forgot.
    DAPPLE_LOG_WARN("the coordinator refused this worker's credential ({}): registering again",
                    s.error_message());
    auth_.SetCredential("");
    absl::MutexLock l(&mu_);
    if (!worker_id_.empty()) previous_id_ = worker_id_;
    worker_id_.clear();
    return false;
  }
  // Deregister's wait depends on it: a coordinator that answers nothing is not waited for.
  heartbeat_failing_.store(s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                           s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED);
  if (!s.ok()) {
    DAPPLE_LOG_DEBUG("heartbeat failed: {}", s.error_message());
    return true;
  }
  if (resp.unknown_worker()) {
    absl::MutexLock l(&mu_);
    // The running rank goes on: the registration claims it back (Register).
    DAPPLE_LOG_WARN("the coordinator does not know {}: registering again{}", req.worker_id(),
                    rank_.job_id().empty()
                        ? ""
                        : absl::StrCat(", claiming stage ", rank_.stage(), " replica ",
                                       rank_.replica(), " of ", rank_.job_id()));
    if (!worker_id_.empty()) previous_id_ = worker_id_;
    worker_id_.clear();
    return false;
  }
  for (const std::string& job : resp.abort_job_ids()) {
    absl::MutexLock l(&mu_);
    if (job == job_id_) {
      DAPPLE_LOG_INFO("coordinator aborts {}", job);
      abort_.store(true);
    }
  }
  if (resp.has_assignment()) StartJob(resp.assignment());
  if (resp.has_profile_request()) StartProfile(resp.profile_request());
  return true;
}

void WorkerDaemon::StartProfile(const v1::ProfileRequest& request) {
  const std::string worker_id = WorkerId();
  if (profiling_.exchange(true)) {
    // Answered at once: the coordinator then plans the job on its estimate (or asks another
    // worker) instead of waiting out its deadline for a measurement that never comes.
    v1::ReportProfileRequest busy;
    busy.set_worker_id(worker_id);
    busy.set_request_id(request.request_id());
    busy.set_busy_with_request_id(profile_request_id_);
    busy.set_error(absl::StrCat("worker ", worker_id, " is measuring another model (request ",
                                profile_request_id_, ")"));
    DAPPLE_LOG_WARN("profile request {}: {}", request.request_id(), busy.error());
    SendProfileReport(busy);
    return;
  }
  JoinProfile();
  profile_request_id_ = request.request_id();
  DAPPLE_LOG_INFO("measuring the model's layers on {} (batch {}, request {})", request.device(),
                  request.batch_size(), request.request_id());
  profile_thread_ = std::thread([this, worker_id, request] {
    const v1::ReportProfileRequest report = RunProfileRequest(worker_id, request);
    if (!report.error().empty()) DAPPLE_LOG_WARN("profile: {}", report.error());
    SendProfileReport(report);
    profiling_.store(false);
  });
}

std::string WorkerDaemon::MeasuringRequestId() const {
  return profiling_.load() ? profile_request_id_ : std::string();
}

void WorkerDaemon::SendProfileReport(const v1::ReportProfileRequest& report) {
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(kRpcDeadline));
  auth_.Attach(&ctx);
  v1::ReportProfileResponse resp;
  grpc::Status s = stub_->ReportProfile(&ctx, report, &resp);
  if (!s.ok()) DAPPLE_LOG_WARN("could not report the profile: {}", s.error_message());
}

void WorkerDaemon::JoinProfile() {
  if (profile_thread_.joinable()) profile_thread_.join();
}

void WorkerDaemon::ReapJob(bool wait) {
  bool finished;
  {
    absl::MutexLock l(&mu_);
    finished = job_finished_;
  }
  if (!job_thread_.joinable() || (!finished && !wait)) return;
  job_thread_.join();
  absl::MutexLock l(&mu_);
  job_id_.clear();
  job_finished_ = false;
}

void WorkerDaemon::StartJob(const v1::StageAssignment& assignment) {
  ReapJob(/*wait=*/false);
  {
    absl::MutexLock l(&mu_);
    if (!job_id_.empty()) {
      DAPPLE_LOG_ERROR("assignment for {} while {} still runs: ignored", assignment.job_id(),
                       job_id_);
      return;
    }
    job_id_ = assignment.job_id();
    job_finished_ = false;
    rank_.Clear();
    rank_.set_job_id(assignment.job_id());
    rank_.set_stage(assignment.stage());
    rank_.set_replica(assignment.replica());
  }
  abort_.store(false);
  checkpoint_step_.store(0);
  last_step_.store(assignment.first_step());
  job_thread_ = std::thread([this, assignment] { RunJob(assignment); });
}

void WorkerDaemon::RunJob(v1::StageAssignment assignment) {
  std::string worker_id;
  {
    absl::MutexLock l(&mu_);
    worker_id = worker_id_;
  }
  // Tells the host's other cpu workers that stages compute here (their idle measurements wait).
  std::optional<HostJobLock> host_job;
  if (IsCpuWorker()) host_job.emplace();
  // Every line this process logs while it runs the rank goes to the coordinator with the
  // rank's reports (`dapplectl logs`).
  JobLogCapture& logs = *ProcessJobLogCapture();
  logs.Begin();
  DAPPLE_LOG_INFO("{}: starting stage {} replica {} of {} stages", assignment.job_id(),
                  assignment.stage(), assignment.replica(), assignment.num_stages());
  ProgressReporter reporter(stub_.get(), &abort_, &checkpoint_step_, &logs, &auth_, [this] {
    absl::MutexLock l(&mu_);
    reregister_now_ = true;
  });
  {
    absl::MutexLock l(&mu_);
    reporter_ = &reporter;
  }
  if (options_.observer) options_.observer->OnRankStarted(assignment);
  // Outlives the final report: closing the connections first would let a peer report "connection
  // lost" before this rank's own cause (say, a diverged loss) reached the coordinator.
  JobResources resources;
  absl::Status s;
  try {
    s = TrainJob(assignment, &reporter, &resources);
  } catch (const std::exception& e) {
    s = absl::InternalError(absl::StrCat("exception: ", e.what()));
  }
  v1::ProgressReport final;
  final.set_worker_id(worker_id);
  final.set_job_id(assignment.job_id());
  final.set_stage(assignment.stage());
  final.set_replica(assignment.replica());
  const bool aborted = !s.ok() && (abort_.load() || s.code() == absl::StatusCode::kAborted);
  {
    // A rank that finished is claimed as done should the coordinator restart before its DONE
    // report arrives. One that failed stays claimed while its FAILED report waits to be
    // delivered (below): a coordinator restarted meanwhile takes the rank back and hears why it
    // failed, instead of failing the job for a worker that "did not register again". One told
    // to stop is not claimed.
    absl::MutexLock l(&mu_);
    if (s.ok()) {
      rank_.set_done(true);
    } else if (aborted) {
      rank_.clear_job_id();
    }
  }
  if (s.ok()) {
    final.set_kind(v1::PROGRESS_DONE);
    DAPPLE_LOG_INFO("{}: stage {} done", assignment.job_id(), assignment.stage());
  } else if (aborted) {
    final.set_kind(v1::PROGRESS_ABORTED);
    // Where the abort landed (an action, a receive) is noise when the cause is this worker's
    // shutdown; should the deregistration not have reached the coordinator, this says why.
    final.set_message(stopping_.load() ? absl::StrCat("worker ", worker_id, " is shutting down")
                                       : std::string(s.message()));
    // The coordinator's abort (a cancel, or a failure elsewhere) first: what the rank was doing
    // comes after it, since a neighbour's closed connection alone reads like a crash.
    const bool between_steps = s.message() == "aborted by the coordinator";
    // A SIGTERM aborts the rank too (Run, after deregistering): say so, not "the coordinator".
    const char* by = stopping_.load() ? ": this worker is shutting down"
                     : abort_.load()
                         ? " by the coordinator (the job was cancelled, failed elsewhere, or "
                           "moved this rank to another worker)"
                         : "";
    DAPPLE_LOG_INFO("{}: stage {} aborted{}{}{}", assignment.job_id(), assignment.stage(), by,
                    between_steps ? "" : "; it was in: ", between_steps ? "" : s.message());
  } else {
    final.set_kind(v1::PROGRESS_FAILED);
    final.set_message(std::string(s.message()));
    DAPPLE_LOG_ERROR("{}: stage {} failed: {}", assignment.job_id(), assignment.stage(),
                     s.message());
  }
  if (options_.observer) options_.observer->OnReport(final);
  reporter.Report(final);
  // Waited for in short slices, so that a worker told to stop meanwhile stops within
  // kFinalReportTimeoutStopping.
  const absl::Time waited_since = absl::Now();
  bool delivered = false;
  while (!delivered && !stopping_.load() && absl::Now() - waited_since < kFinalReportTimeout) {
    delivered = reporter.Flush(absl::Milliseconds(500));
  }
  if (!delivered && stopping_.load()) delivered = reporter.Flush(kFinalReportTimeoutStopping);
  if (!s.ok()) {
    absl::MutexLock l(&mu_);
    if (rank_.job_id() == assignment.job_id()) rank_.clear_job_id();
  }
  if (!delivered) {
    DAPPLE_LOG_WARN(
        "{}: could not deliver the final report (waited {})", assignment.job_id(),
        absl::FormatDuration(absl::Trunc(absl::Now() - waited_since, absl::Seconds(1))));
  }
  logs.End();
  resources.Release();
  absl::MutexLock l(&mu_);
  reporter_ = nullptr;
  job_finished_ = true;
}

}  // namespace dapple::worker
