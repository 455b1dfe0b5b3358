#include "worker/comm/cuda/nccl_communicator.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/status.h"
#include "kernels/cuda/cuda_status.h"

namespace dapple::worker {
namespace {

using kernels::cuda::CudaStatus;

// Polling: a few yields catch work that is about to finish without a sleep; then sleeps grow up
// to kMaxSleep, which bounds how late completion, the abort flag and the deadline are noticed.
constexpr int kSpins = 64;
constexpr absl::Duration kMinSleep = absl::Microseconds(20);
constexpr absl::Duration kMaxSleep = absl::Microseconds(500);
// Longest wait for a healthy communicator to finalise on destruction before it is aborted.
constexpr absl::Duration kFinalizeGrace = absl::Seconds(10);

enum class PollEnd { kDone, kAborted, kTimedOut };

// Calls `step` (StatusOr<bool>: true when done) until it is done, fails, the abort flag is set or
// `timeout` passes.
template <typename Step>
absl::StatusOr<PollEnd> PollUntil(absl::Duration timeout, const std::atomic<bool>* abort,
                                  Step&& step) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::Duration backoff = absl::ZeroDuration();
  for (int i = 0;; ++i) {
    absl::StatusOr<bool> done = step();
    if (!done.ok()) return done.status();
    if (*done) return PollEnd::kDone;
    if (abort != nullptr && abort->load(std::memory_order_relaxed)) return PollEnd::kAborted;
    const absl::Time now = absl::Now();
    if (now >= deadline) return PollEnd::kTimedOut;
    if (i < kSpins) {
      std::this_thread::yield();
      continue;
    }
    backoff = std::clamp(backoff * 2, kMinSleep, kMaxSleep);
    absl::SleepFor(std::min(backoff, deadline - now));
  }
}

absl::StatusCode CodeOf(ncclResult_t result) {
  switch (result) {
    case ncclSystemError:
    case ncclRemoteError:
      return absl::StatusCode::kUnavailable;
    case ncclInvalidArgument:
      return absl::StatusCode::kInvalidArgument;
    case ncclInvalidUsage:
      return absl::StatusCode::kFailedPrecondition;
    default:
      return absl::StatusCode::kInternal;
  }
}

}  // namespace

absl::StatusOr<std::string> NcclCommunicator::NewUniqueId() {
  ncclUniqueId id;
  const ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) {
    return absl::Status(CodeOf(r) == absl::StatusCode::kUnavailable ? absl::StatusCode::kUnavailable
                                                                    : absl::StatusCode::kInternal,
                        absl::StrFormat("ncclGetUniqueId failed: %s (%s)", ncclGetErrorString(r),
                                        ncclGetLastError(nullptr)));
  }
  return std::string(id.internal, sizeof(id.internal));
}

NcclCommunicator::NcclCommunicator(int nranks, int rank, int device_index, Options options)
    : nranks_(nranks), rank_(rank), device_index_(device_index), options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    const std::string& unique_id, int nranks, int rank, CudaDevice* device, Options options) {
  if (unique_id.size() != kUniqueIdBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "NCCL unique id has %d bytes, expected %d (pass NewUniqueId()'s bytes unchanged)",
        unique_id.size(), kUniqueIdBytes));
  }
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "NCCL rank %d of %d ranks: need nranks >= 1 and 0 <= rank < nranks", rank, nranks));
  }
  if (!options.rank_labels.empty() && options.rank_labels.size() != static_cast<size_t>(nranks)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("NCCL communicator of %d ranks got %d rank labels (need 0 or %d)", nranks,
                        options.rank_labels.size(), nranks));
  }
  if (device == nullptr) {
    return absl::InvalidArgumentError("NCCL communicator needs a CUDA device (got null)");
  }
  auto comm = std::unique_ptr<NcclCommunicator>(
      new NcclCommunicator(nranks, rank, device->index(), std::move(options)));
  DAPPLE_CUDA_RETURN_IF_ERROR(cudaSetDevice(device->index()));

  ncclUniqueId id;
  std::memcpy(id.internal, unique_id.data(), kUniqueIdBytes);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // init returns at once; readiness is polled below with our deadline
  const ncclResult_t r = ncclCommInitRankConfig(&comm->comm_, nranks, id, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    const absl::Status failed = comm->NcclFailure(r, "ncclCommInitRankConfig");
    comm->Abort(failed);
    return failed;
  }
  absl::Status ready = comm->AwaitReady("initialisation");
  if (!ready.ok()) return ready;
  return comm;
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ == nullptr) return;
  cudaSetDevice(device_index_);
  bool finalized = false;
  const ncclResult_t r = ncclCommFinalize(comm_);
  if (r == ncclSuccess || r == ncclInProgress) {
    absl::StatusOr<PollEnd> end = PollUntil(
        std::min(options_.timeout, kFinalizeGrace), options_.abort, [&]() -> absl::StatusOr<bool> {
          ncclResult_t state = ncclSuccess;
          if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) {
            return absl::InternalError("ncclCommGetAsyncError");
          }
          if (state == ncclInProgress) return false;
          if (state != ncclSuccess) return absl::InternalError("finalize");
          return true;
        });
    finalized = end.ok() && *end == PollEnd::kDone;
  }
  if (finalized) {
    ncclCommDestroy(comm_);
  } else {
    ncclCommAbort(comm_);
  }
  comm_ = nullptr;
}

