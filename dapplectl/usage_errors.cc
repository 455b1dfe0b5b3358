#include "dapplectl/usage_errors.h"

#include <algorithm>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/edit_distance.h"

namespace dapple::ctl {
namespace {

constexpr absl::string_view kAtMost = ": At Most ";
constexpr absl::string_view kReceived = " required but received ";

// "--tail: At Most 1 required but received 2" -> "--tail given 2 times: give it once".
bool RewriteAtMost(absl::string_view what, std::string* out) {
  const size_t at = what.find(kAtMost);
  const size_t received = what.find(kReceived);
  if (at == absl::string_view::npos || received == absl::string_view::npos || received < at) {
    return false;
  }
  const absl::string_view name = what.substr(0, at);
  const absl::string_view most = what.substr(at + kAtMost.size(), received - at - kAtMost.size());
  const absl::string_view got = what.substr(received + kReceived.size());
  int most_value = 0;
  if (!absl::SimpleAtoi(most, &most_value)) return false;
  *out = most_value == 1 ? absl::StrCat(name, " given ", got, " times: give it once")
                         : absl::StrCat(name, " given ", got, " times: at most ", most);
  return true;
}

// "--rank: 1 required STAGE/REPLICA missing" -> "--rank needs a value: --rank STAGE/REPLICA".
bool RewriteMissingValue(absl::string_view what, std::string* out) {
  if (!absl::EndsWith(what, " missing")) return false;
  const size_t colon = what.find(": ");
  if (colon == absl::string_view::npos) return false;
  const absl::string_view name = what.substr(0, colon);
  absl::string_view rest = what.substr(colon + 2);
  rest = absl::StripSuffix(rest, " missing");
  const size_t required = rest.find(" required ");
  if (required == absl::string_view::npos) return false;
  const absl::string_view type = rest.substr(required + absl::string_view(" required ").size());
  // TEXT is CLI11's name for a value without a type name of its own: it says nothing.
  *out = type == "TEXT" || type.empty() ? absl::StrCat(name, " needs a value")
                                        : absl::StrCat(name, " needs a value: ", name, " ", type);
  return true;
}

// "The following arguments were not expected: c b" (CLI11 lists them last first).
bool RewriteExtras(absl::string_view what, absl::string_view command, std::string* out) {
  const size_t colon = what.find("not expected: ");
  if (colon == absl::string_view::npos) return false;
  std::vector<std::string> words = absl::StrSplit(
      what.substr(colon + absl::string_view("not expected: ").size()), ' ', absl::SkipEmpty());
  if (words.empty()) return false;
  std::reverse(words.begin(), words.end());
  std::vector<std::string> flags, arguments;
  for (std::string& w : words) (absl::StartsWith(w, "-") ? flags : arguments).push_back(w);
  std::vector<std::string> parts;
  if (!flags.empty()) {
    parts.push_back(absl::StrCat(flags.size() == 1 ? "unknown flag " : "unknown flags ",
                                 absl::StrJoin(flags, ", ")));
  }
  if (!arguments.empty()) {
    parts.push_back(
        absl::StrCat(arguments.size() == 1 ? "unexpected argument " : "unexpected arguments ",
                     absl::StrJoin(arguments, ", ")));
  }
  *out =
      absl::StrCat(command.empty() ? "" : absl::StrCat(command, ": "), absl::StrJoin(parts, "; "));
  return true;
}

}  // namespace

std::string SuggestFlag(absl::string_view unknown, const std::vector<std::string>& flags) {
  // "--tail=3": the name alone.
  unknown = unknown.substr(0, unknown.find('='));
  std::string best;
  size_t best_distance = kMaxSuggestionDistance + 1;
  for (const std::string& flag : flags) {
    const size_t d = EditDistance(unknown, flag);
    if (d < best_distance) {
      best = flag;
      best_distance = d;
    }
  }
  return best;
}

std::string UsageErrorText(absl::string_view error_name, absl::string_view what,
                           absl::string_view command, absl::string_view suggestion) {
  std::string text;
  bool rewritten = false;
  if (error_name == "ArgumentMismatch") {
    rewritten = RewriteAtMost(what, &text) || RewriteMissingValue(what, &text);
  } else if (error_name == "ExtrasError") {
    rewritten = RewriteExtras(what, command, &text);
  } else if (error_name == "RequiredError" && absl::EndsWith(what, " is required") &&
             !command.empty()) {
    text = absl::StrCat(command, " needs ", absl::StripSuffix(what, " is required"));
    rewritten = true;
  }
  if (!rewritten) text = std::string(what);
  if (!suggestion.empty()) absl::StrAppend(&text, "; did you mean ", suggestion, "?");
  const std::string help =
      command.empty() ? "dapplectl --help" : absl::StrCat("dapplectl ", command, " --help");
  return absl::StrCat(text, " (see ", help, ")");
}

}  // namespace dapple::ctl
