// Transport on UCX's tag API (UCP). Ranks exchange worker addresses out of band (through the
// coordinator's rendezvous), then Connect() to each neighbour. UCX_TLS defaults to "tcp" when
// the environment does not set it, so a dead peer is detected (UCP_ERR_HANDLING_MODE_PEER), and
// UCX_RNDV_THRESH to "inf" (eager sends of every size: a rendezvous transfer would wait for the
// sender's next UCX call, that is for the end of its current compute), and tcp's segment sizes
// (UCX_TCP_TX_SEG_SIZE, UCX_TCP_RX_SEG_SIZE) to 128 KB instead of 8 KB and 64 KB (fewer system
// calls and copies per message). An explicit environment variable wins over each default.
// UCX_NET_DEVICES is left to UCX (all interfaces), so ranks on different hosts can connect.
//
// Wire tag: (sender rank << 48) | (tag & 0xFFFFFFFFFFFF), matched exactly on receive, so
// messages of different peers or tags never mix. Ranks are therefore limited to [0, 65535].
//
// Blocking calls progress the worker, spin briefly when idle, then sleep on the worker's event
// fd (at most 20 ms at a time), so an idle Recv costs almost no CPU and the abort flag and the
// deadline are noticed within about 20 ms.
//
// Errors (on top of transport.h's rules):
//  - Send/Recv to a rank without Connect(): kFailedPrecondition (does not fail the transport).
//  - Recv whose message size differs from `bytes`: kInternal naming tag and both sizes.
//  - A dead peer: kUnavailable "peer rank N (LABEL) failed: <what happened>", worded by
//    DescribePeerFailure: "connection lost (the process exited or the network failed) (UCX:
//    Endpoint timeout)". On tcp a killed process is noticed within milliseconds (its sockets
//    close); UCX then says "Endpoint timeout" although nothing timed out, so its reason is kept
//    only in parentheses. Messages that arrived in full before the peer died are still delivered
//    by Recv.
//  - Any error from Send/Recv/WaitSends is sticky and force-closes all endpoints before the
//    call returns, so UCX no longer touches any buffer handed to Send or Recv; the peers then
//    see this rank as failed.
// Not thread-safe (transport.h): one thread uses the object, including destruction.
#ifndef DAPPLE_WORKER_COMM_UCX_TRANSPORT_H_
#define DAPPLE_WORKER_COMM_UCX_TRANSPORT_H_

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/comm/transport.h"

namespace dapple::worker {

// What a peer failure with UCX status `status` (a ucs_status_t) means, for messages:
// connection-level statuses (Endpoint timeout, Connection reset, Destination is unreachable,
// Input/output error, ...) read "connection lost (the process exited or the network failed)
// (UCX: <UCX's reason>)"; any other status reads "UCX error (<UCX's reason>)". Thread-safe.
std::string DescribePeerFailure(int status);

class UcxTransport : public Transport {
 public:
  // kUnavailable when UCX cannot be initialised (message carries UCX's own); kInvalidArgument
  // for a rank outside [0, 65535].
  static absl::StatusOr<std::unique_ptr<UcxTransport>> Create(int my_rank, Options options);
  ~UcxTransport() override;  // closes endpoints (forcefully: never waits on a dead peer)

  // This rank's UCP worker address: opaque bytes to publish to peers.
  const std::string& LocalAddress() const;
  // Creates the endpoint to `peer` from its published address. kInvalidArgument for a bad
  // address (too short, another UCX address format, or rejected by UCX), for `peer` equal to
  // this rank or outside [0, 65535]; kFailedPrecondition when `peer` is already connected;
  // kUnavailable when UCX refuses it otherwise. Does not wait for the peer. UCX trusts the bytes
  // past the header: pass only what a peer's LocalAddress() returned.
  // `label` (optional) names the peer in error messages, e.g. "stage 1, worker w-2".
  absl::Status Connect(int peer, const std::string& address, const std::string& label = "");

  absl::Status Send(int peer, uint64_t tag, const void* data, size_t bytes) override;
  absl::Status Recv(int peer, uint64_t tag, void* data, size_t bytes) override;
  absl::Status WaitSends() override;
  bool WaitsForOneSend() const override { return true; }
  absl::Status WaitSend(int peer, uint64_t tag) override;

 private:
  struct Impl;
  explicit UcxTransport(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_COMM_UCX_TRANSPORT_H_
