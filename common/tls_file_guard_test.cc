#include "common/tls_file_guard.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple {
namespace {

using ::testing::HasSubstr;

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void Write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// Real certificates, made by openssl in a fresh folder: a self-signed pair `name`.pem/.key.
class TlsFileGuardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/tls-guard-" + std::to_string(::getpid());
    ASSERT_EQ(std::system(("rm -rf " + dir_ + " && mkdir -p " + dir_).c_str()), 0);
    for (const char* name : {"a", "b"}) MakePair(name);
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }

  void MakePair(const std::string& name) {
    const std::string cmd =
        "cd " + dir_ + " && openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=" + name +
        " -keyout " + name + ".key -out " + name + ".pem > /dev/null 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  std::string Path(const std::string& file) const { return dir_ + "/" + file; }

  std::string dir_;
};

TEST_F(TlsFileGuardTest, ServesCopiesThatChangeOnlyToAWorkingPair) {
  // The user's files, which the test then changes as an operator renewing them would.
  Write(Path("cert.pem"), Read(Path("a.pem")));
  Write(Path("key.pem"), Read(Path("a.key")));
  ServerTlsFiles files{Path("cert.pem"), Path("key.pem"), ""};
  absl::StatusOr<std::unique_ptr<ServerTlsFileGuard>> made = ServerTlsFileGuard::Create(files);
  ASSERT_TRUE(made.ok()) << made.status();
  ServerTlsFileGuard& guard = **made;
  const ServerTlsFiles copies = guard.copies();
  EXPECT_EQ(Read(copies.cert_file), Read(Path("a.pem")));
  EXPECT_EQ(Read(copies.key_file), Read(Path("a.key")));
  EXPECT_TRUE(copies.client_ca_file.empty());
  struct stat st {};
  ASSERT_EQ(::stat(copies.key_file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);     // the private key stays the owner's alone
  EXPECT_FALSE(guard.Poll().has_value());  // nothing changed

  // A truncated certificate: kept, said once, naming the file.
  Write(Path("cert.pem"), "-----BEGIN CERTIFICATE-----\nMIIB\n");
  std::optional<TlsReloadEvent> event = guard.Poll();
  ASSERT_TRUE(event.has_value());
  EXPECT_FALSE(event->loaded);
  EXPECT_THAT(event->message, HasSubstr("not usable, still serving the previous ones"));
  EXPECT_THAT(event->message,
              HasSubstr("--tls-cert " + Path("cert.pem") +
                        ": not a PEM certificate (its certificate block does not parse: cut short "
                        "or damaged)"));
  EXPECT_EQ(Read(copies.cert_file), Read(Path("a.pem")));
  EXPECT_FALSE(guard.Poll().has_value());

  // The certificate renewed, its key not yet: still the old pair, the mismatch named.
  Write(Path("cert.pem"), Read(Path("b.pem")));
  event = guard.Poll();
  ASSERT_TRUE(event.has_value());
  EXPECT_FALSE(event->loaded);
  EXPECT_THAT(event->message,
              HasSubstr("--tls-key " + Path("key.pem") + " is not the private key of --tls-cert " +
                        Path("cert.pem")));
  EXPECT_EQ(Read(copies.key_file), Read(Path("a.key")));

  // ... and then the key: the new pair is served.
  Write(Path("key.pem"), Read(Path("b.key")));
  event = guard.Poll();
  ASSERT_TRUE(event.has_value());
  EXPECT_TRUE(event->loaded) << event->message;
  EXPECT_EQ(Read(copies.cert_file), Read(Path("b.pem")));
  EXPECT_EQ(Read(copies.key_file), Read(Path("b.key")));

  // A file that goes away is a change too; the pair stays.
  std::remove(Path("key.pem").c_str());
  event = guard.Poll();
  ASSERT_TRUE(event.has_value());
  EXPECT_FALSE(event->loaded);
  EXPECT_THAT(event->message, HasSubstr("--tls-key " + Path("key.pem") + ": No such file"));
  EXPECT_EQ(Read(copies.key_file), Read(Path("b.key")));

  // The copies go with the guard.
  made->reset();
  EXPECT_NE(::stat(copies.cert_file.c_str(), &st), 0);
}

// A coordinator killed with kill -9 leaves its folder, key copy and all (found by a security
// review: 22 such folders on one host). The next start removes those of processes that no longer
// run, and no other.
TEST_F(TlsFileGuardTest, AStartRemovesTheCopiesOfCoordinatorsThatNoLongerRun) {
  const std::string tmp = Path("tmp");
  ASSERT_EQ(::mkdir(tmp.c_str(), 0700), 0);
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);  // a pid that no longer runs
  const std::string dead = tmp + "/dapple-coordinator-tls-" + std::to_string(child) + "-abc123";
  const std::string alive = tmp + "/dapple-coordinator-tls-1-def456";  // init: runs
  const std::string other = tmp + "/dapple-coordinator-tls-xyz";       // not one of ours
  for (const std::string& folder : {dead, alive, other}) {
    ASSERT_EQ(::mkdir(folder.c_str(), 0700), 0);
    Write(folder + "/key.pem", "secret");
  }
  Write(dead + "/cert.pem.new", "half");
  const char* saved = std::getenv("TMPDIR");
  const std::string restore = saved != nullptr ? saved : "";
  ::setenv("TMPDIR", tmp.c_str(), 1);
  absl::StatusOr<std::unique_ptr<ServerTlsFileGuard>> made =
      ServerTlsFileGuard::Create({Path("a.pem"), Path("a.key"), ""});
  if (saved != nullptr) {
    ::setenv("TMPDIR", restore.c_str(), 1);
  } else {
    ::unsetenv("TMPDIR");
  }
  ASSERT_TRUE(made.ok()) << made.status();
  struct stat st {};
  EXPECT_NE(::stat(dead.c_str(), &st), 0);
  EXPECT_EQ(::stat((alive + "/key.pem").c_str(), &st), 0);
  EXPECT_EQ(::stat((other + "/key.pem").c_str(), &st), 0);
  // Its own folder names its pid.
  EXPECT_THAT((*made)->copies().key_file,
              HasSubstr("/dapple-coordinator-tls-" + std::to_string(::getpid()) + "-"));
}

