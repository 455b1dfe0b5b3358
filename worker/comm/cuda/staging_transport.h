// A Transport for a GPU stage whose neighbour is on another host or on the CPU: payloads are
// device memory on this side and travel through pinned host memory over a host Transport (for
// example UcxTransport; UCX here has no CUDA support, so it must never see a device pointer).
//
// Send(peer, tag, device_ptr, bytes):
//   copies device -> pinned host on the device's compute stream, waits for that copy (so the
//   host blocks until all work enqueued on the compute stream so far is done: the data is
//   usually produced there), then posts host->Send from the pinned buffer and returns. The
//   caller's device buffer is free for reuse as soon as Send returns; the pinned buffer stays
//   with the host transport until WaitSends() returns.
// Recv(peer, tag, device_ptr, bytes):
//   blocks in host->Recv into a pinned buffer, then ENQUEUES the host -> device copy on the
//   compute stream and returns without waiting for it: the data is ready for every later piece
//   of compute-stream work (stream order); a reader on another stream or on the host must
//   synchronise with the compute stream first. The copy is ordered after all compute-stream work
//   enqueued before Recv, so the destination may still be in use by that work.
// WaitSends(): host->WaitSends(), then the send buffers go back to the pool.
//
// Pinned memory: buffers come from a pool kept across steps; a request takes the smallest free
// buffer that is large enough, else a new one (sizes rounded up to 64 KiB), so a steady training
// step allocates nothing. A receive buffer is free again once its copy has executed (a CUDA
// event); a send buffer once WaitSends returned. The pool only grows: its size is the largest
// number of bytes in flight at once (sends of one step plus copies the GPU has not reached).
//
// Errors: host-transport errors pass through unchanged (transport.h: kAborted, kDeadlineExceeded,
// kUnavailable naming the peer, kInternal for a size mismatch); CUDA failures are kInternal (or
// kResourceExhausted when pinned memory runs out) naming the call. The first error is sticky:
// every later call returns it, and buffers that may still be in use are never reused.
// Ownership: `host` and `device` are not owned and must outlive this object. Destroy it only
// after WaitSends returned or after the host transport failed (UcxTransport then no longer
// touches the buffers), because destruction frees the pinned buffers; it waits for pending
// host -> device copies first.
// Thread safety: one thread uses the object (transport.h), the same thread that uses `device`.
#ifndef DAPPLE_WORKER_COMM_CUDA_STAGING_TRANSPORT_H_
#define DAPPLE_WORKER_COMM_CUDA_STAGING_TRANSPORT_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/comm/transport.h"
#include "worker/device/cuda_device.h"

namespace dapple::worker {

class StagingTransport : public Transport {
 public:
  StagingTransport(Transport* host, CudaDevice* device);
  ~StagingTransport() override;
  StagingTransport(const StagingTransport&) = delete;
  StagingTransport& operator=(const StagingTransport&) = delete;

  // `data` is device memory of `device` (may be null when bytes == 0).
  absl::Status Send(int peer, uint64_t tag, const void* data, size_t bytes) override;
  absl::Status Recv(int peer, uint64_t tag, void* data, size_t bytes) override;
  absl::Status WaitSends() override;

  // Pinned host memory held by the pool (bytes), for tests and metrics.
  size_t pinned_bytes() const;

 private:
  struct Staged;
  absl::StatusOr<Staged*> Acquire(size_t bytes);
  absl::Status Fail(absl::Status status);

  Transport* host_;
  CudaDevice* device_;
  std::vector<std::unique_ptr<Staged>> pool_;
  std::vector<Staged*> sending_;  // handed to host_->Send, released by WaitSends
  absl::Status failed_;           // sticky: the first error returned
};

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_COMM_CUDA_STAGING_TRANSPORT_H_
