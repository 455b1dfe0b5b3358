#include "worker/comm/cuda/cuda_ipc_transport.h"

#include <cstring>
#include <type_traits>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/status.h"
#include "kernels/cuda/cuda_status.h"

namespace dapple::worker {
namespace {

using kernels::cuda::CudaStatus;

constexpr int kKindShift = 44;
constexpr uint64_t kTagMask = (uint64_t{1} << 48) - 1;
constexpr uint64_t kSequenceMask = (uint64_t{1} << kKindShift) - 1;
constexpr uint32_t kHeaderMagic = 0x44495043;  // "DIPC"
constexpr uint32_t kAckMagic = 0x4441434B;     // "DACK"
constexpr uint32_t kNoSlot = ~uint32_t{0};     // zero-byte messages use no slot
// Slots are rounded up so that slightly different sizes (the last evaluation chunk) share them.
constexpr size_t kSlotGranularity = size_t{64} << 10;

static_assert(std::is_trivially_copyable_v<CudaIpcTransport::Header>);
static_assert(std::is_trivially_copyable_v<CudaIpcTransport::Ack>);

uint64_t AckTag(uint64_t sequence) {
  return (CudaIpcTransport::kAckKind << kKindShift) | (sequence & kSequenceMask);
}

uint64_t TagKind(uint64_t tag) { return (tag & kTagMask) >> kKindShift; }

bool SameHandle(const cudaIpcMemHandle_t& a, const cudaIpcMemHandle_t& b) {
  return std::memcmp(&a, &b, sizeof(a)) == 0;
}

}  // namespace

CudaIpcTransport::CudaIpcTransport(Transport* host, CudaDevice* device)
    : host_(host), device_(device) {}

CudaIpcTransport::~CudaIpcTransport() {
  if (mappings_.empty() && outbox_.empty()) return;
  cudaSetDevice(device_->index());
  // Nothing of ours is in flight on the stream after a successful call (every copy was waited
  // for), but a failed call may have left one: let it finish before unmapping or freeing.
  cudaStreamSynchronize(device_->compute_stream());
  for (auto& [key, m] : mappings_) cudaIpcCloseMemHandle(m.ptr);
  for (auto& [peer, slots] : outbox_) {
    for (Slot& s : slots) cudaFree(s.ptr);
  }
}

size_t CudaIpcTransport::outbox_bytes(int peer) const {
  auto it = outbox_.find(peer);
  if (it == outbox_.end()) return 0;
  size_t total = 0;
  for (const Slot& s : it->second) total += s.capacity;
  return total;
}

int CudaIpcTransport::outbox_slots(int peer) const {
  auto it = outbox_.find(peer);
  return it == outbox_.end() ? 0 : static_cast<int>(it->second.size());
}

absl::Status CudaIpcTransport::Fail(absl::Status status) {
  failed_ = status;
  return status;
}

absl::StatusOr<uint32_t> CudaIpcTransport::AcquireSlot(int peer, size_t bytes) {
  std::vector<Slot>& slots = outbox_[peer];
  int best = -1;
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i].busy || slots[i].capacity < bytes) continue;
    if (best < 0 || slots[i].capacity < slots[best].capacity) best = static_cast<int>(i);
  }
  if (best < 0) {
    // A new slot instead of waiting for an ack: see the header on deadlocks.
    Slot slot;
    slot.capacity = (bytes + kSlotGranularity - 1) / kSlotGranularity * kSlotGranularity;
    DAPPLE_CUDA_RETURN_IF_ERROR(cudaMalloc(&slot.ptr, slot.capacity));
    if (absl::Status s = CudaStatus(cudaIpcGetMemHandle(&slot.handle, slot.ptr),
                                    "cudaIpcGetMemHandle of an outbox slot");
        !s.ok()) {
      cudaFree(slot.ptr);
      return s;
    }
    slots.push_back(slot);
    best = static_cast<int>(slots.size()) - 1;
  }
  slots[best].busy = true;
  return static_cast<uint32_t>(best);
}

absl::StatusOr<void*> CudaIpcTransport::OpenSlot(int peer, const Header& header) {
  Mapping& m = mappings_[{peer, header.slot}];
  if (m.ptr != nullptr && SameHandle(m.handle, header.handle)) return m.ptr;
  if (m.ptr != nullptr) {
    // The sender never replaces a slot, but a new allocation under an old index is harmless to
    // follow: the old mapping is closed first (CUDA maps one allocation once per process).
    cudaIpcCloseMemHandle(m.ptr);
    m.ptr = nullptr;
  }
  void* ptr = nullptr;
  const absl::Status opened = CudaStatus(
      cudaIpcOpenMemHandle(&ptr, header.handle, cudaIpcMemLazyEnablePeerAccess),
      absl::StrFormat("cudaIpcOpenMemHandle of peer rank %d's slot %d", peer, header.slot));
  if (!opened.ok()) {
    mappings_.erase({peer, header.slot});
    return opened;
  }
  m.ptr = ptr;
  m.capacity = header.capacity;
  m.handle = header.handle;
  return ptr;
}

