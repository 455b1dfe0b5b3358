#include "dapplectl/json_output.h"

#include <cctype>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "common/job_spec.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"
#include "google/protobuf/dynamic_message.h"
#include "google/protobuf/util/json_util.h"
#include "yaml-cpp/yaml.h"

namespace dapple::ctl {
namespace {

namespace pb = google::protobuf;

// "JobState" -> "JOB_STATE_": the prefix proto style puts on every value of an enum.
std::string EnumValuePrefix(const std::string& enum_name) {
  std::string out;
  for (size_t i = 0; i < enum_name.size(); ++i) {
    const char c = enum_name[i];
    if (i > 0 && std::isupper(static_cast<unsigned char>(c))) out += '_';
    out += absl::ascii_toupper(c);
  }
  return out + "_";
}

std::string EnumShortName(const pb::EnumDescriptor* type, int number) {
  const pb::EnumValueDescriptor* value = type->FindValueByNumber(number);
  if (value == nullptr) return absl::StrCat(number);  // a value newer than this build
  const std::string prefix = EnumValuePrefix(type->name());
  if (absl::StartsWith(value->name(), prefix)) return value->name().substr(prefix.size());
  return value->name();
}

// The full name of the message printed in its canonical form (JobSpecToYaml), and the type
// name of fields of that type in a FileDescriptorProto.
constexpr char kJobSpecName[] = "dapple.v1.JobSpec";
constexpr char kJobSpecTypeName[] = ".dapple.v1.JobSpec";

// A JobSpec field's value in the twin: "@@dapple-spec-N@@", N indexing the specs collected
// while copying. Printers replace it (only as the value of a "spec" key) with the spec.
constexpr char kSpecMarkPrefix[] = "@@dapple-spec-";
constexpr char kSpecMarkSuffix[] = "@@";

bool IsJobSpec(const pb::FieldDescriptor* field) {
  return field->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE &&
         field->message_type()->full_name() == kJobSpecName;
}

// Enum fields and JobSpec fields of the twins are strings (short names, spec marks).
void TwinFieldsToStrings(pb::DescriptorProto* message) {
  for (pb::FieldDescriptorProto& field : *message->mutable_field()) {
    const bool spec = field.type() == pb::FieldDescriptorProto::TYPE_MESSAGE &&
                      field.type_name() == kJobSpecTypeName;
    if (field.type() != pb::FieldDescriptorProto::TYPE_ENUM && !spec) continue;
    field.set_type(pb::FieldDescriptorProto::TYPE_STRING);
    field.clear_type_name();
    field.clear_default_value();
  }
  for (pb::DescriptorProto& nested : *message->mutable_nested_type()) TwinFieldsToStrings(&nested);
}

// A private descriptor pool holding a twin of each dapple/v1 message whose enum fields (and
// JobSpec fields) are strings: printing the twin gives protobuf's JSON with short enum names in
// field order.
class TwinPool {
 public:
  static TwinPool& Get() {
    static TwinPool* pool = new TwinPool();
    return *pool;
  }

  // A new, empty twin of `type`, or nullptr if its file could not be rebuilt.
  std::unique_ptr<pb::Message> NewTwin(const pb::Descriptor* type) {
    absl::MutexLock lock(&mu_);
    if (!AddFile(type->file())) return nullptr;
    const pb::Descriptor* twin = pool_.FindMessageTypeByName(type->full_name());
    if (twin == nullptr) return nullptr;
    return std::unique_ptr<pb::Message>(factory_.GetPrototype(twin)->New());
  }

 private:
  TwinPool() : factory_(&pool_) {}

  bool AddFile(const pb::FileDescriptor* file) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (pool_.FindFileByName(file->name()) != nullptr) return true;
    for (int i = 0; i < file->dependency_count(); ++i) {
      if (!AddFile(file->dependency(i))) return false;
    }
    pb::FileDescriptorProto proto;
    file->CopyTo(&proto);
    for (pb::DescriptorProto& message : *proto.mutable_message_type()) {
      TwinFieldsToStrings(&message);
    }
    return pool_.BuildFile(proto) != nullptr;
  }

