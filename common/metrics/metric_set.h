// MetricSet: the Prometheus families of one binary, built from MetricList() (metric_list.h) on
// a prometheus::Registry, with series access checked against the list (a name that is not
// declared for this binary, or labels other than the declared ones, is a programming error:
// the process aborts with a message naming the metric, so every unit test that drives a
// metrics user catches it).
//
// It is itself the Collectable the HTTP endpoint serves (metrics_server.h): a scrape first
// runs the before-collect hook (which may expire old series), then collects the registry.
//
// Thread safety: thread-safe (prometheus-cpp families lock themselves; the hook is guarded).
#ifndef DAPPLE_COMMON_METRICS_METRIC_SET_H_
#define DAPPLE_COMMON_METRICS_METRIC_SET_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics/metric_list.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/labels.h"
#include "prometheus/registry.h"

namespace dapple::metrics {

class MetricSet : public prometheus::Collectable {
 public:
  // Registers every metric MetricList() declares for `binary`.
  explicit MetricSet(Binary binary);

  Binary binary() const { return binary_; }

  // The series of declared gauge / counter `name` with `labels` (created at 0 when new).
  // `labels` must name exactly the declared label names. The reference stays valid until the
  // series is removed.
  prometheus::Gauge& Gauge(absl::string_view name, const prometheus::Labels& labels = {});
  prometheus::Counter& Counter(absl::string_view name, const prometheus::Labels& labels = {});

  // Removes a series; nothing happens when it does not exist.
  void Remove(absl::string_view name, const prometheus::Labels& labels);

  // Runs `hook` at the start of every Collect (from the HTTP server's threads). It must not
  // call Collect or Serialize.
  void SetBeforeCollect(std::function<void()> hook);

  std::vector<prometheus::MetricFamily> Collect() const override;

  // The text exposition format (version 0.0.4) of Collect().
  std::string Serialize() const;

 private:
  struct Entry {
    const MetricDef* def = nullptr;
    prometheus::Family<prometheus::Gauge>* gauge = nullptr;
    prometheus::Family<prometheus::Counter>* counter = nullptr;
  };
  const Entry& Find(absl::string_view name, MetricType type) const;
  void CheckLabels(const Entry& entry, const prometheus::Labels& labels) const;

  const Binary binary_;
  prometheus::Registry registry_;
  std::map<std::string, Entry, std::less<>> entries_;  // immutable after construction
  mutable absl::Mutex hook_mu_;
  std::function<void()> before_collect_ ABSL_GUARDED_BY(hook_mu_);
};

}  // namespace dapple::metrics

#endif  // DAPPLE_COMMON_METRICS_METRIC_SET_H_
