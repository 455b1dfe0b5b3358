#include "dapplectl/admin_command.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "dapplectl/admin_client.h"
#include "dapplectl/admin_views.h"
#include "dapplectl/command_output.h"
#include "dapplectl/exit_codes.h"
#include "dapplectl/flag_values.h"

namespace dapple::ctl {
namespace {

// The most audit entries one call returns (admin.proto ListAuditRequest.limit).
constexpr int64_t kMaxAuditLimit = 10000;

int64_t NowUnixMs(const Environment& env) { return absl::ToUnixMillis(env.now()); }

// A name flag given with an empty value: "" would mean "every tenant" (or no filter) silently.
absl::Status CheckOptionalName(const CLI::App* command, const char* flag, const char* what,
                               const std::string& value) {
  if (command->count(flag) == 0) return absl::OkStatus();
  return CheckAccountName(what, value);
}

}  // namespace

void AdminCommands::AddQuotaFlags(CLI::App* command, QuotaOptions* values) {
  values->app = command;
  command
      ->add_option("--cohort", values->cohort,
                   "cohort whose members borrow each other's unused quota; 'none': no cohort "
                   "(quota set without --cohort keeps the tenant's cohort)")
      ->type_name("COHORT");
  command
      ->add_option("--nominal", values->nominal,
                   "devices guaranteed to the tenant, per device type (cpu, cuda, emulated); "
                   "repeat the flag or join with ','")
      ->type_name("TYPE=N")
      ->delimiter(',')
      ->allow_extra_args(false);
  command
      ->add_option("--borrowing-limit", values->borrowing_limit,
                   "the most devices of a type borrowed above the nominal quota (default: what "
                   "the cohort has unused; set on one type: others borrow none)")
      ->type_name("TYPE=N")
      ->delimiter(',')
      ->allow_extra_args(false);
  command
      ->add_option("--lending-limit", values->lending_limit,
                   "the most of its unused nominal quota others may borrow (default: all of it; "
                   "set on one type: others lend none)")
      ->type_name("TYPE=N")
      ->delimiter(',')
      ->allow_extra_args(false);
  command
      ->add_option("--weight", values->weight,
                   "fair-share weight for what is above nominal quotas (default 1)")
      ->type_name("W");
  command
      ->add_option("--max-queued-jobs", values->max_queued_jobs,
                   "the most jobs the tenant may have queued at once (default 1000)")
      ->type_name("N");
}

QuotaFlags AdminCommands::Given(const QuotaOptions& values) {
  QuotaFlags flags;
  const auto given = [&](const char* flag, const std::string& value) -> std::optional<std::string> {
    if (values.app->count(flag) == 0) return std::nullopt;
    return value;
  };
  flags.cohort = given("--cohort", values.cohort);
  flags.weight = given("--weight", values.weight);
  flags.max_queued_jobs = given("--max-queued-jobs", values.max_queued_jobs);
  flags.nominal = values.nominal;
  flags.borrowing_limit = values.borrowing_limit;
  flags.lending_limit = values.lending_limit;
  return flags;
}

AdminCommands::AdminCommands(CLI::App& app) {
  admin_ = app.add_subcommand(
      "admin",
      "administer the cluster (an admin's token): tenants, quotas, cohorts, users, "
      "tokens, the join token, the audit log");
  admin_->require_subcommand(1);

  CLI::App* tenant = admin_->add_subcommand("tenant", "create and list tenants (teams)");
  tenant->require_subcommand(1);
  tenant_create_ =
      tenant->add_subcommand("create", "create a tenant, with a quota when quota flags are given");
  tenant_create_
      ->add_option("NAME", name_, "tenant name: 1-63 of a-z 0-9 -, starting with a letter")
      ->required();
  AddQuotaFlags(tenant_create_, &create_quota_);
  tenant_list_ = tenant->add_subcommand(
      "list",
      "per tenant and device type: quota, devices in use, borrowed, lent, jobs queued "
      "and admitted; then the cohorts");

  CLI::App* quota = admin_->add_subcommand("quota", "set a tenant's quota");
  quota->require_subcommand(1);
  quota_set_ = quota->add_subcommand("set", "replace a tenant's quota");
  quota_set_->add_option("TENANT", name_, "tenant name")->required();
  AddQuotaFlags(quota_set_, &set_quota_);

  CLI::App* cohort = admin_->add_subcommand("cohort", "set a cohort's shared devices");
  cohort->require_subcommand(1);
  cohort_set_ = cohort->add_subcommand(
      "set", "create or replace a cohort's own devices, borrowable by every member");
  cohort_set_->add_option("NAME", name_, "cohort name")->required();
  cohort_set_
      ->add_option("--shared", shared_,
                   "devices of the cohort itself, per device type; repeat or join with ','")
      ->type_name("TYPE=N")
      ->delimiter(',')
      ->allow_extra_args(false)
      ->required();

  CLI::App* user = admin_->add_subcommand("user", "create and list users");
  user->require_subcommand(1);
  user_create_ = user->add_subcommand("create", "create a user of a tenant, or an admin");
  user_create_->add_option("NAME", name_, "user name: 1-63 of a-z 0-9 -, starting with a letter")
      ->required();
  user_create_->add_option("--tenant", tenant_, "the user's tenant")->type_name("TENANT");
  user_create_->add_flag("--admin", admin_role_, "an administrator (of no tenant)");
  user_list_ = user->add_subcommand("list", "list users");
  user_list_->add_option("--tenant", tenant_, "only this tenant's")->type_name("TENANT");

  CLI::App* token = admin_->add_subcommand("token", "issue, list and revoke users' tokens");
  token->require_subcommand(1);
  token_issue_ = token->add_subcommand(
      "issue", "issue a token for USER: printed once, alone on stdout (> USER.token)");
  token_issue_->add_option("USER", name_, "user name")->required();
  token_issue_
      ->add_option("--ttl", ttl_,
                   "expire after this long: 90s, 30m, 24h, 7d (default: "
                   "never)")
      ->type_name("DURATION");
  token_list_ = token->add_subcommand("list", "list tokens (ids, never secrets)");
  token_list_->add_option("--user", user_, "only this user's")->type_name("USER");
  token_revoke_ = token->add_subcommand("revoke", "revoke a token: it stops working at once");
  token_revoke_->add_option("ID", name_, "token id: 16 hex digits (admin token list)")->required();

  CLI::App* join_token = admin_->add_subcommand("join-token", "the cluster's worker join token");
  join_token->require_subcommand(1);
  join_token_rotate_ = join_token->add_subcommand(
      "rotate", "make a new join token, printed once, alone on stdout; the old one stops working");

  audit_ = admin_->add_subcommand("audit", "who did what: the audit log, oldest first");
  audit_->add_option("--tenant", tenant_, "only this tenant's entries")->type_name("TENANT");
  audit_->add_option("--limit", limit_, "the newest N entries (default 100, at most 10000)")
      ->type_name("N");

  auth_ = app.add_subcommand("auth", "the identity of your token");
  auth_->require_subcommand(1);
  whoami_ = auth_->add_subcommand(
      "whoami", "who the coordinator takes you for: user, tenant, role, token id and expiry");
}

bool AdminCommands::parsed() const { return admin_->parsed() || auth_->parsed(); }

absl::Status AdminCommands::CheckArguments() {
  if (tenant_create_->parsed()) {
    if (absl::Status s = CheckAccountName("tenant name", name_); !s.ok()) return s;
    absl::StatusOr<v1::TenantQuota> quota = BuildTenantQuota(Given(create_quota_));
    if (!quota.ok()) return quota.status();
    quota_ = *std::move(quota);
  }
  if (quota_set_->parsed()) {
    if (absl::Status s = CheckAccountName("tenant name", name_); !s.ok()) return s;
    if (set_quota_.nominal.empty()) {
      return absl::InvalidArgumentError(
          "quota set needs --nominal TYPE=N (e.g. --nominal cpu=4): the quota replaces the "
          "tenant's whole quota");
    }
    // Without --cohort the tenant keeps its cohort, known only once it is read (RunAdmin).
    absl::StatusOr<v1::TenantQuota> quota =
        BuildTenantQuota(Given(set_quota_), /*cohort_kept=*/true);
    if (!quota.ok()) return quota.status();
    quota_ = *std::move(quota);
  }
  if (cohort_set_->parsed()) {
    if (absl::Status s = CheckAccountName("cohort name", name_); !s.ok()) return s;
    if (name_ == kNoCohort) {
      return absl::InvalidArgumentError(
          "cohort name \"none\" is reserved: --cohort none means no cohort");
    }
    absl::StatusOr<std::vector<std::pair<std::string, int64_t>>> shared =
        ParseDeviceCounts("--shared", shared_);
    if (!shared.ok()) return shared.status();
    cohort_.set_name(name_);
    for (const auto& [type, n] : *shared) {
      v1::DeviceQuota* d = cohort_.add_shared();
      d->set_device_type(type);
      d->set_nominal(n);
    }
  }
  if (user_create_->parsed()) {
    if (absl::Status s = CheckAccountName("user name", name_); !s.ok()) return s;
    const bool tenant = user_create_->count("--tenant") > 0;
    if (tenant == admin_role_) {
      return absl::InvalidArgumentError(
          tenant ? "user create takes --tenant TENANT (a user) or --admin (an administrator, of "
                   "no tenant), not both"
                 : "user create needs --tenant TENANT (a user of that tenant) or --admin (an "
                   "administrator)");
    }
    if (absl::Status s = CheckOptionalName(user_create_, "--tenant", "--tenant", tenant_); !s.ok())
      return s;
  }
  if (user_list_->parsed()) {
    if (absl::Status s = CheckOptionalName(user_list_, "--tenant", "--tenant", tenant_); !s.ok())
      return s;
  }
  if (token_issue_->parsed()) {
    if (absl::Status s = CheckAccountName("user name", name_); !s.ok()) return s;
    if (token_issue_->count("--ttl") > 0) {
      absl::StatusOr<int64_t> ttl = ParseTtlSeconds("--ttl", ttl_);
      if (!ttl.ok()) return ttl.status();
      ttl_seconds_ = *ttl;
    }
  }
  if (token_list_->parsed()) {
    if (absl::Status s = CheckOptionalName(token_list_, "--user", "--user", user_); !s.ok())
      return s;
  }
  if (token_revoke_->parsed()) {
    if (absl::Status s = CheckTokenId(&name_); !s.ok()) return s;
  }
  if (audit_->parsed()) {
    if (absl::Status s = CheckOptionalName(audit_, "--tenant", "--tenant", tenant_); !s.ok())
      return s;
    if (audit_->count("--limit") > 0) {
      absl::StatusOr<int64_t> limit = ParsePositiveCount("--limit", limit_, kMaxAuditLimit);
      if (!limit.ok()) return limit.status();
      limit_value_ = static_cast<int32_t>(*limit);
    }
  }
  return absl::OkStatus();
}

int AdminCommands::Run(const ClientOptions& options, const std::string& output,
                       const Environment& env) {
  if (whoami_->parsed()) {
    std::optional<Format> format = OutputFormat(env, "auth whoami", output, true);
    if (!format) return kExitUsage;
    CoordinatorClient client(options);
    absl::StatusOr<v1::WhoAmIResponse> who = client.WhoAmI();
    if (!who.ok()) return FailStatus(env, who.status());
    return PrintMessage(env, *format, *who, [&] { return RenderWhoAmI(*who, NowUnixMs(env)); });
  }
  return RunAdmin(options, output, env);
}

int AdminCommands::RunAdmin(const ClientOptions& options, const std::string& output,
                            const Environment& env) {
  const std::string command = absl::StrCat("admin ", ParsedCommandPath(*admin_));
  std::optional<Format> format = OutputFormat(env, command, output, true);
  if (!format) return kExitUsage;
  AdminClient client(options);
  const int64_t now = NowUnixMs(env);

  if (tenant_create_->parsed()) {
    v1::CreateTenantRequest request;
    request.set_name(name_);
    if (AnyQuotaFlag(Given(create_quota_))) *request.mutable_quota() = quota_;
    absl::StatusOr<v1::Tenant> tenant = client.CreateTenant(std::move(request));
    if (!tenant.ok()) return FailStatus(env, tenant.status());
    return PrintMessage(env, *format, *tenant, [&] { return RenderTenantChanged(*tenant, true); });
  }
  if (tenant_list_->parsed()) {
    absl::StatusOr<v1::ListTenantsResponse> tenants = client.ListTenants();
    if (!tenants.ok()) return FailStatus(env, tenants.status());
    return PrintMessage(env, *format, *tenants, [&] { return RenderTenants(*tenants); });
  }
  if (quota_set_->parsed()) {
    v1::SetTenantQuotaRequest request;
    request.set_tenant(name_);
    *request.mutable_quota() = quota_;
    // The quota replaces the tenant's whole quota, but without --cohort the tenant stays in its
    // cohort (docs/dapplectl.md): read it first, and say so.
    const bool keep_cohort = !Given(set_quota_).cohort.has_value();
    if (keep_cohort) {
      absl::StatusOr<v1::ListTenantsResponse> tenants = client.ListTenants();
      if (!tenants.ok()) return FailStatus(env, tenants.status());
      for (const v1::Tenant& t : tenants->tenants()) {
        if (t.name() == name_) request.mutable_quota()->set_cohort(t.quota().cohort());
      }
    }
    const std::string kept = request.quota().cohort();
    if (keep_cohort && kept.empty()) {
      for (const v1::DeviceQuota& d : request.quota().devices()) {
        if (!d.has_borrowing_limit() && !d.has_lending_limit()) continue;
        return FailStatus(
            env, absl::InvalidArgumentError(absl::StrCat(
                     d.has_borrowing_limit() ? "--borrowing-limit" : "--lending-limit",
                     " needs a cohort: tenant ", name_,
                     " is in none (give --cohort C), and a tenant outside a cohort neither "
                     "borrows nor lends")));
      }
    }
    absl::StatusOr<v1::Tenant> tenant = client.SetTenantQuota(std::move(request));
    if (!tenant.ok()) return FailStatus(env, tenant.status());
    if (keep_cohort) *env.err << KeptCohortNote(kept) << "\n" << std::flush;
    return PrintMessage(env, *format, *tenant, [&] { return RenderTenantChanged(*tenant, false); });
  }
  if (cohort_set_->parsed()) {
    absl::StatusOr<v1::Cohort> cohort = client.SetCohort(cohort_);
    if (!cohort.ok()) return FailStatus(env, cohort.status());
    return PrintMessage(env, *format, *cohort, [&] { return RenderCohortSet(*cohort); });
  }
  if (user_create_->parsed()) {
    v1::CreateUserRequest request;
    request.set_name(name_);
    request.set_tenant(admin_role_ ? "" : tenant_);
    request.set_role(admin_role_ ? "admin" : "user");
    absl::StatusOr<v1::User> user = client.CreateUser(std::move(request));
    if (!user.ok()) return FailStatus(env, user.status());
    return PrintMessage(env, *format, *user, [&] { return RenderUserCreated(*user); });
  }
  if (user_list_->parsed()) {
    absl::StatusOr<v1::ListUsersResponse> users = client.ListUsers(tenant_);
    if (!users.ok()) return FailStatus(env, users.status());
    return PrintMessage(env, *format, *users, [&] { return RenderUsers(users->users(), now); });
  }
  if (token_issue_->parsed() || join_token_rotate_->parsed()) {
    const bool issue = token_issue_->parsed();
    absl::StatusOr<v1::IssueTokenResponse> issued =
        issue ? client.IssueToken(name_, ttl_seconds_) : client.RotateJoinToken();
    if (!issued.ok()) return FailStatus(env, issued.status());
    // The secret alone on stdout, so that `> file` keeps exactly the token; the note goes to
    // stderr.
    const int rc =
        PrintMessage(env, *format, *issued, [&] { return absl::StrCat(issued->token(), "\n"); });
    if (rc != kExitOk) return rc;
    *env.err << "dapplectl: "
             << (issue ? TokenIssuedNote(issued->info(), now) : JoinTokenRotatedNote()) << "\n"
             << std::flush;
    return kExitOk;
  }
  if (token_list_->parsed()) {
    absl::StatusOr<v1::ListTokensResponse> tokens = client.ListTokens(user_);
    if (!tokens.ok()) return FailStatus(env, tokens.status());
    return PrintMessage(env, *format, *tokens, [&] { return RenderTokens(tokens->tokens(), now); });
  }
  if (token_revoke_->parsed()) {
    absl::StatusOr<v1::RevokeTokenResponse> revoked = client.RevokeToken(name_);
    if (!revoked.ok()) return FailStatus(env, revoked.status());
    return PrintMessage(env, *format, *revoked,
                        [&] { return RenderTokenRevoked(revoked->info()); });
  }
  if (audit_->parsed()) {
    v1::ListAuditRequest request;
    request.set_tenant(tenant_);
    request.set_limit(limit_value_);
    absl::StatusOr<v1::ListAuditResponse> audit = client.ListAudit(std::move(request));
    if (!audit.ok()) return FailStatus(env, audit.status());
    return PrintMessage(env, *format, *audit, [&] { return RenderAudit(audit->entries()); });
  }
  return Fail(env, kExitUsage, "admin needs a subcommand (see dapplectl admin --help)");
}

}  // namespace dapple::ctl
