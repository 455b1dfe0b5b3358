#include "dapplectl/token_source.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/token_file.h"

namespace dapple::ctl {
namespace {

absl::StatusOr<std::string> FromFile(const std::string& what, const std::string& path) {
  absl::StatusOr<std::string> token = common::ReadTokenFile(path);
  if (!token.ok()) {
    return absl::UnauthenticatedError(absl::StrCat(what, ": ", token.status().message()));
  }
  return token;
}

}  // namespace

absl::StatusOr<std::string> ResolveToken(const TokenSources& sources) {
  if (!sources.flag_file.empty()) return FromFile("--token-file", sources.flag_file);
  if (sources.env_token != nullptr) {
    const std::string token(absl::StripAsciiWhitespace(sources.env_token));
    if (token.empty()) return absl::UnauthenticatedError("DAPPLE_TOKEN is empty");
    if (absl::Status s = common::CheckTokenText(token); !s.ok()) {
      return absl::UnauthenticatedError(absl::StrCat("DAPPLE_TOKEN ", s.message()));
    }
    return token;
  }
  if (sources.env_token_file != nullptr) {
    return FromFile("DAPPLE_TOKEN_FILE", sources.env_token_file);
  }
  if (!sources.context_file.empty()) {
    return FromFile(absl::StrCat("context ", sources.context_name, "'s token-file"),
                    sources.context_file);
  }
  return std::string();
}

}  // namespace dapple::ctl
