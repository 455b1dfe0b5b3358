#include "common/grpc_tls.h"

#include <cstdio>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple {
namespace {

using ::testing::HasSubstr;

std::string Write(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(GrpcTlsTest, LoopbackAddresses) {
  EXPECT_TRUE(IsLoopbackAddress("127.0.0.1:7600"));
  EXPECT_TRUE(IsLoopbackAddress("127.3.4.5:0"));
  EXPECT_TRUE(IsLoopbackAddress("localhost:7600"));
  EXPECT_TRUE(IsLoopbackAddress("[::1]:7600"));
  EXPECT_FALSE(IsLoopbackAddress("0.0.0.0:7600"));
  EXPECT_FALSE(IsLoopbackAddress("10.0.0.7:7600"));
  EXPECT_FALSE(IsLoopbackAddress("[::]:7600"));
  EXPECT_FALSE(IsLoopbackAddress("coordinator.dapple.svc:7600"));
  EXPECT_FALSE(IsLoopbackAddress("127.0.0.1.evil.example:7600"));
}

TEST(GrpcTlsTest, PlaintextOnlyOnLoopbackOrWhenAskedFor) {
  EXPECT_TRUE(
      RequirePlaintextAllowed("--listen", "127.0.0.1:7600", false, "x", "--plaintext").ok());
  EXPECT_TRUE(RequirePlaintextAllowed("--listen", "0.0.0.0:7600", true, "x", "--plaintext").ok());
  EXPECT_EQ(RequirePlaintextAllowed("--listen", "0.0.0.0:7600", false, "--tls-cert and --tls-key",
                                    "--plaintext")
                .message(),
            "--listen 0.0.0.0:7600 is not a loopback address: give --tls-cert and --tls-key, or "
            "--plaintext to send tokens and jobs unencrypted");
}

TEST(GrpcTlsTest, FilesAreCheckedUpFrontNamingTheFlag) {
  EXPECT_TRUE(MakeServerCredentials({}).ok());
  EXPECT_TRUE(MakeChannelCredentials({}).ok());
  EXPECT_THAT(MakeServerCredentials({"c.pem", "", ""}).status().message(),
              HasSubstr("--tls-cert and --tls-key go together"));
  EXPECT_THAT(MakeServerCredentials({"", "", "ca.pem"}).status().message(),
              HasSubstr("--tls-client-ca needs --tls-cert and --tls-key"));
  EXPECT_EQ(MakeServerCredentials({"/no/such.pem", "/no/key.pem", ""}).status().message(),
            "--tls-cert /no/such.pem: No such file or directory");
  const std::string not_pem = Write("not.pem", "hello");
  EXPECT_EQ(MakeServerCredentials({not_pem, not_pem, ""}).status().message(),
            "--tls-cert " + not_pem + ": not PEM (no -----BEGIN line)");
  ClientTlsFiles client;
  client.ca_file = "/no/ca.pem";
  EXPECT_EQ(MakeChannelCredentials(client).status().message(),
            "--ca /no/ca.pem: No such file or directory");
  client.ca_file = "";
  client.cert_file = not_pem;
  client.key_file = not_pem;
  EXPECT_THAT(MakeChannelCredentials(client).status().message(),
              HasSubstr("--tls-cert needs --ca"));
}

}  // namespace
// Failures TLS explains are named; a plain-text client's closed connection hints at TLS.
TEST(GrpcTlsTest, TlsFailuresAreNamed) {
  EXPECT_EQ(TlsFailureReason("failed to connect: ... certificate verify failed ..."),
            "TLS: the coordinator's certificate is not signed by the --ca file (certificate "
            "verify failed)");
  EXPECT_EQ(TlsFailureReason("Peer name 127.0.0.2 is not in peer certificate"),
            "TLS: the coordinator's certificate does not hold the name dialled: Peer name "
            "127.0.0.2 is not in peer certificate (dial a name of its subjectAltName, or issue it "
            "one for this name)");
  EXPECT_EQ(TlsFailureReason("Ssl handshake failed: SSL_ERROR_SSL"),
            "TLS handshake failed: Ssl handshake failed: SSL_ERROR_SSL");
  EXPECT_EQ(TlsFailureReason("Connection refused"), "");
  EXPECT_TRUE(IsClosedByPeer("Socket closed"));
  EXPECT_TRUE(IsClosedByPeer("Connection reset by peer"));
  EXPECT_FALSE(IsClosedByPeer("Connection refused"));
  EXPECT_EQ(ClosedByCoordinatorHint(false, false, "--ca FILE"),
            "if the coordinator serves TLS, give --ca FILE");
  EXPECT_EQ(ClosedByCoordinatorHint(true, false, "--ca FILE"),
            "if the coordinator requires client certificates (mutual TLS), give --tls-cert and "
            "--tls-key");
  EXPECT_EQ(ClosedByCoordinatorHint(true, true, "--ca FILE"),
            "if the coordinator requires client certificates (mutual TLS), check that --tls-cert "
            "is signed by the CA of its --tls-client-ca");
}

}  // namespace dapple
