// An in-memory Transport for the runtime's in-process tests (every rank a thread): a fake used
// only in unit tests; tests/integration runs the same checks across real processes over UCX.
// Messages are copied at Send, so sends complete at once; Recv waits up to `timeout` for the
// message (peer, tag), then returns kDeadlineExceeded. Ranks are whatever the runtime addresses
// (schedule::RankIndex). Thread-safe Mailbox; one thread per LocalTransport.
#ifndef DAPPLE_WORKER_RUNTIME_TESTING_LOCAL_TRANSPORT_H_
#define DAPPLE_WORKER_RUNTIME_TESTING_LOCAL_TRANSPORT_H_

#include <algorithm>
#include <map>
#include <tuple>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "worker/comm/transport.h"

namespace dapple::worker::parity {

class Mailbox {
 public:
  explicit Mailbox(absl::Duration timeout = absl::Seconds(30)) : timeout_(timeout) {}
  void Put(int src, int dst, uint64_t tag, const void* data, size_t bytes) {
    absl::MutexLock l(&mu_);
    auto& q = box_[{src, dst, tag}];
    q.assign(static_cast<const char*>(data), static_cast<const char*>(data) + bytes);
  }
  absl::Status Take(int src, int dst, uint64_t tag, void* data, size_t bytes) {
    absl::MutexLock l(&mu_);
    auto key = std::make_tuple(src, dst, tag);
    auto present = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return box_.count(key) > 0; };
    if (!mu_.AwaitWithTimeout(absl::Condition(&present), timeout_)) {
      return absl::DeadlineExceededError("no message");
    }
    auto& v = box_[key];
    if (v.size() != bytes) return absl::InternalError("size mismatch");
    std::copy(v.begin(), v.end(), static_cast<char*>(data));
    box_.erase(key);
    return absl::OkStatus();
  }

 private:
  const absl::Duration timeout_;
  absl::Mutex mu_;
  std::map<std::tuple<int, int, uint64_t>, std::vector<char>> box_ ABSL_GUARDED_BY(mu_);
};

class LocalTransport : public Transport {
 public:
  LocalTransport(Mailbox* box, int rank) : box_(box), rank_(rank) {}
  absl::Status Send(int peer, uint64_t tag, const void* data, size_t bytes) override {
    box_->Put(rank_, peer, tag, data, bytes);
    return absl::OkStatus();
  }
  absl::Status Recv(int peer, uint64_t tag, void* data, size_t bytes) override {
    return box_->Take(peer, rank_, tag, data, bytes);
  }
  absl::Status WaitSends() override { return absl::OkStatus(); }
  // A send is copied into the mailbox at once: nothing to wait for.
  bool WaitsForOneSend() const override { return true; }
  absl::Status WaitSend(int, uint64_t) override { return absl::OkStatus(); }

 private:
  Mailbox* box_;
  int rank_;
};

}  // namespace dapple::worker::parity

#endif  // DAPPLE_WORKER_RUNTIME_TESTING_LOCAL_TRANSPORT_H_
