// CoordinatorStore: a gloo::rendezvous::Store over the coordinator's per-job store (the
// WorkerControl StoreSet / StoreGet RPCs, docs/coordinator.md), so that the replicas of a stage
// rendezvous for Gloo through the coordinator they already reach: no shared file system, no
// extra port.
//
// Gloo's contract: set() stores a value; get() and wait() block until the keys exist. Here they
// poll StoreGet every Options::poll_interval (the coordinator holds no waiting calls) until the
// keys are set, and give up with a gloo::IoException (what Gloo's own stores throw, so Gloo and
// GlooCollective treat it as an I/O failure) whose message names the job, the keys and why:
//   "coordinator store of job job-1: keys [stage-1/0] not set within 120s"  (the timeout)
//   "coordinator store of job job-1: aborted while waiting for keys [...]"   (*abort set)
//   "coordinator store of job job-1: the job ended while waiting for keys [...]"
//   "coordinator store of job job-1: set 'k': <the RPC's error>"            (a failed call)
// A failed StoreGet call is retried until the deadline (the coordinator may be restarting); a
// failed StoreSet is not (Gloo sets each key once, before it waits).
//
// Thread safety: thread-compatible (Gloo's rendezvous uses a store from one thread).
#ifndef DAPPLE_WORKER_DAEMON_COORDINATOR_STORE_H_
#define DAPPLE_WORKER_DAEMON_COORDINATOR_STORE_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dapple/v1/worker.grpc.pb.h"
#include "gloo/rendezvous/store.h"
#include "worker/daemon/call_auth.h"

namespace dapple::worker {

// The two calls the store makes; the daemon's come from StoreCallsOver (gRPC), a unit test's
// from a fake.
struct StoreCalls {
  std::function<absl::Status(const v1::StoreSetRequest&)> set;
  std::function<absl::StatusOr<v1::StoreGetResponse>(const v1::StoreGetRequest&)> get;
};

// StoreSet / StoreGet through `stub` (not owned; must outlive the calls), each with a deadline
// of `rpc_deadline`. A gRPC error becomes absl::Status with the same code and message.
// `auth` (may be null: no token) adds the worker's credential to each call; it and `stub` must
// outlive the calls.
StoreCalls StoreCallsOver(v1::WorkerControl::StubInterface* stub, absl::Duration rpc_deadline,
                          const CallAuth* auth = nullptr);

class CoordinatorStore : public gloo::rendezvous::Store {
 public:
  struct Options {
    std::string job_id;
    std::string worker_id;
    absl::Duration timeout = absl::Seconds(120);  // longest wait() / get()
    absl::Duration poll_interval = absl::Milliseconds(50);
    const std::atomic<bool>* abort = nullptr;  // not owned; when set, waits stop
  };

  CoordinatorStore(StoreCalls calls, Options options);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  // Polls until every key is set; their values in order. Throws gloo::IoException as above.
  std::vector<std::string> Await(const std::vector<std::string>& keys, absl::Duration timeout);

  StoreCalls calls_;
  Options options_;
};

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_DAEMON_COORDINATOR_STORE_H_