  absl::Mutex mu_;
  pb::DescriptorPool pool_ ABSL_GUARDED_BY(mu_);
  pb::DynamicMessageFactory factory_ ABSL_GUARDED_BY(mu_);
};

// The JobSpecs met while copying, by mark index; nullopt for a JobSpec field that is not set
// (its key is left out, as protobuf leaves out an unset message field).
using Specs = std::vector<std::optional<v1::JobSpec>>;

std::string SpecMark(size_t index) { return absl::StrCat(kSpecMarkPrefix, index, kSpecMarkSuffix); }

// Records `message` (a JobSpec; nullptr: the field is not set) in `specs` and returns its
// mark.
std::string AddSpec(const pb::Message* message, Specs* specs) {
  if (message == nullptr) {
    specs->push_back(std::nullopt);
  } else if (const auto* typed = dynamic_cast<const v1::JobSpec*>(message)) {
    specs->push_back(*typed);
  } else {
    v1::JobSpec spec;
    spec.ParseFromString(message->SerializeAsString());
    specs->push_back(std::move(spec));
  }
  return SpecMark(specs->size() - 1);
}

// The index N of "@@dapple-spec-N@@", or -1 when `text` is not a spec mark.
int SpecIndex(absl::string_view text) {
  if (!absl::ConsumePrefix(&text, kSpecMarkPrefix) ||
      !absl::ConsumeSuffix(&text, kSpecMarkSuffix)) {
    return -1;
  }
  int index = -1;
  return absl::SimpleAtoi(text, &index) && index >= 0 ? index : -1;
}

// Copies every field of `src` into its twin `dst`, enum values as short names, JobSpec
// messages as marks (the specs go to `specs`).
void CopyToTwin(const pb::Message& src, pb::Message* dst, Specs* specs) {
  const pb::Descriptor* sd = src.GetDescriptor();
  const pb::Reflection* sr = src.GetReflection();
  const pb::Descriptor* dd = dst->GetDescriptor();
  const pb::Reflection* dr = dst->GetReflection();
  using F = pb::FieldDescriptor;
  for (int i = 0; i < sd->field_count(); ++i) {
    const F* sf = sd->field(i);
    const F* df = dd->FindFieldByNumber(sf->number());
    if (sf->is_repeated()) {
      const int n = sr->FieldSize(src, sf);
      for (int j = 0; j < n; ++j) {
        switch (sf->cpp_type()) {
          case F::CPPTYPE_INT32:
            dr->AddInt32(dst, df, sr->GetRepeatedInt32(src, sf, j));
            break;
          case F::CPPTYPE_INT64:
            dr->AddInt64(dst, df, sr->GetRepeatedInt64(src, sf, j));
            break;
          case F::CPPTYPE_UINT32:
            dr->AddUInt32(dst, df, sr->GetRepeatedUInt32(src, sf, j));
            break;
          case F::CPPTYPE_UINT64:
            dr->AddUInt64(dst, df, sr->GetRepeatedUInt64(src, sf, j));
            break;
          case F::CPPTYPE_DOUBLE:
            dr->AddDouble(dst, df, sr->GetRepeatedDouble(src, sf, j));
            break;
          case F::CPPTYPE_FLOAT:
            dr->AddFloat(dst, df, sr->GetRepeatedFloat(src, sf, j));
            break;
          case F::CPPTYPE_BOOL:
            dr->AddBool(dst, df, sr->GetRepeatedBool(src, sf, j));
            break;
          case F::CPPTYPE_STRING:
            dr->AddString(dst, df, sr->GetRepeatedString(src, sf, j));
            break;
          case F::CPPTYPE_ENUM:
            dr->AddString(dst, df,
                          EnumShortName(sf->enum_type(), sr->GetRepeatedEnumValue(src, sf, j)));
            break;
          case F::CPPTYPE_MESSAGE:
            if (IsJobSpec(sf)) {
              dr->AddString(dst, df, AddSpec(&sr->GetRepeatedMessage(src, sf, j), specs));
            } else {
              CopyToTwin(sr->GetRepeatedMessage(src, sf, j), dr->AddMessage(dst, df), specs);
            }
            break;
        }
      }
      continue;
    }
    // Fields without presence (proto3 scalars, enums) are copied even at their default, so an
    // UNSPECIFIED enum prints as "UNSPECIFIED" rather than "".
    if (sf->has_presence() && !sr->HasField(src, sf)) {
      // The twin's string field is always printed: its mark says to leave the key out.
      if (IsJobSpec(sf)) dr->SetString(dst, df, AddSpec(nullptr, specs));
      continue;
    }
    switch (sf->cpp_type()) {
      case F::CPPTYPE_INT32:
        dr->SetInt32(dst, df, sr->GetInt32(src, sf));
        break;
      case F::CPPTYPE_INT64:
        dr->SetInt64(dst, df, sr->GetInt64(src, sf));
        break;
      case F::CPPTYPE_UINT32:
        dr->SetUInt32(dst, df, sr->GetUInt32(src, sf));
        break;
      case F::CPPTYPE_UINT64:
        dr->SetUInt64(dst, df, sr->GetUInt64(src, sf));
        break;
      case F::CPPTYPE_DOUBLE:
        dr->SetDouble(dst, df, sr->GetDouble(src, sf));
        break;
      case F::CPPTYPE_FLOAT:
        dr->SetFloat(dst, df, sr->GetFloat(src, sf));
        break;
      case F::CPPTYPE_BOOL:
        dr->SetBool(dst, df, sr->GetBool(src, sf));
        break;
      case F::CPPTYPE_STRING:
        dr->SetString(dst, df, sr->GetString(src, sf));
        break;
      case F::CPPTYPE_ENUM:
        dr->SetString(dst, df, EnumShortName(sf->enum_type(), sr->GetEnumValue(src, sf)));
        break;
      case F::CPPTYPE_MESSAGE:
        if (IsJobSpec(sf)) {
          dr->SetString(dst, df, AddSpec(&sr->GetMessage(src, sf), specs));
        } else {
          CopyToTwin(sr->GetMessage(src, sf), dr->MutableMessage(dst, df), specs);
        }
        break;
    }
  }
}

// Plain YAML scalars that a YAML reader would not take as a string.
bool NeedsQuotes(const std::string& s) {
  if (s.empty()) return true;
  static const auto* kSpecial = new absl::flat_hash_set<std::string>{
      "true", "false", "yes",  "no",  "on",   "off",  "null",  "~",        "y",
      "n",    "nan",   ".nan", "inf", "-inf", ".inf", "-.inf", "infinity", "-infinity"};
  if (kSpecial->contains(absl::AsciiStrToLower(s))) return true;
  // Anything that starts like a number (1700000000000, -3, 1e5, .5) is read as one.
  const char c = s[0];
  return std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '+' || c == '.';
}

// The canonical YAML of `spec` (JobSpecToYaml) as a tree; flow collections keep their style.
YAML::Node CanonicalSpecTree(const v1::JobSpec& spec) { return YAML::Load(JobSpecToYaml(spec)); }

// `keep_flow`: emit flow collections as flow (the canonical spec's `[1, 28, 28]` and
// `{type: linear, out: 1024}`); elsewhere every collection is block style (the tree came from
// JSON, where every collection is flow). `specs` resolves spec marks. `in_flow`: `node` is
// inside a flow collection, where a literal block cannot stand.
void EmitYaml(const YAML::Node& node, const Specs& specs, bool keep_flow, YAML::Emitter* out,
              bool in_flow = false) {
  const bool flow = keep_flow && node.Style() == YAML::EmitterStyle::Flow;
  switch (node.Type()) {
    case YAML::NodeType::Map:
      if (flow) *out << YAML::Flow;
      *out << YAML::BeginMap;
      for (const auto& kv : node) {
        const std::string& key = kv.first.Scalar();
        const int spec = key == "spec" && kv.second.IsScalar() && kv.second.Tag() == "!"
                             ? SpecIndex(kv.second.Scalar())
                             : -1;
        if (spec >= 0 && spec < static_cast<int>(specs.size())) {
          if (!specs[spec].has_value()) continue;  // not set: left out
          *out << YAML::Key << key << YAML::Value;
          EmitYaml(CanonicalSpecTree(*specs[spec]), specs, /*keep_flow=*/true, out);
        } else {
          *out << YAML::Key << key << YAML::Value;
          EmitYaml(kv.second, specs, keep_flow, out, in_flow || flow);
        }
      }
      *out << YAML::EndMap;
      break;
    case YAML::NodeType::Sequence:
      if (node.size() == 0 || flow) *out << YAML::Flow;
      *out << YAML::BeginSeq;
      for (const auto& item : node) EmitYaml(item, specs, keep_flow, out, in_flow || flow);
      *out << YAML::EndSeq;
      break;
    case YAML::NodeType::Scalar: {
      const std::string& s = node.Scalar();
      // yaml-cpp tags a quoted scalar "!" and a plain one "?": in JSON, quoted means string.
      if (node.Tag() != "!") {
        *out << s;  // number, true/false
      } else if (!in_flow && s.size() > 1 && s.find('\n') != std::string::npos && s[0] != ' ' &&
                 s[0] != '\n' && s.back() == '\n' && !absl::EndsWith(s, "\n\n")) {
        // A literal block ("|") reads back with exactly one final newline; yaml-cpp would add
        // a blank line if that newline were emitted as content. Not for "\n" alone (an empty
        // block reads back as "") nor inside a flow map (the sample's {prompt: "\n", ...}).
        *out << YAML::Literal << s.substr(0, s.size() - 1);
      } else if (NeedsQuotes(s) || s.find('\n') != std::string::npos) {
        *out << YAML::DoubleQuoted << s;
      } else {
        *out << s;
      }
      break;
    }
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      *out << YAML::Null;
      break;
  }
}

// --- the spec as JSON ---

// A JSON number as RFC 8259 writes it (what JSON.parse and jq accept).
bool IsJsonNumber(absl::string_view s) {
  size_t i = 0;
  const auto digits = [&] {
    const size_t start = i;
    while (i < s.size() && absl::ascii_isdigit(static_cast<unsigned char>(s[i]))) ++i;
    return i > start;
  };
  if (i < s.size() && s[i] == '-') ++i;
  if (i < s.size() && s[i] == '0') {
    ++i;
  } else if (!digits()) {
    return false;
  }
  if (i < s.size() && s[i] == '.') {
    ++i;
    if (!digits()) return false;
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    if (!digits()) return false;
  }
  return i == s.size();
}

void AppendJsonString(absl::string_view s, std::string* out) {
  out->push_back('"');
  for (const char c : s) {
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\t':
        out->append("\\t");
        break;
      case '\r':
        out->append("\\r");
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          absl::StrAppend(out, absl::StrFormat("\\u%04x", static_cast<unsigned char>(c)));
        } else {
          out->push_back(c);
        }
    }
  }
  out->push_back('"');
}

