#include "common/profile/cluster_topology.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/testing/assert_ok.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::profile {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr int64_t kGiB = int64_t{1} << 30;

std::string SourceRoot() {
  const char* env = std::getenv("DAPPLE_SOURCE_DIR");
  return env != nullptr && *env != '\0' ? env : DAPPLE_SOURCE_ROOT;
}
std::string ClusterPath(const std::string& name) {
  return absl::StrCat(SourceRoot(), "/examples/clusters/", name);
}
std::string TestData(const std::string& name) {
  return absl::StrCat(SourceRoot(), "/common/profile/testdata/", name);
}

TEST(ReadClusterFileTest, EveryExampleParses) {
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(ClusterPath(""))) {
    if (entry.path().extension() != ".yaml") continue;
    SCOPED_TRACE(entry.path().string());
    const absl::StatusOr<v1::ClusterTopology> topology = ReadClusterFile(entry.path().string());
    ASSERT_OK(topology.status());
    EXPECT_GE(NumDevices(*topology), 2);
    ++files;
  }
  EXPECT_GE(files, 4);
}

TEST(ReadClusterFileTest, TwoNodesEightGpus) {
  const std::string path = ClusterPath("two_nodes_8_gpus.yaml");
  const absl::StatusOr<v1::ClusterTopology> topology = ReadClusterFile(path);
  ASSERT_OK(topology.status());
  EXPECT_EQ(topology->source(), path);
  ASSERT_EQ(topology->nodes_size(), 2);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(topology->nodes(i).name(), absl::StrCat("node", i));
    EXPECT_EQ(topology->nodes(i).devices(), 8);
    EXPECT_EQ(topology->nodes(i).device_memory_bytes(), 16 * kGiB);
  }
  EXPECT_EQ(topology->intra_node_bandwidth_bytes_per_s(), 130e9);
  EXPECT_DOUBLE_EQ(topology->intra_node_latency_ms(), 0.005);
  EXPECT_EQ(topology->inter_node_bandwidth_bytes_per_s(), 3.125e9);  // 25e9 bits / 8
  EXPECT_DOUBLE_EQ(topology->inter_node_latency_ms(), 0.03);
  EXPECT_EQ(NumDevices(*topology), 16);
  EXPECT_EQ(NodeOfDevice(*topology, 0), 0);
  EXPECT_EQ(NodeOfDevice(*topology, 7), 0);
  EXPECT_EQ(NodeOfDevice(*topology, 8), 1);
  EXPECT_EQ(NodeOfDevice(*topology, 15), 1);
  EXPECT_EQ(DeviceName(*topology, 11), "node1/3");
  EXPECT_EQ(DeviceMemoryBytes(*topology, 15), 16 * kGiB);
}

TEST(ReadClusterFileTest, SixteenNodesAtTwoSpeedsAndTheLocalMachine) {
  for (const auto& [name, bandwidth] : {std::make_pair("sixteen_nodes_25gbit.yaml", 3.125e9),
                                        std::make_pair("sixteen_nodes_10gbit.yaml", 1.25e9)}) {
    SCOPED_TRACE(name);
    const absl::StatusOr<v1::ClusterTopology> topology = ReadClusterFile(ClusterPath(name));
    ASSERT_OK(topology.status());
    EXPECT_EQ(topology->nodes_size(), 16);
    EXPECT_EQ(NumDevices(*topology), 16);
    EXPECT_EQ(NodeOfDevice(*topology, 9), 9);
    EXPECT_EQ(DeviceName(*topology, 15), "node15/0");
    EXPECT_EQ(DeviceMemoryBytes(*topology, 3), 16 * kGiB);
    EXPECT_EQ(topology->inter_node_bandwidth_bytes_per_s(), bandwidth);
  }
  const absl::StatusOr<v1::ClusterTopology> local = ReadClusterFile(ClusterPath("local_cpu.yaml"));
  ASSERT_OK(local.status());
  ASSERT_EQ(local->nodes_size(), 1);
  EXPECT_EQ(DeviceName(*local, 1), "localhost/1");
  EXPECT_EQ(DeviceMemoryBytes(*local, 0), 4 * kGiB);
  EXPECT_EQ(local->intra_node_bandwidth_bytes_per_s(), 5e9);
}

TEST(ReadClusterFileTest, MissingFileIsNotFound) {
  const absl::Status status = ReadClusterFile(ClusterPath("nope.yaml")).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(status.message()), StartsWith(ClusterPath("nope.yaml")));
}

