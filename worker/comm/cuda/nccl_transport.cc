#include "worker/comm/cuda/nccl_transport.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"
#include "kernels/cuda/cuda_status.h"

namespace dapple::worker {
namespace {

using kernels::cuda::CudaStatus;

// Keeps the code of `s` and puts `context` in front of its message.
absl::Status WithContext(const absl::Status& s, const std::string& context) {
  return absl::Status(s.code(), absl::StrCat(context, ": ", s.message()));
}

}  // namespace

struct NcclTransport::Peer {
  int rank = -1;
  std::string label;
  int nccl_peer = 0;  // the neighbour's rank inside both 2-rank communicators
  cudaStream_t send_stream = nullptr;
  cudaStream_t recv_stream = nullptr;
  std::unique_ptr<NcclCommunicator> send_comm;
  std::unique_ptr<NcclCommunicator> recv_comm;
  int pending_sends = 0;  // enqueued since the last WaitSends

  ~Peer() {
    // Communicators first: finalising them waits for their work on these streams.
    send_comm.reset();
    recv_comm.reset();
    if (send_stream != nullptr) cudaStreamDestroy(send_stream);
    if (recv_stream != nullptr) cudaStreamDestroy(recv_stream);
  }
};

absl::StatusOr<std::unique_ptr<NcclTransport>> NcclTransport::Create(int my_rank,
                                                                     CudaDevice* device,
                                                                     Options options,
                                                                     std::string my_label) {
  if (my_rank < 0 || device == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrFormat("NcclTransport needs a rank >= 0 (got %d) and a CUDA device", my_rank));
  }
  return std::unique_ptr<NcclTransport>(
      new NcclTransport(my_rank, device, options, std::move(my_label)));
}

NcclTransport::NcclTransport(int my_rank, CudaDevice* device, Options options, std::string my_label)
    : my_rank_(my_rank), device_(device), options_(options), my_label_(std::move(my_label)) {}

NcclTransport::~NcclTransport() {
  if (!peers_.empty()) cudaSetDevice(device_->index());
  peers_.clear();
}

std::string NcclTransport::PeerName(int peer) const {
  auto it = peers_.find(peer);
  if (it != peers_.end() && !it->second->label.empty()) {
    return absl::StrFormat("peer rank %d (%s)", peer, it->second->label);
  }
  return absl::StrFormat("peer rank %d", peer);
}

absl::Status NcclTransport::Fail(absl::Status status) {
  failed_ = status;
  for (auto& [rank, p] : peers_) {
    if (p->send_comm != nullptr) p->send_comm->Abort(status);
    if (p->recv_comm != nullptr) p->recv_comm->Abort(status);
  }
  return status;
}

absl::StatusOr<NcclTransport::Peer*> NcclTransport::ConnectedPeer(int peer, const char* what) {
  auto it = peers_.find(peer);
  if (it == peers_.end()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "rank %d cannot %s peer rank %d: no NCCL communicators with it (call Connect first)",
        my_rank_, what, peer));
  }
  return it->second.get();
}

