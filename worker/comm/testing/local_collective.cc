#include "worker/comm/testing/local_collective.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace dapple::worker::testing {

LocalCollectiveGroup::LocalCollectiveGroup(int size, absl::Duration timeout)
    : size_(size), timeout_(timeout), in_(size), bytes_(size), kind_(size) {}

void LocalCollectiveGroup::Break(absl::Status status) {
  absl::MutexLock lock(&mu_);
  if (broken_.ok()) broken_ = std::move(status);
}

int64_t LocalCollectiveGroup::calls() const {
  absl::MutexLock lock(&mu_);
  return calls_;
}

absl::Status LocalCollectiveGroup::Barrier(int64_t* generation, int* arrived) {
  const int64_t mine = *generation;
  if (++*arrived == size_) {
    *arrived = 0;
    ++*generation;
    return absl::OkStatus();
  }
  auto released = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return *generation != mine || !broken_.ok();
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&released), timeout_)) {
    return absl::DeadlineExceededError(absl::StrCat("local collective: not every member of ", size_,
                                                    " arrived within ",
                                                    absl::FormatDuration(timeout_)));
  }
  // A broken group fails even a barrier that completed at the same time: results are not used.
  return broken_;
}

absl::Status LocalCollectiveGroup::Run(int rank, int kind, const void* in, size_t bytes,
                                       void* out) {
  absl::MutexLock lock(&mu_);
  if (!broken_.ok()) return broken_;
  in_[rank] = in;
  bytes_[rank] = bytes;
  kind_[rank] = kind;
  if (absl::Status s = Barrier(&enter_generation_, &enter_arrived_); !s.ok()) return s;
  for (int r = 0; r < size_; ++r) {
    if (kind_[r] != kind || bytes_[r] != bytes) {
      // Every member sees the same mismatch and fails; nobody waits for the second barrier.
      return absl::InvalidArgumentError(absl::StrCat(
          "local collective: member ", r, " called ", kind_[r] == 0 ? "AllReduceSum" : "AllGather",
          " with ", bytes_[r], " bytes, member ", rank, " ",
          kind == 0 ? "AllReduceSum" : "AllGather", " with ", bytes, " bytes"));
    }
  }
  // Every deposit stays valid until the second barrier: its owner is blocked in this call.
  if (kind == 0) {
    const size_t count = bytes / sizeof(float);
    std::vector<float> sum(count);
    std::memcpy(sum.data(), in_[0], count * sizeof(float));
    for (int r = 1; r < size_; ++r) {
      const float* x = static_cast<const float*>(in_[r]);
      for (size_t i = 0; i < count; ++i) sum[i] += x[i];
    }
    if (absl::Status s = Barrier(&leave_generation_, &leave_arrived_); !s.ok()) return s;
    std::memcpy(out, sum.data(), count * sizeof(float));
  } else {
    for (int r = 0; r < size_; ++r) {
      std::memcpy(static_cast<char*>(out) + static_cast<size_t>(r) * bytes, in_[r], bytes);
    }
    if (absl::Status s = Barrier(&leave_generation_, &leave_arrived_); !s.ok()) return s;
  }
  if (rank == 0) ++calls_;
  return absl::OkStatus();
}

absl::Status LocalCollective::AllReduceSum(float* data, size_t count) {
  return group_->Run(rank_, 0, data, count * sizeof(float), data);
}

absl::Status LocalCollective::AllGather(const void* in, size_t bytes, void* out) {
  return group_->Run(rank_, 1, in, bytes, out);
}

}  // namespace dapple::worker::testing