std::string NcclCommunicator::RankName(int rank) const {
  if (rank >= 0 && static_cast<size_t>(rank) < options_.rank_labels.size() &&
      !options_.rank_labels[rank].empty()) {
    return absl::StrFormat("rank %d (%s)", rank, options_.rank_labels[rank]);
  }
  return absl::StrFormat("rank %d", rank);
}

std::string NcclCommunicator::Describe() const {
  std::vector<std::string> peers;
  for (int r = 0; r < nranks_; ++r) {
    if (r != rank_) peers.push_back(RankName(r));
  }
  return absl::StrFormat("NCCL communicator of %d ranks (this: %s; peers: %s)", nranks_,
                         RankName(rank_), peers.empty() ? "none" : absl::StrJoin(peers, ", "));
}

absl::Status NcclCommunicator::NcclFailure(ncclResult_t result, const std::string& what) const {
  return absl::Status(CodeOf(result),
                      absl::StrFormat("%s: %s failed: %s (%s)", Describe(), what,
                                      ncclGetErrorString(result), ncclGetLastError(comm_)));
}

absl::Status NcclCommunicator::Usable(const std::string& what) const {
  if (!failed_.ok()) return failed_;
  if (comm_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s: %s on a communicator that was aborted", Describe(), what));
  }
  return absl::OkStatus();
}

void NcclCommunicator::Abort(absl::Status why) {
  if (failed_.ok()) failed_ = std::move(why);
  if (comm_ == nullptr) return;
  cudaSetDevice(device_index_);
  ncclCommAbort(comm_);
  comm_ = nullptr;
}

absl::Status NcclCommunicator::AwaitReady(const std::string& what) {
  absl::StatusOr<PollEnd> end =
      PollUntil(options_.timeout, options_.abort, [&]() -> absl::StatusOr<bool> {
        ncclResult_t state = ncclSuccess;
        const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
        if (r != ncclSuccess) return NcclFailure(r, "ncclCommGetAsyncError");
        if (state == ncclInProgress) return false;
        if (state != ncclSuccess) return NcclFailure(state, what);
        return true;
      });
  absl::Status status;
  if (!end.ok()) {
    status = end.status();
  } else if (*end == PollEnd::kAborted) {
    status = absl::AbortedError(absl::StrFormat("%s: %s aborted", Describe(), what));
  } else if (*end == PollEnd::kTimedOut) {
    if (what == "initialisation") {
      // NCCL does not report which ranks have joined: name every other one.
      std::vector<std::string> others;
      for (int r = 0; r < nranks_; ++r) {
        if (r != rank_) others.push_back(RankName(r));
      }
      status = absl::DeadlineExceededError(absl::StrFormat(
          "NCCL communicator of %d ranks not ready after %s: still waiting for %s%s (this "
          "process is %s)",
          nranks_, absl::FormatDuration(options_.timeout), others.size() > 1 ? "any of " : "",
          absl::StrJoin(others, ", "), RankName(rank_)));
    } else {
      status = absl::DeadlineExceededError(absl::StrFormat(
          "%s: %s not done after %s", Describe(), what, absl::FormatDuration(options_.timeout)));
    }
  } else {
    return absl::OkStatus();
  }
  Abort(status);
  return status;
}

absl::Status NcclCommunicator::Enqueued(ncclResult_t result, const std::string& what) {
  if (result == ncclSuccess) return absl::OkStatus();
  // A non-blocking communicator may still be launching the work: wait until it is accepted.
  if (result == ncclInProgress) return AwaitReady(what);
  const absl::Status failed = NcclFailure(result, what);
  Abort(failed);
  return failed;
}

absl::Status NcclCommunicator::AllReduceSum(float* data, size_t count, cudaStream_t stream) {
  const std::string what = absl::StrFormat("ncclAllReduce of %d floats", count);
  DAPPLE_RETURN_IF_ERROR(Usable(what));
  if (count == 0) return absl::OkStatus();
  if (data == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: %s of a null buffer", Describe(), what));
  }
  DAPPLE_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_index_));
  return Enqueued(ncclAllReduce(data, data, count, ncclFloat32, ncclSum, comm_, stream), what);
}

