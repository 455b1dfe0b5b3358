#include "worker/comm/ucx_transport.h"

#include <poll.h>
#include <ucp/api/ucp.h>

#include <algorithm>
#include <cstdlib>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/status.h"

namespace dapple::worker {
namespace {

constexpr int kTagBits = 48;
constexpr uint64_t kUserTagMask = (uint64_t{1} << kTagBits) - 1;
constexpr int kMaxRank = (1 << (64 - kTagBits)) - 1;
constexpr ucp_tag_t kExactMatch = ~ucp_tag_t{0};
// UCP worker address: one header byte (format version in the low 4 bits) and an 8-byte worker id
// come first (ucp/wireup/address.c).
constexpr size_t kMinAddressBytes = 9;
constexpr char kAddressVersionMask = 0x0F;

// Idle progress calls before a blocking loop starts sleeping: a short spin catches a reply that is
// already on its way without a sleep and wakeup, yet is too short to starve the peer when all
// ranks share one core.
constexpr int kSpinIterations = 32;
// Longest single sleep: bounds how late the abort flag and the deadline are noticed when no event
// arrives, and how late a missed wakeup is recovered from.
constexpr absl::Duration kMaxSleep = absl::Milliseconds(20);
// Backoff sleeps used when the event fd cannot be waited on (absent, or stuck readable): a message
// arriving during one is seen at most kMaxBackoff late.
constexpr absl::Duration kMinBackoff = absl::Microseconds(50);
constexpr absl::Duration kMaxBackoff = absl::Milliseconds(2);
// UCX's tcp segment size for sends and receives (see Create).
constexpr char kTcpSegmentSize[] = "128K";
// How long teardown waits for UCX to release cancelled requests and closed endpoints.
constexpr absl::Duration kTeardownGrace = absl::Seconds(1);

ucp_tag_t WireTag(int sender, uint64_t tag) {
  return (static_cast<ucp_tag_t>(sender) << kTagBits) | (tag & kUserTagMask);
}

std::string UcxError(ucs_status_t status) { return ucs_status_string(status); }

}  // namespace

std::string DescribePeerFailure(int status) {
  const auto st = static_cast<ucs_status_t>(status);
  switch (st) {
    // On tcp a peer whose process exited (or whose host went away) surfaces as any of these,
    // most often "Endpoint timeout" although nothing timed out: its sockets closed.
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_IO_ERROR:
    case UCS_ERR_REJECTED:
      return absl::StrCat(
          "connection lost (the process exited or the network failed) (UCX: ", UcxError(st), ")");
    default:
      return absl::StrCat("UCX error (", UcxError(st), ")");
  }
}

struct UcxTransport::Impl {
  struct Peer {
    int rank = -1;
    std::string label;  // who the peer is, for messages (e.g. "stage 1, worker w-2")
    ucp_ep_h ep = nullptr;
    ucs_status_t failure = UCS_OK;  // set by the endpoint error callback
  };
  struct PendingSend {
    void* request;
    int peer;
    uint64_t tag;
    size_t bytes;
  };

  int my_rank = 0;
  Options options;
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  int event_fd = -1;  // -1: no wakeup support, blocking loops sleep instead
  std::string address;
  std::map<int, std::unique_ptr<Peer>> peers;  // unique_ptr: the error callback keeps a pointer
  std::vector<PendingSend> pending;
  absl::Status failed;  // sticky: the first error a call returned
  // Blocking-loop state (ProgressOrWait).
  int idle = 0;            // consecutive progress calls that did nothing
  bool woken = false;      // the last wait ended because the event fd was ready
  absl::Duration backoff;  // current backoff sleep; zero while the event fd works

  ~Impl() { Shutdown(); }

  static void OnEndpointError(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
    auto* peer = static_cast<Peer*>(arg);
    if (peer->failure == UCS_OK) peer->failure = status;
  }

  absl::Status PeerFailed(int rank, ucs_status_t status) const {
    auto it = peers.find(rank);
    const std::string who = it != peers.end() && !it->second->label.empty()
                                ? absl::StrFormat("peer rank %d (%s)", rank, it->second->label)
                                : absl::StrFormat("peer rank %d", rank);
    return absl::UnavailableError(
        absl::StrFormat("%s failed: %s", who, DescribePeerFailure(status)));
  }

