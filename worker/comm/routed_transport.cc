#include "worker/comm/routed_transport.h"

#include <algorithm>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace dapple::worker {

void RoutedTransport::SetRoute(int peer, Transport* transport) {
  routes_[peer] = transport;
  if (std::find(distinct_.begin(), distinct_.end(), transport) == distinct_.end()) {
    distinct_.push_back(transport);
  }
}

absl::StatusOr<Transport*> RoutedTransport::Route(int peer) const {
  auto it = routes_.find(peer);
  if (it == routes_.end()) {
    return absl::FailedPreconditionError(absl::StrCat("no route to rank ", peer));
  }
  return it->second;
}

absl::Status RoutedTransport::Send(int peer, uint64_t tag, const void* data, size_t bytes) {
  absl::StatusOr<Transport*> t = Route(peer);
  if (!t.ok()) return t.status();
  return (*t)->Send(peer, tag, data, bytes);
}

absl::Status RoutedTransport::Recv(int peer, uint64_t tag, void* data, size_t bytes) {
  absl::StatusOr<Transport*> t = Route(peer);
  if (!t.ok()) return t.status();
  return (*t)->Recv(peer, tag, data, bytes);
}

bool RoutedTransport::WaitsForOneSend() const {
  for (const Transport* t : distinct_) {
    if (!t->WaitsForOneSend()) return false;
  }
  return true;
}

absl::Status RoutedTransport::WaitSend(int peer, uint64_t tag) {
  DAPPLE_ASSIGN_OR_RETURN(Transport * t, Route(peer));
  return t->WaitSend(peer, tag);
}

absl::Status RoutedTransport::WaitSends() {
  absl::Status first;
  for (Transport* t : distinct_) {
    absl::Status s = t->WaitSends();
    if (first.ok() && !s.ok()) first = s;
  }
  return first;
}

}  // namespace dapple::worker
