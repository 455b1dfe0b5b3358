// TLS for dapple's gRPC connections (issue 16, "TLS"): the coordinator's server credentials
// (certificate and key files, reloaded when they change; optionally client certificates
// required: mutual TLS for workers), and the credentials dapplectl and workers connect with
// (the CA file that verifies the coordinator, optionally their own certificate). Plain text is
// the caller's decision (RequirePlaintextAllowed): only where asked for, or on loopback.
//
// Thread safety: the functions are thread-safe.
#ifndef DAPPLE_COMMON_GRPC_TLS_H_
#define DAPPLE_COMMON_GRPC_TLS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"

namespace dapple {

// How often the coordinator looks at its certificate files for a change, seconds.
inline constexpr unsigned int kTlsReloadIntervalS = 10;

struct ServerTlsFiles {
  std::string cert_file;       // PEM certificate chain; empty (with key_file): plain text
  std::string key_file;        // PEM private key
  std::string client_ca_file;  // non-empty: clients must present a certificate it signed
};

// The server files' shape, without reading them: both of cert and key or neither, a client CA
// only with them. kInvalidArgument naming the flags ("--tls-cert and --tls-key go together:
// give both or neither", "--tls-client-ca needs --tls-cert and --tls-key: ...").
absl::Status CheckServerTlsShape(const ServerTlsFiles& files);

// The server files' texts, each checked (ReadServerTlsFiles).
struct ServerTlsPem {
  std::string cert;
  std::string key;
  std::string client_ca;  // empty without a client CA file
};

// Reads and checks the files of `files` (cert_file set): each readable and PEM, the certificate
// a certificate whose private key key_file holds, the client CA (if any) a certificate.
// kInvalidArgument naming the flag and the rule: "--tls-cert /x.pem: No such file or
// directory", "--tls-key k.pem: not PEM (no -----BEGIN line)", "--tls-key k.pem is not the
// private key of --tls-cert c.pem".
absl::StatusOr<ServerTlsPem> ReadServerTlsFiles(const ServerTlsFiles& files);

// Plain text when cert_file and key_file are both empty (and client_ca_file too), else TLS
// whose certificate and key gRPC re-reads from these paths every kTlsReloadIntervalS, taking
// whatever they hold then: the coordinator serves through MakeGuardedServerCredentials
// (tls_file_guard.h), which gives it copies that change only to a working set.
// kInvalidArgument naming the flag (--tls-cert, --tls-key, --tls-client-ca) for one of
// cert/key without the other, a client CA without a certificate, or ReadServerTlsFiles' errors.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTlsFiles& files);

// The coordinator's TLS flags' rules, without reading the files: --tls-cert and --tls-key
// together, --tls-client-ca only with them, --plaintext not with them, and without TLS a
// loopback `listen` or --plaintext (RequirePlaintextAllowed). kInvalidArgument with the rule
// ("--plaintext and --tls-cert contradict each other: choose one", ...).
absl::Status CheckServerTlsFlags(const ServerTlsFiles& files, bool plaintext,
                                 const std::string& listen);

struct ClientTlsFiles {
  std::string ca_file;    // PEM CA bundle that signed the coordinator's certificate; empty:
                          // plain text
  std::string cert_file;  // for mutual TLS: this client's certificate chain and key
  std::string key_file;
  // The flag names for messages ("--ca", "--tls-cert", "--tls-key").
  std::string ca_flag = "--ca";
  std::string cert_flag = "--tls-cert";
  std::string key_flag = "--tls-key";
};

// Plain text for an empty ca_file (and no certificate), else TLS verifying the server against
// the CA. kInvalidArgument as MakeServerCredentials, naming the client's flags.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientTlsFiles& files);

// Whether HOST:PORT names this machine only: 127.0.0.0/8, [::1], localhost.
bool IsLoopbackAddress(const std::string& address);

// OK when plain text to or on `address` is allowed: asked for (`plaintext`), or a loopback
// address. kInvalidArgument otherwise: "<what> <address> is not a loopback address: give
// <tls_hint>, or <plaintext_flag> to send tokens and jobs unencrypted".
absl::Status RequirePlaintextAllowed(const std::string& what, const std::string& address,
                                     bool plaintext, const std::string& tls_hint,
                                     const std::string& plaintext_flag);

// Why a call over TLS failed, from gRPC's message, when TLS explains it; "" otherwise:
// "TLS: the coordinator's certificate is not signed by the --ca file (certificate verify
// failed)",
// "TLS: the coordinator's certificate does not hold the name dialled: <gRPC's message> (dial a
// name of its subjectAltName, or issue it one for this name)", "TLS handshake failed: <message>".
std::string TlsFailureReason(const std::string& grpc_message);

// Whether gRPC's message says the peer closed the connection ("Socket closed", "Connection
// reset", "end of file"): what a coordinator does, without a word, to a plain-text client when it
// serves TLS, and to a TLS client without the client certificate mutual TLS wants.
bool IsClosedByPeer(const std::string& grpc_message);

// What to check when the coordinator closed the connection (IsClosedByPeer), by how the client
// connected: plain text: "if the coordinator serves TLS, give <ca_hint>"; TLS without a client
// certificate: "if the coordinator requires client certificates (mutual TLS), give --tls-cert
// and --tls-key"; with one: "if the coordinator requires client certificates (mutual TLS), check
// that --tls-cert is signed by the CA of its --tls-client-ca". The one wording of the worker's
// and dapplectl's messages.
std::string ClosedByCoordinatorHint(bool tls, bool client_certificate, const std::string& ca_hint);

}  // namespace dapple

#endif  // DAPPLE_COMMON_GRPC_TLS_H_
