// One NCCL communicator (ncclComm_t) that never hangs its caller: created non-blocking
// (ncclConfig_t::blocking = 0) and every wait polls completion, NCCL's asynchronous error, an
// abort flag and a deadline. On an error, the abort flag or a timeout the communicator is
// aborted at once (ncclCommAbort: NCCL kernels still on a stream quit, the peers see this rank
// fail) and the error is sticky: every later call returns it. ncclCommAbort frees device memory,
// which waits for work already running on the device (NCCL's own kernels quit at once when
// aborted), so an abort returns only after such work ends.
//
// Unique ids: one rank calls NewUniqueId() and hands the 128 bytes to all ranks through the
// coordinator's rendezvous; each rank then calls Create with the same id, nranks and its own rank.
// NCCL cannot put two ranks of one communicator on the same GPU (it fails or hangs): each rank
// uses its own device. The process that called NewUniqueId serves the id's bootstrap, so it must
// stay alive until every rank has created its communicator.
//
// Streams: AllReduceSum/Send/Recv/SendRecv only enqueue work on the given stream and return
// (after NCCL accepted it); ordering with other streams is the caller's (CudaDevice::StreamWait).
// Wait(stream) blocks until everything enqueued on that stream so far has executed.
//
// Status codes: kInvalidArgument for bad arguments (id size, ranks, labels, null pointers);
// kAborted when the abort flag became true; kDeadlineExceeded after Options::timeout (one call's
// longest wait); kUnavailable when NCCL reports a system or remote error (a peer died or its
// connection broke); kFailedPrecondition for NCCL's "invalid usage"; kInternal for other NCCL or
// CUDA failures. Messages are one line naming the operation and the communicator's ranks with
// their labels ("NCCL communicator of 2 ranks (this: rank 0 = stage 0, worker w-1; peers: rank 1
// = stage 1, worker w-2)").
// Thread safety: one thread uses a communicator (and the CUDA device it was created on).
#ifndef DAPPLE_WORKER_COMM_CUDA_NCCL_COMMUNICATOR_H_
#define DAPPLE_WORKER_COMM_CUDA_NCCL_COMMUNICATOR_H_

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/device/cuda_device.h"

namespace dapple::worker {

class NcclCommunicator {
 public:
  static constexpr size_t kUniqueIdBytes = NCCL_UNIQUE_ID_BYTES;  // 128

  struct Options {
    absl::Duration timeout = absl::Seconds(120);  // longest wait of one blocking call
    const std::atomic<bool>* abort = nullptr;     // polled while waiting; may be null
    // Names per rank for messages, e.g. "stage 1, worker w-2"; empty (ranks are named by number
    // only) or exactly nranks entries.
    std::vector<std::string> rank_labels;
  };

  // ncclGetUniqueId: kUniqueIdBytes opaque bytes. kInternal (kUnavailable for a system error,
  // e.g. no usable network interface for the bootstrap) naming NCCL's reason.
  static absl::StatusOr<std::string> NewUniqueId();

  // Joins communicator `unique_id` as `rank` of `nranks` on `device` (not owned; must outlive
  // the communicator). Blocks until every rank has joined; kDeadlineExceeded after
  // options.timeout ("NCCL communicator of 2 ranks not ready after 30s: still waiting for rank 1
  // (stage 1, worker w-2) ..."; NCCL does not say who is missing, so every other rank is listed),
  // kAborted when the abort flag becomes true; both abort the half-made communicator first.
  // kInvalidArgument for an id that is not kUniqueIdBytes long, nranks < 1, rank outside
  // [0, nranks), a label count other than 0 or nranks, or a null device.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(const std::string& unique_id,
                                                                  int nranks, int rank,
                                                                  CudaDevice* device,
                                                                  Options options);
  // A healthy communicator is finalised (waiting at most min(timeout, 10 s) for its operations)
  // and destroyed; a failed one was already aborted, one that does not finalise is aborted.
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int nranks() const { return nranks_; }
  int rank() const { return rank_; }
  // "rank 1 (stage 1, worker w-2)" or "rank 1" without a label.
  std::string RankName(int rank) const;
  // "NCCL communicator of N ranks (this: ...; peers: ...)", for messages.
  std::string Describe() const;

  // In-place sum of `count` floats at device pointer `data` over all ranks (ncclAllReduce,
  // ncclFloat32, ncclSum), enqueued on `stream`. Every rank must call it with the same count, in
  // the same order relative to this communicator's other operations.
  absl::Status AllReduceSum(float* data, size_t count, cudaStream_t stream);
  // Point-to-point (ncclSend / ncclRecv of `bytes` as ncclUint8) with rank `peer`, enqueued on
  // `stream`. NCCL has no tags: sends and receives between two ranks match in the order they are
  // posted, and `bytes` must be equal on both sides. A send may not complete before the peer
  // posts its receive, so a rank must not wait for a send whose receive the peer posts only after
  // hearing from this rank. Zero bytes is a no-op on both sides.
  absl::Status Send(const void* data, size_t bytes, int peer, cudaStream_t stream);
  absl::Status Recv(void* data, size_t bytes, int peer, cudaStream_t stream);
  // A send to `send_peer` and a receive from `recv_peer` in one NCCL group, so they progress
  // together (needed for exchanges, and for a rank sending to itself).
  absl::Status SendRecv(const void* send_data, int send_peer, void* recv_data, int recv_peer,
                        size_t bytes, cudaStream_t stream);

  // Blocks until all work enqueued on `stream` so far has executed, polling the stream
  // (cudaStreamQuery), this communicator's asynchronous error, the abort flag and the deadline.
  // Errors and timeouts abort the communicator (codes above).
  absl::Status Wait(cudaStream_t stream);
  // Non-blocking health check: NCCL's asynchronous error (aborting on one), or the sticky error.
  absl::Status Check();
  // Aborts now (idempotent); `why` becomes the sticky error returned by every later call.
  void Abort(absl::Status why);
  // OK, or the sticky error.
  const absl::Status& status() const { return failed_; }

 private:
  NcclCommunicator(int nranks, int rank, int device_index, Options options);
  // Polls until NCCL is done with the last call (no longer ncclInProgress).
  absl::Status AwaitReady(const std::string& what);
  // Turns the result of an enqueueing call into a Status, waiting out ncclInProgress.
  absl::Status Enqueued(ncclResult_t result, const std::string& what);
  absl::Status NcclFailure(ncclResult_t result, const std::string& what) const;
  absl::Status Usable(const std::string& what) const;

  int nranks_;
  int rank_;
  int device_index_;
  Options options_;
  ncclComm_t comm_ = nullptr;  // null after Abort
  absl::Status failed_;        // sticky
};

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_COMM_CUDA_NCCL_COMMUNICATOR_H_
