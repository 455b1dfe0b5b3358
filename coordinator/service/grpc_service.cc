#include "coordinator/service/grpc_service.h"

#include <errno.h>
#include <netdb.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace dapple::coordinator {
namespace {

// How long Shutdown lets gRPC's GOAWAY travel before it ends the watch streams. A client whose
// stream ends goes on with GetJob at once; had it not yet seen the GOAWAY, that call would go
// to this closing server, which cancels it (CANCELLED) instead of sending it elsewhere.
constexpr absl::Duration kGoawayLead = absl::Milliseconds(50);

// Why binding `address` ("host:port", "[v6]:port") fails, found by binding a plain socket the
// way gRPC does (SO_REUSEADDR, no SO_REUSEPORT): gRPC reports only that it failed. "" when the
// probe binds (the failure was something else) or the address cannot be split.
std::string BindFailureReason(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return "";
  std::string host = address.substr(0, colon);
  const std::string port = address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int rc =
          getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found);
      rc != 0) {
    return absl::StrCat("cannot resolve '", host, "': ", gai_strerror(rc));
  }
  std::string why;
  for (addrinfo* a = found; a != nullptr && why.empty(); a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0) {
      why = strerror(errno);
      if (!why.empty()) why[0] = absl::ascii_tolower(why[0]);
    }
    close(fd);
  }
  freeaddrinfo(found);
  return why;
}

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  const absl::string_view message = status.message();
  if (message.size() <= kMaxStatusMessageBytes) {
    return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(message));
  }
  size_t cut = kMaxStatusMessageBytes;
  while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80) --cut;
  return grpc::Status(
      static_cast<grpc::StatusCode>(status.code()),
      absl::StrCat(message.substr(0, cut), " ... (", message.size() - cut, " more bytes)"));
}

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(
    const std::string& address, CoordinatorService* service, GrpcAuth auth,
    std::shared_ptr<grpc::ServerCredentials> credentials) {
  if (auth.authenticator == nullptr || auth.credentials == nullptr || auth.audit == nullptr) {
    return absl::InvalidArgumentError(
        "GrpcServer::Start needs an authenticator, a credential "
        "store and an audit log");
  }
  std::unique_ptr<GrpcServer> server(new GrpcServer(service, auth));
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address,
                           credentials != nullptr ? credentials : grpc::InsecureServerCredentials(),
                           &server->port_);
  builder.RegisterService(&server->coordinator_);
  builder.RegisterService(&server->worker_control_);
  builder.RegisterService(&server->admin_);
  builder.SetMaxReceiveMessageSize(kMaxReceiveMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  // `dapplectl watch` keeps a quiet stream open for as long as a job runs and pings it every
  // 30 s; gRPC's defaults would answer those pings with GOAWAY ("too many pings").
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  // gRPC sets SO_REUSEPORT by default, which lets a second coordinator bind a port the first
  // listens on and split its clients between the two.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    const std::string why = BindFailureReason(address);
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", address, why.empty() ? "" : ": ", why));
  }
  return server;
}

GrpcServer::~GrpcServer() { Shutdown(absl::ZeroDuration()); }

void GrpcServer::Shutdown(absl::Duration grace) {
  if (server_ == nullptr) return;
  std::call_once(shutdown_once_, [&] {
    const absl::Time deadline = absl::Now() + grace;
    // grpc::Server::Shutdown blocks until the handlers return or the deadline passes (then
    // it cancels them): run it aside, and end the watches, which would otherwise run on.
    std::thread drain([&] { server_->Shutdown(absl::ToChronoTime(deadline)); });
    absl::SleepFor(std::min(kGoawayLead, grace));
    service_->EndWatches();
    drain.join();
    server_->Wait();
  });
}

}  // namespace dapple::coordinator
