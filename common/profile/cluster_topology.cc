// ParseClusterYaml and the device arithmetic of cluster_topology.h.
#include "common/profile/cluster_topology.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/profile/text_util.h"
#include "common/status.h"

namespace dapple::profile {
namespace {

struct Unit {
  absl::string_view name;
  double scale;  // to bytes, bytes/s or ms
};

// Decimal prefixes are powers of 10 (GB = 1e9), binary ones powers of 2 (GiB = 2^30); link
// speeds in bits are divided by 8 (25 Gbit/s = 3.125e9 B/s).
constexpr Unit kMemoryUnits[] = {
    {"B", 1},           {"KB", 1e3},           {"MB", 1e6},
    {"GB", 1e9},        {"TB", 1e12},          {"KiB", 1024},
    {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
constexpr Unit kBandwidthUnits[] = {
    {"B/s", 1},          {"KB/s", 1e3},        {"MB/s", 1e6},           {"GB/s", 1e9},
    {"KiB/s", 1024},     {"MiB/s", 1048576.0}, {"GiB/s", 1073741824.0}, {"bit/s", 1.0 / 8},
    {"Kbit/s", 1e3 / 8}, {"Mbit/s", 1e6 / 8},  {"Gbit/s", 1e9 / 8}};
constexpr Unit kLatencyUnits[] = {{"s", 1e3}, {"ms", 1}, {"us", 1e-3}, {"ns", 1e-6}};

struct QuantityKind {
  std::span<const Unit> units;
  absl::string_view plain;    // what a number without a unit means
  absl::string_view example;  // for "expected a number and a unit like ..."
};
constexpr QuantityKind kMemory = {kMemoryUnits, "bytes", "16 GiB"};
constexpr QuantityKind kBandwidth = {kBandwidthUnits, "bytes/s", "25 Gbit/s"};
constexpr QuantityKind kLatency = {kLatencyUnits, "ms", "5 us"};

constexpr absl::string_view kRootKeys[] = {"name",          "nodes",      "devices_per_node",
                                           "device_memory", "intra_node", "inter_node"};
constexpr absl::string_view kNodeKeys[] = {"name", "devices", "device_memory"};
constexpr absl::string_view kLinkKeys[] = {"bandwidth", "latency"};
constexpr int64_t kMaxNodes = kMaxClusterNodes;
constexpr int64_t kMaxDevicesPerNode = kMaxClusterDevices;

// A closed range of a quantity, with its bounds as people write them.
struct Limit {
  double min;
  double max;
  absl::string_view min_text;
  absl::string_view max_text;
};
constexpr Limit kMemoryLimit = {static_cast<double>(kMinDeviceMemoryBytes),
                                static_cast<double>(kMaxDeviceMemoryBytes), "1 MiB", "1 PiB"};
constexpr Limit kBandwidthLimit = {kMinBandwidthBytesPerS, kMaxBandwidthBytesPerS, "1 KB/s",
                                   "10 TB/s"};
constexpr Limit kLatencyLimit = {0, kMaxLatencyMs, "0 s", "10 s"};

// "" when `value` is in `limit`; otherwise what is wrong with it ("is more than 10 s").
std::string LimitRule(double value, const Limit& limit) {
  if (value < limit.min) return absl::StrCat("is less than ", limit.min_text);
  if (value > limit.max) return absl::StrCat("is more than ", limit.max_text);
  if (!(value >= limit.min && value <= limit.max)) return "is not a number";
  return "";
}

absl::Status CheckLimit(const std::string& field, double value, const Limit& limit) {
  const std::string rule = LimitRule(value, limit);
  if (rule.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(field, " ", ShortestDouble(value), " ", rule));
}

struct Field {
  YAML::Node key;
  YAML::Node value;
};
using Fields = std::map<std::string, Field, std::less<>>;

std::string Describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Scalar:
      return Quote(node.Scalar());
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return "nothing";
  }
  return "something else";
}

std::string Join(absl::string_view parent, absl::string_view key) {
  return parent.empty() ? std::string(key) : absl::StrCat(parent, ".", key);
}

class ClusterParser {
 public:
  explicit ClusterParser(absl::string_view source) : source_(source) {}

