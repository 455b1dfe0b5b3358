// Collective (worker/comm/collective.h) over Gloo's TCP transport: the gradient AllReduce among
// the replicas of one stage on CPU workers (DAPPLE, Fan et al., PPoPP 2021, section 4;
// design.md "Processes"). Host memory only.
//
// Rendezvous: Create connects a full mesh of TCP pairs among the `size` members through `store`
// (every member calls Create with the same prefix and size and its own rank); keys live under
// `prefix`, so one store can serve several stages and jobs ("job-3/stage-1"). The store is only
// used inside Create.
//
// Blocking rules: Create blocks until every member has joined, or fails with kDeadlineExceeded
// after `timeout` (a member that never joins). Each AllReduceSum / AllGather blocks until every
// member made the matching call (the same calls in the same order with the same sizes on every
// member), or fails: kDeadlineExceeded when no progress came within `timeout`, kUnavailable when
// a peer closed its connection (its process died, or it destroyed its GlooCollective), each
// message naming `label`, this member and what Gloo said. After a failure every call returns
// that first error at once (Gloo's pairs are unusable after an error). Gloo's C++ exceptions
// never leave this class.
//
// Results: AllReduceSum is one gloo::allreduce (ring reduce-scatter + allgather: each element is
// reduced on one member and then copied), so every member ends with bitwise-identical values;
// the summation order over members is Gloo's, not rank order.
//
// Thread safety: one thread at a time calls a GlooCollective; distinct GlooCollectives (each has
// its own Gloo device and I/O thread) may run on different threads of one process. Destroying
// it closes its connections: the other members' pending or next calls fail with kUnavailable.
#ifndef DAPPLE_WORKER_COMM_GLOO_COLLECTIVE_H_
#define DAPPLE_WORKER_COMM_GLOO_COLLECTIVE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/comm/collective.h"

namespace gloo {
class Context;
namespace rendezvous {
class Store;
}  // namespace rendezvous
}  // namespace gloo

namespace dapple::worker {

class GlooCollective : public Collective {
 public:
  // Joins the collective as member `rank` of `size` (0 <= rank < size). `hostname` is the
  // address this member binds to and publishes to the others (e.g. "127.0.0.1" or the node's
  // address); `timeout` (> 0) bounds the rendezvous and every later wait (Gloo's connect of each
  // pair included, which cannot be aborted otherwise; Gloo passes the store's waits a fifth of
  // it: `store` should bound them by its own timeout, as CoordinatorStore does); `label` names
  // the group in messages ("stage 1"). `store` need only outlive Create. With size 1 nothing is
  // connected (the store is not used) and the calls are local copies.
  // Errors: kInvalidArgument for a bad rank / size / timeout / empty hostname;
  // kFailedPrecondition when Gloo cannot use `hostname`; kDeadlineExceeded when the other
  // members do not all join within `timeout`; kUnavailable for any other rendezvous failure.
  static absl::StatusOr<std::unique_ptr<GlooCollective>> Create(
      int rank, int size, gloo::rendezvous::Store& store, const std::string& prefix,
      const std::string& hostname, absl::Duration timeout, const std::string& label);

  ~GlooCollective() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::Status AllReduceSum(float* data, size_t count) override;
  absl::Status AllGather(const void* in, size_t bytes, void* out) override;

 private:
  GlooCollective(int rank, int size, std::string label);
  // Runs `op` (a Gloo call) and turns its exceptions into the sticky error `failed_`.
  template <typename Op>
  absl::Status Guard(const char* what, Op op);

  const int rank_;
  const int size_;
  const std::string label_;
  std::shared_ptr<gloo::Context> context_;  // null when size_ == 1
  uint32_t next_tag_ = 1;  // one Gloo tag per call, equal on every member (same call order)
  absl::Status failed_;
};

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_COMM_GLOO_COLLECTIVE_H_
