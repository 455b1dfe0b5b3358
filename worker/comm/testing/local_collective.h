// An in-process Collective for unit tests (a fake: tests of one piece only; real replicas use
// Gloo across processes). D threads, one per member, share a LocalCollectiveGroup; each call
// deposits the member's buffer and waits at a barrier until every member made the matching
// call, then every member reads all deposits in rank order, waits at a second barrier (so no
// buffer is released while another member still reads it) and writes its own result.
//
// AllReduceSum sums in rank order starting from member 0's value (((x_0 + x_1) + x_2) ...), so
// every member gets bitwise-identical values. A call that waits longer than the group's timeout
// returns kDeadlineExceeded; Break(status) makes every waiting and later call return `status`
// (a member "dying"), as collective.h requires. Members must agree on the call sequence and
// sizes (an AllReduceSum against an AllGather, or different counts, is kInvalidArgument on
// every member).
// Thread safety: the group is thread-safe; each LocalCollective is used by one thread at a time.
#ifndef DAPPLE_WORKER_COMM_TESTING_LOCAL_COLLECTIVE_H_
#define DAPPLE_WORKER_COMM_TESTING_LOCAL_COLLECTIVE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "worker/comm/collective.h"

namespace dapple::worker::testing {

class LocalCollectiveGroup {
 public:
  explicit LocalCollectiveGroup(int size, absl::Duration timeout = absl::Seconds(30));

  int size() const { return size_; }
  // Every waiting and later call of every member returns `status` (not OK).
  void Break(absl::Status status);
  // Collective calls completed by member 0 (for tests counting AllReduces).
  int64_t calls() const;

  // The member's half of a call: `kind` 0 = sum, 1 = gather; `bytes` of `data` (in place for a
  // sum; the input for a gather, with `out` its output).
  absl::Status Run(int rank, int kind, const void* in, size_t bytes, void* out);

 private:
  // Waits until `arrived_` of generation `gen` reaches size_ (phase barrier).
  absl::Status Barrier(int64_t* generation, int* arrived) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int size_;
  const absl::Duration timeout_;
  mutable absl::Mutex mu_;
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  // Per member: its deposit for the current call.
  std::vector<const void*> in_ ABSL_GUARDED_BY(mu_);
  std::vector<size_t> bytes_ ABSL_GUARDED_BY(mu_);
  std::vector<int> kind_ ABSL_GUARDED_BY(mu_);
  int64_t enter_generation_ ABSL_GUARDED_BY(mu_) = 0;
  int enter_arrived_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t leave_generation_ ABSL_GUARDED_BY(mu_) = 0;
  int leave_arrived_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t calls_ ABSL_GUARDED_BY(mu_) = 0;
};

class LocalCollective : public Collective {
 public:
  // `group` must outlive this object; 0 <= rank < group->size().
  LocalCollective(LocalCollectiveGroup* group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  absl::Status AllReduceSum(float* data, size_t count) override;
  absl::Status AllGather(const void* in, size_t bytes, void* out) override;

 private:
  LocalCollectiveGroup* group_;
  int rank_;
};

}  // namespace dapple::worker::testing

#endif  // DAPPLE_WORKER_COMM_TESTING_LOCAL_COLLECTIVE_H_