  absl::StatusOr<v1::ClusterTopology> Parse(const YAML::Node& root);

 private:
  absl::Status Error(const YAML::Mark& mark, absl::string_view field,
                     absl::string_view rule) const {
    if (mark.is_null()) {
      return absl::InvalidArgumentError(absl::StrCat(source_, ": ", field, ": ", rule));
    }
    return absl::InvalidArgumentError(
        absl::StrCat(source_, ":", mark.line + 1, ":", mark.column + 1, ": ", field, ": ", rule));
  }
  // A null value (`key:` with nothing after it) has no position of its own: use its key's.
  static YAML::Mark MarkOf(const Field& f) {
    return f.value.IsNull() || f.value.Mark().is_null() ? f.key.Mark() : f.value.Mark();
  }

  absl::StatusOr<Fields> ReadMap(const YAML::Node& node, const YAML::Mark& where,
                                 const std::string& path, std::span<const absl::string_view> known,
                                 absl::string_view example) const;
  absl::StatusOr<const Field*> Require(const Fields& fields, const YAML::Mark& parent,
                                       const std::string& path, absl::string_view key,
                                       absl::string_view what) const;
  absl::StatusOr<std::string> Name(const Field& f, const std::string& path) const;
  absl::StatusOr<int64_t> Count(const Field& f, const std::string& path, int64_t max) const;
  absl::StatusOr<double> Quantity(const Field& f, const std::string& path,
                                  const QuantityKind& kind) const;
  absl::StatusOr<double> Limited(const Field& f, const std::string& path, const QuantityKind& kind,
                                 const Limit& limit) const;
  absl::StatusOr<int64_t> Memory(const Field& f, const std::string& path) const;

  absl::Status ParseNodeCount(const Fields& root, const Field& nodes, const YAML::Mark& root_mark,
                              v1::ClusterTopology& topology) const;
  absl::Status ParseNodeList(const Fields& root, const Field& nodes,
                             v1::ClusterTopology& topology) const;
  absl::Status ParseLink(const Fields& root, const YAML::Mark& root_mark, const std::string& name,
                         double& bandwidth, double& latency_ms) const;

