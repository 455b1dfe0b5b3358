// ParseGraphTxt and WriteGraphTxt (model_profile.h): PipeDream's graph.txt format
// (examples/profiles/README.md; PipeDream's graph/graph.py, Graph.from_str and Node.from_str).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <queue>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/profile/model_profile.h"
#include "common/profile/text_util.h"
#include "common/status.h"

namespace dapple::profile {
namespace {

constexpr absl::string_view kSeparator = " -- ";
constexpr absl::string_view kForward = "forward_compute_time";
constexpr absl::string_view kBackward = "backward_compute_time";
constexpr absl::string_view kActivation = "activation_size";
constexpr absl::string_view kParameter = "parameter_size";
constexpr absl::string_view kStageId = "stage_id=";
constexpr absl::string_view kKnownKeys =
    "forward_compute_time, backward_compute_time, activation_size, parameter_size";
constexpr absl::string_view kNodeFormat =
    "'<id> -- <description> -- forward_compute_time=<ms>, backward_compute_time=<ms>, "
    "activation_size=<bytes>, parameter_size=<bytes>'";
// Byte counts above this do not fit an int64 after rounding.
constexpr double kMaxBytes = 9.0e18;

bool HasSpace(absl::string_view text) {
  for (char c : text) {
    if (absl::ascii_isspace(static_cast<unsigned char>(c))) return true;
  }
  return false;
}

struct RawNode {
  v1::LayerProfile layer;
  int line = 0;
};

struct RawEdge {
  std::string src;
  std::string dst;
  int line = 0;
  int src_column = 0;
  int dst_column = 0;
};

// One pass over the lines collects nodes and edges; Finish resolves edges (so an edge may
// precede the node it names) and orders the graph.
class GraphTxtParser {
 public:
  // Every message starts with the source, so an empty one still says what it is.
  explicit GraphTxtParser(absl::string_view source)
      : source_(source.empty() ? "<profile>" : source) {}

  absl::Status ParseLine(absl::string_view line, int line_number);
  absl::StatusOr<v1::ModelProfile> Finish(int64_t batch_size);

 private:
  absl::Status Error(int line, int column, absl::string_view field, absl::string_view rule) const {
    return absl::InvalidArgumentError(
        absl::StrCat(source_, ":", line, ":", column, ": ", field, ": ", rule));
  }
  // 1-based column of `piece`, a view into `line_`.
  int Column(absl::string_view piece) const {
    return static_cast<int>(piece.data() - line_.data()) + 1;
  }

  absl::Status ParseNode(absl::string_view line, int line_number);
  absl::Status ParseEdge(absl::string_view line, int line_number);
  absl::Status ParseMetrics(absl::string_view metrics, int line_number, v1::LayerProfile& layer);
  absl::Status ParseTrailer(absl::string_view trailer, int line_number);
  absl::StatusOr<double> Number(absl::string_view text, int line_number,
                                absl::string_view field) const;
  absl::StatusOr<double> ActivationBytes(absl::string_view text, int line_number) const;
  absl::StatusOr<int64_t> Bytes(double value, absl::string_view text, int line_number,
                                absl::string_view field) const;

  absl::StatusOr<std::vector<std::pair<int, int>>> ResolveEdges() const;
  absl::StatusOr<std::vector<int>> TopologicalOrder(
      const std::vector<std::pair<int, int>>& edges) const;
  absl::Status CycleError(const std::vector<std::pair<int, int>>& edges,
                          const std::vector<int>& in_degree) const;

