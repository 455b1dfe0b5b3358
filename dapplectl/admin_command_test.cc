// `dapplectl admin ...` and `dapplectl auth whoami` against in-process fakes: what each command
// sends, prints (table, JSON, YAML) and exits with; every usage error (exit 2, nothing sent);
// and that no command but `token issue` and `join-token rotate` prints a token's secret.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "dapplectl/commands.h"
#include "dapplectl/exit_codes.h"
#include "dapplectl/fake_admin_test_util.h"
#include "dapplectl/fake_coordinator_test_util.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace dapple::ctl {
namespace {

using ::dapple::ctl::testing::FakeAdmin;
using ::dapple::ctl::testing::FakeCoordinator;
using ::dapple::ctl::testing::kFakeSecret;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;

struct Result {
  int code;
  std::string out;
  std::string err;
};

// 1970-01-01T00:00:10Z: the fakes create everything at 1 s.
constexpr int64_t kNowMs = 10'000;

Result RunCtl(const std::string& address, std::vector<std::string> args) {
  args.insert(args.begin(), {"dapplectl", "--coordinator", address});
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  Environment env;
  env.out = &out;
  env.err = &err;
  env.now = [] { return absl::FromUnixMillis(kNowMs); };
  const int code = RunDapplectl(static_cast<int>(argv.size()), argv.data(), env);
  return {code, out.str(), err.str()};
}

class AdminCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("DAPPLE_COORDINATOR");
    unsetenv("DAPPLE_CA");
    unsetenv("DAPPLE_TOKEN");
    unsetenv("DAPPLE_TOKEN_FILE");
    setenv("DAPPLE_CONFIG", (::testing::TempDir() + "/no-dapple-config.yaml").c_str(), 1);
  }
  Result Run(std::vector<std::string> args) { return RunCtl(fake_.address(), std::move(args)); }

  FakeAdmin fake_;
};

