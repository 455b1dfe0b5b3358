#include "common/grpc_tls.h"

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"

namespace dapple {
namespace {

// The file's text, checked to hold a PEM block, so that a wrong path or file is refused at
// start with the flag's name rather than at the first handshake.
absl::StatusOr<std::string> ReadPem(const std::string& flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": ", std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (!absl::StrContains(text.str(), "-----BEGIN ")) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " ", path, ": not PEM (no -----BEGIN line)"));
  }
  return text.str();
}

// What OpenSSL makes of a PEM text: a certificate (the first of a chain or bundle), or a private
// key. gRPC would only say "Invalid private key" in its log and serve nobody, or fail every
// connection with "empty address list": the mistakes are named at start instead.
X509* ParseCertificate(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  return cert;
}

EVP_PKEY* ParseKey(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  return key;
}

absl::Status CheckCertificate(const std::string& flag, const std::string& path,
                              const std::string& pem) {
  X509* cert = ParseCertificate(pem);
  if (cert == nullptr) {
    // Say which: a renewal's certificate cut short reads differently from a key given for it.
    const char* what = absl::StrContains(pem, "-----BEGIN CERTIFICATE-----")
                           ? "its certificate block does not parse: cut short or damaged"
                       : absl::StrContains(pem, "PRIVATE KEY-----") ? "a private key was given"
                                                                    : "no certificate block";
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " ", path, ": not a PEM certificate (", what, ")"));
  }
  X509_free(cert);
  return absl::OkStatus();
}

// The certificate and the key must be a pair (the key signs what the certificate's public key
// verifies).
absl::Status CheckPair(const std::string& cert_flag, const std::string& cert_path,
                       const std::string& cert_pem, const std::string& key_flag,
                       const std::string& key_path, const std::string& key_pem) {
  if (absl::Status s = CheckCertificate(cert_flag, cert_path, cert_pem); !s.ok()) return s;
  EVP_PKEY* key = ParseKey(key_pem);
  if (key == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(key_flag, " ", key_path, ": not a PEM private key"));
  }
  X509* cert = ParseCertificate(cert_pem);
  const bool match = X509_check_private_key(cert, key) == 1;
  X509_free(cert);
  EVP_PKEY_free(key);
  if (!match) {
    return absl::InvalidArgumentError(absl::StrCat(
        key_flag, " ", key_path, " is not the private key of ", cert_flag, " ", cert_path));
  }
  return absl::OkStatus();
}

