// The YAML document -> JobSpec reader of job_spec_parse.cc and job_spec_parse_model.cc: typed
// reads of scalars, maps with known keys, and every field's position for messages. An internal
// header of common/: only the job spec files include it.
#ifndef DAPPLE_COMMON_JOB_SPEC_PARSER_H_
#define DAPPLE_COMMON_JOB_SPEC_PARSER_H_

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/spec_text.h"
#include "common/status.h"
#include "common/yaml_tags.h"
#include "dapple/v1/job.pb.h"
#include "google/protobuf/message.h"

namespace dapple::job_spec_internal {

// One key: value pair of a YAML map.
struct Field {
  YAML::Node key;
  YAML::Node value;
};

// Plain (unquoted, untagged) scalars, and those tagged !!int, !!float or !!bool, are the only
// ones read as numbers and booleans (yaml_tags.h).
inline bool IsPlain(const YAML::Node& node) { return ReadsAsValue(node); }

// Decimal integer syntax (what SimpleAtoi reads), whatever its size.
inline bool IsIntegerText(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  if (!text.empty() && (text[0] == '-' || text[0] == '+')) text.remove_prefix(1);
  if (text.empty()) return false;
  for (char c : text) {
    if (!absl::ascii_isdigit(c)) return false;
  }
  return true;
}

inline std::string Describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return "an empty value";
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Scalar:
      return IsPlain(node) ? absl::StrCat("'", node.Scalar(), "'")
                           : absl::StrCat("the string '", node.Scalar(), "'");
    case YAML::NodeType::Undefined:
      return "nothing";
  }
  return "something else";
}

// The job spec's reader: one object per parse, recording where each field is so that errors
// (its own, and validation's through ErrorAtField) point at the field's line and column.
class Parser {
 public:
  explicit Parser(std::string source) : source_(std::move(source)) {}

  absl::Status Parse(const YAML::Node& root, v1::JobSpec& spec);

  // "<source>:line:col: message" at the line of `field` (or its closest recorded parent).
  absl::Status ErrorAtField(const std::string& field, const std::string& message) const {
    std::string path = field;
    while (!path.empty()) {
      auto it = marks_.find(path);
      if (it != marks_.end()) return Error(it->second, message);
      const size_t cut = path.find_last_of(".[");
      path = cut == std::string::npos ? "" : path.substr(0, cut);
    }
    return Error(YAML::Mark::null_mark(), message);
  }

 private:
  using Fields = std::map<std::string, Field>;

  absl::Status Error(const YAML::Mark& mark, const std::string& message) const {
    if (mark.is_null()) {
      return absl::InvalidArgumentError(OneLine(absl::StrCat(source_, ": ", message)));
    }
    return absl::InvalidArgumentError(
        OneLine(absl::StrFormat("%s:%d:%d: %s", source_, mark.line + 1, mark.column + 1, message)));
  }

  // Where a value is: a null value has no position of its own, so use its key's.
  static YAML::Mark MarkOf(const Field& f) {
    return f.value.IsNull() || f.value.Mark().is_null() ? f.key.Mark() : f.value.Mark();
  }

  static std::string Join(const std::string& parent, const std::string& key) {
    return parent.empty() ? key : absl::StrCat(parent, ".", key);
  }

  // The path of another section's field named `key` ("training.recompute" for a recompute under
  // parallel), or "" when no other section of training and parallel has one (or `path` is that
  // section). Defined beside the sections' key lists (job_spec_parse.cc).
  static std::string FieldElsewhere(absl::string_view key, absl::string_view path);

  absl::StatusOr<Fields> ReadMap(const YAML::Node& node, const YAML::Mark& where,
                                 const std::string& path, Names known, const std::string& example) {
    const std::string name = path.empty() ? "the job spec" : path;
    // A section whose fields are all commented out is empty, not wrong; required fields in it
    // are still reported as missing.
    if (node.IsNull() && !path.empty()) return Fields();
    if (!node.IsMap()) {
      return Error(where,
                   absl::StrFormat("%s must be a map%s, got %s", name, example, Describe(node)));
    }
    Fields fields;
    for (auto it = node.begin(); it != node.end(); ++it) {
      const YAML::Node& key = it->first;
      if (!key.IsScalar()) {
        return Error(key.Mark(), absl::StrFormat("the keys of %s must be plain names, got %s", name,
                                                 Describe(key)));
      }
      const std::string& text = key.Scalar();
      if (!Contains(known, text)) {
        std::string message = absl::StrFormat("unknown field '%s' in %s; known: %s", text, name,
                                              absl::StrJoin(known, ", "));
        bool suggested = false;
        for (absl::string_view candidate : known) {
          if (EditDistance(text, candidate) <= 2 && text.size() > 2) {
            absl::StrAppend(&message, "; did you mean '", candidate, "'?");
            suggested = true;
            break;
          }
        }
        if (!suggested) {
          const std::string home = FieldElsewhere(text, path);
          if (!home.empty()) {
            absl::StrAppend(&message, "; '", text, "' is a field of ",
                            home.substr(0, home.rfind('.')), ": move it there (", home, ")");
          }
        }
        return Error(key.Mark(), message);
      }
      if (fields.count(text) > 0) {
        return Error(key.Mark(), absl::StrFormat("duplicate field '%s' in %s (first at line %d)",
                                                 text, name, fields[text].key.Mark().line + 1));
      }
      fields[text] = Field{key, it->second};
      marks_[Join(path, text)] = MarkOf(fields[text]);
    }
    return fields;
  }