  std::string source_;
};

absl::StatusOr<Fields> ClusterParser::ReadMap(const YAML::Node& node, const YAML::Mark& where,
                                              const std::string& path,
                                              std::span<const absl::string_view> known,
                                              absl::string_view example) const {
  const std::string field = path.empty() ? "cluster" : path;
  if (!node.IsMap()) {
    return Error(where, field, absl::StrCat("must be a map ", example, ", got ", Describe(node)));
  }
  Fields fields;
  for (auto it = node.begin(); it != node.end(); ++it) {
    const YAML::Node key = it->first;  // a copy: `it->` returns a temporary proxy
    const std::string text = key.IsScalar() ? key.Scalar() : Describe(key);
    bool is_known = false;
    for (absl::string_view k : known) is_known = is_known || (key.IsScalar() && k == text);
    if (!is_known) {
      return Error(
          key.Mark(), Join(path, text),
          absl::StrCat("unknown key ", Quote(text), "; known: ", absl::StrJoin(known, ", ")));
    }
    if (fields.count(text) > 0) {
      return Error(
          key.Mark(), Join(path, text),
          absl::StrCat("repeated key (first at line ", fields[text].key.Mark().line + 1, ")"));
    }
    fields[text] = Field{key, it->second};
  }
  return fields;
}

absl::StatusOr<const Field*> ClusterParser::Require(const Fields& fields, const YAML::Mark& parent,
                                                    const std::string& path, absl::string_view key,
                                                    absl::string_view what) const {
  const auto it = fields.find(key);
  if (it == fields.end()) {
    return Error(parent, Join(path, key), absl::StrCat("missing required key (", what, ")"));
  }
  return &it->second;
}

absl::StatusOr<std::string> ClusterParser::Name(const Field& f, const std::string& path) const {
  // Device names are "<node>/<index>", so a node name must not contain '/'.
  if (!f.value.IsScalar() || f.value.Scalar().empty() ||
      f.value.Scalar().find('/') != std::string::npos) {
    return Error(MarkOf(f), path,
                 absl::StrCat("must be a non-empty name without '/', got ", Describe(f.value)));
  }
  return f.value.Scalar();
}

absl::StatusOr<int64_t> ClusterParser::Count(const Field& f, const std::string& path,
                                             int64_t max) const {
  int64_t value = 0;
  if (!f.value.IsScalar() || !absl::SimpleAtoi(f.value.Scalar(), &value) || value < 1 ||
      value > max) {
    return Error(MarkOf(f), path,
                 absl::StrCat("must be an integer in [1, ", max, "], got ", Describe(f.value)));
  }
  return value;
}

absl::StatusOr<double> ClusterParser::Quantity(const Field& f, const std::string& path,
                                               const QuantityKind& kind) const {
  const std::string expected = absl::StrCat("a number and a unit like '", kind.example,
                                            "' (or a plain number of ", kind.plain, ")");
  if (!f.value.IsScalar()) {
    return Error(MarkOf(f), path, absl::StrCat("expected ", expected, ", got ", Describe(f.value)));
  }
  const absl::string_view text = f.value.Scalar();
  const size_t length = DecimalPrefixLength(text);
  if (length == 0) {
    return Error(MarkOf(f), path, absl::StrCat("expected ", expected, ", got ", Quote(text)));
  }
  const double number = ParseDecimal(text.substr(0, length)).value_or(NAN);
  const absl::string_view unit = absl::StripAsciiWhitespace(text.substr(length));
  double scale = unit.empty() ? 1.0 : 0.0;
  for (const Unit& u : kind.units) {
    if (u.name == unit) scale = u.scale;
  }
  if (scale == 0.0) {
    std::vector<absl::string_view> names;
    for (const Unit& u : kind.units) names.push_back(u.name);
    return Error(MarkOf(f), path,
                 absl::StrCat("unknown unit ", Quote(unit), " in ", Quote(text), "; known: ",
                              absl::StrJoin(names, ", "), " (a plain number is ", kind.plain, ")"));
  }
  if (!std::isfinite(number * scale)) {
    return Error(MarkOf(f), path, absl::StrCat("must be finite, got ", Quote(text)));
  }
  return number * scale;
}

absl::StatusOr<double> ClusterParser::Limited(const Field& f, const std::string& path,
                                              const QuantityKind& kind, const Limit& limit) const {
  DAPPLE_ASSIGN_OR_RETURN(const double value, Quantity(f, path, kind));
  const std::string rule = LimitRule(value, limit);
  if (!rule.empty()) {
    return Error(MarkOf(f), path, absl::StrCat(Describe(f.value), " ", rule));
  }
  return value;
}

absl::StatusOr<int64_t> ClusterParser::Memory(const Field& f, const std::string& path) const {
  DAPPLE_ASSIGN_OR_RETURN(const double bytes, Limited(f, path, kMemory, kMemoryLimit));
  return std::llround(bytes);
}

absl::Status ClusterParser::ParseNodeCount(const Fields& root, const Field& nodes,
                                           const YAML::Mark& root_mark,
                                           v1::ClusterTopology& topology) const {
  DAPPLE_ASSIGN_OR_RETURN(const int64_t count, Count(nodes, "nodes", kMaxNodes));
  DAPPLE_ASSIGN_OR_RETURN(const Field* devices,
                          Require(root, root_mark, "", "devices_per_node",
                                  "with 'nodes: <count>', the devices of each node"));
  DAPPLE_ASSIGN_OR_RETURN(const int64_t per_node,
                          Count(*devices, "devices_per_node", kMaxDevicesPerNode));
  DAPPLE_ASSIGN_OR_RETURN(const Field* memory,
                          Require(root, root_mark, "", "device_memory",
                                  "with 'nodes: <count>', each device's memory like 16 GiB"));
  DAPPLE_ASSIGN_OR_RETURN(const int64_t bytes, Memory(*memory, "device_memory"));
  if (count * per_node > kMaxClusterDevices) {
    return Error(
        MarkOf(nodes), "nodes",
        absl::StrCat(count, " nodes of ", per_node, " devices are ", count * per_node,
                     " devices, more than the ", kMaxClusterDevices, " a cluster may have"));
  }
  for (int64_t i = 0; i < count; ++i) {
    v1::ClusterNode* node = topology.add_nodes();
    node->set_name(absl::StrCat("node", i));
    node->set_devices(static_cast<int32_t>(per_node));
    node->set_device_memory_bytes(bytes);
  }
  return absl::OkStatus();
}

absl::Status ClusterParser::ParseNodeList(const Fields& root, const Field& nodes,
                                          v1::ClusterTopology& topology) const {
  // With a list each node says its own devices and memory; a top-level default as well would
  // leave two places to look.
  for (absl::string_view key : {"devices_per_node", "device_memory"}) {
    if (const auto it = root.find(key); it != root.end()) {
      return Error(it->second.key.Mark(), key,
                   "applies only with 'nodes: <count>'; with a list of nodes give each node "
                   "'devices' and 'device_memory'");
    }
  }
  if (nodes.value.size() < 1 || nodes.value.size() > static_cast<size_t>(kMaxNodes)) {
    return Error(MarkOf(nodes), "nodes",
                 absl::StrCat("must list 1 to ", kMaxNodes, " nodes, got ", nodes.value.size()));
  }
  std::set<std::string> names;
  int64_t total_devices = 0;
  for (size_t i = 0; i < nodes.value.size(); ++i) {
    const std::string path = absl::StrCat("nodes[", i, "]");
    const YAML::Node entry = nodes.value[i];
    DAPPLE_ASSIGN_OR_RETURN(const Fields fields,
                            ReadMap(entry, entry.Mark(), path, kNodeKeys,
                                    "like {name: a, devices: 8, device_memory: 16 GiB}"));
    v1::ClusterNode* node = topology.add_nodes();
    node->set_name(absl::StrCat("node", i));
    if (const auto it = fields.find("name"); it != fields.end()) {
      DAPPLE_ASSIGN_OR_RETURN(*node->mutable_name(), Name(it->second, path + ".name"));
    }
    if (!names.insert(node->name()).second) {
      return Error(entry.Mark(), path + ".name",
                   absl::StrCat("repeated node name ", Quote(node->name())));
    }
    DAPPLE_ASSIGN_OR_RETURN(const Field* devices,
                            Require(fields, entry.Mark(), path, "devices", "a device count"));
    DAPPLE_ASSIGN_OR_RETURN(const int64_t count,
                            Count(*devices, path + ".devices", kMaxDevicesPerNode));
    node->set_devices(static_cast<int32_t>(count));
    total_devices += count;
    if (total_devices > kMaxClusterDevices) {
      return Error(
          MarkOf(*devices), path + ".devices",
          absl::StrCat("nodes[0..", i, "] have ", total_devices, " devices, more than the ",
                       kMaxClusterDevices, " a cluster may have"));
    }
    DAPPLE_ASSIGN_OR_RETURN(const Field* memory,
                            Require(fields, entry.Mark(), path, "device_memory", "like 16 GiB"));
    DAPPLE_ASSIGN_OR_RETURN(const int64_t bytes, Memory(*memory, path + ".device_memory"));
    node->set_device_memory_bytes(bytes);
  }
  return absl::OkStatus();
}

absl::Status ClusterParser::ParseLink(const Fields& root, const YAML::Mark& root_mark,
                                      const std::string& name, double& bandwidth,
                                      double& latency_ms) const {
  DAPPLE_ASSIGN_OR_RETURN(
      const Field* link,
      Require(root, root_mark, "", name, "a map {bandwidth: 25 Gbit/s, latency: 20 us}"));
  DAPPLE_ASSIGN_OR_RETURN(const Fields fields,
                          ReadMap(link->value, MarkOf(*link), name, kLinkKeys,
                                  "like {bandwidth: 25 Gbit/s, latency: 20 us}"));
  DAPPLE_ASSIGN_OR_RETURN(const Field* bw, Require(fields, MarkOf(*link), name, "bandwidth",
                                                   "like 25 Gbit/s or 130 GB/s"));
  const std::string bw_path = Join(name, "bandwidth");
  DAPPLE_ASSIGN_OR_RETURN(bandwidth, Limited(*bw, bw_path, kBandwidth, kBandwidthLimit));
  DAPPLE_ASSIGN_OR_RETURN(const Field* latency,
                          Require(fields, MarkOf(*link), name, "latency", "like 20 us"));
  const std::string latency_path = Join(name, "latency");
  DAPPLE_ASSIGN_OR_RETURN(latency_ms, Limited(*latency, latency_path, kLatency, kLatencyLimit));
  return absl::OkStatus();
}

absl::StatusOr<v1::ClusterTopology> ClusterParser::Parse(const YAML::Node& root) {
  if (!root.IsDefined() || root.IsNull()) {
    return Error(YAML::Mark(), "cluster",
                 absl::StrCat("the file is empty; expected a map with the keys ",
                              absl::StrJoin(kRootKeys, ", ")));
  }
  const YAML::Mark root_mark = root.Mark();
  DAPPLE_ASSIGN_OR_RETURN(const Fields fields,
                          ReadMap(root, root_mark, "", kRootKeys,
                                  absl::StrCat("with the keys ", absl::StrJoin(kRootKeys, ", "))));
  v1::ClusterTopology topology;
  topology.set_source(source_);
  // `name` is for people reading the file; ClusterTopology has no field for it.
  if (const auto it = fields.find("name"); it != fields.end()) {
    DAPPLE_RETURN_IF_ERROR(Name(it->second, "name").status());
  }
  DAPPLE_ASSIGN_OR_RETURN(
      const Field* nodes,
      Require(fields, root_mark, "", "nodes",
              "a node count, or a list like [{name: a, devices: 8, device_memory: 16 GiB}]"));
  if (nodes->value.IsSequence()) {
    DAPPLE_RETURN_IF_ERROR(ParseNodeList(fields, *nodes, topology));
  } else {
    DAPPLE_RETURN_IF_ERROR(ParseNodeCount(fields, *nodes, root_mark, topology));
  }
  double bandwidth = 0;
  double latency = 0;
  DAPPLE_RETURN_IF_ERROR(ParseLink(fields, root_mark, "intra_node", bandwidth, latency));
  topology.set_intra_node_bandwidth_bytes_per_s(bandwidth);
  topology.set_intra_node_latency_ms(latency);
  DAPPLE_RETURN_IF_ERROR(ParseLink(fields, root_mark, "inter_node", bandwidth, latency));
  topology.set_inter_node_bandwidth_bytes_per_s(bandwidth);
  topology.set_inter_node_latency_ms(latency);
  // The checks above name the file position; this one holds the parser to the same rules as
  // topologies that come over RPC.
  if (absl::Status valid = ValidateTopology(topology); !valid.ok()) {
    return Error(YAML::Mark(), "cluster", valid.message());
  }
  return topology;
}

}  // namespace

absl::StatusOr<v1::ClusterTopology> ParseClusterYaml(absl::string_view text,
                                                     absl::string_view source) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ":", e.mark.line + 1, ":", e.mark.column + 1, ": YAML syntax error: ", e.msg));
  }
  // yaml-cpp reports some conversion problems by exception even on well-formed text; they
  // become a Status here rather than escaping.
  try {
    return ClusterParser(source).Parse(root);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": cluster: ", e.what()));
  }
}

