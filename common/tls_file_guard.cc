#include "common/tls_file_guard.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace dapple {
namespace {

// The three files' texts as one string, to tell whether anything changed; a file that cannot be
// read contributes its error instead, so a file that goes missing counts as a change.
std::string Snapshot(const ServerTlsFiles& files) {
  std::string all;
  for (const std::string* path : {&files.cert_file, &files.key_file, &files.client_ca_file}) {
    if (path->empty()) continue;
    std::ifstream in(*path, std::ios::binary);
    if (!in) {
      absl::StrAppend(&all, "\n#unreadable ", *path, " ", errno, "\n");
      continue;
    }
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    absl::StrAppend(&all, text.size(), ":", text);
  }
  return all;
}

// Writes `text` to `path` through a file beside it, renamed over: gRPC never reads half a copy.
absl::Status WriteAtomically(const std::string& path, const std::string& text) {
  const std::string aside = path + ".new";
  FILE* f = std::fopen(aside.c_str(), "wb");
  if (f == nullptr) {
    return absl::InternalError(
        absl::StrCat("TLS: cannot write ", aside, ": ", std::strerror(errno)));
  }
  ::fchmod(fileno(f), 0600);
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed || std::rename(aside.c_str(), path.c_str()) != 0) {
    const int error = errno;
    std::remove(aside.c_str());
    return absl::InternalError(
        absl::StrCat("TLS: cannot write ", path, ": ", std::strerror(error)));
  }
  return absl::OkStatus();
}

// The copies' folders: <prefix><pid>-<random>, so that a later start can tell whose they are.
constexpr char kFolderPrefix[] = "dapple-coordinator-tls-";

// A coordinator killed (kill -9, a crash) leaves its folder and the key copy in it: each start
// removes the folders, under `parent`, of this user's coordinators that no longer run.
void RemoveFoldersOfDeadProcesses(const std::string& parent) {
  DIR* dir = ::opendir(parent.c_str());
  if (dir == nullptr) return;
  while (const dirent* entry = ::readdir(dir)) {
    const absl::string_view name = entry->d_name;
    if (!absl::StartsWith(name, kFolderPrefix)) continue;
    const absl::string_view rest = name.substr(sizeof(kFolderPrefix) - 1);
    int pid = 0;
    if (!absl::SimpleAtoi(rest.substr(0, rest.find('-')), &pid) || pid <= 0) continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to ask
    const std::string path = absl::StrCat(parent, "/", name);
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::getuid()) {
      continue;
    }
    for (const char* file : {"/cert.pem", "/key.pem", "/client_ca.pem"}) {
      std::remove(absl::StrCat(path, file).c_str());
      std::remove(absl::StrCat(path, file, ".new").c_str());  // a write cut short
    }
    ::rmdir(path.c_str());
  }
  ::closedir(dir);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ServerTlsFileGuard>> ServerTlsFileGuard::Create(
    const ServerTlsFiles& files) {
  // Read before the folder exists: a refusal leaves nothing behind.
  const std::string seen = Snapshot(files);
  absl::StatusOr<ServerTlsPem> pem = ReadServerTlsFiles(files);
  if (!pem.ok()) return pem.status();
  const char* tmp = std::getenv("TMPDIR");
  const std::string parent = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  RemoveFoldersOfDeadProcesses(parent);
  std::string folder = absl::StrCat(parent, "/", kFolderPrefix, ::getpid(), "-XXXXXX");
  std::vector<char> name(folder.begin(), folder.end());
  name.push_back('\0');
  if (::mkdtemp(name.data()) == nullptr) {  // mode 0700
    return absl::InternalError(
        absl::StrCat("TLS: cannot make a folder for the certificate copies (", folder,
                     "): ", std::strerror(errno)));
  }
  std::unique_ptr<ServerTlsFileGuard> guard(new ServerTlsFileGuard(files, name.data()));
  if (absl::Status s = guard->WriteCopies(*pem); !s.ok()) return s;
  absl::MutexLock lock(&guard->mu_);
  guard->last_seen_ = seen;
  return guard;
}