absl::Status NcclTransport::Connect(int peer, const std::string& low_to_high_id,
                                    const std::string& high_to_low_id, const std::string& label) {
  if (!failed_.ok()) return failed_;
  if (peer < 0 || peer == my_rank_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rank %d cannot connect to peer rank %d: peers are other ranks >= 0", my_rank_, peer));
  }
  if (peers_.count(peer) != 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("rank %d is already connected to peer rank %d", my_rank_, peer));
  }
  if (low_to_high_id.size() != NcclCommunicator::kUniqueIdBytes ||
      high_to_low_id.size() != NcclCommunicator::kUniqueIdBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "NCCL ids for peer rank %d have %d and %d bytes, expected %d each", peer,
        low_to_high_id.size(), high_to_low_id.size(), NcclCommunicator::kUniqueIdBytes));
  }
  DAPPLE_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_->index()));
  auto p = std::make_unique<Peer>();
  p->rank = peer;
  p->label = label;
  const bool low = my_rank_ < peer;
  const int my_nccl = low ? 0 : 1;
  p->nccl_peer = 1 - my_nccl;
  DAPPLE_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&p->send_stream, cudaStreamNonBlocking));
  DAPPLE_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&p->recv_stream, cudaStreamNonBlocking));

  NcclCommunicator::Options o;
  o.timeout = options_.timeout;
  o.abort = options_.abort;
  o.rank_labels.resize(2);
  o.rank_labels[my_nccl] = my_label_.empty()
                               ? absl::StrFormat("transport rank %d", my_rank_)
                               : absl::StrFormat("transport rank %d, %s", my_rank_, my_label_);
  o.rank_labels[p->nccl_peer] = label.empty()
                                    ? absl::StrFormat("transport rank %d", peer)
                                    : absl::StrFormat("transport rank %d, %s", peer, label);
  // Both sides create the low-to-high communicator first: NCCL init blocks until both joined.
  std::unique_ptr<NcclCommunicator> comms[2];
  const char* names[2] = {"low-to-high", "high-to-low"};
  const std::string* ids[2] = {&low_to_high_id, &high_to_low_id};
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<std::unique_ptr<NcclCommunicator>> c =
        NcclCommunicator::Create(*ids[i], 2, my_nccl, device_, o);
    if (!c.ok()) {
      const std::string who = label.empty() ? absl::StrFormat("peer rank %d", peer)
                                            : absl::StrFormat("peer rank %d (%s)", peer, label);
      const absl::Status failed = WithContext(
          c.status(),
          absl::StrFormat("rank %d: connecting to %s (%s communicator)", my_rank_, who, names[i]));
      // The communicator made already would otherwise try to finalise with a peer that failed.
      if (comms[0] != nullptr) comms[0]->Abort(failed);
      return Fail(failed);
    }
    comms[i] = std::move(*c);
  }
  p->send_comm = std::move(comms[low ? 0 : 1]);
  p->recv_comm = std::move(comms[low ? 1 : 0]);
  peers_.emplace(peer, std::move(p));
  return absl::OkStatus();
}

absl::Status NcclTransport::Send(int peer, uint64_t tag, const void* data, size_t bytes) {
  if (!failed_.ok()) return failed_;
  DAPPLE_ASSIGN_OR_RETURN(Peer * p, ConnectedPeer(peer, "send to"));
  if (bytes == 0) return absl::OkStatus();
  const std::string what = absl::StrFormat("rank %d: send of tag %d (%d bytes) to %s", my_rank_,
                                           tag, bytes, PeerName(peer));
  if (absl::Status s = device_->StreamWait(p->send_stream, device_->compute_stream()); !s.ok()) {
    return Fail(WithContext(s, what));
  }
  if (absl::Status s = p->send_comm->Send(data, bytes, p->nccl_peer, p->send_stream); !s.ok()) {
    return Fail(WithContext(s, what));
  }
  ++p->pending_sends;
  return absl::OkStatus();
}

absl::Status NcclTransport::Recv(int peer, uint64_t tag, void* data, size_t bytes) {
  if (!failed_.ok()) return failed_;
  DAPPLE_ASSIGN_OR_RETURN(Peer * p, ConnectedPeer(peer, "receive from"));
  if (bytes == 0) return absl::OkStatus();
  const std::string what = absl::StrFormat("rank %d: recv of tag %d (%d bytes) from %s", my_rank_,
                                           tag, bytes, PeerName(peer));
  if (absl::Status s = device_->StreamWait(p->recv_stream, device_->compute_stream()); !s.ok()) {
    return Fail(WithContext(s, what));
  }
  if (absl::Status s = p->recv_comm->Recv(data, bytes, p->nccl_peer, p->recv_stream); !s.ok()) {
    return Fail(WithContext(s, what));
  }
  // Waiting here (rather than making the compute stream wait on an event) is what lets the abort
  // flag, the deadline and peer failures end a receive that would otherwise never complete.
  if (absl::Status s = p->recv_comm->Wait(p->recv_stream); !s.ok()) {
    return Fail(WithContext(s, what));
  }
  return absl::OkStatus();
}

absl::Status NcclTransport::WaitSends() {
  if (!failed_.ok()) return failed_;
  for (auto& [rank, p] : peers_) {
    if (p->pending_sends == 0) continue;
    if (absl::Status s = p->send_comm->Wait(p->send_stream); !s.ok()) {
      return Fail(WithContext(s, absl::StrFormat("rank %d: waiting for %d sends to %s", my_rank_,
                                                 p->pending_sends, PeerName(rank))));
    }
    p->pending_sends = 0;
  }
  return absl::OkStatus();
}

}  // namespace dapple::worker
