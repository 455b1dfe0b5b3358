// A Transport that sends to each peer through that peer's own transport: a GPU stage may reach
// its previous stage through CUDA IPC and its next one through NCCL or host staging.
//
// Blocking rules and errors are those of the underlying transports (transport.h). WaitSends
// waits on every distinct underlying transport, in the order they were added, and returns the
// first error; WaitSend on the peer's own (WaitsForOneSend: every route's). A peer without a
// route is kFailedPrecondition naming it.
// Thread safety: one thread (transport.h). Routes are not owned and must outlive this object.
#ifndef DAPPLE_WORKER_COMM_ROUTED_TRANSPORT_H_
#define DAPPLE_WORKER_COMM_ROUTED_TRANSPORT_H_

#include <map>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/comm/transport.h"

namespace dapple::worker {

class RoutedTransport : public Transport {
 public:
  // Routes messages to and from `peer` through `transport` (replacing an earlier route).
  void SetRoute(int peer, Transport* transport);

  absl::Status Send(int peer, uint64_t tag, const void* data, size_t bytes) override;
  absl::Status Recv(int peer, uint64_t tag, void* data, size_t bytes) override;
  absl::Status WaitSends() override;
  bool WaitsForOneSend() const override;
  absl::Status WaitSend(int peer, uint64_t tag) override;

 private:
  absl::StatusOr<Transport*> Route(int peer) const;
  std::map<int, Transport*> routes_;
  std::vector<Transport*> distinct_;
};

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_COMM_ROUTED_TRANSPORT_H_
