#include "worker/comm/cuda/staging_transport.h"

#include <utility>

#include "absl/strings/str_format.h"
#include "common/status.h"
#include "kernels/cuda/cuda_status.h"

namespace dapple::worker {
namespace {

// Rounding keeps slightly different sizes (the last evaluation chunk) on the same buffers.
constexpr size_t kPinnedGranularity = size_t{64} << 10;
// Zero-byte messages still travel (the receiver matches them), from a valid address.
char kEmpty[1];

size_t RoundUp(size_t bytes) {
  return (bytes + kPinnedGranularity - 1) / kPinnedGranularity * kPinnedGranularity;
}

}  // namespace

struct StagingTransport::Staged {
  enum class State { kFree, kSending, kCopying };
  PinnedBuffer buffer;
  cudaEvent_t copied = nullptr;  // recorded after a receive's host -> device copy
  State state = State::kFree;
};

StagingTransport::StagingTransport(Transport* host, CudaDevice* device)
    : host_(host), device_(device) {}

StagingTransport::~StagingTransport() {
  cudaSetDevice(device_->index());
  // A pending host -> device copy still reads its pinned buffer.
  for (auto& s : pool_) {
    if (s->copied != nullptr) {
      if (s->state == Staged::State::kCopying) cudaEventSynchronize(s->copied);
      cudaEventDestroy(s->copied);
    }
  }
}

size_t StagingTransport::pinned_bytes() const {
  size_t total = 0;
  for (const auto& s : pool_) total += s->buffer.bytes();
  return total;
}

absl::Status StagingTransport::Fail(absl::Status status) {
  failed_ = status;
  return status;
}

absl::StatusOr<StagingTransport::Staged*> StagingTransport::Acquire(size_t bytes) {
  Staged* best = nullptr;
  for (auto& s : pool_) {
    if (s->state == Staged::State::kCopying) {
      const cudaError_t q = cudaEventQuery(s->copied);
      if (q == cudaErrorNotReady) continue;
      DAPPLE_CUDA_RETURN_IF_ERROR(q);
      s->state = Staged::State::kFree;
    }
    if (s->state != Staged::State::kFree || s->buffer.bytes() < bytes) continue;
    if (best == nullptr || s->buffer.bytes() < best->buffer.bytes()) best = s.get();
  }
  if (best != nullptr) return best;
  auto staged = std::make_unique<Staged>();
  DAPPLE_ASSIGN_OR_RETURN(staged->buffer, PinnedBuffer::Allocate(RoundUp(bytes)));
  DAPPLE_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&staged->copied, cudaEventDisableTiming));
  pool_.push_back(std::move(staged));
  return pool_.back().get();
}

absl::Status StagingTransport::Send(int peer, uint64_t tag, const void* data, size_t bytes) {
  if (!failed_.ok()) return failed_;
  if (bytes == 0) {
    if (absl::Status s = host_->Send(peer, tag, kEmpty, 0); !s.ok()) return Fail(s);
    return absl::OkStatus();
  }
  if (absl::Status s = kernels::cuda::CudaStatus(cudaSetDevice(device_->index()), "cudaSetDevice");
      !s.ok()) {
    return Fail(s);
  }
  absl::StatusOr<Staged*> staged = Acquire(bytes);
  if (!staged.ok()) return Fail(staged.status());
  Staged& st = **staged;
  const cudaStream_t stream = device_->compute_stream();
  absl::Status copied = kernels::cuda::CudaStatus(
      cudaMemcpyAsync(st.buffer.data(), data, bytes, cudaMemcpyDeviceToHost, stream),
      absl::StrFormat("cudaMemcpyAsync device to pinned host (%d bytes for peer rank %d)", bytes,
                      peer));
  // The host transport reads the pinned buffer as soon as Send is posted.
  if (copied.ok()) {
    copied = kernels::cuda::CudaStatus(cudaStreamSynchronize(stream),
                                       "cudaStreamSynchronize(compute) before a staged send");
  }
  if (!copied.ok()) return Fail(copied);
  st.state = Staged::State::kSending;
  sending_.push_back(&st);
  if (absl::Status s = host_->Send(peer, tag, st.buffer.data(), bytes); !s.ok()) return Fail(s);
  return absl::OkStatus();
}

absl::Status StagingTransport::Recv(int peer, uint64_t tag, void* data, size_t bytes) {
  if (!failed_.ok()) return failed_;
  if (bytes == 0) {
    if (absl::Status s = host_->Recv(peer, tag, kEmpty, 0); !s.ok()) return Fail(s);
    return absl::OkStatus();
  }
  if (absl::Status s = kernels::cuda::CudaStatus(cudaSetDevice(device_->index()), "cudaSetDevice");
      !s.ok()) {
    return Fail(s);
  }
  absl::StatusOr<Staged*> staged = Acquire(bytes);
  if (!staged.ok()) return Fail(staged.status());
  Staged& st = **staged;
  // Marked busy before receiving: after a failed Recv the host transport may not have let go.
  st.state = Staged::State::kSending;
  if (absl::Status s = host_->Recv(peer, tag, st.buffer.data(), bytes); !s.ok()) return Fail(s);
  const cudaStream_t stream = device_->compute_stream();
  absl::Status enqueued = kernels::cuda::CudaStatus(
      cudaMemcpyAsync(data, st.buffer.data(), bytes, cudaMemcpyHostToDevice, stream),
      absl::StrFormat("cudaMemcpyAsync pinned host to device (%d bytes from peer rank %d)", bytes,
                      peer));
  if (enqueued.ok()) {
    enqueued = kernels::cuda::CudaStatus(cudaEventRecord(st.copied, stream),
                                         "cudaEventRecord after a staged receive");
  }
  if (!enqueued.ok()) return Fail(enqueued);
  st.state = Staged::State::kCopying;
  return absl::OkStatus();
}

absl::Status StagingTransport::WaitSends() {
  if (!failed_.ok()) return failed_;
  if (absl::Status s = host_->WaitSends(); !s.ok()) return Fail(s);
  for (Staged* s : sending_) s->state = Staged::State::kFree;
  sending_.clear();
  return absl::OkStatus();
}

}  // namespace dapple::worker
