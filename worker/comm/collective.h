// Collectives among the replicas of one stage (DAPPLE's gradient AllReduce, Pipe-SGD's
// pipelined AllReduce): a small interface so the runtime does not depend on Gloo, and a test can
// run replicas as threads.
//
// Blocking rules: every call blocks until all `size()` members made the matching call (same
// order of calls on every member) or a member failed. A failure is kUnavailable naming the
// member that died or could not be reached ("stage 1 replica 0 ..."), kDeadlineExceeded after
// the implementation's timeout. A failing collective is not used again: after an error every
// call returns that error.
// Thread safety: one thread at a time uses a Collective (Pipe-SGD hands it to its AllReduce
// thread and takes it back).
#ifndef DAPPLE_WORKER_COMM_COLLECTIVE_H_
#define DAPPLE_WORKER_COMM_COLLECTIVE_H_

#include <cstddef>

#include "absl/status/status.h"

namespace dapple::worker {

class Collective {
 public:
  virtual ~Collective() = default;
  // This member's index in [0, size()) (the replica) and the number of members (D).
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In place: data[i] becomes the sum over members of their data[i] (`count` fp32 values, the
  // same count on every member). Every member ends with bitwise-identical values.
  virtual absl::Status AllReduceSum(float* data, size_t count) = 0;
  // `out` (size() * bytes) becomes the members' `in` buffers (`bytes` each) in rank order.
  virtual absl::Status AllGather(const void* in, size_t bytes, void* out) = 0;
};

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_COMM_COLLECTIVE_H_