absl::Status NcclCommunicator::Send(const void* data, size_t bytes, int peer, cudaStream_t stream) {
  const std::string what = absl::StrFormat("ncclSend of %d bytes to %s", bytes, RankName(peer));
  DAPPLE_RETURN_IF_ERROR(Usable(what));
  if (peer < 0 || peer >= nranks_ || (bytes > 0 && data == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %s: need a peer in [0, %d) and a buffer", Describe(), what, nranks_));
  }
  if (bytes == 0) return absl::OkStatus();
  DAPPLE_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_index_));
  return Enqueued(ncclSend(data, bytes, ncclUint8, peer, comm_, stream), what);
}

absl::Status NcclCommunicator::Recv(void* data, size_t bytes, int peer, cudaStream_t stream) {
  const std::string what = absl::StrFormat("ncclRecv of %d bytes from %s", bytes, RankName(peer));
  DAPPLE_RETURN_IF_ERROR(Usable(what));
  if (peer < 0 || peer >= nranks_ || (bytes > 0 && data == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %s: need a peer in [0, %d) and a buffer", Describe(), what, nranks_));
  }
  if (bytes == 0) return absl::OkStatus();
  DAPPLE_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_index_));
  return Enqueued(ncclRecv(data, bytes, ncclUint8, peer, comm_, stream), what);
}

absl::Status NcclCommunicator::SendRecv(const void* send_data, int send_peer, void* recv_data,
                                        int recv_peer, size_t bytes, cudaStream_t stream) {
  const std::string what =
      absl::StrFormat("grouped ncclSend to %s and ncclRecv from %s of %d bytes",
                      RankName(send_peer), RankName(recv_peer), bytes);
  DAPPLE_RETURN_IF_ERROR(Usable(what));
  if (send_peer < 0 || send_peer >= nranks_ || recv_peer < 0 || recv_peer >= nranks_ ||
      (bytes > 0 && (send_data == nullptr || recv_data == nullptr))) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %s: need peers in [0, %d) and buffers", Describe(), what, nranks_));
  }
  if (bytes == 0) return absl::OkStatus();
  DAPPLE_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_index_));
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) return Enqueued(r, what);
  const ncclResult_t sent = ncclSend(send_data, bytes, ncclUint8, send_peer, comm_, stream);
  const ncclResult_t received = ncclRecv(recv_data, bytes, ncclUint8, recv_peer, comm_, stream);
  r = ncclGroupEnd();  // always closes the group, even after a failed call inside it
  if (sent != ncclSuccess && sent != ncclInProgress) return Enqueued(sent, what);
  if (received != ncclSuccess && received != ncclInProgress) return Enqueued(received, what);
  return Enqueued(r, what);
}

absl::Status NcclCommunicator::Wait(cudaStream_t stream) {
  DAPPLE_RETURN_IF_ERROR(Usable("wait"));
  DAPPLE_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_index_));
  absl::StatusOr<PollEnd> end =
      PollUntil(options_.timeout, options_.abort, [&]() -> absl::StatusOr<bool> {
        const cudaError_t q = cudaStreamQuery(stream);
        if (q == cudaSuccess) return true;
        if (q != cudaErrorNotReady) {
          return CudaStatus(q, absl::StrCat(Describe(), ": cudaStreamQuery while waiting"));
        }
        ncclResult_t state = ncclSuccess;
        const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
        if (r != ncclSuccess) return NcclFailure(r, "ncclCommGetAsyncError");
        if (state != ncclSuccess && state != ncclInProgress) {
          return NcclFailure(state, "an operation in flight");
        }
        return false;
      });
  absl::Status status;
  if (!end.ok()) {
    status = end.status();
  } else if (*end == PollEnd::kAborted) {
    status = absl::AbortedError(absl::StrFormat("%s: wait for the stream aborted", Describe()));
  } else if (*end == PollEnd::kTimedOut) {
    status = absl::DeadlineExceededError(
        absl::StrFormat("%s: stream work not done after %s (a peer is stuck, dead or never posted "
                        "the matching operation)",
                        Describe(), absl::FormatDuration(options_.timeout)));
  } else {
    return absl::OkStatus();
  }
  Abort(status);
  return status;
}

absl::Status NcclCommunicator::Check() {
  DAPPLE_RETURN_IF_ERROR(Usable("check"));
  ncclResult_t state = ncclSuccess;
  ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
  if (r == ncclSuccess && (state == ncclSuccess || state == ncclInProgress)) {
    return absl::OkStatus();
  }
  const absl::Status failed =
      r != ncclSuccess ? NcclFailure(r, "ncclCommGetAsyncError") : NcclFailure(state, "check");
  Abort(failed);
  return failed;
}

}  // namespace dapple::worker
