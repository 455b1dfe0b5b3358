#include "dapplectl/json_output.h"

#include <cctype>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
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

void EnumFieldsToStrings(pb::DescriptorProto* message) {
  for (pb::FieldDescriptorProto& field : *message->mutable_field()) {
    if (field.type() != pb::FieldDescriptorProto::TYPE_ENUM) continue;
    field.set_type(pb::FieldDescriptorProto::TYPE_STRING);
    field.clear_type_name();
    field.clear_default_value();
  }
  for (pb::DescriptorProto& nested : *message->mutable_nested_type()) EnumFieldsToStrings(&nested);
}

// A private descriptor pool holding a twin of each dapple/v1 message whose enum fields are
// strings: printing the twin gives protobuf's JSON with short enum names in field order.
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
      EnumFieldsToStrings(&message);
    }
    return pool_.BuildFile(proto) != nullptr;
  }

  absl::Mutex mu_;
  pb::DescriptorPool pool_ ABSL_GUARDED_BY(mu_);
  pb::DynamicMessageFactory factory_ ABSL_GUARDED_BY(mu_);
};

// Copies every field of `src` into its twin `dst`, enum values as short names.
void CopyToTwin(const pb::Message& src, pb::Message* dst) {
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
            CopyToTwin(sr->GetRepeatedMessage(src, sf, j), dr->AddMessage(dst, df));
            break;
        }
      }
      continue;
    }
    // Fields without presence (proto3 scalars, enums) are copied even at their default, so an
    // UNSPECIFIED enum prints as "UNSPECIFIED" rather than "".
    if (sf->has_presence() && !sr->HasField(src, sf)) continue;
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
        CopyToTwin(sr->GetMessage(src, sf), dr->MutableMessage(dst, df));
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

void EmitYaml(const YAML::Node& node, YAML::Emitter* out) {
  switch (node.Type()) {
    case YAML::NodeType::Map:
      *out << YAML::BeginMap;
      for (const auto& kv : node) {
        *out << YAML::Key << kv.first.Scalar() << YAML::Value;
        EmitYaml(kv.second, out);
      }
      *out << YAML::EndMap;
      break;
    case YAML::NodeType::Sequence:
      if (node.size() == 0) {
        *out << YAML::Flow << YAML::BeginSeq << YAML::EndSeq;
        break;
      }
      *out << YAML::BeginSeq;
      for (const auto& item : node) EmitYaml(item, out);
      *out << YAML::EndSeq;
      break;
    case YAML::NodeType::Scalar: {
      const std::string& s = node.Scalar();
      // yaml-cpp tags a quoted scalar "!" and a plain one "?": in JSON, quoted means string.
      if (node.Tag() != "!") {
        *out << s;  // number, true/false
      } else if (s.find('\n') != std::string::npos && s[0] != ' ' && s.back() == '\n' &&
                 !absl::EndsWith(s, "\n\n")) {
        // A literal block ("|") reads back with exactly one final newline; yaml-cpp would add
        // a blank line if that newline were emitted as content.
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

}  // namespace

absl::StatusOr<std::string> MessageToJson(const pb::Message& message, bool pretty) {
  std::unique_ptr<pb::Message> twin = TwinPool::Get().NewTwin(message.GetDescriptor());
  if (twin == nullptr) {
    return absl::InternalError(
        absl::StrCat("cannot build a JSON view of ", message.GetDescriptor()->full_name()));
  }
  CopyToTwin(message, twin.get());
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
  if (pretty && (out.empty() || out.back() != '\n')) out += '\n';
  return out;
}

absl::StatusOr<std::string> MessageToYaml(const pb::Message& message) {
  absl::StatusOr<std::string> json = MessageToJson(message, /*pretty=*/false);
  if (!json.ok()) return json.status();
  YAML::Node tree;
  try {
    tree = YAML::Load(*json);  // JSON is YAML; yaml-cpp keeps the keys' order.
  } catch (const YAML::Exception& e) {
    return absl::InternalError(absl::StrCat("cannot convert ", message.GetDescriptor()->full_name(),
                                            " to YAML: ", e.what()));
  }
  YAML::Emitter out;
  EmitYaml(tree, &out);
  if (!out.good()) {
    return absl::InternalError(absl::StrCat("cannot emit ", message.GetDescriptor()->full_name(),
                                            " as YAML: ", out.GetLastError()));
  }
  return absl::StrCat(out.c_str(), "\n");
}

}  // namespace dapple::ctl
