// A Transport between stages on different GPUs over NCCL point-to-point (ncclSend / ncclRecv).
// Payload pointers are device memory of this rank's CudaDevice.
//
// NCCL has no tags: between two ranks, sends and receives match in the order they are posted.
// So every neighbour pair gets TWO 2-rank communicators, one per direction ("low to high" carries
// messages from the lower transport rank to the higher one, e.g. activations; "high to low" the
// others, e.g. gradients), each driven on its own CUDA stream of this transport. The messages
// of one direction then match by position and never wait behind the other direction's, which is
// what makes the 1F1B exchange (both neighbours send before they receive) deadlock-free.
// REQUIREMENT (not checked at run time): for each ordered pair of ranks, the receiver calls Recv
// for the messages in the order the sender called Send, with the same sizes; the schedule's
// lowering pass guarantees it (each side posts a direction's messages in micro-batch order).
// Tags are therefore only used in error messages.
//
// Send(peer, tag, data, bytes): the peer's send stream waits for the compute stream (data is
// usually produced there; CudaDevice::StreamWait), then ncclSend is enqueued; returns without
// waiting. `data` must stay valid and unchanged until WaitSends() returns.
// Recv(peer, tag, data, bytes): the peer's receive stream waits for the compute stream (earlier
// compute work may still use `data`), ncclRecv is enqueued, and Recv blocks until it has
// executed (transport.h: Recv returns with the message in place), so the host also waits for the
// compute work enqueued before the Recv. Later compute-stream work sees the data.
// WaitSends(): blocks until every send so far has executed.
// Zero-byte messages are skipped on both sides (they carry nothing and need no matching).
//
// Errors (transport.h): kAborted on the abort flag, kDeadlineExceeded after Options::timeout,
// kUnavailable naming the peer when NCCL reports its failure; a peer that is merely stuck (NCCL
// does not always notice a dead peer on the same node) ends in kDeadlineExceeded naming it.
// Send/Recv to a peer without Connect is kFailedPrecondition and does not fail the transport.
// Any other error is sticky and aborts every communicator of the transport first (so no NCCL
// kernel keeps waiting on a stream, and the peers see this rank fail).
// Thread safety: one thread uses the transport and its CudaDevice (transport.h).
#ifndef DAPPLE_WORKER_COMM_CUDA_NCCL_TRANSPORT_H_
#define DAPPLE_WORKER_COMM_CUDA_NCCL_TRANSPORT_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/comm/cuda/nccl_communicator.h"
#include "worker/comm/transport.h"
#include "worker/device/cuda_device.h"

namespace dapple::worker {

class NcclTransport : public Transport {
 public:
  // `device` is not owned and must outlive the transport. `my_label` names this rank in
  // messages (e.g. "stage 0, worker w-1"). kInvalidArgument for a negative rank or null device.
  static absl::StatusOr<std::unique_ptr<NcclTransport>> Create(int my_rank, CudaDevice* device,
                                                               Options options,
                                                               std::string my_label = "");
  // Destroys the communicators (finalising healthy ones: NcclCommunicator's destructor) and the
  // transport's streams.
  ~NcclTransport() override;

  // Joins the two communicators shared with neighbour `peer`. The lower rank of the pair creates
  // both ids (NcclCommunicator::NewUniqueId) and both sides receive them through the rendezvous;
  // the lower rank is NCCL rank 0 in both. Blocks until `peer` has joined both (it must call
  // Connect with the same ids), at most Options::timeout each: kDeadlineExceeded naming the peer
  // and its `label` otherwise, kAborted on the abort flag. Every rank must connect its peers in
  // ascending rank order, so that no two ranks wait for each other in a cycle.
  // kInvalidArgument for `peer` equal to this rank or negative, or a malformed id;
  // kFailedPrecondition when `peer` is already connected.
  absl::Status Connect(int peer, const std::string& low_to_high_id,
                       const std::string& high_to_low_id, const std::string& label = "");

  absl::Status Send(int peer, uint64_t tag, const void* data, size_t bytes) override;
  absl::Status Recv(int peer, uint64_t tag, void* data, size_t bytes) override;
  absl::Status WaitSends() override;

 private:
  struct Peer;
  NcclTransport(int my_rank, CudaDevice* device, Options options, std::string my_label);
  absl::StatusOr<Peer*> ConnectedPeer(int peer, const char* what);
  std::string PeerName(int peer) const;
  absl::Status Fail(absl::Status status);

  int my_rank_;
  CudaDevice* device_;
  Options options_;
  std::string my_label_;
  std::map<int, std::unique_ptr<Peer>> peers_;
  absl::Status failed_;  // sticky
};

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_COMM_CUDA_NCCL_TRANSPORT_H_