  // Records `status` as the transport's permanent error and releases every user buffer UCX may
  // still touch (`recv`: an unfinished receive request, or null), so the caller may free them as
  // soon as the failing call returns. Closing the endpoints also tells the peers we are gone.
  absl::Status Fail(absl::Status status, void* recv = nullptr) {
    failed = status;
    if (worker == nullptr) return status;
    // Unmatched receives cancel at once; a matched one in the middle of a rendezvous completes or
    // fails when its endpoint is force-closed below.
    const absl::Time deadline = absl::Now() + kTeardownGrace;
    if (recv != nullptr) ucp_request_cancel(worker, recv);
    CloseEndpoints(deadline);
    if (recv != nullptr) DrainAndFree(recv, deadline);
    Shutdown();
    return status;
  }

  absl::StatusOr<Peer*> ConnectedPeer(int peer) {
    auto it = peers.find(peer);
    if (it == peers.end() || it->second->ep == nullptr) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "rank %d has no endpoint to peer rank %d: call Connect first", my_rank, peer));
    }
    return it->second.get();
  }

  // One step of the blocking loops: returns after progress happened or after a short wait.
  void ProgressOrWait(absl::Time deadline) {
    if (ucp_worker_progress(worker) != 0) {
      idle = 0;
      backoff = absl::ZeroDuration();
      woken = false;
      return;
    }
    const absl::Duration left = std::min(kMaxSleep, deadline - absl::Now());
    if (left <= absl::ZeroDuration()) return;
    if (woken || event_fd < 0) {
      // The event fd said "ready" yet progress found nothing: it can stay readable, e.g. while a
      // tcp connection waits for a peer that is not progressing yet to finish the handshake
      // (EPOLLOUT stays asserted). Sleep with a growing backoff instead of spinning on it.
      woken = false;
      backoff = std::clamp(backoff * 2, kMinBackoff, kMaxBackoff);
      absl::SleepFor(std::min(left, backoff));
      return;
    }
    if (++idle < kSpinIterations) return;
    // UCS_ERR_BUSY: events arrived since the last progress call; progress again instead.
    if (ucp_worker_arm(worker) != UCS_OK) {
      woken = true;
      return;
    }
    pollfd pfd{event_fd, POLLIN, 0};
    const timespec ts = absl::ToTimespec(left);
    woken = ppoll(&pfd, 1, &ts, nullptr) > 0;
    if (!woken) backoff = absl::ZeroDuration();  // the fd blocks properly again
  }

  // Progresses the worker until `done()` is true. Fails on abort, deadline, or the failure of peer
  // `peer` (-1: none to watch); `what` names the operation in messages.
  template <typename Done>
  absl::Status Block(Done&& done, int peer, const std::string& what) {
    const absl::Time deadline = absl::Now() + options.timeout;
    idle = 0;
    for (;;) {
      if (done()) return absl::OkStatus();
      if (peer >= 0) {
        const Peer& p = *peers.at(peer);
        if (p.failure != UCS_OK) return PeerFailed(peer, p.failure);
      }
      if (options.abort != nullptr && options.abort->load(std::memory_order_relaxed)) {
        return absl::AbortedError(absl::StrCat(what, " aborted"));
      }
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat(what, " did not complete within ", absl::FormatDuration(options.timeout)));
      }
      ProgressOrWait(deadline);
    }
  }

  // Frees completed sends; returns the first failed one's error (kUnavailable naming the peer).
  absl::Status ReapSends() {
    absl::Status result;
    size_t kept = 0;
    for (PendingSend& s : pending) {
      const ucs_status_t st = ucp_request_check_status(s.request);
      if (st == UCS_INPROGRESS) {
        pending[kept++] = s;
        continue;
      }
      ucp_request_free(s.request);
      if (st != UCS_OK && result.ok()) {
        const Peer& p = *peers.at(s.peer);
        result = PeerFailed(s.peer, p.failure != UCS_OK ? p.failure : st);
      }
    }
    pending.resize(kept);
    // UCX completes a dead peer's sends with an error, but do not rely on the order of events.
    for (const PendingSend& s : pending) {
      if (!result.ok()) break;
      const Peer& p = *peers.at(s.peer);
      if (p.failure != UCS_OK) result = PeerFailed(s.peer, p.failure);
    }
    return result;
  }

  // Waits until `request` completes or `deadline` passes, then frees it.
  void DrainAndFree(void* request, absl::Time deadline) {
    while (ucp_request_check_status(request) == UCS_INPROGRESS && absl::Now() < deadline) {
      ucp_worker_progress(worker);
    }
    ucp_request_free(request);
  }

  // Force-closes every endpoint, which completes their outstanding operations with an error. Never
  // waits on a peer: FORCE closes locally.
  void CloseEndpoints(absl::Time deadline) {
    std::vector<void*> closing;
    for (auto& [rank, peer] : peers) {
      if (peer->ep == nullptr) continue;
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = UCP_EP_CLOSE_FLAG_FORCE;
      ucs_status_ptr_t req = ucp_ep_close_nbx(peer->ep, &param);
      if (UCS_PTR_IS_PTR(req)) closing.push_back(req);
      peer->ep = nullptr;
    }
    for (void* req : closing) DrainAndFree(req, deadline);
  }

  // Closes endpoints, releases pending sends, destroys worker and context. Idempotent.
  void Shutdown() {
    if (worker == nullptr) return;
    const absl::Time deadline = absl::Now() + kTeardownGrace;
    CloseEndpoints(deadline);
    for (PendingSend& s : pending) DrainAndFree(s.request, deadline);
    pending.clear();
    ucp_worker_destroy(worker);
    worker = nullptr;
    ucp_cleanup(context);
    context = nullptr;
  }
};