std::string Cluster(const std::string& memory, const std::string& bandwidth,
                    const std::string& latency) {
  return absl::StrCat("nodes: 1\ndevices_per_node: 2\ndevice_memory: ", memory,
                      "\nintra_node: {bandwidth: ", bandwidth, ", latency: ", latency,
                      "}\ninter_node: {bandwidth: 1 GB/s, latency: 1 ms}\n");
}

TEST(ParseClusterYamlTest, Units) {
  struct Case {
    const char* memory;
    const char* bandwidth;
    const char* latency;
    double bytes;
    double bytes_per_s;
    double ms;
  };
  const Case cases[] = {
      {"1.5 GB", "100 Mbit/s", "1 s", 1.5e9, 12.5e6, 1000},
      {"512 MiB", "2 GiB/s", "250 ns", 512.0 * 1024 * 1024, 2.0 * kGiB, 0.00025},
      {"2000000", "1e9", "2", 2e6, 1e9, 2},  // plain numbers: bytes, bytes/s, ms
      {"16GiB", "25Gbit/s", "0 us", 16.0 * kGiB, 3.125e9, 0},
      {"3000 KB", "8000 bit/s", "7 ms", 3e6, 1000, 7},
      {"2048 KiB", "4 KB/s", "3 us", 2.0 * 1024 * 1024, 4000, 0.003},
      {"1 TB", "1 MB/s", "1.5 s", 1e12, 1e6, 1500},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat(c.memory, " | ", c.bandwidth, " | ", c.latency));
    const absl::StatusOr<v1::ClusterTopology> topology =
        ParseClusterYaml(Cluster(c.memory, c.bandwidth, c.latency), "u.yaml");
    ASSERT_OK(topology.status());
    EXPECT_EQ(topology->nodes(0).device_memory_bytes(), static_cast<int64_t>(c.bytes));
    EXPECT_DOUBLE_EQ(topology->intra_node_bandwidth_bytes_per_s(), c.bytes_per_s);
    EXPECT_DOUBLE_EQ(topology->intra_node_latency_ms(), c.ms);
  }
}

TEST(ParseClusterYamlTest, ListOfNodesWithDefaultNames) {
  const absl::StatusOr<v1::ClusterTopology> topology = ParseClusterYaml(
      "name: mixed\n"
      "nodes:\n"
      "  - {name: big, devices: 2, device_memory: 8 GiB}\n"
      "  - {devices: 3, device_memory: 16 GiB}\n"
      "intra_node: {bandwidth: 10 GB/s, latency: 5 us}\n"
      "inter_node: {bandwidth: 1 GB/s, latency: 30 us}\n",
      "mixed.yaml");
  ASSERT_OK(topology.status());
  EXPECT_EQ(topology->nodes(0).name(), "big");
  EXPECT_EQ(topology->nodes(1).name(), "node1");
  EXPECT_EQ(NumDevices(*topology), 5);
  EXPECT_EQ(DeviceName(*topology, 1), "big/1");
  EXPECT_EQ(DeviceName(*topology, 4), "node1/2");
  EXPECT_EQ(DeviceMemoryBytes(*topology, 1), 8 * kGiB);
  EXPECT_EQ(DeviceMemoryBytes(*topology, 2), 16 * kGiB);
  // Outside the devices.
  EXPECT_EQ(NodeOfDevice(*topology, -1), -1);
  EXPECT_EQ(NodeOfDevice(*topology, 5), -1);
  EXPECT_EQ(DeviceName(*topology, 5), "");
  EXPECT_EQ(DeviceMemoryBytes(*topology, 5), 0);
}

// One malformed file per kind of error; each message names file:line:column and the field.
absl::Status ReadBad(const std::string& name) { return ReadClusterFile(TestData(name)).status(); }

TEST(MalformedClusterTest, BadYamlSyntax) {
  const absl::Status status = ReadBad("bad_syntax.yaml");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              StartsWith(absl::StrCat(TestData("bad_syntax.yaml"), ":6:11: YAML syntax error: ")));
}

TEST(MalformedClusterTest, UnknownKey) {
  EXPECT_EQ(ReadBad("unknown_key.yaml").message(),
            absl::StrCat(TestData("unknown_key.yaml"),
                         ":5:14: intra_node.bandwith: unknown key 'bandwith'; known: bandwidth, "
                         "latency"));
}

TEST(MalformedClusterTest, BadUnit) {
  EXPECT_EQ(ReadBad("bad_unit.yaml").message(),
            absl::StrCat(TestData("bad_unit.yaml"),
                         ":6:25: inter_node.bandwidth: unknown unit 'Gbps' in '25 Gbps'; known: "
                         "B/s, KB/s, MB/s, GB/s, KiB/s, MiB/s, GiB/s, bit/s, Kbit/s, Mbit/s, "
                         "Gbit/s (a plain number is bytes/s)"));
}

