// The coordinator's certificate files as gRPC reads them: private copies that change only to a
// set that works.
//
// Why. gRPC's FileWatcherCertificateProvider re-reads the certificate and key every few seconds
// so that a renewed certificate is served without a restart, but it takes whatever the files
// hold: a certificate renewed without its key, a truncated copy or a key of another certificate
// broke every new connection, and the coordinator logged only gRPC internals. The guard gives
// gRPC copies of the files in a private folder and refreshes them only when the user's files
// change into a set ReadServerTlsFiles accepts; otherwise the previous set stays served and the
// reason is reported once per change, naming the file.
//
// Thread safety: Poll and copies() may be called from any thread (Poll serialises on a mutex);
// Start runs Poll on a thread of its own until the guard is destroyed.
#ifndef DAPPLE_COMMON_TLS_FILE_GUARD_H_
#define DAPPLE_COMMON_TLS_FILE_GUARD_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/grpc_tls.h"

namespace dapple {

// What a Poll found: the user's files changed and are served from now on (`loaded`), or changed
// into something unusable and the previous set is kept. `message` is one line for the log (file
// paths and the rule broken, never the files' contents).
struct TlsReloadEvent {
  bool loaded = false;
  std::string message;
};

class ServerTlsFileGuard {
 public:
  // Checks `files` (ReadServerTlsFiles: its kInvalidArgument naming the flag), then copies them
  // into a new folder of this process's own (dapple-coordinator-tls-<pid>-<random>, mode 0700,
  // under $TMPDIR or /tmp; files 0600). First removes the folders there of this user's
  // coordinator processes that no longer run (a kill -9 leaves its folder and key copy).
  // kInternal when the folder or a copy cannot be written. `files.cert_file` must be set.
  static absl::StatusOr<std::unique_ptr<ServerTlsFileGuard>> Create(const ServerTlsFiles& files);
  ~ServerTlsFileGuard();  // stops Start's thread, removes the folder
  ServerTlsFileGuard(const ServerTlsFileGuard&) = delete;
  ServerTlsFileGuard& operator=(const ServerTlsFileGuard&) = delete;

  // The copies' paths (client_ca_file empty when the user gave none): what gRPC watches.
  const ServerTlsFiles& copies() const { return copies_; }

  // Reads the user's files once. nullopt when their contents are those of the last Poll (or of
  // Create); else the event: a set that ReadServerTlsFiles accepts is copied (each copy written
  // aside and renamed over, the key first) and `loaded`, any other is left and reported.
  std::optional<TlsReloadEvent> Poll();

  // Polls every `interval` on a thread of its own, giving each event to `on_event` (on that
  // thread). Once per guard.
  void Start(absl::Duration interval, std::function<void(const TlsReloadEvent&)> on_event);

 private:
  ServerTlsFileGuard(ServerTlsFiles files, std::string folder);
  absl::Status WriteCopies(const ServerTlsPem& pem);

  const ServerTlsFiles files_;
  const std::string folder_;
  ServerTlsFiles copies_;
  absl::Mutex mu_;
  std::string last_seen_ ABSL_GUARDED_BY(mu_);  // the user's files' texts at the last look
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// The coordinator's server credentials: MakeServerCredentials' rules and messages on `files`
// (plain text when cert_file and key_file are empty), TLS served from a guard's copies. The
// caller keeps `guard` while the server runs and may Start it.
struct ServerTls {
  std::shared_ptr<grpc::ServerCredentials> credentials;
  std::unique_ptr<ServerTlsFileGuard> guard;  // null for plain text
};
absl::StatusOr<ServerTls> MakeGuardedServerCredentials(const ServerTlsFiles& files);

}  // namespace dapple

#endif  // DAPPLE_COMMON_TLS_FILE_GUARD_H_