absl::Status CudaIpcTransport::Send(int peer, uint64_t tag, const void* data, size_t bytes) {
  if (!failed_.ok()) return failed_;
  tag &= kTagMask;
  if (TagKind(tag) == kAckKind) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "tag %#x to peer rank %d has kind %d, which CudaIpcTransport reserves for acks", tag, peer,
        kAckKind));
  }
  if (absl::Status s = CudaStatus(cudaSetDevice(device_->index()), "cudaSetDevice"); !s.ok()) {
    return Fail(s);
  }
  Header header{};
  header.magic = kHeaderMagic;
  header.slot = kNoSlot;
  header.sequence = next_sequence_[peer]++;
  header.bytes = bytes;
  if (bytes > 0) {
    absl::StatusOr<uint32_t> index = AcquireSlot(peer, bytes);
    if (!index.ok()) return Fail(index.status());
    const Slot& slot = outbox_[peer][*index];
    header.slot = *index;
    header.capacity = slot.capacity;
    header.handle = slot.handle;
    const cudaStream_t stream = device_->compute_stream();
    absl::Status copied = CudaStatus(
        cudaMemcpyAsync(slot.ptr, data, bytes, cudaMemcpyDeviceToDevice, stream),
        absl::StrFormat("cudaMemcpyAsync into outbox slot %d (%d bytes for peer rank %d)", *index,
                        bytes, peer));
    // The receiver reads the slot as soon as the header arrives.
    if (copied.ok()) {
      copied = CudaStatus(cudaStreamSynchronize(stream),
                          "cudaStreamSynchronize(compute) before an IPC send");
    }
    if (!copied.ok()) return Fail(copied);
  }
  outstanding_.push_back({peer, tag, header.sequence, header.slot});
  headers_.push_back(header);
  if (absl::Status s = host_->Send(peer, tag, &headers_.back(), sizeof(Header)); !s.ok()) {
    return Fail(s);
  }
  return absl::OkStatus();
}

absl::Status CudaIpcTransport::Recv(int peer, uint64_t tag, void* data, size_t bytes) {
  if (!failed_.ok()) return failed_;
  tag &= kTagMask;
  Header header{};
  if (absl::Status s = host_->Recv(peer, tag, &header, sizeof(Header)); !s.ok()) return Fail(s);
  const std::string what =
      absl::StrFormat("IPC recv of tag %d (%d bytes) from peer rank %d", tag, bytes, peer);
  if (header.magic != kHeaderMagic) {
    return Fail(absl::InternalError(absl::StrFormat(
        "%s: header magic %#x is not %#x (the peer does not speak CudaIpcTransport)", what,
        header.magic, kHeaderMagic)));
  }
  if (header.bytes != bytes) {
    return Fail(absl::InternalError(absl::StrFormat(
        "%s: received %d bytes, expected %d (sender and receiver disagree on the size)", what,
        header.bytes, bytes)));
  }
  if (bytes > 0) {
    if (header.slot == kNoSlot || header.capacity < bytes) {
      return Fail(absl::InternalError(
          absl::StrFormat("%s: header names slot %d of %d bytes, too small for the payload", what,
                          header.slot, header.capacity)));
    }
    if (absl::Status s = CudaStatus(cudaSetDevice(device_->index()), "cudaSetDevice"); !s.ok()) {
      return Fail(s);
    }
    absl::StatusOr<void*> src = OpenSlot(peer, header);
    if (!src.ok()) return Fail(src.status());
    const cudaStream_t stream = device_->compute_stream();
    absl::Status copied =
        CudaStatus(cudaMemcpyAsync(data, *src, bytes, cudaMemcpyDeviceToDevice, stream),
                   absl::StrFormat("cudaMemcpyAsync from peer rank %d's slot %d (%d bytes)", peer,
                                   header.slot, bytes));
    // The ack lets the sender overwrite the slot, so the copy must have executed.
    if (copied.ok()) {
      copied = CudaStatus(cudaStreamSynchronize(stream),
                          "cudaStreamSynchronize(compute) after an IPC recv");
    }
    if (!copied.ok()) return Fail(copied);
  }
  acks_.push_back(Ack{kAckMagic, header.slot, header.sequence});
  if (absl::Status s = host_->Send(peer, AckTag(header.sequence), &acks_.back(), sizeof(Ack));
      !s.ok()) {
    return Fail(s);
  }
  return absl::OkStatus();
}

absl::Status CudaIpcTransport::WaitSends() {
  if (!failed_.ok()) return failed_;
  // Acks come back in the order the peer received; exact tags make our order irrelevant.
  for (const Outstanding& o : outstanding_) {
    Ack ack{};
    if (absl::Status s = host_->Recv(o.peer, AckTag(o.sequence), &ack, sizeof(Ack)); !s.ok()) {
      return Fail(
          absl::Status(s.code(), absl::StrFormat("waiting for peer rank %d to receive tag %d: %s",
                                                 o.peer, o.tag, s.message())));
    }
    if (ack.magic != kAckMagic || ack.sequence != o.sequence || ack.slot != o.slot) {
      return Fail(absl::InternalError(absl::StrFormat(
          "ack from peer rank %d for message %d (tag %d, slot %d) names message %d slot %d", o.peer,
          o.sequence, o.tag, o.slot, ack.sequence, ack.slot)));
    }
    if (o.slot != kNoSlot) outbox_[o.peer][o.slot].busy = false;
  }
  outstanding_.clear();
  if (absl::Status s = host_->WaitSends(); !s.ok()) return Fail(s);
  headers_.clear();
  acks_.clear();
  return absl::OkStatus();
}

}  // namespace dapple::worker