absl::StatusOr<v1::ClusterTopology> ReadClusterFile(const std::string& path) {
  DAPPLE_ASSIGN_OR_RETURN(const std::string text, ReadTextFile(path, kMaxClusterFileBytes));
  return ParseClusterYaml(text, path);
}

absl::Status ValidateTopology(const v1::ClusterTopology& topology) {
  if (topology.nodes_size() < 1 || topology.nodes_size() > kMaxClusterNodes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "nodes: ", topology.nodes_size(), " nodes; a cluster has 1 to ", kMaxClusterNodes));
  }
  std::set<std::string> names;
  int64_t devices = 0;
  for (int i = 0; i < topology.nodes_size(); ++i) {
    const v1::ClusterNode& node = topology.nodes(i);
    const std::string field = absl::StrCat("nodes[", i, "]");
    if (node.name().empty() || node.name().find('/') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".name ", Quote(node.name()),
                                                     " must be a non-empty name without '/'"));
    }
    if (!names.insert(node.name()).second) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".name ", Quote(node.name()),
                                                     " is repeated: node names must differ"));
    }
    if (node.devices() < 1 || node.devices() > kMaxClusterDevices) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".devices ", node.devices(),
                                                     " must be in [1, ", kMaxClusterDevices, "]"));
    }
    devices += node.devices();
    if (devices > kMaxClusterDevices) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".devices: nodes[0..", i, "] have ",
                                                     devices, " devices, more than the ",
                                                     kMaxClusterDevices, " a cluster may have"));
    }
    DAPPLE_RETURN_IF_ERROR(CheckLimit(field + ".device_memory_bytes",
                                      static_cast<double>(node.device_memory_bytes()),
                                      kMemoryLimit));
    if (node.device_memory_per_device_size() != 0 &&
        node.device_memory_per_device_size() != node.devices()) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".device_memory_per_device has ", node.device_memory_per_device_size(),
          " entries: it has one per device (", node.devices(), ") or none"));
    }
    for (int d = 0; d < node.device_memory_per_device_size(); ++d) {
      DAPPLE_RETURN_IF_ERROR(CheckLimit(absl::StrCat(field, ".device_memory_per_device[", d, "]"),
                                        static_cast<double>(node.device_memory_per_device(d)),
                                        kMemoryLimit));
    }
    if (node.device_group_size() != 0 && node.device_group_size() != node.devices()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".device_group has ", node.device_group_size(),
                       " entries: it has one per device (", node.devices(), ") or none"));
    }
    for (int d = 0; d < node.device_group_size(); ++d) {
      if (node.device_group(d) < 0 || node.device_group(d) >= node.devices()) {
        return absl::InvalidArgumentError(absl::StrCat(field, ".device_group[", d, "] ",
                                                       node.device_group(d), " must be in [0, ",
                                                       node.devices(), ")"));
      }
    }
  }
  DAPPLE_RETURN_IF_ERROR(CheckLimit("intra_node_bandwidth_bytes_per_s",
                                    topology.intra_node_bandwidth_bytes_per_s(), kBandwidthLimit));
  DAPPLE_RETURN_IF_ERROR(
      CheckLimit("intra_node_latency_ms", topology.intra_node_latency_ms(), kLatencyLimit));
  DAPPLE_RETURN_IF_ERROR(CheckLimit("inter_node_bandwidth_bytes_per_s",
                                    topology.inter_node_bandwidth_bytes_per_s(), kBandwidthLimit));
  DAPPLE_RETURN_IF_ERROR(
      CheckLimit("inter_node_latency_ms", topology.inter_node_latency_ms(), kLatencyLimit));
  return absl::OkStatus();
}

int NumDevices(const v1::ClusterTopology& topology) {
  int total = 0;
  for (const v1::ClusterNode& node : topology.nodes()) total += node.devices();
  return total;
}

int NodeOfDevice(const v1::ClusterTopology& topology, int device) {
  if (device < 0) return -1;
  for (int i = 0; i < topology.nodes_size(); ++i) {
    if (device < topology.nodes(i).devices()) return i;
    device -= topology.nodes(i).devices();
  }
  return -1;
}

std::string DeviceName(const v1::ClusterTopology& topology, int device) {
  const int node = NodeOfDevice(topology, device);
  if (node < 0) return "";
  int first = 0;
  for (int i = 0; i < node; ++i) first += topology.nodes(i).devices();
  return absl::StrCat(topology.nodes(node).name(), "/", device - first);
}

int64_t DeviceMemoryBytes(const v1::ClusterTopology& topology, int device) {
  if (device < 0) return 0;
  for (const v1::ClusterNode& node : topology.nodes()) {
    if (device < node.devices()) {
      return node.device_memory_per_device_size() == node.devices()
                 ? node.device_memory_per_device(device)
                 : node.device_memory_bytes();
    }
    device -= node.devices();
  }
  return 0;
}

}  // namespace dapple::profile