  static const Field* Find(const Fields& fields, const std::string& key) {
    auto it = fields.find(key);
    return it == fields.end() ? nullptr : &it->second;
  }

  absl::Status Missing(const YAML::Mark& parent_mark, const std::string& path) const {
    return Error(parent_mark, absl::StrFormat("missing required field '%s'", path));
  }

  absl::StatusOr<std::string> String(const Field& f, const std::string& path) const {
    if (!f.value.IsScalar()) {
      return Error(MarkOf(f),
                   absl::StrFormat("%s must be a string, got %s", path, Describe(f.value)));
    }
    return f.value.Scalar();
  }

  // A string naming one of a field's `values` (a schedule, a precision, ...; the rules refuse
  // others): as String, and an explicit empty string ("") is refused naming `values`, since an
  // unset field and "" would otherwise read the same and "" would silently take the default.
  absl::StatusOr<std::string> Choice(const Field& f, const std::string& path,
                                     absl::Span<const absl::string_view> values) const {
    absl::StatusOr<std::string> s = String(f, path);
    if (s.ok() && s->empty()) {
      return Error(MarkOf(f), absl::StrFormat("%s is an empty string: give one of %s, or leave "
                                              "the key out for its default",
                                              path, absl::StrJoin(values, ", ")));
    }
    return s;
  }