TEST(MalformedClusterTest, ZeroDevices) {
  EXPECT_EQ(ReadBad("zero_devices.yaml").message(),
            absl::StrCat(TestData("zero_devices.yaml"),
                         ":3:19: devices_per_node: must be an integer in [1, 4096], got '0'"));
}

TEST(MalformedClusterTest, MissingKey) {
  // Reported where the map that lacks it starts (its first key, after the comment).
  EXPECT_EQ(ReadBad("missing_key.yaml").message(),
            absl::StrCat(TestData("missing_key.yaml"),
                         ":2:1: inter_node: missing required key (a map {bandwidth: 25 Gbit/s, "
                         "latency: 20 us})"));
}

TEST(MalformedClusterTest, InlineCases) {
  const std::string links =
      "intra_node: {bandwidth: 1 GB/s, latency: 1 us}\n"
      "inter_node: {bandwidth: 1 GB/s, latency: 1 us}\n";
  const std::string count = "nodes: 2\ndevices_per_node: 2\ndevice_memory: 1 GiB\n";
  struct Case {
    std::string text;
    const char* message;  // the expected start, after "c.yaml:"
  };
  const Case cases[] = {
      {"", "1:1: cluster: the file is empty; expected a map with the keys name, nodes, "},
      {"- 1\n- 2\n", "1:1: cluster: must be a map with the keys "},
      {count + links + "gpus: 8\n",
       "6:1: gpus: unknown key 'gpus'; known: name, nodes, "
       "devices_per_node, device_memory, intra_node, inter_node"},
      {count + links + "nodes: 3\n", "6:1: nodes: repeated key (first at line 1)"},
      {"nodes: two\ndevices_per_node: 2\ndevice_memory: 1 GiB\n" + links,
       "1:8: nodes: must be an integer in [1, 4096], got 'two'"},
      {"nodes: 2\ndevices_per_node: 2\n" + links,
       "1:1: device_memory: missing required key (with 'nodes: <count>', each device's memory"},
      {"nodes: 2\ndevices_per_node: 2\ndevice_memory: 0 GiB\n" + links,
       "3:16: device_memory: '0 GiB' is less than 1 MiB"},
      {"nodes: 2\ndevices_per_node: 2\ndevice_memory: lots\n" + links,
       "3:16: device_memory: expected a number and a unit like '16 GiB' (or a plain number of "
       "bytes), got 'lots'"},
      {count + "intra_node: {bandwidth: 0 GB/s, latency: 1 us}\n" + links.substr(47),
       "4:25: intra_node.bandwidth: '0 GB/s' is less than 1 KB/s"},
      {count + "intra_node: {bandwidth: 1 GB/s, latency: -1 us}\n" + links.substr(47),
       "4:42: intra_node.latency: '-1 us' is less than 0 s"},
      {count + "intra_node: {bandwidth: 1 GB/s}\n" + links.substr(47),
       "4:13: intra_node.latency: missing required key (like 20 us)"},
      {count + "intra_node: 5\n" + links.substr(47),
       "4:13: intra_node: must be a map like {bandwidth: 25 Gbit/s, latency: 20 us}, got '5'"},
      {"nodes: []\n" + links, "1:8: nodes: must list 1 to 4096 nodes, got 0"},
      {"nodes: [{devices: 1, device_memory: 1 GiB}]\ndevices_per_node: 2\n" + links,
       "2:1: devices_per_node: applies only with 'nodes: <count>'"},
      {"nodes: [{name: a, devices: 1, device_memory: 1 GiB}, {name: a, devices: 1, "
       "device_memory: 1 GiB}]\n" +
           links,
       "1:54: nodes[1].name: repeated node name 'a'"},
      {"nodes: [{name: a/b, devices: 1, device_memory: 1 GiB}]\n" + links,
       "1:16: nodes[0].name: must be a non-empty name without '/', got 'a/b'"},
      {"nodes: [{name: a, device_memory: 1 GiB}]\n" + links,
       "1:9: nodes[0].devices: missing required key (a device count)"},
      {"nodes: [{name: a, devices: 0, device_memory: 1 GiB}]\n" + links,
       "1:28: nodes[0].devices: must be an integer in [1, 4096], got '0'"},
      {"nodes: [{name: a, devices: 1, memory: 1 GiB}]\n" + links,
       "1:31: nodes[0].memory: unknown key 'memory'; known: name, devices, device_memory"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    const absl::Status status = ParseClusterYaml(c.text, "c.yaml").status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(status.message()), StartsWith(absl::StrCat("c.yaml:", c.message)));
  }
}

