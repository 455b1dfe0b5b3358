// Transport on UCX's tag API (UCP). Ranks exchange worker addresses out of band (through the
// coordinator's rendezvous), then Connect() to each neighbour. UCX_TLS defaults to "tcp" when
// the environment does not set it, so a dead peer is detected (UCP_ERR_HANDLING_MODE_PEER).
#ifndef DAPPLE_WORKER_COMM_UCX_TRANSPORT_H_
#define DAPPLE_WORKER_COMM_UCX_TRANSPORT_H_

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/comm/transport.h"

namespace dapple::worker {

class UcxTransport : public Transport {
 public:
  // kUnavailable when UCX cannot be initialised (message carries UCX's own).
  static absl::StatusOr<std::unique_ptr<UcxTransport>> Create(int my_rank, Options options);
  ~UcxTransport() override;  // closes endpoints (forcefully: never waits on a dead peer)

  // This rank's UCP worker address: opaque bytes to publish to peers.
  const std::string& LocalAddress() const;
  // Creates the endpoint to `peer` from its published address. kInvalidArgument for a bad
  // address, kUnavailable when UCX refuses it.
  absl::Status Connect(int peer, const std::string& address);

  absl::Status Send(int peer, uint64_t tag, const void* data, size_t bytes) override;
  absl::Status Recv(int peer, uint64_t tag, void* data, size_t bytes) override;
  absl::Status WaitSends() override;

 private:
  struct Impl;
  explicit UcxTransport(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_COMM_UCX_TRANSPORT_H_