absl::StatusOr<std::unique_ptr<UcxTransport>> UcxTransport::Create(int my_rank, Options options) {
  if (my_rank < 0 || my_rank > kMaxRank) {
    return absl::InvalidArgumentError(
        absl::StrFormat("rank %d is outside [0, %d]: the rank fills the top 16 bits of the tag",
                        my_rank, kMaxRank));
  }
  auto impl = std::make_unique<Impl>();
  impl->my_rank = my_rank;
  impl->options = options;

  ucp_config_t* config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) {
    return absl::UnavailableError(absl::StrCat("ucp_config_read failed: ", UcxError(st)));
  }
  // tcp detects a dead peer (UCP_ERR_HANDLING_MODE_PEER); shared memory transports only work
  // without error handling. Set through the config object so the process environment stays
  // untouched; an explicit UCX_TLS wins.
  if (std::getenv("UCX_TLS") == nullptr) {
    st = ucp_config_modify(config, "TLS", "tcp");
    if (st != UCS_OK) {
      ucp_config_release(config);
      return absl::UnavailableError(absl::StrCat("setting UCX TLS=tcp failed: ", UcxError(st)));
    }
  }
  // Eager protocol for every size: a rendezvous send's data moves only while the SENDER calls
  // into UCX, and a rank spends most of its time computing (or, emulated, waiting) between
  // actions, so a receiver waited up to a whole forward for data that was long "sent"
  // (emulated GPipe ran 60-85% over the simulator with rendezvous, within 5% with eager:
  // docs/benchmarks.md). The price: a receiver buffers messages that arrive before their
  // receive. An explicit UCX_RNDV_THRESH wins.
  if (std::getenv("UCX_RNDV_THRESH") == nullptr) {
    st = ucp_config_modify(config, "RNDV_THRESH", "inf");
    if (st != UCS_OK) {
      ucp_config_release(config);
      return absl::UnavailableError(
          absl::StrCat("setting UCX RNDV_THRESH=inf failed: ", UcxError(st)));
    }
  }
  // tcp moves a message in segments of TCP_TX_SEG_SIZE (8 KB by default): a 128 KB activation
  // is 16 sends and 16 receive copies. 128 KB segments halve the time of a 64 KB message on
  // loopback (39 -> 21 us) and cut a 1 MB one by a third (467 -> 308 us) with a quarter less
  // system CPU (ucx_pingpong_bench, docs/benchmarks.md "UCX's tcp segment size"); the price is
  // host memory for the buffer pools, 8 segments of each kind per interface at a time. UCX
  // applies a key that is not its own to the transports' configurations by their unprefixed
  // names ("TX_SEG_SIZE", not "TCP_TX_SEG_SIZE"). An explicit UCX_TCP_TX_SEG_SIZE /
  // UCX_TCP_RX_SEG_SIZE wins.
  for (const char* key : {"TX_SEG_SIZE", "RX_SEG_SIZE"}) {
    if (std::getenv(absl::StrCat("UCX_TCP_", key).c_str()) != nullptr) continue;
    st = ucp_config_modify(config, key, kTcpSegmentSize);
    if (st != UCS_OK) {
      ucp_config_release(config);
      return absl::UnavailableError(
          absl::StrCat("setting UCX ", key, "=", kTcpSegmentSize, " failed: ", UcxError(st)));
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  // WAKEUP lets idle blocking loops sleep on the worker's event fd; transports a user forced
  // through UCX_TLS may lack it, in which case the loops fall back to short sleeps.
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  st = ucp_init(&params, config, &impl->context);
  if (st != UCS_OK) {
    params.features = UCP_FEATURE_TAG;
    st = ucp_init(&params, config, &impl->context);
  }
  ucp_config_release(config);
  if (st != UCS_OK) {
    impl->context = nullptr;
    return absl::UnavailableError(absl::StrCat("ucp_init failed: ", UcxError(st)));
  }

  ucp_worker_params_t worker_params{};
  worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  worker_params.thread_mode = UCS_THREAD_MODE_SINGLE;
  st = ucp_worker_create(impl->context, &worker_params, &impl->worker);
  if (st != UCS_OK) {
    ucp_cleanup(impl->context);
    impl->context = nullptr;
    impl->worker = nullptr;
    return absl::UnavailableError(absl::StrCat("ucp_worker_create failed: ", UcxError(st)));
  }
  if ((params.features & UCP_FEATURE_WAKEUP) == 0 ||
      ucp_worker_get_efd(impl->worker, &impl->event_fd) != UCS_OK) {
    impl->event_fd = -1;
  }

  ucp_address_t* address = nullptr;
  size_t address_length = 0;
  st = ucp_worker_get_address(impl->worker, &address, &address_length);
  if (st != UCS_OK) {
    return absl::UnavailableError(absl::StrCat("ucp_worker_get_address failed: ", UcxError(st)));
  }
  impl->address.assign(reinterpret_cast<const char*>(address), address_length);
  ucp_worker_release_address(impl->worker, address);
  return std::unique_ptr<UcxTransport>(new UcxTransport(std::move(impl)));
}

UcxTransport::UcxTransport(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

UcxTransport::~UcxTransport() = default;

const std::string& UcxTransport::LocalAddress() const { return impl_->address; }

absl::Status UcxTransport::Connect(int peer, const std::string& address, const std::string& label) {
  Impl& s = *impl_;
  if (!s.failed.ok()) return s.failed;
  if (peer < 0 || peer > kMaxRank || peer == s.my_rank) {
    return absl::InvalidArgumentError(
        absl::StrFormat("rank %d cannot connect to peer rank %d: peers are other ranks in [0, %d]",
                        s.my_rank, peer, kMaxRank));
  }
  // UCX trusts address bytes (it asserts, i.e. aborts the process, on an unknown format), so
  // reject what cannot be a worker address of this UCX build: too short for the header and
  // worker id, or another address format version (low 4 bits of the first byte).
  if (address.size() < kMinAddressBytes ||
      (address[0] & kAddressVersionMask) != (s.address[0] & kAddressVersionMask)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "invalid UCX worker address for peer rank %d (%d bytes): not published by LocalAddress()",
        peer, address.size()));
  }
  if (s.peers.count(peer) != 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("rank %d is already connected to peer rank %d", s.my_rank, peer));
  }
  auto state = std::make_unique<Impl::Peer>();
  state->rank = peer;
  state->label = label;
  ucp_ep_params_t ep_params{};
  ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                         UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  ep_params.address = reinterpret_cast<const ucp_address_t*>(address.data());
  ep_params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep_params.err_handler.cb = &Impl::OnEndpointError;
  ep_params.err_handler.arg = state.get();
  const ucs_status_t st = ucp_ep_create(s.worker, &ep_params, &state->ep);
  if (st != UCS_OK) {
    const std::string message =
        absl::StrFormat("cannot create UCX endpoint to peer rank %d: %s", peer, UcxError(st));
    if (st == UCS_ERR_INVALID_PARAM || st == UCS_ERR_INVALID_ADDR) {
      return absl::InvalidArgumentError(message);
    }
    return absl::UnavailableError(message);
  }
  s.peers.emplace(peer, std::move(state));
  return absl::OkStatus();
}

