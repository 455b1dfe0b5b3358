// What a worker's calls to the coordinator carry (issue 16, contract 4; docs/security.md,
// "Workers"): `authorization: Bearer <token>` metadata with the cluster's join token until the
// coordinator answered RegisterWorker with this worker's credential, then that credential.
//
// Thread safety: thread-safe (the daemon's heartbeat thread, a job's progress reporter and its
// collectives' store call at once).
#ifndef DAPPLE_WORKER_DAEMON_CALL_AUTH_H_
#define DAPPLE_WORKER_DAEMON_CALL_AUTH_H_

#include <grpcpp/grpcpp.h>

#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace dapple::worker {

class CallAuth {
 public:
  explicit CallAuth(std::string join_token) : join_token_(std::move(join_token)) {}

  // The worker credential RegisterWorker answered ("" forgets it: the join token again).
  void SetCredential(std::string credential) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    credential_ = std::move(credential);
  }
  bool HasCredential() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return !credential_.empty();
  }
  // The credential, or the join token before there is one. Nothing when neither exists (a
  // test's daemon without a join token: the coordinator answers UNAUTHENTICATED).
  void Attach(grpc::ClientContext* context) const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    Add(context, credential_.empty() ? join_token_ : credential_);
  }
  // The join token (a registration as a new worker).
  void AttachJoin(grpc::ClientContext* context) const { Add(context, join_token_); }

 private:
  static void Add(grpc::ClientContext* context, const std::string& token) {
    if (!token.empty()) context->AddMetadata("authorization", "Bearer " + token);
  }

  const std::string join_token_;
  mutable absl::Mutex mu_;
  std::string credential_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_DAEMON_CALL_AUTH_H_
