#include "dapplectl/ctl_config.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "yaml-cpp/yaml.h"

namespace dapple::ctl {
namespace {

absl::Status Invalid(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 63) return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.')) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::string ConfigPath() {
  if (const char* path = std::getenv("DAPPLE_CONFIG"); path != nullptr && *path != '\0') {
    return path;
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return absl::StrCat(home, "/.config/dapple/config.yaml");
  }
  return "";
}

absl::StatusOr<CtlConfig> LoadConfig(const std::string& path) {
  CtlConfig config;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) return config;
    return absl::FailedPreconditionError(
        absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  YAML::Node root;
  try {
    root = YAML::Load(text.str());
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ":", e.mark.line + 1, ":", e.mark.column + 1, ": ", e.msg));
  }
  if (root.IsNull()) return config;
  if (!root.IsMap()) return Invalid(path, "expected a map with current-context and contexts");
  try {
    for (const auto& kv : root) {
      const std::string key = kv.first.as<std::string>();
      if (key == "current-context") {
        config.current_context = kv.second.as<std::string>();
      } else if (key == "contexts") {
        if (!kv.second.IsSequence()) return Invalid(path, "contexts must be a list");
        for (const YAML::Node& item : kv.second) {
          if (!item.IsMap()) return Invalid(path, "each context must be a map");
          Context c;
          for (const auto& field : item) {
            const std::string name = field.first.as<std::string>();
            const std::string value = field.second.as<std::string>();
            if (name == "name") {
              c.name = value;
            } else if (name == "coordinator") {
              c.coordinator = value;
            } else if (name == "ca") {
              c.ca = value;
            } else if (name == "tls-cert") {
              c.tls_cert = value;
            } else if (name == "tls-key") {
              c.tls_key = value;
            } else if (name == "token-file") {
              c.token_file = value;
            } else {
              return Invalid(path, absl::StrCat("unknown key '", name,
                                                "' in a context (name, coordinator, ca, "
                                                "tls-cert, tls-key, token-file)"));
            }
          }
          config.contexts.push_back(std::move(c));
        }
      } else {
        return Invalid(path, absl::StrCat("unknown key '", key, "' (current-context, contexts)"));
      }
    }
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ":", e.mark.line + 1, ":", e.mark.column + 1, ": ", e.msg));
  }
  std::set<std::string> names;
  for (const Context& c : config.contexts) {
    if (!ValidName(c.name)) {
      return Invalid(path, absl::StrCat("context name '", c.name,
                                        "' must be 1-63 characters of a-z 0-9 - _ ."));
    }
    if (!names.insert(c.name).second) {
      return Invalid(path, absl::StrCat("context '", c.name, "' is defined twice"));
    }
    if (c.coordinator.empty()) {
      return Invalid(path, absl::StrCat("context '", c.name, "' has no coordinator"));
    }
  }
  if (!config.current_context.empty() && !names.contains(config.current_context)) {
    return Invalid(path, absl::StrCat("current-context '", config.current_context,
                                      "' names no context (", ContextNames(config), ")"));
  }
  return config;
}

absl::Status SaveConfig(const std::string& path, const CtlConfig& config) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  if (!config.current_context.empty()) {
    out << YAML::Key << "current-context" << YAML::Value << config.current_context;
  }
  out << YAML::Key << "contexts" << YAML::Value << YAML::BeginSeq;
  for (const Context& c : config.contexts) {
    out << YAML::BeginMap << YAML::Key << "name" << YAML::Value << c.name << YAML::Key
        << "coordinator" << YAML::Value << c.coordinator;
    if (!c.ca.empty()) out << YAML::Key << "ca" << YAML::Value << c.ca;
    if (!c.tls_cert.empty()) out << YAML::Key << "tls-cert" << YAML::Value << c.tls_cert;
    if (!c.tls_key.empty()) out << YAML::Key << "tls-key" << YAML::Value << c.tls_key;
    if (!c.token_file.empty()) out << YAML::Key << "token-file" << YAML::Value << c.token_file;
    out << YAML::EndMap;
  }
  out << YAML::EndSeq << YAML::EndMap;
  auto fail = [&](const std::string& why) {
    return absl::FailedPreconditionError(absl::StrCat("cannot write ", path, ": ", why));
  };
  std::error_code ec;
  const std::filesystem::path folder = std::filesystem::path(path).parent_path();
  if (!folder.empty()) {
    std::filesystem::create_directories(folder, ec);
    if (ec) return fail(ec.message());
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return fail(std::strerror(errno));
    f << out.c_str() << "\n";
    f.flush();
    if (!f) return fail(std::strerror(errno));
  }
  chmod(tmp.c_str(), 0600);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    return fail(why);
  }
  return absl::OkStatus();
}

absl::Status CheckContextName(const std::string& name) {
  if (ValidName(name)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("context name '", name, "' must be 1-63 characters of a-z 0-9 - _ ."));
}

const Context* FindContext(const CtlConfig& config, const std::string& name) {
  for (const Context& c : config.contexts) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

std::string ContextNames(const CtlConfig& config) {
  std::vector<std::string> names;
  for (const Context& c : config.contexts) names.push_back(c.name);
  return names.empty() ? "none" : absl::StrJoin(names, ", ");
}

}  // namespace dapple::ctl
