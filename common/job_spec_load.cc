// YAML text -> one yaml-cpp document (LoadDocument, job_spec_internal.h): syntax errors with
// positions that point where the fix goes, and the nesting limit checked before yaml-cpp reads
// the text.
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "common/job_spec_internal.h"

namespace dapple::job_spec_internal {
namespace {

// Deeper YAML is refused before yaml-cpp, which recurses once per level, reads it. A job spec
// needs 4 levels.
constexpr int kMaxYamlDepth = 64;

struct Bracket {
  int line = 0;  // 0-based, like yaml-cpp's marks
  int column = 0;
  char symbol = 0;
  bool closed = false;
};

// The innermost '[' or '{' that is open at byte `pos` and never closed before the end of the
// text, skipping quoted strings and comments. A heuristic for error messages only: yaml-cpp
// reports an unclosed bracket where parsing finally fails, often lines later.
std::optional<Bracket> NeverClosedBracket(absl::string_view text, size_t pos) {
  std::vector<Bracket> brackets;
  std::vector<size_t> open;    // indices into brackets
  std::vector<size_t> at_pos;  // `open` as it was at `pos`
  bool seen_pos = false;
  int line = 0, column = 0;
  char quote = 0;
  bool comment = false;
  for (size_t i = 0; i < text.size(); ++i) {
    if (i == pos) {
      at_pos = open;
      seen_pos = true;
    }
    const char c = text[i];
    if (c == '\n') {
      ++line;
      column = 0;
      comment = false;
      continue;
    }
    if (comment) {
    } else if (quote != 0) {
      if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '#' && (i == 0 || text[i - 1] == ' ' || text[i - 1] == '\t')) {
      comment = true;
    } else if (c == '[' || c == '{') {
      open.push_back(brackets.size());
      brackets.push_back(Bracket{line, column, c});
    } else if ((c == ']' || c == '}') && !open.empty()) {
      brackets[open.back()].closed = true;
      open.pop_back();
    }
    ++column;
  }
  if (!seen_pos) at_pos = open;
  for (auto it = at_pos.rbegin(); it != at_pos.rend(); ++it) {
    if (!brackets[*it].closed) return brackets[*it];
  }
  return std::nullopt;
}

struct TooDeep {
  int line = 0;  // 1-based
  int column = 0;
};

// Where `text` first nests collections more than kMaxYamlDepth deep, or nullopt. yaml-cpp
// recurses once per level (and gives up at 2000 with "bad file"), so this runs first, in one pass
// with no recursion. It estimates the depth as block levels (the indentation stack, where each
// compact "- " / "? " / ": " indicator opens a level) plus open flow brackets. A bracket or quote
// counts only where a value starts (after line start, an indicator, ',' or a bracket), so text
// inside plain scalars, quoted strings, comments and block scalars (| and >) is skipped.
std::optional<TooDeep> FindTooDeep(absl::string_view text) {
  std::vector<int> indents;  // columns of the open block levels
  int flow = 0;
  char quote = 0;
  int block_scalar_parent = -1;  // while >= 0: lines indented more are block scalar content
  int line = 0;
  for (size_t start = 0; start <= text.size(); ++line) {
    size_t end = text.find('\n', start);
    if (end == absl::string_view::npos) end = text.size();
    const absl::string_view row = text.substr(start, end - start);
    start = end + 1;
    size_t i = 0;
    bool value_start = true;  // the next character may start a node
    int line_indent = indents.empty() ? 0 : indents.back();
    if (quote == 0 && flow == 0) {
      while (i < row.size() && row[i] == ' ') ++i;
      const bool blank = i == row.size() || row[i] == '#' || row[i] == '\r';
      if (block_scalar_parent >= 0) {
        if (blank || static_cast<int>(i) > block_scalar_parent) continue;
        block_scalar_parent = -1;
      }
      if (blank) continue;
      while (!indents.empty() && indents.back() >= static_cast<int>(i)) indents.pop_back();
      indents.push_back(static_cast<int>(i));
      line_indent = static_cast<int>(i);
      while (i + 1 < row.size() && (row[i] == '-' || row[i] == '?' || row[i] == ':') &&
             (row[i + 1] == ' ' || row[i + 1] == '\t')) {
        i += 2;
        while (i < row.size() && (row[i] == ' ' || row[i] == '\t')) ++i;
        indents.push_back(static_cast<int>(i));
        if (static_cast<int>(indents.size()) > kMaxYamlDepth) {
          return TooDeep{line + 1, static_cast<int>(i) + 1};
        }
      }
      if (static_cast<int>(indents.size()) > kMaxYamlDepth) {
        return TooDeep{line + 1, static_cast<int>(i) + 1};
      }
    }
    for (; i < row.size(); ++i) {
      const char c = row[i];
      if (quote == '"') {
        if (c == '\\') {
          ++i;
        } else if (c == '"') {
          quote = 0;
        }
        continue;
      }
      if (quote == '\'') {
        if (c == '\'' && i + 1 < row.size() && row[i + 1] == '\'') {
          ++i;
        } else if (c == '\'') {
          quote = 0;
        }
        continue;
      }
      if (c == ' ' || c == '\t' || c == '\r') continue;
      if (c == '#' && (i == 0 || row[i - 1] == ' ' || row[i - 1] == '\t')) break;
      // In flow context plain scalars cannot hold brackets, so every bracket counts there.
      const bool starts = value_start;
      value_start = false;
      if ((c == '[' || c == '{') && (starts || flow > 0)) {
        ++flow;
        if (static_cast<int>(indents.size()) + flow > kMaxYamlDepth) {
          return TooDeep{line + 1, static_cast<int>(i) + 1};
        }
        value_start = true;
      } else if ((c == ']' || c == '}') && flow > 0) {
        --flow;
      } else if ((c == '"' || c == '\'') && starts) {
        quote = c;
      } else if (c == ',' && flow > 0) {
        value_start = true;
      } else if ((c == ':' || c == '-' || c == '?') &&
                 (i + 1 == row.size() || row[i + 1] == ' ' || row[i + 1] == '\t')) {
        value_start = true;
      } else if ((c == '|' || c == '>') && starts && flow == 0) {
        block_scalar_parent = line_indent;
        break;
      }
    }
    if (end == text.size()) break;
  }
  return std::nullopt;
}

// The first line (0-based) up to `last_line` whose indentation holds a tab before content
// (a blank or comment line's whitespace does not count), if any.
std::optional<int> TabIndentedLine(absl::string_view text, int last_line) {
  int line = 0;
  for (size_t start = 0; start < text.size() && line <= last_line; ++line) {
    size_t end = text.find('\n', start);
    if (end == absl::string_view::npos) end = text.size();
    const absl::string_view row = text.substr(start, end - start);
    const size_t content = row.find_first_not_of(" \t\r");
    if (content != absl::string_view::npos && row[content] != '#' &&
        row.substr(0, content).find('\t') != absl::string_view::npos) {
      return line;
    }
    start = end + 1;
  }
  return std::nullopt;
}

// Where a quoted scalar of `node` (or below it) opens a quote that does not close on its own
// line: its line, column and quote character, 1-based, and the line where it closes (0: never). A
// quote left open takes in the lines after it up to the next quote character, and what is left
// parses as a different document ("missing required field 'model'"), so the open quote is what the
// message must name. No value of a job spec needs more than one line.
struct OpenQuote {
  int line = 0;
  int column = 0;
  char quote = 0;
  int end_line = 0;  // 0: the quote is never closed
};

// `seen`: the positions of the collections visited, so that an alias (even a cyclic one,
// `a: &x [*x]`) is walked once.
std::optional<OpenQuote> MultiLineQuote(const YAML::Node& node, absl::string_view text,
                                        std::set<int>* seen) {
  if (node.IsScalar()) {
    const YAML::Mark mark = node.Mark();
    if (mark.is_null() || mark.pos < 0 || static_cast<size_t>(mark.pos) >= text.size()) {
      return std::nullopt;
    }
    const char q = text[mark.pos];
    if (q != '"' && q != '\'') return std::nullopt;
    int line = mark.line;
    for (size_t i = mark.pos + 1; i < text.size(); ++i) {
      const char c = text[i];
      if (q == '"' && c == '\\') {
        ++i;  // an escape; an escaped line break also continues the value on the next line
        if (i < text.size() && text[i] == '\n') ++line;
        continue;
      }
      if (c == '\n') {
        ++line;
        continue;
      }
      if (c != q) continue;
      if (q == '\'' && i + 1 < text.size() && text[i + 1] == '\'') {
        ++i;  // '' is a quote inside single quotes
        continue;
      }
      if (line == mark.line) return std::nullopt;
      return OpenQuote{mark.line + 1, mark.column + 1, q, line + 1};
    }
    // Never closed: yaml-cpp takes the rest of the text as the value.
    return OpenQuote{mark.line + 1, mark.column + 1, q, 0};
  }
  if ((node.IsSequence() || node.IsMap()) && seen->insert(node.Mark().pos).second) {
    for (YAML::const_iterator it = node.begin(); it != node.end(); ++it) {
      if (node.IsMap()) {
        if (auto q = MultiLineQuote(it->first, text, seen)) return q;
        if (auto q = MultiLineQuote(it->second, text, seen)) return q;
      } else if (auto q = MultiLineQuote(*it, text, seen)) {
        return q;
      }
    }
  }
  return std::nullopt;
}

// The first merge key (`<<: *anchor`, YAML 1.1's merge) in `node`: yaml-cpp keeps it as a plain
// key and merges nothing, so `{<<: *block, heads: 4}` read as a layer without a type. `seen` as
// MultiLineQuote's.
std::optional<YAML::Mark> MergeKey(const YAML::Node& node, std::set<int>* seen) {
  if (!(node.IsSequence() || node.IsMap()) || !seen->insert(node.Mark().pos).second) {
    return std::nullopt;
  }
  for (YAML::const_iterator it = node.begin(); it != node.end(); ++it) {
    if (node.IsMap()) {
      if (it->first.IsScalar() && it->first.Tag() != "!" && it->first.Scalar() == "<<") {
        return it->first.Mark();
      }
      if (auto m = MergeKey(it->second, seen)) return m;
    } else if (auto m = MergeKey(*it, seen)) {
      return m;
    }
  }
  return std::nullopt;
}

}  // namespace

absl::StatusOr<YAML::Node> LoadDocument(absl::string_view yaml, const std::string& name) {
  if (std::optional<TooDeep> deep = FindTooDeep(yaml)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s:%d:%d: the job spec is nested more than %d levels deep here (a valid "
                        "job spec needs at most 4); refused "
                        "before parsing",
                        name, deep->line, deep->column, kMaxYamlDepth));
  }
  std::vector<YAML::Node> documents;
  try {
    documents = YAML::LoadAll(std::string(yaml));
  } catch (const YAML::DeepRecursion& e) {
    // Backstop for nesting FindTooDeep underestimates.
    return absl::InvalidArgumentError(
        absl::StrFormat("%s:%d:%d: the job spec is nested more than %d levels deep here (a valid "
                        "job spec needs at most 4)",
                        name, e.mark.line + 1, e.mark.column + 1, e.depth()));
  } catch (const YAML::Exception& e) {
    if (e.mark.is_null()) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: YAML syntax error: %s", name, e.msg));
    }
    // Point at a bracket that is never closed, where the fix goes, rather than where yaml-cpp
    // gave up.
    if (std::optional<Bracket> open = NeverClosedBracket(yaml, e.mark.pos)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s:%d:%d: YAML syntax error: this '%c' is never closed (yaml-cpp stopped at %d:%d: %s)",
          name, open->line + 1, open->column + 1, open->symbol, e.mark.line + 1, e.mark.column + 1,
          e.msg));
    }
    // yaml-cpp's words for a tab in the indentation ("illegal map value" at the line's end,
    // "illegal block entry", "illegal tab when looking for indentation") say it differently
    // each time, or not at all: one message for all.
    if (std::optional<int> tab = TabIndentedLine(yaml, e.mark.line)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s:%d:1: YAML syntax error: this line is indented with a tab; YAML indents with "
          "spaces only (yaml-cpp stopped at %d:%d: %s)",
          name, *tab + 1, e.mark.line + 1, e.mark.column + 1, e.msg));
    }
    // yaml-cpp's "illegal map value" is a 'key: value' where a plain value goes on: most often a
    // line indented deeper than the key above it (read as that key's value continuing), or a
    // value holding ': '.
    const std::string hint =
        e.msg == "illegal map value"
            ? " (a 'key: value' where a value goes on: is this line indented deeper than the "
              "key above it, or does a value hold ': ' and need quotes?)"
            : "";
    return absl::InvalidArgumentError(absl::StrFormat("%s:%d:%d: YAML syntax error: %s%s", name,
                                                      e.mark.line + 1, e.mark.column + 1, e.msg,
                                                      hint));
  }
  if (documents.size() > 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s:%d:%d: the job spec must be one YAML document, found %d (separated by ---)", name,
        documents[1].Mark().line + 1, documents[1].Mark().column + 1, documents.size()));
  }
  if (documents.empty()) return YAML::Node();
  std::set<int> seen;
  if (std::optional<OpenQuote> open = MultiLineQuote(documents[0], yaml, &seen)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s:%d:%d: this %c is not closed on its line: the value runs on to %s (close the "
        "quote; every value of a job spec fits on one line)",
        name, open->line, open->column, open->quote,
        open->end_line > 0 ? absl::StrFormat("line %d", open->end_line) : "the end of the text"));
  }
  std::set<int> walked;
  if (std::optional<YAML::Mark> merge = MergeKey(documents[0], &walked)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s:%d:%d: YAML merge keys ('<<') are not supported: write the fields out (an anchor "
        "and alias, '&name' and '*name', may stand for a whole value)",
        name, merge->line + 1, merge->column + 1));
  }
  return documents[0];
}

}  // namespace dapple::job_spec_internal