  absl::StatusOr<int64_t> Int(const Field& f, const std::string& path, int64_t min,
                              int64_t max) const {
    int64_t value = 0;
    const bool plain = f.value.IsScalar() && IsPlain(f.value);
    if (plain && IsIntegerText(f.value.Scalar()) && !absl::SimpleAtoi(f.value.Scalar(), &value)) {
      // An integer, but past int64: say so rather than "must be an integer".
      return Error(MarkOf(f), absl::StrFormat("%s must be an integer in [%d, %d], got %s", path,
                                              min, max, f.value.Scalar()));
    }
    if (!plain || !absl::SimpleAtoi(f.value.Scalar(), &value)) {
      return Error(MarkOf(f),
                   absl::StrFormat("%s must be an integer, got %s", path, Describe(f.value)));
    }
    if (value < min || value > max) {
      return Error(MarkOf(f), absl::StrFormat("%s must be an integer in [%d, %d], got %d", path,
                                              min, max, value));
    }
    return value;
  }
  absl::StatusOr<int64_t> Int64(const Field& f, const std::string& path) const {
    return Int(f, path, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
  }
  // An int32 field whose rule allows [min, max] (the rules check it with their own message): a
  // value beyond int32 is refused naming that rule ("parallel.devices 9999999999 is more than
  // the maximum 4096") rather than the type's range, which says nothing about the field.
  absl::StatusOr<int32_t> Int32Within(const Field& f, const std::string& path, int64_t min,
                                      int64_t max) const {
    DAPPLE_ASSIGN_OR_RETURN(const int64_t value, Int64(f, path));
    if (value > std::numeric_limits<int32_t>::max()) {
      return Error(MarkOf(f),
                   absl::StrFormat("%s %d is more than the maximum %d", path, value, max));
    }
    if (value < std::numeric_limits<int32_t>::min()) {
      return Error(MarkOf(f),
                   absl::StrFormat("%s %d is less than the minimum %d", path, value, min));
    }
    return static_cast<int32_t>(value);
  }
  absl::StatusOr<int32_t> Int32(const Field& f, const std::string& path) const {
    DAPPLE_ASSIGN_OR_RETURN(int64_t value, Int(f, path, std::numeric_limits<int32_t>::min(),
                                               std::numeric_limits<int32_t>::max()));
    return static_cast<int32_t>(value);
  }

  absl::StatusOr<uint64_t> Uint64(const Field& f, const std::string& path) const {
    uint64_t value = 0;
    const bool plain = f.value.IsScalar() && IsPlain(f.value);
    const std::string text = plain ? f.value.Scalar() : "";
    if (IsIntegerText(text) && absl::StripAsciiWhitespace(text)[0] != '-' &&
        !absl::SimpleAtoi(text, &value)) {
      return Error(MarkOf(f), absl::StrFormat("%s must be an integer in [0, %d], got %s", path,
                                              std::numeric_limits<uint64_t>::max(), text));
    }
    if (!plain || !absl::SimpleAtoi(text, &value)) {
      return Error(MarkOf(f), absl::StrFormat("%s must be a non-negative integer, got %s", path,
                                              Describe(f.value)));
    }
    return value;
  }

  absl::StatusOr<double> Double(const Field& f, const std::string& path) const {
    const bool plain = f.value.IsScalar() && IsPlain(f.value);
    const std::string text = plain ? f.value.Scalar() : "";
    // YAML 1.2 spells infinity and NaN .inf and .nan; accept them so that validation, not
    // parsing, says what is wrong with such a value.
    const std::string lower = absl::AsciiStrToLower(text);
    if (lower == ".inf" || lower == "+.inf") return std::numeric_limits<double>::infinity();
    if (lower == "-.inf") return -std::numeric_limits<double>::infinity();
    if (lower == ".nan") return std::numeric_limits<double>::quiet_NaN();
    double value = 0;
    if (!plain || !absl::SimpleAtod(text, &value)) {
      return Error(MarkOf(f),
                   absl::StrFormat("%s must be a number, got %s", path, Describe(f.value)));
    }
    // The conversion saturates: quote what was written, not the inf or 0 it became.
    if (std::isinf(value)) {
      return Error(MarkOf(f), absl::StrFormat("%s %s is beyond the largest number (about "
                                              "1.8e308): it would be infinite",
                                              path, text));
    }
    if (value == 0 && HasNonZeroDigit(text.substr(0, text.find_first_of("eE")))) {
      return Error(MarkOf(f), absl::StrFormat("%s %s is below the smallest number (about "
                                              "4.9e-324): it would be 0",
                                              path, text));
    }
    return value;
  }
  static bool HasNonZeroDigit(absl::string_view mantissa) {
    return mantissa.find_first_of("123456789") != absl::string_view::npos;
  }

  // YAML's booleans are the plain scalars true and false; a quoted "true" is a string (and
  // yes/no/on/off are YAML 1.1's, not 1.2's), so both are refused as for a number in quotes.
  absl::StatusOr<bool> Bool(const Field& f, const std::string& path) const {
    const bool plain = f.value.IsScalar() && IsPlain(f.value);
    if (plain && (f.value.Scalar() == "true" || f.value.Scalar() == "false")) {
      return f.value.Scalar() == "true";
    }
    return Error(MarkOf(f),
                 absl::StrFormat("%s must be true or false, got %s", path, Describe(f.value)));
  }

  // job_spec_parse_model.cc: the model, data and sample sections.
  absl::Status ParseModel(const Field& section, v1::ModelSpec& model);
  absl::Status ParseLayer(const Field& item, const std::string& path, v1::LayerSpec& layer);
  absl::Status ParseLayerParam(const Field& f, const std::string& path,
                               google::protobuf::Message& params);
  absl::Status ParseData(const Field* section, v1::DataSpec& data);
  absl::Status ParseSample(const Field& section, v1::SampleSpec& sample);
  // After model and data: the model's input from the dataset where the spec leaves it out.
  absl::Status ResolveModelInput(const Field& model_section, v1::JobSpec& spec);
  // job_spec_parse.cc: the training and parallel sections.
  absl::Status ParseLrSchedule(const Field& section, v1::LrSchedule& schedule);
  // training.restart with its defaults filled. Without the section TrainingSpec.restart stays
  // unset: no restarts (the default), as specs stored before restarts existed read.
  absl::Status ParseRestart(const Field& section, v1::RestartSpec& restart);
  absl::Status ParseTraining(const Field& section, v1::TrainingSpec& training);
  absl::Status ParseOptimizer(const Field& section, v1::OptimizerSpec& opt);
  absl::Status ParseParallel(const Field* section, v1::ParallelSpec& parallel);
  absl::Status ParseEmulation(const Field& section, v1::EmulationSpec& emulation);
  absl::Status ParsePipeSgd(const Field& section, v1::PipeSgdSpec& pipesgd);
  absl::Status ParsePipeDream(const Field& section, v1::PipeDreamSpec& pipedream);
  absl::Status ParseStages(const Field& f, v1::ParallelSpec& parallel);

  std::string source_;
  std::map<std::string, YAML::Mark> marks_;  // YAML path -> position of its value
};

}  // namespace dapple::job_spec_internal

#endif  // DAPPLE_COMMON_JOB_SPEC_PARSER_H_
