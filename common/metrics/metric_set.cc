#include "common/metrics/metric_set.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "prometheus/text_serializer.h"

namespace dapple::metrics {
namespace {

[[noreturn]] void Die(const std::string& message) {
  // A wrong name or label set is a bug in dapple, not an input error: fail loudly in the first
  // test that reaches it.
  std::fprintf(stderr, "dapple metrics: %s\n", message.c_str());
  std::abort();
}

}  // namespace

MetricSet::MetricSet(Binary binary) : binary_(binary) {
  for (const MetricDef& def : MetricList()) {
    if (def.binary != binary) continue;
    Entry entry;
    entry.def = &def;
    switch (def.type) {
      case MetricType::kGauge:
        entry.gauge = &prometheus::BuildGauge().Name(def.name).Help(def.help).Register(registry_);
        break;
      case MetricType::kCounter:
        entry.counter =
            &prometheus::BuildCounter().Name(def.name).Help(def.help).Register(registry_);
        break;
    }
    entries_.emplace(def.name, entry);
  }
}

const MetricSet::Entry& MetricSet::Find(absl::string_view name, MetricType type) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    Die(absl::StrCat("metric ", name, " is not declared for the ", BinaryName(binary_),
                     " in common/metrics/metric_list.cc"));
  }
  if (it->second.def->type != type) {
    Die(absl::StrCat("metric ", name, " is a ", MetricTypeName(it->second.def->type), ", not a ",
                     MetricTypeName(type)));
  }
  return it->second;
}

void MetricSet::CheckLabels(const Entry& entry, const prometheus::Labels& labels) const {
  bool same = labels.size() == entry.def->labels.size();
  for (const std::string& label : entry.def->labels) same = same && labels.count(label) == 1;
  if (!same) {
    std::vector<std::string> given;
    for (const auto& [key, value] : labels) given.push_back(key);
    Die(absl::StrCat("metric ", entry.def->name, " has labels {",
                     absl::StrJoin(entry.def->labels, ","), "}, got {", absl::StrJoin(given, ","),
                     "}"));
  }
}

prometheus::Gauge& MetricSet::Gauge(absl::string_view name, const prometheus::Labels& labels) {
  const Entry& entry = Find(name, MetricType::kGauge);
  CheckLabels(entry, labels);
  return entry.gauge->Add(labels);
}

prometheus::Counter& MetricSet::Counter(absl::string_view name, const prometheus::Labels& labels) {
  const Entry& entry = Find(name, MetricType::kCounter);
  CheckLabels(entry, labels);
  return entry.counter->Add(labels);
}

void MetricSet::Remove(absl::string_view name, const prometheus::Labels& labels) {
  auto it = entries_.find(name);
  if (it == entries_.end()) Die(absl::StrCat("metric ", name, " is not declared"));
  const Entry& entry = it->second;
  if (entry.gauge != nullptr && entry.gauge->Has(labels)) {
    entry.gauge->Remove(&entry.gauge->Add(labels));
  }
  if (entry.counter != nullptr && entry.counter->Has(labels)) {
    entry.counter->Remove(&entry.counter->Add(labels));
  }
}

void MetricSet::SetBeforeCollect(std::function<void()> hook) {
  absl::MutexLock lock(&hook_mu_);
  before_collect_ = std::move(hook);
}

std::vector<prometheus::MetricFamily> MetricSet::Collect() const {
  {
    absl::MutexLock lock(&hook_mu_);
    if (before_collect_) before_collect_();
  }
  return registry_.Collect();
}

std::string MetricSet::Serialize() const {
  return prometheus::TextSerializer().Serialize(Collect());
}

}  // namespace dapple::metrics
