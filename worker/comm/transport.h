// Point-to-point transport between the ranks of one job (activations and gradients).
//
// Blocking rules:
//  - Send posts the message and returns without waiting for the receiver; `data` must stay
//    valid and unchanged until WaitSends() returns, or until WaitSend() of that message
//    returns where the transport can wait for one send (WaitsForOneSend).
//  - Recv blocks until the message with (peer, tag) has arrived in full.
//  - Every blocking call returns early with kAborted when the abort flag (Options) becomes
//    true, with kDeadlineExceeded after Options::timeout, and with kUnavailable naming the
//    peer when the peer's connection fails (process died). A failing transport is not waited
//    on again: after an error every call returns that error.
// Thread safety: one thread uses a Transport (the rank's interpreter thread).
#ifndef DAPPLE_WORKER_COMM_TRANSPORT_H_
#define DAPPLE_WORKER_COMM_TRANSPORT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace dapple::worker {

class Transport {
 public:
  struct Options {
    absl::Duration timeout = absl::Seconds(120);  // longest wait of one blocking call
    const std::atomic<bool>* abort = nullptr;     // polled while blocking; may be null
  };

  virtual ~Transport() = default;
  // `tag` uses the low 48 bits only; the transport adds the sender's rank.
  virtual absl::Status Send(int peer, uint64_t tag, const void* data, size_t bytes) = 0;
  // `bytes` must equal the size sent; a mismatch is kInternal.
  virtual absl::Status Recv(int peer, uint64_t tag, void* data, size_t bytes) = 0;
  virtual absl::Status WaitSends() = 0;

  // Whether WaitSend works: a transport that can wait for one message's send without waiting
  // for the others. Those that cannot (their sends complete in order: NCCL's stream, CUDA IPC's
  // acknowledgements) say false; their callers keep every buffer until WaitSends.
  virtual bool WaitsForOneSend() const { return false; }
  // Blocks until the send of (peer, tag) posted since the last WaitSends is done, so that its
  // `data` may change, whatever other sends are still out (a program without a flush keeps sends
  // out that the peer receives only later: waiting for them all there would deadlock). OK at
  // once when no such send is pending. kUnimplemented when !WaitsForOneSend(); other errors as
  // WaitSends'.
  virtual absl::Status WaitSend(int peer, uint64_t tag) {
    (void)peer;
    (void)tag;
    return absl::UnimplementedError("this transport waits for all sends at once only");
  }
};

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_COMM_TRANSPORT_H_
