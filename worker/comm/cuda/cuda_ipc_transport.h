// A Transport between processes that use the SAME GPU (two stages placed on one device): payloads
// move device to device through CUDA IPC (cudaIpcGetMemHandle / cudaIpcOpenMemHandle) and never
// touch host memory; small control messages (headers and acks) travel over a host Transport
// between the same ranks (for example UcxTransport).
//
// Protocol (per ordered pair of ranks):
//  - The sender owns "outbox slots": device buffers it cudaMalloc'd itself. Send copies the
//    payload into a free slot that is large enough on the compute stream, waits for that copy
//    (the host blocks until all compute-stream work so far is done), then sends a header
//    {slot, slot size, IPC handle, sequence number, bytes} over the host transport with the
//    caller's tag. The caller's buffer is free for reuse as soon as Send returns.
//  - Recv(peer, tag) receives the header with that tag, opens the slot's handle (once per slot;
//    mappings are cached), copies slot -> destination on the compute stream, waits for that copy
//    (so Recv returns with the data in place and the slot no longer read), then sends an ack
//    tagged (kAckKind << 44) | (sequence & (2^44 - 1)).
//  - WaitSends receives the ack of every message sent since the last WaitSends (in any order:
//    tags are exact), then waits for the host transport's own sends; the slots are free again.
// Send never waits for an ack: when no slot is free it allocates another (smallest fit first,
// sizes rounded up to 64 KiB). Waiting there could deadlock, because both neighbours send before
// they receive (1F1B warm-up and steady state), exactly as with UcxTransport. So each rank keeps as
// many slots per peer as it sends messages between two WaitSends (the runtime: at most M per step
// and direction), reused every step, and the device memory of the slots is never given back
// before destruction (a slot is never freed while a receiver may have it mapped).
// The ack makes WaitSends depend on the receiver having called Recv for each message, which is
// what a rendezvous send over UcxTransport already requires.
//
// Tags: headers carry the caller's tag unchanged (the runtime's tags put their kind, 1-6, in the
// top 4 of the 48 bits); acks use kind kAckKind = 15. A caller tag of kind 15 is kInvalidArgument.
// Do not send other traffic with kind-15 tags over the same host transport between these ranks.
//
// Errors: blocking happens only in the host transport, so its rules apply (transport.h: kAborted
// on the abort flag, kDeadlineExceeded after its timeout, kUnavailable naming the peer when the
// peer dies); a size mismatch is kInternal naming tag, peer and both sizes; CUDA failures are
// kInternal (kResourceExhausted when cudaMalloc fails) naming the call. The first error is sticky
// (except kInvalidArgument for a bad tag, which fails only that call).
// Ownership: `host` and `device` are not owned and must outlive this object. Destruction closes
// the mappings it opened and frees its slots; a peer may then no longer read them, so destroy
// after WaitSends or after the job failed.
// Requirements: all ranks on the same device of the same machine, in different processes
// (CUDA refuses to open a handle in the process that created it).
// Thread safety: one thread uses the object (transport.h), the same thread that uses `device`.
#ifndef DAPPLE_WORKER_COMM_CUDA_CUDA_IPC_TRANSPORT_H_
#define DAPPLE_WORKER_COMM_CUDA_CUDA_IPC_TRANSPORT_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/comm/transport.h"
#include "worker/device/cuda_device.h"

namespace dapple::worker {

class CudaIpcTransport : public Transport {
 public:
  static constexpr uint64_t kAckKind = 15;  // top 4 of the 48 tag bits

  CudaIpcTransport(Transport* host, CudaDevice* device);
  ~CudaIpcTransport() override;
  CudaIpcTransport(const CudaIpcTransport&) = delete;
  CudaIpcTransport& operator=(const CudaIpcTransport&) = delete;

  // `data` is device memory on `device` (may be null when bytes == 0).
  absl::Status Send(int peer, uint64_t tag, const void* data, size_t bytes) override;
  absl::Status Recv(int peer, uint64_t tag, void* data, size_t bytes) override;
  absl::Status WaitSends() override;

  // Device memory held in outbox slots for `peer` (bytes) and their count, for tests and metrics.
  size_t outbox_bytes(int peer) const;
  int outbox_slots(int peer) const;

  // Wire format (both processes run the same build). Public for tests only.
  struct Header {
    uint32_t magic;
    uint32_t slot;      // index in the sender's outbox for this receiver
    uint64_t sequence;  // per sender and receiver, from 0
    uint64_t bytes;     // payload size
    uint64_t capacity;  // slot size
    cudaIpcMemHandle_t handle;
  };
  struct Ack {
    uint32_t magic;
    uint32_t slot;
    uint64_t sequence;
  };

 private:
  struct Slot {
    void* ptr = nullptr;
    size_t capacity = 0;
    cudaIpcMemHandle_t handle{};
    bool busy = false;
  };
  struct Mapping {  // a peer's slot opened in this process
    void* ptr = nullptr;
    size_t capacity = 0;
    cudaIpcMemHandle_t handle{};
  };
  struct Outstanding {
    int peer;
    uint64_t tag;
    uint64_t sequence;
    uint32_t slot;
  };

  absl::StatusOr<uint32_t> AcquireSlot(int peer, size_t bytes);
  absl::StatusOr<void*> OpenSlot(int peer, const Header& header);
  absl::Status Fail(absl::Status status);

  Transport* host_;
  CudaDevice* device_;
  std::map<int, std::vector<Slot>> outbox_;               // receiver -> slots
  std::map<std::pair<int, uint32_t>, Mapping> mappings_;  // (sender, slot) -> mapping
  std::map<int, uint64_t> next_sequence_;                 // receiver -> next sequence number
  std::vector<Outstanding> outstanding_;                  // sent, not acked yet
  // Handed to host_->Send, which needs them until host_->WaitSends (deque: stable addresses).
  std::deque<Header> headers_;
  std::deque<Ack> acks_;
  absl::Status failed_;  // sticky: the first error returned
};

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_COMM_CUDA_CUDA_IPC_TRANSPORT_H_