ServerTlsFileGuard::ServerTlsFileGuard(ServerTlsFiles files, std::string folder)
    : files_(std::move(files)), folder_(std::move(folder)) {
  copies_.cert_file = folder_ + "/cert.pem";
  copies_.key_file = folder_ + "/key.pem";
  if (!files_.client_ca_file.empty()) copies_.client_ca_file = folder_ + "/client_ca.pem";
}

ServerTlsFileGuard::~ServerTlsFileGuard() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
  for (const std::string* path : {&copies_.cert_file, &copies_.key_file, &copies_.client_ca_file}) {
    if (!path->empty()) std::remove(path->c_str());
  }
  ::rmdir(folder_.c_str());
}

absl::Status ServerTlsFileGuard::WriteCopies(const ServerTlsPem& pem) {
  // The key first: gRPC re-reads a pair whose files changed while it read them, and a new key
  // beside the old certificate lasts only until the certificate's rename right after.
  if (absl::Status s = WriteAtomically(copies_.key_file, pem.key); !s.ok()) return s;
  if (absl::Status s = WriteAtomically(copies_.cert_file, pem.cert); !s.ok()) return s;
  if (!copies_.client_ca_file.empty()) {
    if (absl::Status s = WriteAtomically(copies_.client_ca_file, pem.client_ca); !s.ok()) return s;
  }
  return absl::OkStatus();
}

std::optional<TlsReloadEvent> ServerTlsFileGuard::Poll() {
  absl::MutexLock lock(&mu_);
  const std::string seen = Snapshot(files_);
  if (seen == last_seen_) return std::nullopt;
  last_seen_ = seen;
  TlsReloadEvent event;
  absl::StatusOr<ServerTlsPem> pem = ReadServerTlsFiles(files_);
  if (pem.ok()) {
    if (absl::Status s = WriteCopies(*pem); !s.ok()) {
      event.message = absl::StrCat(
          "TLS: the certificate files changed but could not be taken, still serving the previous "
          "ones: ",
          s.message());
      return event;
    }
    event.loaded = true;
    event.message = absl::StrCat("TLS: the certificate files changed; serving --tls-cert ",
                                 files_.cert_file, " and its key as they are now");
    return event;
  }
  event.message = absl::StrCat(
      "TLS: the certificate files changed but are not usable, still serving the previous ones "
      "(new connections keep working; fix the files and they are taken within seconds): ",
      pem.status().message());
  return event;
}

void ServerTlsFileGuard::Start(absl::Duration interval,
                               std::function<void(const TlsReloadEvent&)> on_event) {
  thread_ = std::thread([this, interval, on_event = std::move(on_event)] {
    while (true) {
      {
        absl::MutexLock lock(&mu_);
        if (mu_.AwaitWithTimeout(absl::Condition(&stop_), interval)) return;
      }
      if (std::optional<TlsReloadEvent> event = Poll()) on_event(*event);
    }
  });
}

}  // namespace dapple

namespace dapple {

absl::StatusOr<ServerTls> MakeGuardedServerCredentials(const ServerTlsFiles& files) {
  if (absl::Status s = CheckServerTlsShape(files); !s.ok()) return s;
  ServerTls tls;
  if (files.cert_file.empty()) {
    tls.credentials = grpc::InsecureServerCredentials();
    return tls;
  }
  absl::StatusOr<std::unique_ptr<ServerTlsFileGuard>> guard = ServerTlsFileGuard::Create(files);
  if (!guard.ok()) return guard.status();
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      MakeServerCredentials((*guard)->copies());
  if (!credentials.ok()) return credentials.status();
  tls.credentials = *std::move(credentials);
  tls.guard = *std::move(guard);
  return tls;
}

}  // namespace dapple
