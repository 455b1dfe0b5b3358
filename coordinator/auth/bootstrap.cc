#include "coordinator/auth/bootstrap.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace dapple::coordinator::auth {
namespace {

// An open file descriptor closed when it goes out of scope.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

absl::Status OpenSecret(const char* what, const std::string& path, Fd* out) {
  out->fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  // An existing file keeps its mode through O_CREAT: make it private too.
  if (out->fd < 0 || fchmod(out->fd, 0600) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot write the ", what, " file '", path, "': ", strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status WriteSecret(const char* what, const std::string& path, const Fd& fd,
                         const std::string& token) {
  const std::string line = token + "\n";
  if (write(fd.fd, line.data(), line.size()) != static_cast<ssize_t>(line.size()) ||
      fsync(fd.fd) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot write the ", what, " file '", path, "': ", strerror(errno)));
  }
  return absl::OkStatus();
}

// A first start never overwrites a token: a file that holds one belongs to another database
// (two in one folder share the default names), whose admin would lose the only copy of its
// secret.
absl::Status RefuseExistingToken(const char* what, const char* flag, const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || st.st_size == 0) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "this database has no admin yet, but the ", what, " file '", path,
      "' already holds a token (another database's in the same folder?); a first start never "
      "overwrites one: give this database its own ",
      flag, " (or --db in another folder), or move the file away if its database is gone"));
}

}  // namespace

std::string DefaultTokenFile(const std::string& db_path, const std::string& name) {
  const size_t slash = db_path.rfind('/');
  if (slash == std::string::npos) return name;
  return absl::StrCat(db_path.substr(0, slash + 1), name);
}

absl::StatusOr<bool> Bootstrap(CredentialStore& store, const std::string& admin_token_file,
                               const std::string& join_token_file) {
  absl::StatusOr<bool> has_admin = store.HasAdmin();
  if (!has_admin.ok()) return has_admin.status();
  if (*has_admin) return false;
  if (absl::Status s = RefuseExistingToken("admin token", "--admin-token-file", admin_token_file);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = RefuseExistingToken("join token", "--join-token-file", join_token_file);
      !s.ok()) {
    return s;
  }
  Fd admin_fd;
  Fd join_fd;
  if (absl::Status s = OpenSecret("admin token", admin_token_file, &admin_fd); !s.ok()) return s;
  if (absl::Status s = OpenSecret("join token", join_token_file, &join_fd); !s.ok()) return s;
  if (absl::Status s = store.CreateUser("", "admin", Role::kAdmin); !s.ok()) return s;
  absl::StatusOr<CredentialStore::IssuedToken> admin = store.IssueToken("admin", std::nullopt);
  if (!admin.ok()) return admin.status();
  absl::StatusOr<CredentialStore::IssuedToken> join = store.RotateJoinToken();
  if (!join.ok()) return join.status();
  if (absl::Status s = WriteSecret("admin token", admin_token_file, admin_fd, admin->token);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = WriteSecret("join token", join_token_file, join_fd, join->token); !s.ok()) {
    return s;
  }
  return true;
}

absl::StatusOr<std::optional<std::string>> RecoverAdminToken(CredentialStore& store,
                                                             const std::string& admin_token_file) {
  absl::StatusOr<std::optional<std::string>> admin = store.RecoverableAdmin();
  if (!admin.ok() || !admin->has_value()) return admin;
  Fd fd;
  if (absl::Status s = OpenSecret("admin token", admin_token_file, &fd); !s.ok()) return s;
  absl::StatusOr<CredentialStore::IssuedToken> token = store.IssueToken(**admin, std::nullopt);
  if (!token.ok()) return token.status();
  if (absl::Status s = WriteSecret("admin token", admin_token_file, fd, token->token); !s.ok()) {
    return s;
  }
  return admin;
}

}  // namespace dapple::coordinator::auth