  std::string source_;
  absl::string_view line_;  // the line being parsed, for columns
  std::vector<RawNode> nodes_;
  std::vector<RawEdge> edges_;
  absl::flat_hash_map<std::string, int> node_index_;  // id -> index in nodes_ (file order)
  // First line of each edge (file-order node indices), for the cycle message.
  std::map<std::pair<int, int>, int> edge_line_;
};

absl::Status GraphTxtParser::ParseLine(absl::string_view line, int line_number) {
  // Tolerate CRLF and trailing blanks (bert-24-pbs-6.txt has a trailing space).
  line = absl::StripTrailingAsciiWhitespace(line);
  line_ = line;
  if (line.empty()) return absl::OkStatus();
  // Edges are indented: a TAB in PipeDream's files, spaces in some of DAPPLE's.
  if (absl::ascii_isspace(static_cast<unsigned char>(line[0]))) {
    return ParseEdge(line, line_number);
  }
  return ParseNode(line, line_number);
}

absl::Status GraphTxtParser::ParseNode(absl::string_view line, int line_number) {
  const size_t id_end = line.find(kSeparator);
  if (id_end == absl::string_view::npos) {
    return Error(line_number, 1, "node",
                 absl::StrCat("expected ", kNodeFormat, ", got ", Quote(line)));
  }
  const absl::string_view id = line.substr(0, id_end);
  if (HasSpace(id)) {
    return Error(line_number, 1, "id", absl::StrCat("node id ", Quote(id), " has a blank in it"));
  }
  // The metrics start at the first " -- <known key>=" after the description.
  const size_t description_start = id_end + kSeparator.size();
  size_t metrics_start = absl::string_view::npos;
  for (absl::string_view key : {kForward, kBackward, kActivation, kParameter}) {
    const size_t at = line.find(absl::StrCat(kSeparator, key, "="), description_start);
    if (at != absl::string_view::npos &&
        (metrics_start == absl::string_view::npos || at < metrics_start)) {
      metrics_start = at;
    }
  }
  if (metrics_start == absl::string_view::npos) {
    return Error(line_number, static_cast<int>(description_start) + 1, "node",
                 absl::StrCat("no ' -- forward_compute_time=...' metrics after the description; "
                              "expected ",
                              kNodeFormat));
  }
  const absl::string_view description =
      line.substr(description_start, metrics_start - description_start);
  if (description.empty()) {
    return Error(line_number, static_cast<int>(description_start) + 1, "description",
                 "the node's description is empty");
  }
  absl::string_view metrics = line.substr(metrics_start + kSeparator.size());
  absl::string_view trailer;
  if (const size_t end = metrics.find(kSeparator); end != absl::string_view::npos) {
    trailer = metrics.substr(end + kSeparator.size());
    metrics = metrics.substr(0, end);
  }
  if (nodes_.size() >= static_cast<size_t>(kMaxProfileLayers)) {
    return Error(line_number, 1, "node",
                 absl::StrCat("more than ", kMaxProfileLayers,
                              " nodes; a profile may have at most ", kMaxProfileLayers, " layers"));
  }
  RawNode node;
  node.line = line_number;
  node.layer.set_id(std::string(id));
  node.layer.set_name(std::string(description));
  node.layer.set_input(absl::StartsWith(description, "Input"));
  DAPPLE_RETURN_IF_ERROR(ParseMetrics(metrics, line_number, node.layer));
  DAPPLE_RETURN_IF_ERROR(ParseTrailer(trailer, line_number));
  const auto [it, inserted] = node_index_.emplace(std::string(id), static_cast<int>(nodes_.size()));
  if (!inserted) {
    return Error(line_number, 1, "id",
                 absl::StrCat("repeated node id ", Quote(id), " (first at line ",
                              nodes_[it->second].line, ")"));
  }
  nodes_.push_back(std::move(node));
  return absl::OkStatus();
}

absl::Status GraphTxtParser::ParseMetrics(absl::string_view metrics, int line_number,
                                          v1::LayerProfile& layer) {
  std::set<std::string> seen;
  for (absl::string_view item : absl::StrSplit(metrics, ',')) {
    item = absl::StripLeadingAsciiWhitespace(item);
    const size_t eq = item.find('=');
    const absl::string_view key = eq == absl::string_view::npos ? item : item.substr(0, eq);
    if (eq == absl::string_view::npos ||
        (key != kForward && key != kBackward && key != kActivation && key != kParameter)) {
      return Error(line_number, Column(item), key.empty() ? "node" : key,
                   absl::StrCat("unknown metric ", Quote(item),
                                "; expected <key>=<value> with "
                                "the keys ",
                                kKnownKeys));
    }
    if (!seen.insert(std::string(key)).second) {
      return Error(line_number, Column(item), key, "repeated key");
    }
    const absl::string_view value = absl::StripTrailingAsciiWhitespace(item.substr(eq + 1));
    if (key == kActivation) {
      DAPPLE_ASSIGN_OR_RETURN(const double bytes, ActivationBytes(value, line_number));
      DAPPLE_ASSIGN_OR_RETURN(const int64_t rounded, Bytes(bytes, value, line_number, key));
      layer.set_activation_bytes(rounded);
      continue;
    }
    DAPPLE_ASSIGN_OR_RETURN(const double number, Number(value, line_number, key));
    if (key == kForward) layer.set_forward_ms(number);
    if (key == kBackward) layer.set_backward_ms(number);
    if (key == kParameter) {
      DAPPLE_ASSIGN_OR_RETURN(const int64_t rounded, Bytes(number, value, line_number, key));
      layer.set_parameter_bytes(rounded);
    }
  }
  for (absl::string_view key : {kForward, kBackward, kActivation, kParameter}) {
    if (seen.count(std::string(key)) == 0) {
      return Error(line_number, Column(metrics), key,
                   absl::StrCat("missing key; a node needs ", kKnownKeys));
    }
  }
  return absl::OkStatus();
}

absl::Status GraphTxtParser::ParseTrailer(absl::string_view trailer, int line_number) {
  // An earlier plan's " -- stage_id=K": checked for form, otherwise ignored.
  if (trailer.empty()) return absl::OkStatus();
  int64_t stage = 0;
  if (!absl::StartsWith(trailer, kStageId) ||
      !absl::SimpleAtoi(trailer.substr(kStageId.size()), &stage) || stage < 0) {
    return Error(line_number, Column(trailer), "stage_id",
                 absl::StrCat("after the metrics only ' -- stage_id=<integer >= 0>' may follow, "
                              "got ",
                              Quote(trailer)));
  }
  return absl::OkStatus();
}

absl::StatusOr<double> GraphTxtParser::Number(absl::string_view text, int line_number,
                                              absl::string_view field) const {
  const std::optional<double> value = ParseDecimal(text);
  if (!value.has_value() || !std::isfinite(*value) || *value < 0) {
    return Error(line_number, Column(text), field,
                 absl::StrCat("must be a finite number >= 0, got ", Quote(text)));
  }
  const bool time = field == kForward || field == kBackward;
  const double most = time ? kMaxLayerMs : kMaxLayerBytes;
  if (*value > most) {
    return Error(
        line_number, Column(text), field,
        absl::StrCat("must be at most ", most, time ? " (ms)" : " (bytes)", ", got ", Quote(text)));
  }
  return *value;
}

absl::StatusOr<double> GraphTxtParser::ActivationBytes(absl::string_view text,
                                                       int line_number) const {
  if (!absl::StartsWith(text, "[")) return Number(text, line_number, kActivation);
  if (!absl::EndsWith(text, "]")) {
    return Error(line_number, Column(text), kActivation,
                 absl::StrCat("a list must look like [a; b; ...], got ", Quote(text)));
  }
  const absl::string_view inside = text.substr(1, text.size() - 2);
  if (absl::StripAsciiWhitespace(inside).empty()) {
    return Error(line_number, Column(text), kActivation, "empty list []");
  }
  double sum = 0;
  for (absl::string_view element : absl::StrSplit(inside, ';')) {
    DAPPLE_ASSIGN_OR_RETURN(const double value,
                            Number(absl::StripAsciiWhitespace(element), line_number, kActivation));
    sum += value;
  }
  return sum;
}

absl::StatusOr<int64_t> GraphTxtParser::Bytes(double value, absl::string_view text, int line_number,
                                              absl::string_view field) const {
  if (value > kMaxBytes) {
    return Error(line_number, Column(text), field,
                 absl::StrCat("must be at most 9e18 bytes, got ", Quote(text)));
  }
  return std::llround(value);
}

absl::Status GraphTxtParser::ParseEdge(absl::string_view line, int line_number) {
  const absl::string_view edge = absl::StripAsciiWhitespace(line);
  const size_t sep = edge.find(kSeparator);
  const absl::string_view src = sep == absl::string_view::npos ? edge : edge.substr(0, sep);
  const absl::string_view dst =
      sep == absl::string_view::npos ? absl::string_view() : edge.substr(sep + kSeparator.size());
  if (src.empty() || dst.empty() || HasSpace(src) || HasSpace(dst)) {
    return Error(line_number, Column(edge), "edge",
                 absl::StrCat("expected '<TAB><src id> -- <dst id>', got ", Quote(edge)));
  }
  edges_.push_back(
      RawEdge{std::string(src), std::string(dst), line_number, Column(src), Column(dst)});
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::pair<int, int>>> GraphTxtParser::ResolveEdges() const {
  std::vector<std::pair<int, int>> edges;
  std::set<std::pair<int, int>> seen;  // a repeated edge adds nothing; it is dropped
  for (const RawEdge& edge : edges_) {
    const auto src = node_index_.find(edge.src);
    const auto dst = node_index_.find(edge.dst);
    if (src == node_index_.end() || dst == node_index_.end()) {
      const bool src_unknown = src == node_index_.end();
      return Error(edge.line, src_unknown ? edge.src_column : edge.dst_column, "edge",
                   absl::StrCat("unknown node ", Quote(src_unknown ? edge.src : edge.dst),
                                ": no node line has that id"));
    }
    if (seen.insert({src->second, dst->second}).second) {
      edges.emplace_back(src->second, dst->second);
    }
  }
  return edges;
}

absl::StatusOr<std::vector<int>> GraphTxtParser::TopologicalOrder(
    const std::vector<std::pair<int, int>>& edges) const {
  // Kahn's algorithm (Kahn, CACM 1962) with a min-heap of file positions: among the nodes whose
  // inputs are all placed, the one earliest in the file goes next, so a chain listed in any
  // order comes out as the chain and a file already in topological order keeps its order.
  const int n = static_cast<int>(nodes_.size());
  std::vector<std::vector<int>> successors(n);
  std::vector<int> in_degree(n, 0);
  for (const auto& [src, dst] : edges) {
    successors[src].push_back(dst);
    ++in_degree[dst];
  }
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int v = 0; v < n; ++v) {
    if (in_degree[v] == 0) ready.push(v);
  }
  std::vector<int> order;
  order.reserve(n);
  while (!ready.empty()) {
    const int v = ready.top();
    ready.pop();
    order.push_back(v);
    for (int w : successors[v]) {
      if (--in_degree[w] == 0) ready.push(w);
    }
  }
  if (static_cast<int>(order.size()) < n) return CycleError(edges, in_degree);
  return order;
}

absl::Status GraphTxtParser::CycleError(const std::vector<std::pair<int, int>>& edges,
                                        const std::vector<int>& in_degree) const {
  // Every node Kahn left behind has a predecessor that was also left behind; walking those
  // predecessors from any of them must revisit a node, and the loop walked is a cycle.
  const int n = static_cast<int>(nodes_.size());
  std::vector<int> predecessor(n, -1);
  for (const auto& [src, dst] : edges) {
    if (in_degree[src] > 0 && in_degree[dst] > 0 && predecessor[dst] < 0) predecessor[dst] = src;
  }
  int start = 0;
  while (in_degree[start] == 0) ++start;
  std::vector<int> visit_step(n, -1);
  std::vector<int> walk;
  for (int v = start; visit_step[v] < 0; v = predecessor[v]) {
    visit_step[v] = static_cast<int>(walk.size());
    walk.push_back(v);
  }
  // The walk went backwards along edges; the cycle is its tail, reversed.
  const int repeated = predecessor[walk.back()];
  std::vector<int> cycle(walk.begin() + visit_step[repeated], walk.end());
  std::reverse(cycle.begin(), cycle.end());
  // Start the cycle at its earliest node in the file, so the message is the same every time.
  std::rotate(cycle.begin(), std::min_element(cycle.begin(), cycle.end()), cycle.end());
  std::vector<std::string> ids;
  int last_line = 0;  // report the cycle's edge that comes last in the file: it closes it
  for (size_t i = 0; i < cycle.size(); ++i) {
    ids.push_back(nodes_[cycle[i]].layer.id());
    const int next = cycle[(i + 1) % cycle.size()];
    last_line = std::max(last_line, edge_line_.at({cycle[i], next}));
  }
  ids.push_back(ids.front());
  return Error(last_line, 1, "edge",
               absl::StrCat("the graph has a cycle ", absl::StrJoin(ids, " -> "),
                            "; a profile must be a DAG"));
}

absl::StatusOr<v1::ModelProfile> GraphTxtParser::Finish(int64_t batch_size) {
  if (nodes_.empty()) {
    return Error(1, 1, "node", absl::StrCat("the file has no node lines; expected ", kNodeFormat));
  }
  using Edges = std::vector<std::pair<int, int>>;
  DAPPLE_ASSIGN_OR_RETURN(const Edges edges, ResolveEdges());
  for (const RawEdge& edge : edges_) {
    edge_line_.emplace(std::make_pair(node_index_.at(edge.src), node_index_.at(edge.dst)),
                       edge.line);
  }
  DAPPLE_ASSIGN_OR_RETURN(const std::vector<int> order, TopologicalOrder(edges));
  std::vector<int> position(order.size());
  v1::ModelProfile profile;
  profile.set_source(source_);
  profile.set_batch_size(batch_size);
  for (size_t i = 0; i < order.size(); ++i) {
    position[order[i]] = static_cast<int>(i);
    *profile.add_layers() = nodes_[order[i]].layer;
  }
  std::vector<std::pair<int, int>> sorted;
  for (const auto& [src, dst] : edges) sorted.emplace_back(position[src], position[dst]);
  std::sort(sorted.begin(), sorted.end());
  for (const auto& [src, dst] : sorted) {
    v1::ProfileEdge* edge = profile.add_edges();
    edge->set_src(src);
    edge->set_dst(dst);
  }
  return profile;
}

// WriteGraphTxt keeps ids and names on one line and parseable: blanks in an id and line breaks
// or " -- " in a name would split the line differently when read back.
std::string WritableId(const v1::LayerProfile& layer, int index) {
  if (layer.id().empty()) return absl::StrCat("layer", index);
  std::string id = layer.id();
  for (char& c : id) {
    if (absl::ascii_isspace(static_cast<unsigned char>(c))) c = '_';
  }
  return id;
}

std::string WritableName(const v1::LayerProfile& layer) {
  std::string name = layer.name();
  for (char& c : name) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  const std::string separator(kSeparator);
  for (size_t at = name.find(separator); at != std::string::npos; at = name.find(separator)) {
    name.replace(at, separator.size(), " - ");
  }
  return name.empty() ? "unnamed" : name;
}

}  // namespace

absl::StatusOr<v1::ModelProfile> ParseGraphTxt(absl::string_view text, absl::string_view source,
                                               int64_t batch_size) {
  if (batch_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(source.empty() ? "<profile>" : source,
                                                   ": profile batch size ", batch_size,
                                                   " must be > 0"));
  }
  GraphTxtParser parser(source);
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    DAPPLE_RETURN_IF_ERROR(parser.ParseLine(line, ++line_number));
  }
  return parser.Finish(batch_size);
}

std::string WriteGraphTxt(const v1::ModelProfile& profile) {
  std::string out;
  std::vector<std::string> ids;
  for (int i = 0; i < profile.layers_size(); ++i) {
    const v1::LayerProfile& layer = profile.layers(i);
    ids.push_back(WritableId(layer, i));
    absl::StrAppend(&out, ids.back(), kSeparator, WritableName(layer), kSeparator, kForward, "=",
                    ShortestDouble(layer.forward_ms()), ", ", kBackward, "=",
                    ShortestDouble(layer.backward_ms()), ", ", kActivation, "=",
                    layer.activation_bytes(), ", ", kParameter, "=", layer.parameter_bytes(), "\n");
  }
  const auto write_edge = [&](int src, int dst) {
    if (src < 0 || dst < 0 || src >= profile.layers_size() || dst >= profile.layers_size()) return;
    absl::StrAppend(&out, "\t", ids[src], kSeparator, ids[dst], "\n");
  };
  if (profile.edges().empty()) {
    for (int k = 0; k + 1 < profile.layers_size(); ++k) write_edge(k, k + 1);
  }
  for (const v1::ProfileEdge& edge : profile.edges()) write_edge(edge.src(), edge.dst());
  return out;
}

}  // namespace dapple::profile