absl::Status UcxTransport::Send(int peer, uint64_t tag, const void* data, size_t bytes) {
  Impl& s = *impl_;
  if (!s.failed.ok()) return s.failed;
  DAPPLE_ASSIGN_OR_RETURN(Impl::Peer * p, s.ConnectedPeer(peer));
  if (p->failure != UCS_OK) return s.Fail(s.PeerFailed(peer, p->failure));
  ucp_request_param_t param{};
  ucs_status_ptr_t req = ucp_tag_send_nbx(p->ep, data, bytes, WireTag(s.my_rank, tag), &param);
  if (UCS_PTR_IS_ERR(req)) {
    const ucs_status_t st = p->failure != UCS_OK ? p->failure : UCS_PTR_STATUS(req);
    return s.Fail(s.PeerFailed(peer, st));
  }
  if (req != nullptr) s.pending.push_back({req, peer, tag & kUserTagMask, bytes});
  // Free what already finished so a long run of Sends keeps the pending list short.
  if (absl::Status reaped = s.ReapSends(); !reaped.ok()) return s.Fail(reaped);
  return absl::OkStatus();
}

absl::Status UcxTransport::Recv(int peer, uint64_t tag, void* data, size_t bytes) {
  Impl& s = *impl_;
  if (!s.failed.ok()) return s.failed;
  // A failed peer is detected while blocking, not here: messages that arrived in full before the
  // peer died are still delivered.
  DAPPLE_ASSIGN_OR_RETURN(Impl::Peer * p, s.ConnectedPeer(peer));
  tag &= kUserTagMask;
  const std::string what = absl::StrFormat("rank %d: recv of tag %d (%d bytes) from peer rank %d",
                                           s.my_rank, tag, bytes, peer);

  ucp_tag_recv_info_t info{};
  ucp_request_param_t param{};
  // Always get a request: UCX 1.13 returns an immediately completed receive without filling
  // recv_info, and the received length is needed to check the size.
  param.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  ucs_status_ptr_t req =
      ucp_tag_recv_nbx(s.worker, data, bytes, WireTag(peer, tag), kExactMatch, &param);
  ucs_status_t st = UCS_OK;
  if (UCS_PTR_IS_ERR(req)) {
    st = UCS_PTR_STATUS(req);
  } else {
    absl::Status waited =
        s.Block([&] { return ucp_request_check_status(req) != UCS_INPROGRESS; }, peer, what);
    if (!waited.ok()) return s.Fail(waited, req);
    st = ucp_tag_recv_request_test(req, &info);
    ucp_request_free(req);
  }
  std::string received;
  if (st == UCS_ERR_MESSAGE_TRUNCATED) {
    // UCX reports the sent length here when it knows it (eager messages do).
    received = info.length > bytes ? absl::StrFormat("%d bytes", info.length)
                                   : absl::StrFormat("more than %d bytes", bytes);
  } else if (st != UCS_OK) {
    return s.Fail(s.PeerFailed(peer, p->failure != UCS_OK ? p->failure : st));
  } else if (info.length != bytes) {
    received = absl::StrFormat("%d bytes", info.length);
  } else {
    return absl::OkStatus();
  }
  return s.Fail(absl::InternalError(
      absl::StrFormat("%s: received %s, expected %d (sender and receiver disagree on the size)",
                      what, received, bytes)));
}