// A scalar of the canonical spec as a JSON value. `field` is the proto field it holds (nullptr
// inside stage range pairs): strings stay strings, numbers of numeric fields become numbers
// (YAML's .nan / .inf as proto3 JSON writes them: "NaN", "Infinity"), anything else (stages:
// auto) a string.
void AppendSpecScalar(const YAML::Node& node, const pb::FieldDescriptor* field, std::string* out) {
  const std::string& s = node.Scalar();
  using F = pb::FieldDescriptor;
  const bool string_field = field != nullptr && field->cpp_type() == F::CPPTYPE_STRING;
  if (string_field || node.Tag() == "!") {
    AppendJsonString(s, out);
    return;
  }
  if (field != nullptr && field->cpp_type() == F::CPPTYPE_BOOL && (s == "true" || s == "false")) {
    out->append(s);
    return;
  }
  if (s == ".nan" || s == ".inf" || s == "-.inf") {
    AppendJsonString(s == ".nan" ? "NaN" : (s == ".inf" ? "Infinity" : "-Infinity"), out);
    return;
  }
  if (IsJsonNumber(s)) {
    out->append(s);
    return;
  }
  AppendJsonString(s, out);
}

// The canonical spec tree as JSON, in protobuf's layout: `indent` spaces before this value's
// closing bracket, one more per level (pretty), or one line.
void AppendSpecJson(const YAML::Node& node, const pb::Descriptor* type,
                    const pb::FieldDescriptor* field, bool pretty, int indent, std::string* out) {
  const auto newline = [&](int level) {
    if (pretty) absl::StrAppend(out, "\n", std::string(level, ' '));
  };
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      out->push_back('{');
      bool first = true;
      for (const auto& kv : node) {
        if (!first) out->push_back(',');
        first = false;
        newline(indent + 1);
        const std::string& key = kv.first.Scalar();
        AppendJsonString(key, out);
        out->append(pretty ? ": " : ":");
        const pb::FieldDescriptor* child = type == nullptr ? nullptr : type->FindFieldByName(key);
        const pb::Descriptor* child_type =
            child != nullptr && child->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE
                ? child->message_type()
                : nullptr;
        AppendSpecJson(kv.second, child_type, child, pretty, indent + 1, out);
      }
      if (!first) newline(indent);
      out->push_back('}');
      break;
    }
    case YAML::NodeType::Sequence: {
      out->push_back('[');
      // Elements of a repeated field share its type; a list in a scalar field (stages given
      // as ranges) holds [first, last] pairs of numbers.
      const bool repeated = field != nullptr && field->is_repeated();
      bool first = true;
      for (const auto& item : node) {
        if (!first) out->push_back(',');
        first = false;
        newline(indent + 1);
        AppendSpecJson(item, repeated ? type : nullptr, repeated ? field : nullptr, pretty,
                       indent + 1, out);
      }
      if (!first) newline(indent);
      out->push_back(']');
      break;
    }
    case YAML::NodeType::Scalar:
      AppendSpecScalar(node, field, out);
      break;
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      out->append("null");
      break;
  }
}