absl::Status PairComplete(const std::string& cert, const std::string& key,
                          const std::string& cert_flag, const std::string& key_flag) {
  if (cert.empty() != key.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(cert_flag, " and ", key_flag, " go together: give both or neither"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckServerTlsShape(const ServerTlsFiles& files) {
  if (absl::Status s = PairComplete(files.cert_file, files.key_file, "--tls-cert", "--tls-key");
      !s.ok()) {
    return s;
  }
  if (files.cert_file.empty() && !files.client_ca_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls-client-ca needs --tls-cert and --tls-key: mutual TLS is TLS first");
  }
  return absl::OkStatus();
}

absl::Status CheckServerTlsFlags(const ServerTlsFiles& files, bool plaintext,
                                 const std::string& listen) {
  if (absl::Status s = CheckServerTlsShape(files); !s.ok()) return s;
  if (!files.cert_file.empty()) {
    if (plaintext) {
      return absl::InvalidArgumentError(
          "--plaintext and --tls-cert contradict each other: choose one");
    }
    return absl::OkStatus();
  }
  return RequirePlaintextAllowed("--listen", listen, plaintext, "--tls-cert and --tls-key",
                                 "--plaintext");
}

absl::StatusOr<ServerTlsPem> ReadServerTlsFiles(const ServerTlsFiles& files) {
  ServerTlsPem pem;
  absl::StatusOr<std::string> cert = ReadPem("--tls-cert", files.cert_file);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadPem("--tls-key", files.key_file);
  if (!key.ok()) return key.status();
  if (absl::Status s =
          CheckPair("--tls-cert", files.cert_file, *cert, "--tls-key", files.key_file, *key);
      !s.ok()) {
    return s;
  }
  pem.cert = *std::move(cert);
  pem.key = *std::move(key);
  if (!files.client_ca_file.empty()) {
    absl::StatusOr<std::string> ca = ReadPem("--tls-client-ca", files.client_ca_file);
    if (!ca.ok()) return ca.status();
    if (absl::Status s = CheckCertificate("--tls-client-ca", files.client_ca_file, *ca); !s.ok()) {
      return s;
    }
    pem.client_ca = *std::move(ca);
  }
  return pem;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTlsFiles& files) {
  if (absl::Status s = CheckServerTlsShape(files); !s.ok()) return s;
  if (files.cert_file.empty()) return grpc::InsecureServerCredentials();
  if (absl::Status s = ReadServerTlsFiles(files).status(); !s.ok()) return s;
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      files.key_file, files.cert_file, files.client_ca_file, kTlsReloadIntervalS);
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (files.client_ca_file.empty()) {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  } else {
    options.watch_root_certs();
    options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  }
  return grpc::experimental::TlsServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientTlsFiles& files) {
  if (absl::Status s =
          PairComplete(files.cert_file, files.key_file, files.cert_flag, files.key_flag);
      !s.ok()) {
    return s;
  }
  if (files.ca_file.empty()) {
    if (!files.cert_file.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(files.cert_flag, " needs ", files.ca_flag,
                                                     ": a client certificate is sent over TLS"));
    }
    return grpc::InsecureChannelCredentials();
  }
  grpc::SslCredentialsOptions options;
  absl::StatusOr<std::string> ca = ReadPem(files.ca_flag, files.ca_file);
  if (!ca.ok()) return ca.status();
  if (absl::Status s = CheckCertificate(files.ca_flag, files.ca_file, *ca); !s.ok()) return s;
  options.pem_root_certs = *std::move(ca);
  if (!files.cert_file.empty()) {
    absl::StatusOr<std::string> cert = ReadPem(files.cert_flag, files.cert_file);
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadPem(files.key_flag, files.key_file);
    if (!key.ok()) return key.status();
    if (absl::Status s = CheckPair(files.cert_flag, files.cert_file, *cert, files.key_flag,
                                   files.key_file, *key);
        !s.ok()) {
      return s;
    }
    options.pem_cert_chain = *std::move(cert);
    options.pem_private_key = *std::move(key);
  }
  return grpc::SslCredentials(options);
}

bool IsLoopbackAddress(const std::string& address) {
  std::string host = address;
  if (absl::StartsWith(host, "[")) {
    const size_t close = host.find(']');
    host = close == std::string::npos ? host : host.substr(1, close - 1);
  } else if (const size_t colon = host.rfind(':'); colon != std::string::npos) {
    host = host.substr(0, colon);
  }
  if (host == "localhost" || host == "::1") return true;
  const std::vector<std::string> octets = absl::StrSplit(host, '.');
  int first = 0;
  return octets.size() == 4 && absl::SimpleAtoi(octets[0], &first) && first == 127;
}

absl::Status RequirePlaintextAllowed(const std::string& what, const std::string& address,
                                     bool plaintext, const std::string& tls_hint,
                                     const std::string& plaintext_flag) {
  if (plaintext || IsLoopbackAddress(address)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, " ", address, " is not a loopback address: give ", tls_hint, ", or ",
                   plaintext_flag, " to send tokens and jobs unencrypted"));
}

std::string TlsFailureReason(const std::string& grpc_message) {
  const std::string m = absl::AsciiStrToLower(grpc_message);
  if (absl::StrContains(m, "certificate verify failed")) {
    return "TLS: the coordinator's certificate is not signed by the --ca file (certificate "
           "verify failed)";
  }
  if (absl::StrContains(m, "not in peer certificate")) {
    return absl::StrCat(
        "TLS: the coordinator's certificate does not hold the name dialled: ", grpc_message,
        " (dial a name of its subjectAltName, or issue it one for this name)");
  }
  if (absl::StrContains(m, "handshake failed")) {
    return absl::StrCat("TLS handshake failed: ", grpc_message);
  }
  return "";
}

bool IsClosedByPeer(const std::string& grpc_message) {
  const std::string m = absl::AsciiStrToLower(grpc_message);
  for (const char* closed : {"socket closed", "connection reset", "end of file"}) {
    if (absl::StrContains(m, closed)) return true;
  }
  return false;
}

std::string ClosedByCoordinatorHint(bool tls, bool client_certificate, const std::string& ca_hint) {
  if (!tls) return absl::StrCat("if the coordinator serves TLS, give ", ca_hint);
  if (!client_certificate) {
    return "if the coordinator requires client certificates (mutual TLS), give --tls-cert and "
           "--tls-key";
  }
  // The coordinator closes the handshake on a client certificate its --tls-client-ca did not
  // sign; gRPC then reports a closed socket, nothing about the certificate.
  return "if the coordinator requires client certificates (mutual TLS), check that --tls-cert is "
         "signed by the CA of its --tls-client-ca";
}

}  // namespace dapple