absl::Status UcxTransport::WaitSends() {
  Impl& s = *impl_;
  if (!s.failed.ok()) return s.failed;
  absl::Status reaped;
  absl::Status waited = s.Block(
      [&] {
        reaped = s.ReapSends();
        return !reaped.ok() || s.pending.empty();
      },
      -1, absl::StrFormat("rank %d: waiting for sends", s.my_rank));
  if (!reaped.ok()) return s.Fail(reaped);
  if (!waited.ok()) {
    const Impl::PendingSend& first = s.pending.front();
    return s.Fail(absl::Status(
        waited.code(),
        absl::StrFormat("%s (%d pending; first: tag %d, %d bytes to peer rank %d)",
                        waited.message(), s.pending.size(), first.tag, first.bytes, first.peer)));
  }
  return absl::OkStatus();
}

absl::Status UcxTransport::WaitSend(int peer, uint64_t tag) {
  Impl& s = *impl_;
  if (!s.failed.ok()) return s.failed;
  const uint64_t user_tag = tag & kUserTagMask;
  auto pending = [&] {
    for (const Impl::PendingSend& p : s.pending) {
      if (p.peer == peer && p.tag == user_tag) return true;
    }
    return false;
  };
  absl::Status reaped;
  absl::Status waited = s.Block(
      [&] {
        reaped = s.ReapSends();
        return !reaped.ok() || !pending();
      },
      peer,
      absl::StrFormat("rank %d: waiting for the send of tag %d to peer rank %d", s.my_rank,
                      user_tag, peer));
  if (!reaped.ok()) return s.Fail(reaped);
  if (!waited.ok()) return s.Fail(waited);
  return absl::OkStatus();
}

}  // namespace dapple::worker