// Replaces every `"spec": "<mark>"` of protobuf's JSON `json` by the spec it marks, or drops
// it (with the comma before it) for a spec that is not set.
std::string SpliceSpecsIntoJson(const std::string& json, const Specs& specs, bool pretty) {
  std::string out;
  out.reserve(json.size() + specs.size() * 1024);
  const std::string key = pretty ? "\"spec\": " : "\"spec\":";
  size_t pos = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const std::string value = absl::StrCat("\"", SpecMark(i), "\"");
    const size_t at = json.find(key + value, pos);
    if (at == std::string::npos) continue;
    const size_t end = at + key.size() + value.size();
    if (!specs[i].has_value()) {
      // Job.spec is never its message's first field, so a comma (and in pretty output a
      // newline and indentation) comes before it.
      const size_t comma = json.rfind(',', at);
      if (comma != std::string::npos && comma >= pos) {
        out.append(json, pos, comma - pos);
        pos = end;
      }
      continue;
    }
    const size_t line_start = json.rfind('\n', at);
    const size_t start = line_start == std::string::npos ? 0 : line_start + 1;
    const int indent = pretty ? static_cast<int>(json.find_first_not_of(' ', start) - start) : 0;
    out.append(json, pos, at + key.size() - pos);
    AppendSpecJson(CanonicalSpecTree(*specs[i]), v1::JobSpec::descriptor(), nullptr, pretty, indent,
                   &out);
    pos = end;
  }
  out.append(json, pos, std::string::npos);
  return out;
}

