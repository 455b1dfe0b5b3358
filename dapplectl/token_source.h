// Where dapplectl's bearer token comes from (issue 16, contract 5; docs/dapplectl.md,
// "Authentication"): the first found of
//   1. --token-file PATH,
//   2. $DAPPLE_TOKEN (the token itself),
//   3. $DAPPLE_TOKEN_FILE (a file holding it),
//   4. the token-file of the context in use (--context NAME, else the configuration's
//      current-context; ctl_config.h), also when --coordinator or DAPPLE_COORDINATOR gives the
//      address: like kubectl's --server, an address given otherwise replaces the context's
//      coordinator (and its TLS files), not its credentials.
// None: "" (calls go without a token; a coordinator's UNAUTHENTICATED then says "no token: ...",
// where dapplectl looked (DescribeTokenSearch), exit code 6).
#ifndef DAPPLE_DAPPLECTL_TOKEN_SOURCE_H_
#define DAPPLE_DAPPLECTL_TOKEN_SOURCE_H_

#include <string>

#include "absl/status/statusor.h"

namespace dapple::ctl {

struct TokenSources {
  std::string flag_file;                 // --token-file ("" : not given)
  const char* env_token = nullptr;       // $DAPPLE_TOKEN
  const char* env_token_file = nullptr;  // $DAPPLE_TOKEN_FILE
  std::string context_file;  // the context's token-file; context_name names it in errors
  std::string context_name;
};

// The token, or "" for none. kUnauthenticated (exit code 6) naming the source for a file that
// cannot be read or is empty, e.g. "--token-file: cannot read token file '/x': No such file or
// directory", "DAPPLE_TOKEN is empty".
absl::StatusOr<std::string> ResolveToken(const TokenSources& sources);

// Where ResolveToken looked, for the message of a call that went without a token: "looked at
// --token-file (not given), DAPPLE_TOKEN (not set), DAPPLE_TOKEN_FILE (not set), context prod
// (no token-file)"; the last item reads "no context in use" without one.
std::string DescribeTokenSearch(const TokenSources& sources);

}  // namespace dapple::ctl

#endif  // DAPPLE_DAPPLECTL_TOKEN_SOURCE_H_
