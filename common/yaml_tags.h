// Which YAML scalars dapple's files (job specs, tenants files) read as numbers and booleans.
// Thread safety: pure functions.
#ifndef DAPPLE_COMMON_YAML_TAGS_H_
#define DAPPLE_COMMON_YAML_TAGS_H_

#include <string>

#include "yaml-cpp/yaml.h"

namespace dapple {

// A plain scalar (unquoted, untagged: yaml-cpp's tag "?"), or one tagged explicitly with a YAML
// core type that is not a string (`!!int 256`, `!!float 0.1`, `!!bool true`): what a reader
// may take as a number or a boolean. A quoted scalar ("256", tag "!") or a `!!str` one is text
// the author meant as text, refused where a number is expected.
inline bool ReadsAsValue(const YAML::Node& node) {
  const std::string& tag = node.Tag();
  return tag == "?" || tag == "tag:yaml.org,2002:int" || tag == "tag:yaml.org,2002:float" ||
         tag == "tag:yaml.org,2002:bool";
}

}  // namespace dapple

#endif  // DAPPLE_COMMON_YAML_TAGS_H_