// The message as protobuf's JSON of its twin: short enum names, JobSpecs as marks (collected
// in `specs`).
absl::StatusOr<std::string> TwinJson(const pb::Message& message, bool pretty, Specs* specs) {
  std::unique_ptr<pb::Message> twin = TwinPool::Get().NewTwin(message.GetDescriptor());
  if (twin == nullptr) {
    return absl::InternalError(
        absl::StrCat("cannot build a JSON view of ", message.GetDescriptor()->full_name()));
  }
  CopyToTwin(message, twin.get(), specs);
  pb::util::JsonPrintOptions options;
  options.add_whitespace = pretty;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string out;
  const auto status = pb::util::MessageToJsonString(*twin, &out, options);
  if (!status.ok()) {
    return absl::InternalError(absl::StrCat("cannot print ", message.GetDescriptor()->full_name(),
                                            " as JSON: ", std::string(status.message())));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::string> MessageToJson(const pb::Message& message, bool pretty) {
  Specs specs;
  absl::StatusOr<std::string> json = TwinJson(message, pretty, &specs);
  if (!json.ok()) return json.status();
  std::string out = SpliceSpecsIntoJson(*json, specs, pretty);
  if (pretty && (out.empty() || out.back() != '\n')) out += '\n';
  return out;
}

absl::StatusOr<std::string> MessageToYaml(const pb::Message& message) {
  Specs specs;
  absl::StatusOr<std::string> json = TwinJson(message, /*pretty=*/false, &specs);
  if (!json.ok()) return json.status();
  YAML::Emitter out;
  try {
    const YAML::Node tree = YAML::Load(*json);  // JSON is YAML; yaml-cpp keeps the keys' order.
    EmitYaml(tree, specs, /*keep_flow=*/false, &out);
  } catch (const YAML::Exception& e) {
    return absl::InternalError(absl::StrCat("cannot convert ", message.GetDescriptor()->full_name(),
                                            " to YAML: ", e.what()));
  }
  if (!out.good()) {
    return absl::InternalError(absl::StrCat("cannot emit ", message.GetDescriptor()->full_name(),
                                            " as YAML: ", out.GetLastError()));
  }
  return absl::StrCat(out.c_str(), "\n");
}

}  // namespace dapple::ctl
