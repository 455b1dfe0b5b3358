#include "dapplectl/config_command.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dapplectl/ctl_config.h"
#include "dapplectl/flag_values.h"
#include "dapplectl/text_table.h"
#include "dapplectl/trace_json.h"
#include "yaml-cpp/yaml.h"

namespace dapple::ctl {
namespace {

std::string ContextTable(const CtlConfig& config, const std::string& path) {
  TextTable table({"CURRENT", "NAME", "COORDINATOR", "CA", "TOKEN-FILE"});
  for (const Context& c : config.contexts) {
    table.AddRow({c.name == config.current_context ? "*" : "", c.name, c.coordinator,
                  c.ca.empty() ? "- (plain text)" : c.ca,
                  c.token_file.empty() ? "-" : c.token_file});
  }
  std::string out = config.contexts.empty() ? "no contexts\n" : table.Render();
  absl::StrAppend(&out, "FILE          ", path, "\n");
  return out;
}

}  // namespace

absl::StatusOr<std::string> ConfigAsText(const std::string& path, bool json) {
  if (path.empty()) {
    return absl::FailedPreconditionError(
        "no configuration file: set DAPPLE_CONFIG (a file) or HOME");
  }
  absl::StatusOr<CtlConfig> config = LoadConfig(path);
  if (!config.ok()) return config.status();
  using Fields = std::vector<std::pair<const char*, std::string>>;
  auto fields_of = [](const Context& c) {
    return Fields{{"name", c.name},       {"coordinator", c.coordinator},
                  {"ca", c.ca},           {"tls_cert", c.tls_cert},
                  {"tls_key", c.tls_key}, {"token_file", c.token_file}};
  };
  if (json) {
    std::string out = absl::StrCat("{\n \"file\": ", JsonString(path),
                                   ",\n \"current_context\": ", JsonString(config->current_context),
                                   ",\n \"contexts\": [");
    for (size_t i = 0; i < config->contexts.size(); ++i) {
      absl::StrAppend(&out, i == 0 ? "\n  {" : ",\n  {");
      const Fields fields = fields_of(config->contexts[i]);
      for (size_t f = 0; f < fields.size(); ++f) {
        absl::StrAppend(&out, f == 0 ? "\n" : ",\n", "   \"", fields[f].first,
                        "\": ", JsonString(fields[f].second));
      }
      absl::StrAppend(&out, "\n  }");
    }
    absl::StrAppend(&out, config->contexts.empty() ? "]\n}\n" : "\n ]\n}\n");
    return out;
  }
  YAML::Emitter out;
  out << YAML::BeginMap << YAML::Key << "file" << YAML::Value << path << YAML::Key
      << "current_context" << YAML::Value << config->current_context << YAML::Key << "contexts"
      << YAML::Value << YAML::BeginSeq;
  for (const Context& c : config->contexts) {
    out << YAML::BeginMap;
    for (const auto& [key, value] : fields_of(c)) out << YAML::Key << key << YAML::Value << value;
    out << YAML::EndMap;
  }
  out << YAML::EndSeq << YAML::EndMap;
  return absl::StrCat(out.c_str(), "\n");
}

absl::StatusOr<std::string> RunConfigAction(const std::string& path, const ConfigAction& a) {
  if (path.empty()) {
    return absl::FailedPreconditionError(
        "no configuration file: set DAPPLE_CONFIG (a file) or HOME");
  }
  absl::StatusOr<CtlConfig> loaded = LoadConfig(path);
  if (!loaded.ok()) return loaded.status();
  CtlConfig config = *std::move(loaded);
  if (a.verb == "view" || a.verb == "get-contexts") return ContextTable(config, path);

  Context* found = nullptr;
  for (Context& c : config.contexts) {
    if (c.name == a.name) found = &c;
  }
  if (a.verb == "use-context" || a.verb == "delete-context") {
    if (found == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("no context '", a.name, "' in ", path,
                                                     " (contexts: ", ContextNames(config), ")"));
    }
    std::string done;
    if (a.verb == "use-context") {
      config.current_context = a.name;
      done = absl::StrCat("switched to context ", a.name, "\n");
    } else {
      std::erase_if(config.contexts, [&](const Context& c) { return c.name == a.name; });
      if (config.current_context == a.name) config.current_context.clear();
      done = absl::StrCat("context ", a.name, " deleted\n");
    }
    if (absl::Status s = SaveConfig(path, config); !s.ok()) return s;
    return done;
  }
  if (a.verb != "set-context") {
    return absl::InvalidArgumentError(absl::StrCat("unknown config command '", a.verb, "'"));
  }
  const bool created = found == nullptr;
  if (absl::Status s = CheckContextName(a.name); !s.ok()) return s;
  if (created) {
    if (!a.coordinator.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("a new context needs --coordinator: dapplectl config set-context ", a.name,
                       " --coordinator HOST:PORT [--ca FILE]"));
    }
    config.contexts.push_back(Context{a.name, "", "", "", "", ""});
    found = &config.contexts.back();
  }
  // Files are kept absolute (a relative path would change meaning with the working folder) and
  // must be readable now.
  for (auto [flag, value, field] :
       {std::tuple<const char*, const std::optional<std::string>*, std::string*>{"--ca", &a.ca,
                                                                                 &found->ca},
        {"--tls-cert", &a.tls_cert, &found->tls_cert},
        {"--tls-key", &a.tls_key, &found->tls_key},
        {"--token-file", &a.token_file, &found->token_file}}) {
    if (!value->has_value()) continue;
    if ((*value)->empty()) {
      *field = "";
      continue;
    }
    std::error_code ec;
    const std::string absolute = std::filesystem::absolute(**value, ec).lexically_normal().string();
    if (!std::ifstream(absolute)) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, " ", **value, ": ", std::strerror(errno)));
    }
    *field = absolute;
  }
  if (a.coordinator.has_value()) {
    if (absl::Status s = CheckCoordinatorAddress("--coordinator", *a.coordinator); !s.ok()) {
      return s;
    }
    found->coordinator = *a.coordinator;
  }
  // Checked as LoadConfig checks a file, so that what is written loads again.
  if (absl::Status s = SaveConfig(path, config); !s.ok()) return s;
  if (absl::StatusOr<CtlConfig> again = LoadConfig(path); !again.ok()) return again.status();
  return absl::StrCat("context ", a.name, created ? " created\n" : " updated\n");
}

}  // namespace dapple::ctl