TEST_F(AdminCommandTest, TenantCreateSendsTheQuotaAndPrintsTheTenant) {
  Result r = Run({"admin", "tenant", "create", "team-a", "--cohort", "research", "--nominal",
                  "cpu=4", "--nominal", "cuda=2", "--borrowing-limit", "cpu=2", "--lending-limit",
                  "cpu=1,cuda=2", "--weight", "2", "--max-queued-jobs", "50"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const auto request = fake_.last<v1::CreateTenantRequest>("CreateTenant");
  EXPECT_EQ(request.name(), "team-a");
  EXPECT_EQ(request.quota().cohort(), "research");
  EXPECT_EQ(request.quota().weight(), 2);
  EXPECT_EQ(request.quota().max_queued_jobs(), 50);
  ASSERT_EQ(request.quota().devices_size(), 2);
  const v1::DeviceQuota& cpu = request.quota().devices(0);
  EXPECT_EQ(cpu.device_type(), "cpu");
  EXPECT_EQ(cpu.nominal(), 4);
  ASSERT_TRUE(cpu.has_borrowing_limit());
  EXPECT_EQ(cpu.borrowing_limit(), 2);
  EXPECT_EQ(cpu.lending_limit(), 1);
  const v1::DeviceQuota& cuda = request.quota().devices(1);
  EXPECT_EQ(cuda.device_type(), "cuda");
  EXPECT_EQ(cuda.nominal(), 2);
  EXPECT_FALSE(cuda.has_borrowing_limit());
  EXPECT_EQ(cuda.lending_limit(), 2);
  EXPECT_EQ(r.out,
            "created tenant team-a\n"
            "TENANT   COHORT     WEIGHT   DEVICE   NOMINAL   BORROW LIMIT   LEND LIMIT   IN USE   "
            "BORROWED   LENT   QUEUED   ADMITTED\n"
            "team-a   research   2        cpu      4         2              1            0        "
            "0          0      0        0\n"
            "team-a   research   2        cuda     2         0              2            0        "
            "0          0      0        0\n");
  EXPECT_EQ(r.err, "");
}

TEST_F(AdminCommandTest, TenantCreateWithoutQuotaFlagsSendsNoQuota) {
  Result r = Run({"admin", "tenant", "create", "team-b"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_FALSE(fake_.last<v1::CreateTenantRequest>("CreateTenant").has_quota());
  EXPECT_THAT(r.out, HasSubstr("team-b   -        1        -"));
  // A second time: the coordinator's refusal, exit 1.
  r = Run({"admin", "tenant", "create", "team-b"});
  EXPECT_EQ(r.code, kExitRefused);
  EXPECT_EQ(r.err, "dapplectl: tenant team-b already exists\n");
}

TEST_F(AdminCommandTest, TenantListShowsQuotaUsageAndCohorts) {
  v1::Tenant a;
  a.set_name("team-a");
  a.mutable_quota()->set_cohort("research");
  v1::DeviceQuota* cpu = a.mutable_quota()->add_devices();
  cpu->set_device_type("cpu");
  cpu->set_nominal(4);
  v1::DeviceUsage* use = a.add_usage();
  use->set_device_type("cpu");
  use->set_in_use(6);
  use->set_borrowed(2);
  a.set_queued_jobs(3);
  a.set_admitted_jobs(2);
  fake_.AddTenant(a);
  v1::Tenant b;
  b.set_name("team-b");
  fake_.AddTenant(b);
  v1::Cohort cohort;
  cohort.set_name("research");
  v1::DeviceQuota* shared = cohort.add_shared();
  shared->set_device_type("cuda");
  shared->set_nominal(8);
  fake_.AddCohort(cohort);

  Result r = Run({"admin", "tenant", "list"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out,
            "TENANT   COHORT     WEIGHT   DEVICE   NOMINAL   BORROW LIMIT   LEND LIMIT   IN USE   "
            "BORROWED   LENT   QUEUED   ADMITTED\n"
            "team-a   research   1        cpu      4         no limit       all          6        "
            "2          0      3        2\n"
            "team-b   -          1        -        -         -              -            -        "
            "-          -      0        0\n"
            "\n"
            "COHORT     SHARED\n"
            "research   cuda=8\n");

  r = Run({"admin", "tenant", "list", "-o", "json"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  google::protobuf::Struct json;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &json).ok()) << r.out;
  EXPECT_EQ(json.fields()
                .at("tenants")
                .list_value()
                .values(0)
                .struct_value()
                .fields()
                .at("queued_jobs")
                .number_value(),
            3);
  r = Run({"admin", "tenant", "list", "-o", "yaml"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("name: research"));
}

TEST_F(AdminCommandTest, QuotaSetReplacesTheQuota) {
  v1::Tenant a;
  a.set_name("team-a");
  fake_.AddTenant(a);
  Result r = Run({"admin", "quota", "set", "team-a", "--nominal", "emulated=16"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const auto request = fake_.last<v1::SetTenantQuotaRequest>("SetTenantQuota");
  EXPECT_EQ(request.tenant(), "team-a");
  ASSERT_EQ(request.quota().devices_size(), 1);
  EXPECT_EQ(request.quota().devices(0).device_type(), "emulated");
  EXPECT_EQ(request.quota().devices(0).nominal(), 16);
  EXPECT_THAT(r.out, ::testing::StartsWith("set the quota of tenant team-a\nTENANT"));
  r = Run({"admin", "quota", "set", "team-z", "--nominal", "cpu=1"});
  EXPECT_EQ(r.code, kExitRefused);
  EXPECT_EQ(r.err, "dapplectl: no tenant team-z\n");
}

// Without a token the message says where dapplectl looked; the token-file of the context in use
// goes with it also when --coordinator or DAPPLE_COORDINATOR gives the address.
TEST_F(AdminCommandTest, TheContextsTokenFollowsTheContextAndMissingTokensSayWhere) {
  fake_.RequireToken("tok-of-here");
  Result r = Run({"admin", "tenant", "list"});
  EXPECT_EQ(r.code, kExitUnauthenticated);
  EXPECT_EQ(r.err,
            "dapplectl: no token: set DAPPLE_TOKEN, --token-file or a context's token-file; "
            "looked at --token-file (not given), DAPPLE_TOKEN (not set), DAPPLE_TOKEN_FILE (not "
            "set), no context in use (the coordinator said: no token)\n");
  const std::string dir = ::testing::TempDir() + "/admin-ctx-token-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  const std::string token_file = dir + "/here.token";
  std::ofstream(token_file) << "tok-of-here\n";
  std::filesystem::permissions(
      token_file, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  std::ofstream(dir + "/config.yaml")
      << "current-context: here\ncontexts:\n  - name: here\n    coordinator: 127.0.0.1:1\n"
      << "    token-file: " << token_file << "\n  - name: bare\n    coordinator: 127.0.0.1:1\n";
  setenv("DAPPLE_CONFIG", (dir + "/config.yaml").c_str(), 1);
  r = Run({"admin", "tenant", "list"});  // --coordinator gives the address
  EXPECT_EQ(r.code, kExitOk) << r.err;
  setenv("DAPPLE_COORDINATOR", fake_.address().c_str(), 1);
  {
    std::vector<const char*> argv = {"dapplectl", "admin", "tenant", "list"};
    std::ostringstream out, err;
    Environment env;
    env.out = &out;
    env.err = &err;
    EXPECT_EQ(RunDapplectl(static_cast<int>(argv.size()), argv.data(), env), kExitOk) << err.str();
  }
  unsetenv("DAPPLE_COORDINATOR");
  r = Run({"--context", "bare", "admin", "tenant", "list"});
  EXPECT_EQ(r.code, kExitUnauthenticated);
  EXPECT_THAT(r.err, HasSubstr("DAPPLE_TOKEN_FILE (not set), context bare (no token-file)"));
  setenv("DAPPLE_CONFIG", (::testing::TempDir() + "/no-dapple-config.yaml").c_str(), 1);
  std::filesystem::remove_all(dir);
}

TEST_F(AdminCommandTest, QuotaSetKeepsTheCohortUnlessToldAndSaysSo) {
  v1::Tenant a;
  a.set_name("team-a");
  a.mutable_quota()->set_cohort("research");
  fake_.AddTenant(a);
  Result r = Run({"admin", "quota", "set", "team-a", "--nominal", "cpu=4"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(fake_.last<v1::SetTenantQuotaRequest>("SetTenantQuota").quota().cohort(), "research");
  EXPECT_EQ(r.err,
            "cohort: research (kept: --cohort was not given; --cohort none takes the tenant out "
            "of it)\n");
  // --cohort none: out of it, and nothing to say.
  r = Run({"admin", "quota", "set", "team-a", "--nominal", "cpu=4", "--cohort", "none"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(fake_.last<v1::SetTenantQuotaRequest>("SetTenantQuota").quota().cohort(), "");
  EXPECT_EQ(r.err, "");
  r = Run({"admin", "quota", "set", "team-a", "--nominal", "cpu=4"});
  EXPECT_EQ(r.err, "cohort: none (kept: --cohort was not given; --cohort C joins C)\n");
  // A limit needs a real cohort.
  r = Run({"admin", "quota", "set", "team-a", "--nominal", "cpu=4", "--cohort", "none",
           "--lending-limit", "cpu=1"});
  EXPECT_EQ(r.code, kExitUsage);
  // Without --cohort the limits are checked against the kept cohort (a user was refused
  // "--borrowing-limit needs --cohort" for a tenant in one): allowed in one, refused in none.
  fake_.AddTenant(a);  // back in research
  r = Run({"admin", "quota", "set", "team-a", "--nominal", "cpu=2", "--borrowing-limit", "cpu=1",
           "--lending-limit", "cpu=1"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const v1::TenantQuota set = fake_.last<v1::SetTenantQuotaRequest>("SetTenantQuota").quota();
  EXPECT_EQ(set.cohort(), "research");
  ASSERT_EQ(set.devices_size(), 1);
  EXPECT_EQ(set.devices(0).borrowing_limit(), 1);
  EXPECT_EQ(set.devices(0).lending_limit(), 1);
  r = Run({"admin", "quota", "set", "team-a", "--nominal", "cpu=2", "--lending-limit", "cpu=3"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("--lending-limit cpu=3 is above --nominal cpu=2"));
  v1::Tenant b;
  b.set_name("team-b");
  fake_.AddTenant(b);
  r = Run({"admin", "quota", "set", "team-b", "--nominal", "cpu=2", "--borrowing-limit", "cpu=1"});
  EXPECT_NE(r.code, kExitOk);
  EXPECT_THAT(r.err, HasSubstr("--borrowing-limit needs a cohort: tenant team-b is in none (give "
                               "--cohort C), and a tenant outside a cohort neither borrows nor "
                               "lends"));
  // "none" is no cohort's name.
  r = Run({"admin", "cohort", "set", "none", "--shared", "cpu=1"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("cohort name \"none\" is reserved"));
}

TEST_F(AdminCommandTest, CohortSet) {
  Result r = Run({"admin", "cohort", "set", "research", "--shared", "cpu=4,cuda=2"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out, "set cohort research: shared cpu=4, cuda=2\n");
  const auto request = fake_.last<v1::SetCohortRequest>("SetCohort");
  EXPECT_EQ(request.cohort().name(), "research");
  ASSERT_EQ(request.cohort().shared_size(), 2);
  EXPECT_EQ(request.cohort().shared(1).nominal(), 2);
}

TEST_F(AdminCommandTest, UsersCreateAndList) {
  ASSERT_EQ(Run({"admin", "tenant", "create", "team-a"}).code, kExitOk);
  Result r = Run({"admin", "user", "create", "alice", "--tenant", "team-a"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out, "created user alice (tenant team-a)\n");
  EXPECT_EQ(fake_.last<v1::CreateUserRequest>("CreateUser").role(), "user");
  r = Run({"admin", "user", "create", "root", "--admin"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out, "created admin root\n");
  const auto admin = fake_.last<v1::CreateUserRequest>("CreateUser");
  EXPECT_EQ(admin.role(), "admin");
  EXPECT_EQ(admin.tenant(), "");
  r = Run({"admin", "user", "list"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out,
            "NAME    TENANT   ROLE    AGE\n"
            "alice   team-a   user    9s\n"
            "root    -        admin   9s\n");
  r = Run({"admin", "user", "list", "--tenant", "team-a"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(fake_.last<v1::ListUsersRequest>("ListUsers").tenant(), "team-a");
  EXPECT_THAT(r.out, Not(HasSubstr("root")));
  r = Run({"admin", "user", "create", "bob", "--tenant", "team-q"});
  EXPECT_EQ(r.code, kExitRefused);
}

TEST_F(AdminCommandTest, TokenIssuePrintsTheTokenAloneOnStdout) {
  ASSERT_EQ(Run({"admin", "tenant", "create", "team-a"}).code, kExitOk);
  ASSERT_EQ(Run({"admin", "user", "create", "alice", "--tenant", "team-a"}).code, kExitOk);
  Result r = Run({"admin", "token", "issue", "alice", "--ttl", "25h"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out, std::string("dpl_0000000000000001_") + kFakeSecret + "\n");
  EXPECT_EQ(fake_.last<v1::IssueTokenRequest>("IssueToken").ttl_seconds(), 25 * 3600);
  EXPECT_EQ(r.err,
            "dapplectl: token 0000000000000001 of alice (expires in 1d) is shown only this once: "
            "keep it secret, in a file of yours alone, e.g. (umask 077; dapplectl admin token "
            "issue alice > alice.token)\n");
  EXPECT_THAT(r.err, Not(HasSubstr(kFakeSecret)));
  // Without --ttl: never expires.
  r = Run({"admin", "token", "issue", "alice"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(fake_.last<v1::IssueTokenRequest>("IssueToken").ttl_seconds(), 0);
  EXPECT_THAT(r.err, HasSubstr("(expires never)"));
  // JSON carries it too (it is the answer), for scripts.
  r = Run({"admin", "token", "issue", "alice", "-o", "json"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr(kFakeSecret));
}

TEST_F(AdminCommandTest, TokenListAndRevokeNeverShowSecrets) {
  ASSERT_EQ(Run({"admin", "tenant", "create", "team-a"}).code, kExitOk);
  ASSERT_EQ(Run({"admin", "user", "create", "alice", "--tenant", "team-a"}).code, kExitOk);
  ASSERT_EQ(Run({"admin", "token", "issue", "alice", "--ttl", "30m"}).code, kExitOk);
  ASSERT_EQ(Run({"admin", "token", "issue", "alice", "--ttl", "5s"}).code, kExitOk);
  Result r = Run({"admin", "token", "revoke", "0000000000000001"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out, "revoked token 0000000000000001 of alice\n");
  EXPECT_EQ(fake_.last<v1::RevokeTokenRequest>("RevokeToken").id(), "0000000000000001");
  r = Run({"admin", "token", "list", "--user", "alice"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(fake_.last<v1::ListTokensRequest>("ListTokens").user(), "alice");
  EXPECT_EQ(r.out,
            "ID                 USER    AGE   EXPIRES          STATE\n"
            "0000000000000001   alice   9s    in 30m           revoked 8s ago\n"
            "0000000000000002   alice   9s    expired 4s ago   expired\n");
  r = Run({"admin", "token", "revoke", "00000000000000ff"});
  EXPECT_EQ(r.code, kExitRefused);
  EXPECT_EQ(r.err, "dapplectl: no token 00000000000000ff\n");
  // Revoking again changes nothing, and says so (FAILED_PRECONDITION: refused).
  r = Run({"admin", "token", "revoke", "0000000000000001"});
  EXPECT_EQ(r.code, kExitRefused);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "dapplectl: token dpl_0000000000000001 is already revoked\n");
}

TEST_F(AdminCommandTest, JoinTokenRotatePrintsTheTokenAloneOnStdout) {
  Result r = Run({"admin", "join-token", "rotate"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out, std::string("dpl_0000000000000001_") + kFakeSecret + "\n");
  EXPECT_THAT(r.err, MatchesRegex("dapplectl: the new cluster join token is shown only this "
                                  "once[^\n]*\n"));
  EXPECT_THAT(fake_.calls(), ElementsAre("RotateJoinToken"));
}

TEST_F(AdminCommandTest, Audit) {
  v1::AuditEntry e;
  e.set_seq(7);
  e.set_unix_ms(1'796'246'401'000);  // 2026-12-02T21:20:01Z
  e.set_user("alice");
  e.set_tenant("team-a");
  e.set_role("user");
  e.set_action("CancelJob");
  e.set_target("job-3");
  e.set_result("OK");
  fake_.AddAudit(e);
  e.set_tenant("team-b");
  e.set_seq(8);
  fake_.AddAudit(e);
  Result r = Run({"admin", "audit", "--tenant", "team-a", "--limit", "20"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const auto request = fake_.last<v1::ListAuditRequest>("ListAudit");
  EXPECT_EQ(request.tenant(), "team-a");
  EXPECT_EQ(request.limit(), 20);
  EXPECT_EQ(r.out,
            "SEQ   TIME                   USER    TENANT   ROLE   ACTION      TARGET   RESULT   "
            "DETAIL\n"
            "7     2026-12-02T21:20:01Z   alice   team-a   user   CancelJob   job-3    OK       "
            "-\n");
  r = Run({"admin", "audit"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(fake_.last<v1::ListAuditRequest>("ListAudit").limit(), 0);
  EXPECT_THAT(r.out, HasSubstr("team-b"));
}

TEST_F(AdminCommandTest, RefusalsOfTheCoordinatorArePrintedAsTheyCome) {
  fake_.FailAll(grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "admin only"));
  Result r = Run({"admin", "tenant", "list"});
  EXPECT_NE(r.code, kExitOk);
  EXPECT_NE(r.code, kExitUsage);
  EXPECT_EQ(r.err, "dapplectl: admin only\n");
  EXPECT_EQ(r.out, "");
}

TEST_F(AdminCommandTest, UsageErrorsNameTheFlagTheValueAndTheRuleAndSendNothing) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"admin", "tenant", "create", "Team_A"},
       "tenant name \"Team_A\" must be 1-63 characters of a-z, 0-9 and -, starting with a letter"},
      {{"admin", "tenant", "create", "9lives"},
       "tenant name \"9lives\" must be 1-63 characters of a-z, 0-9 and -, starting with a letter"},
      {{"admin", "tenant", "create", "t", "--nominal", "cpu"},
       "--nominal must be TYPE=N (e.g. cpu=4), got \"cpu\""},
      {{"admin", "tenant", "create", "t", "--nominal", "gpu=4"},
       "--nominal \"gpu=4\": device type must be one of cpu, cuda, emulated, got \"gpu\""},
      {{"admin", "tenant", "create", "t", "--nominal", "cpu=-1"},
       "--nominal \"cpu=-1\": N must be a whole number from 0 to 1000000, got \"-1\""},
      {{"admin", "tenant", "create", "t", "--nominal", "cpu=4", "--nominal", "cpu=2"},
       "--nominal gives cpu twice: give each device type once"},
      {{"admin", "tenant", "create", "t", "--nominal", "cpu=4", "--borrowing-limit", "cpu=2"},
       "--borrowing-limit needs --cohort: a tenant outside a cohort neither borrows nor lends"},
      {{"admin", "tenant", "create", "t", "--cohort", "c", "--nominal", "cpu=4", "--lending-limit",
        "cpu=8"},
       "--lending-limit cpu=8 is above --nominal cpu=4: a tenant lends only its own nominal "
       "quota"},
      {{"admin", "tenant", "create", "t", "--cohort", "C"},
       "--cohort \"C\" must be 1-63 characters of a-z, 0-9 and -, starting with a letter"},
      {{"admin", "tenant", "create", "t", "--weight", "0"},
       "--weight must be a number greater than 0 and at most 1000, got \"0\""},
      {{"admin", "tenant", "create", "t", "--weight", ""},
       "--weight must be a number greater than 0 and at most 1000, got \"\""},
      {{"admin", "tenant", "create", "t", "--max-queued-jobs", "0"},
       "--max-queued-jobs must be a whole number from 1 to 1000000, got \"0\""},
      {{"admin", "quota", "set", "t"},
       "quota set needs --nominal TYPE=N (e.g. --nominal cpu=4): the quota replaces the "
       "tenant's whole quota"},
      {{"admin", "quota", "set", "t", "--nominal", "cuda=x"},
       "--nominal \"cuda=x\": N must be a whole number from 0 to 1000000, got \"x\""},
      {{"admin", "cohort", "set", "c", "--shared", "tpu=1"},
       "--shared \"tpu=1\": device type must be one of cpu, cuda, emulated, got \"tpu\""},
      {{"admin", "cohort", "set", "c"},
       "admin cohort set needs --shared (see dapplectl admin cohort set --help)"},
      {{"admin", "user", "create", "alice"},
       "user create needs --tenant TENANT (a user of that tenant) or --admin (an administrator)"},
      {{"admin", "user", "create", "alice", "--tenant", "a", "--admin"},
       "user create takes --tenant TENANT (a user) or --admin (an administrator, of no tenant), "
       "not both"},
      {{"admin", "user", "create", "Alice", "--admin"},
       "user name \"Alice\" must be 1-63 characters of a-z, 0-9 and -, starting with a letter"},
      {{"admin", "user", "list", "--tenant", ""},
       "--tenant \"\" must be 1-63 characters of a-z, 0-9 and -, starting with a letter"},
      {{"admin", "token", "issue", "alice", "--ttl", "1 day"},
       "--ttl must be a duration like 30m, 24h or 7d (a whole number and s, m, h or d), got "
       "\"1 day\""},
      {{"admin", "token", "issue", "alice", "--ttl", "24"},
       "--ttl must be a duration like 30m, 24h or 7d (a whole number and s, m, h or d), got "
       "\"24\""},
      {{"admin", "token", "issue", "alice", "--ttl", "0h"},
       "--ttl must be greater than 0, got \"0h\" (leave --ttl out for a token that never "
       "expires)"},
      {{"admin", "token", "issue", "alice", "--ttl", "4000d"},
       "--ttl must be at most 3650d (ten years), got \"4000d\""},
      {{"admin", "token", "list", "--user", "A"},
       "--user \"A\" must be 1-63 characters of a-z, 0-9 and -, starting with a letter"},
      {{"admin", "token", "revoke", "xyz"},
       "a token id must be 16 hex digits (e.g. 0123456789abcdef; see dapplectl admin token "
       "list), got \"xyz\""},
      {{"admin", "token", "revoke", std::string("dpl_0000000000000001_") + kFakeSecret},
       "give the token's id (16 hex digits, see dapplectl admin token list), not the token "
       "itself: a token is a secret"},
      {{"admin", "audit", "--limit", "0"},
       "--limit must be a whole number from 1 to 10000, got \"0\""},
      {{"admin", "audit", "--limit", "10001"},
       "--limit must be a whole number from 1 to 10000, got \"10001\""},
      {{"admin", "audit", "--tenant", "x y"},
       "--tenant \"x y\" must be 1-63 characters of a-z, 0-9 and -, starting with a letter"},
      {{"admin", "tenant", "list", "-o", "xml"},
       "--output: xml not in {table,json,yaml} (see dapplectl admin tenant list --help)"},
      {{},
       "no command given; commands: config, submit, get, describe, logs, list, cancel, watch, "
       "workers, checkpoint, trace, top, plan, admin, auth (see dapplectl --help)"},
      {{"admin"},
       "admin needs a subcommand: tenant, quota, cohort, user, token, join-token, audit (see "
       "dapplectl admin --help)"},
      {{"admin", "tenant"},
       "admin tenant needs a subcommand: create, list (see dapplectl admin tenant --help)"},
      {{"admin", "frobnicate"},
       "admin has no subcommand 'frobnicate': tenant, quota, cohort, user, token, join-token, "
       "audit (see dapplectl admin --help)"},
      {{"auth"}, "auth needs a subcommand: whoami (see dapplectl auth --help)"},
      {{"admin", "tokn", "list"},
       "admin has no subcommand 'tokn' (did you mean token?): tenant, quota, cohort, user, "
       "token, join-token, audit (see dapplectl admin --help)"},
      {{"admin", "tenant", "create"},
       "admin tenant create needs NAME (see dapplectl admin tenant create --help)"},
      {{"admin", "token", "list", "--bogus"},
       "admin token list: unknown flag --bogus (see dapplectl admin token list --help)"},
      {{"admin", "token", "list", "--usr"},
       "admin token list: unknown flag --usr; did you mean --user? (see dapplectl admin token "
       "list --help)"},
      {{"admin", "tenant", "list", "--outptu", "json"},
       "admin tenant list: unknown flag --outptu; unexpected argument json; did you mean "
       "--output? (see dapplectl admin tenant list --help)"},
      {{"admin", "audit", "--limit"},
       "--limit needs a value: --limit N (see dapplectl admin audit --help)"},
  };
  for (const auto& [args, message] : cases) {
    Result r = Run(args);
    EXPECT_EQ(r.code, kExitUsage) << ::testing::PrintToString(args);
    EXPECT_EQ(r.err, "dapplectl: " + message + "\n") << ::testing::PrintToString(args);
    EXPECT_EQ(r.out, "");
    // Usage errors never echo a secret.
    EXPECT_THAT(r.err, Not(HasSubstr(kFakeSecret)));
  }
  EXPECT_THAT(fake_.calls(), ::testing::IsEmpty());
}

// Only `token issue` and `join-token rotate` print a token's secret, in any output format.
TEST_F(AdminCommandTest, NoOtherCommandPrintsASecret) {
  ASSERT_EQ(Run({"admin", "tenant", "create", "team-a"}).code, kExitOk);
  ASSERT_EQ(Run({"admin", "user", "create", "alice", "--tenant", "team-a"}).code, kExitOk);
  ASSERT_EQ(Run({"admin", "token", "issue", "alice"}).code, kExitOk);
  ASSERT_EQ(Run({"admin", "join-token", "rotate"}).code, kExitOk);
  // A token of its own to revoke per format: revoking one twice is refused.
  std::map<std::string, std::string> revoke_id;
  for (const char* output : {"table", "json", "yaml"}) {
    Result issued = Run({"admin", "token", "issue", "alice"});
    ASSERT_EQ(issued.code, kExitOk) << issued.err;
    revoke_id[output] = issued.out.substr(4, 16);
  }
  for (const char* output : {"table", "json", "yaml"}) {
    for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
             {"admin", "tenant", "list"},
             {"admin", "quota", "set", "team-a", "--nominal", "cpu=1"},
             {"admin", "cohort", "set", "c", "--shared", "cpu=1"},
             {"admin", "user", "list"},
             {"admin", "token", "list"},
             {"admin", "token", "revoke", revoke_id.at(output)},
             {"admin", "audit"}}) {
      std::vector<std::string> with_output = args;
      with_output.insert(with_output.end(), {"-o", output});
      Result r = Run(with_output);
      EXPECT_EQ(r.code, kExitOk) << ::testing::PrintToString(with_output) << r.err;
      EXPECT_THAT(r.out, Not(HasSubstr(kFakeSecret))) << ::testing::PrintToString(with_output);
      EXPECT_THAT(r.err, Not(HasSubstr(kFakeSecret))) << ::testing::PrintToString(with_output);
    }
  }
}

TEST_F(AdminCommandTest, AServerWithoutTheAdminServiceIsNamed) {
  FakeCoordinator coordinator;  // serves Coordinator only
  Result r = RunCtl(coordinator.address(), {"admin", "tenant", "list"});
  EXPECT_EQ(r.code, kExitRefused);
  EXPECT_EQ(r.err, "dapplectl: the server at " + coordinator.address() +
                       " does not implement dapple.v1.Admin/ListTenants (is it a "
                       "dapple-coordinator of the same version?)\n");
}

// A shared cluster's jobs through `list`, `get` and `describe`: owners, the pending reason, the
// scheduling facts; -o json carries the new fields.
TEST_F(AdminCommandTest, JobViewsShowOwnersReasonsAndPreemptions) {
  FakeCoordinator coordinator;
  v1::Job job = ::dapple::ctl::testing::Snapshot("job-4", v1::JOB_STATE_PENDING, 0, 0);
  job.set_owner("bob");
  job.set_tenant("team-a");
  job.set_pending_reason("WaitingForQuota");
  job.set_message("3 of 4 cpu devices of tenant team-a in use by 2 jobs");
  job.set_preemptions(1);
  job.set_last_preemption("reclaimed by tenant team-b");
  job.mutable_spec()->set_priority(5);
  coordinator.AddJob(job);

  Result r = RunCtl(coordinator.address(), {"list"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("OWNER"));
  EXPECT_THAT(r.out, HasSubstr("bob/team-a"));
  EXPECT_THAT(r.out, HasSubstr("WaitingForQuota: 3 of 4 cpu devices of tenant team-a in use by "
                               "2 jobs\n"));
  r = RunCtl(coordinator.address(), {"get", "job-4"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("REASON        WaitingForQuota: 3 of 4 cpu devices"));
  r = RunCtl(coordinator.address(), {"describe", "job-4"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("OWNER         bob\nTENANT        team-a\nPRIORITY      5\n"
                               "PREEMPTIONS   1 (last: reclaimed by tenant team-b)\n"));
  r = RunCtl(coordinator.address(), {"get", "job-4", "-o", "json"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  google::protobuf::Struct json;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &json).ok()) << r.out;
  EXPECT_EQ(json.fields().at("owner").string_value(), "bob");
  EXPECT_EQ(json.fields().at("tenant").string_value(), "team-a");
  EXPECT_EQ(json.fields().at("pending_reason").string_value(), "WaitingForQuota");
  EXPECT_EQ(json.fields().at("preemptions").number_value(), 1);
  EXPECT_EQ(json.fields().at("last_preemption").string_value(), "reclaimed by tenant team-b");
  r = RunCtl(coordinator.address(), {"list", "-o", "yaml"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("pending_reason: WaitingForQuota"));
}

TEST_F(AdminCommandTest, WhoAmI) {
  FakeCoordinator coordinator;
  v1::WhoAmIResponse who;
  who.set_user("alice");
  who.set_tenant("team-a");
  who.set_role("user");
  who.set_token_id("0123456789abcdef");
  who.set_expires_unix_ms(kNowMs + 3'600'000);
  coordinator.SetWhoAmI(who);
  Result r = RunCtl(coordinator.address(), {"auth", "whoami"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out,
            "USER          alice\n"
            "TENANT        team-a\n"
            "ROLE          user\n"
            "TOKEN         dpl_0123456789abcdef\n"
            "EXPIRES       in 1h\n");
  r = RunCtl(coordinator.address(), {"auth", "whoami", "-o", "json"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  google::protobuf::Struct json;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &json).ok()) << r.out;
  EXPECT_EQ(json.fields().at("role").string_value(), "user");
  EXPECT_EQ(json.fields().at("token_id").string_value(), "0123456789abcdef");
}

}  // namespace
}  // namespace dapple::ctl
