// `dapplectl admin ...` (an administrator's commands: tenants, quotas, cohorts, users, tokens,
// the join token, the audit log; docs/dapplectl.md "Admins") and `dapplectl auth whoami`: their
// CLI11 subcommands, the checks of their arguments, and running them with AdminClient
// (admin_client.h) or CoordinatorClient::WhoAmI.
//
//   admin tenant create NAME [--cohort C] [--nominal TYPE=N ...] [--borrowing-limit TYPE=N ...]
//                            [--lending-limit TYPE=N ...] [--weight W] [--max-queued-jobs N]
//   admin tenant list
//   admin quota set TENANT (the quota flags of tenant create; --nominal required)
//   admin cohort set NAME --shared TYPE=N ...
//   admin user create NAME (--tenant T | --admin)
//   admin user list [--tenant T]
//   admin token issue USER [--ttl 24h]     prints the token alone on stdout, a note on stderr
//   admin token list [--user U]
//   admin token revoke ID
//   admin join-token rotate                prints the join token alone on stdout
//   admin audit [--tenant T] [--limit N]
//   auth whoami
//
// Every one takes -o table|json|yaml. Only `token issue` and `join-token rotate` ever print a
// token's secret (ClientOptions.token, the caller's own, never).
//
// Thread safety: one thread at a time.
#ifndef DAPPLE_DAPPLECTL_ADMIN_COMMAND_H_
#define DAPPLE_DAPPLECTL_ADMIN_COMMAND_H_

#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "dapplectl/admin_args.h"
#include "dapplectl/client.h"
#include "dapplectl/commands.h"

namespace dapple::ctl {

class AdminCommands {
 public:
  // Adds `admin` and `auth` with their subcommands to `app`, which must outlive this object.
  explicit AdminCommands(CLI::App& app);
  AdminCommands(const AdminCommands&) = delete;
  AdminCommands& operator=(const AdminCommands&) = delete;

  // True when the parsed command line runs one of them (after app.parse).
  bool parsed() const;

  // The usage errors of the parsed command's arguments (kInvalidArgument naming the flag, the
  // value and the rule), checked before anything is read or sent.
  absl::Status CheckArguments();

  // Runs the parsed command against the coordinator of `options`, printing in `output` (the -o
  // value) to env.out; errors as one line on env.err. Returns the exit code (exit_codes.h).
  // CheckArguments must have returned OK.
  int Run(const ClientOptions& options, const std::string& output, const Environment& env);

 private:
  // The raw quota flags of one command, and their options (given or not).
  struct QuotaOptions {
    std::string cohort, weight, max_queued_jobs;
    std::vector<std::string> nominal, borrowing_limit, lending_limit;
    CLI::App* app = nullptr;
  };
  static void AddQuotaFlags(CLI::App* command, QuotaOptions* values);
  static QuotaFlags Given(const QuotaOptions& values);

  int RunAdmin(const ClientOptions& options, const std::string& output, const Environment& env);

  CLI::App* admin_ = nullptr;
  CLI::App* auth_ = nullptr;
  CLI::App* tenant_create_ = nullptr;
  CLI::App* tenant_list_ = nullptr;
  CLI::App* quota_set_ = nullptr;
  CLI::App* cohort_set_ = nullptr;
  CLI::App* user_create_ = nullptr;
  CLI::App* user_list_ = nullptr;
  CLI::App* token_issue_ = nullptr;
  CLI::App* token_list_ = nullptr;
  CLI::App* token_revoke_ = nullptr;
  CLI::App* join_token_rotate_ = nullptr;
  CLI::App* audit_ = nullptr;
  CLI::App* whoami_ = nullptr;

  std::string name_;  // NAME, TENANT, USER or ID of the command
  QuotaOptions create_quota_, set_quota_;
  std::vector<std::string> shared_;
  std::string tenant_;  // --tenant of user create, user list, audit
  bool admin_role_ = false;
  std::string user_;  // --user of token list
  std::string ttl_;
  std::string limit_;

  // Filled by CheckArguments.
  v1::TenantQuota quota_;
  v1::Cohort cohort_;
  int64_t ttl_seconds_ = 0;
  int32_t limit_value_ = 0;
};

}  // namespace dapple::ctl

#endif  // DAPPLE_DAPPLECTL_ADMIN_COMMAND_H_