TEST_F(TlsFileGuardTest, BadFilesAreRefusedAtStartNamingTheFlag) {
  Write(Path("cert.pem"), Read(Path("a.pem")));
  absl::StatusOr<ServerTls> tls =
      MakeGuardedServerCredentials({Path("cert.pem"), Path("b.key"), ""});
  EXPECT_EQ(
      tls.status().message(),
      "--tls-key " + Path("b.key") + " is not the private key of --tls-cert " + Path("cert.pem"));
  EXPECT_THAT(MakeGuardedServerCredentials({Path("a.pem"), "", ""}).status().message(),
              HasSubstr("--tls-cert and --tls-key go together"));
  tls = MakeGuardedServerCredentials({});
  ASSERT_TRUE(tls.ok()) << tls.status();
  EXPECT_EQ(tls->guard, nullptr);  // plain text
  tls = MakeGuardedServerCredentials({Path("a.pem"), Path("a.key"), Path("b.pem")});
  ASSERT_TRUE(tls.ok()) << tls.status();
  ASSERT_NE(tls->guard, nullptr);
  EXPECT_EQ(Read(tls->guard->copies().client_ca_file), Read(Path("b.pem")));
}

// Start polls on its own thread and reports each change once; destruction stops it.
TEST_F(TlsFileGuardTest, StartReportsChangesFromItsThread) {
  Write(Path("cert.pem"), Read(Path("a.pem")));
  absl::StatusOr<std::unique_ptr<ServerTlsFileGuard>> guard =
      ServerTlsFileGuard::Create({Path("cert.pem"), Path("a.key"), ""});
  ASSERT_TRUE(guard.ok()) << guard.status();
  absl::Mutex mu;
  std::vector<TlsReloadEvent> events;
  (*guard)->Start(absl::Milliseconds(10), [&](const TlsReloadEvent& e) {
    absl::MutexLock lock(&mu);
    events.push_back(e);
  });
  Write(Path("cert.pem"), "garbage");
  absl::MutexLock lock(&mu);
  EXPECT_TRUE(
      mu.AwaitWithTimeout(absl::Condition(
                              +[](std::vector<TlsReloadEvent>* e) { return !e->empty(); }, &events),
                          absl::Seconds(10)));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_THAT(events[0].message, HasSubstr("not PEM"));
}

}  // namespace
}  // namespace dapple