// Each limit on each side, in the file's own words: position, field, value and rule.
TEST(MalformedClusterTest, ValuesOutsideTheLimits) {
  const auto file = [](const std::string& nodes, const std::string& memory,
                       const std::string& intra, const std::string& inter) {
    return absl::StrCat(nodes, "\ndevice_memory: ", memory, "\nintra_node: {", intra,
                        "}\ninter_node: {", inter, "}\n");
  };
  const std::string nodes = "nodes: 2\ndevices_per_node: 2";
  const std::string link = "bandwidth: 1 GB/s, latency: 1 us";
  struct Case {
    std::string text;
    std::string message;  // the whole message after "c.yaml:"
  };
  const Case cases[] = {
      {file("nodes: 4097\ndevices_per_node: 1", "1 GiB", link, link),
       "1:8: nodes: must be an integer in [1, 4096], got '4097'"},
      {file("nodes: 65536\ndevices_per_node: 1", "1 GiB", link, link),
       "1:8: nodes: must be an integer in [1, 4096], got '65536'"},
      {file("nodes: 1025\ndevices_per_node: 4", "1 GiB", link, link),
       "1:8: nodes: 1025 nodes of 4 devices are 4100 devices, more than the 4096 a cluster may "
       "have"},
      {file(nodes, "1048575", link, link), "3:16: device_memory: '1048575' is less than 1 MiB"},
      {file(nodes, "1025 TiB", link, link), "3:16: device_memory: '1025 TiB' is more than 1 PiB"},
      {file(nodes, "1 GiB", "bandwidth: 999 B/s, latency: 1 us", link),
       "4:25: intra_node.bandwidth: '999 B/s' is less than 1 KB/s"},
      {file(nodes, "1 GiB", link, "bandwidth: 10001 GB/s, latency: 1 us"),
       "5:25: inter_node.bandwidth: '10001 GB/s' is more than 10 TB/s"},
      {file(nodes, "1 GiB", link, "bandwidth: 1 GB/s, latency: 1e300 s"),
       "5:42: inter_node.latency: '1e300 s' is more than 10 s"},
      {file(nodes, "1 GiB", "bandwidth: 1 GB/s, latency: 10001 ms", link),
       "4:42: intra_node.latency: '10001 ms' is more than 10 s"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    const absl::Status status = ParseClusterYaml(c.text, "c.yaml").status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(status.message(), absl::StrCat("c.yaml:", c.message));
  }
  // A list of nodes is checked as it adds up.
  std::string list = "nodes: [";
  for (int i = 0; i < 5; ++i)
    absl::StrAppend(&list, i > 0 ? ", " : "", "{devices: 1000, device_memory: 1 GiB}");
  const absl::Status status =
      ParseClusterYaml(
          absl::StrCat(list, "]\nintra_node: {", link, "}\ninter_node: {", link, "}\n"), "c.yaml")
          .status();
  EXPECT_EQ(status.message(),
            "c.yaml:1:175: nodes[4].devices: nodes[0..4] have 5000 devices, more than the 4096 a "
            "cluster may have");
  // The limits themselves are allowed.
  ASSERT_OK(ParseClusterYaml(
                file("nodes: 4096\ndevices_per_node: 1", "1 MiB", "bandwidth: 1 KB/s, latency: 0 s",
                     "bandwidth: 10000 GB/s, latency: 10 s"),
                "c.yaml")
                .status());
  ASSERT_OK(
      ParseClusterYaml(file("nodes: 1\ndevices_per_node: 4096", "1024 TiB", link, link), "c.yaml")
          .status());
}

v1::ClusterTopology ValidTopology() {
  v1::ClusterTopology topology;
  for (int i = 0; i < 2; ++i) {
    v1::ClusterNode* node = topology.add_nodes();
    node->set_name(absl::StrCat("n", i));
    node->set_devices(2);
    node->set_device_memory_bytes(16 * kGiB);
  }
  topology.set_intra_node_bandwidth_bytes_per_s(1e11);
  topology.set_intra_node_latency_ms(0.005);
  topology.set_inter_node_bandwidth_bytes_per_s(1e10);
  topology.set_inter_node_latency_ms(0.02);
  return topology;
}

TEST(ValidateTopologyTest, NamesTheFieldValueAndRule) {
  ASSERT_OK(ValidateTopology(ValidTopology()));
  {
    v1::ClusterTopology shared = ValidTopology();  // node 0's two devices on one GPU
    shared.mutable_nodes(0)->add_device_group(0);
    shared.mutable_nodes(0)->add_device_group(0);
    ASSERT_OK(ValidateTopology(shared));
  }
  struct Case {
    std::function<void(v1::ClusterTopology&)> change;
    const char* message;
  };
  const Case cases[] = {
      {[](v1::ClusterTopology& t) { t.clear_nodes(); }, "nodes: 0 nodes; a cluster has 1 to 4096"},
      {[](v1::ClusterTopology& t) {
         for (int i = 0; i < 4095; ++i) *t.add_nodes() = t.nodes(0);
       },
       "nodes: 4097 nodes; a cluster has 1 to 4096"},
      {[](v1::ClusterTopology& t) { t.mutable_nodes(1)->set_name(""); },
       "nodes[1].name '' must be a non-empty name without '/'"},
      {[](v1::ClusterTopology& t) { t.mutable_nodes(1)->set_name("a/b"); },
       "nodes[1].name 'a/b' must be a non-empty name without '/'"},
      {[](v1::ClusterTopology& t) { t.mutable_nodes(1)->set_name("n0"); },
       "nodes[1].name 'n0' is repeated: node names must differ"},
      {[](v1::ClusterTopology& t) { t.mutable_nodes(0)->set_devices(0); },
       "nodes[0].devices 0 must be in [1, 4096]"},
      {[](v1::ClusterTopology& t) { t.mutable_nodes(1)->set_devices(4095); },
       "nodes[1].devices: nodes[0..1] have 4097 devices, more than the 4096 a cluster may have"},
      {[](v1::ClusterTopology& t) { t.mutable_nodes(1)->set_device_memory_bytes(0); },
       "nodes[1].device_memory_bytes 0 is less than 1 MiB"},
      {[](v1::ClusterTopology& t) {
         t.mutable_nodes(0)->set_device_memory_bytes(int64_t{1} << 51);
       },
       "nodes[0].device_memory_bytes 2251799813685248 is more than 1 PiB"},
      {[](v1::ClusterTopology& t) { t.mutable_nodes(1)->add_device_group(0); },
       "nodes[1].device_group has 1 entries: it has one per device (2) or none"},
      {[](v1::ClusterTopology& t) {
         t.mutable_nodes(0)->add_device_group(0);
         t.mutable_nodes(0)->add_device_group(2);
       },
       "nodes[0].device_group[1] 2 must be in [0, 2)"},
      {[](v1::ClusterTopology& t) {
         t.mutable_nodes(0)->add_device_group(-1);
         t.mutable_nodes(0)->add_device_group(0);
       },
       "nodes[0].device_group[0] -1 must be in [0, 2)"},
      {[](v1::ClusterTopology& t) { t.set_intra_node_bandwidth_bytes_per_s(999); },
       "intra_node_bandwidth_bytes_per_s 999 is less than 1 KB/s"},
      {[](v1::ClusterTopology& t) { t.set_inter_node_bandwidth_bytes_per_s(2e13); },
       "inter_node_bandwidth_bytes_per_s 2e+13 is more than 10 TB/s"},
      {[](v1::ClusterTopology& t) { t.set_inter_node_bandwidth_bytes_per_s(NAN); },
       "inter_node_bandwidth_bytes_per_s nan is not a number"},
      {[](v1::ClusterTopology& t) { t.set_intra_node_latency_ms(-1); },
       "intra_node_latency_ms -1 is less than 0 s"},
      {[](v1::ClusterTopology& t) { t.set_inter_node_latency_ms(1e300); },
       "inter_node_latency_ms 1e+300 is more than 10 s"},
      {[](v1::ClusterTopology& t) { t.set_inter_node_latency_ms(INFINITY); },
       "inter_node_latency_ms inf is more than 10 s"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    v1::ClusterTopology topology = ValidTopology();
    c.change(topology);
    const absl::Status status = ValidateTopology(topology);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(status.message(), c.message);
  }
}

TEST(ReadClusterFileTest, RefusesDevicesFifosAndHugeFiles) {
  for (const char* device : {"/dev/zero", "/dev/urandom", "/dev/null"}) {
    const absl::Status status = ReadClusterFile(device).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(status.message(), absl::StrCat(device, ": not a regular file"));
  }
  const std::string dir = ::testing::TempDir();
  const std::string big = absl::StrCat(dir, "/cluster_big.yaml");
  {
    std::ofstream out(big, std::ios::binary);
    out << std::string((int64_t{1} << 20) + 1, '#');
  }
  const absl::Status status = ReadClusterFile(big).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(status.message(),
            absl::StrCat(big, ": 1048577 bytes is more than the 1.00 MiB limit (1048576 bytes)"));
  std::remove(big.c_str());
}

}  // namespace
}  // namespace dapple::profile
