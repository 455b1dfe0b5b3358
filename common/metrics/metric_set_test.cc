#include "common/metrics/metric_set.h"

#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace dapple::metrics {
namespace {

TEST(MetricSetTest, BuildsEveryFamilyOfItsBinaryOnly) {
  MetricSet coordinator(Binary::kCoordinator);
  // A family shows in the output once it has a series.
  EXPECT_EQ(coordinator.Serialize(), "");
  for (const MetricDef& def : MetricList()) {
    if (def.binary != Binary::kCoordinator) continue;
    prometheus::Labels labels;
    for (const std::string& label : def.labels) labels[label] = "v";
    if (def.type == MetricType::kGauge) {
      coordinator.Gauge(def.name, labels).Set(1);
    } else {
      coordinator.Counter(def.name, labels).Increment();
    }
  }
  const std::string text = coordinator.Serialize();
  for (const MetricDef& def : MetricList()) {
    const std::string type_line = "# TYPE " + def.name + " " + MetricTypeName(def.type) + "\n";
    EXPECT_EQ(absl::StrContains(text, type_line), def.binary == Binary::kCoordinator) << def.name;
  }
  EXPECT_TRUE(absl::StrContains(text, "# HELP dapple_job_queue_length Jobs waiting to start"));
  EXPECT_DEATH(MetricSet(Binary::kWorker).Gauge(kJobQueueLength), "not declared for the worker");
}

TEST(MetricSetTest, SeriesAreCreatedSetAndRemoved) {
  MetricSet set(Binary::kCoordinator);
  set.Gauge(kJobQueueLength).Set(3);
  set.Counter(kJobsFinishedTotal, {{"state", "failed"}}).Increment(2);
  set.Gauge(kJobStep, {{"job_id", "job-1"}, {"job_name", "mlp"}}).Set(17);
  std::string text = set.Serialize();
  EXPECT_TRUE(absl::StrContains(text, "dapple_job_queue_length 3\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "dapple_jobs_finished_total{state=\"failed\"} 2\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "dapple_job_step{job_id=\"job-1\",job_name=\"mlp\"} 17\n"))
      << text;
  // The same labels are the same series.
  set.Gauge(kJobStep, {{"job_name", "mlp"}, {"job_id", "job-1"}}).Increment();
  EXPECT_TRUE(absl::StrContains(set.Serialize(), "job_name=\"mlp\"} 18\n"));
  set.Remove(kJobStep, {{"job_id", "job-1"}, {"job_name", "mlp"}});
  set.Remove(kJobStep, {{"job_id", "job-9"}, {"job_name", "x"}});  // absent: nothing happens
  text = set.Serialize();
  EXPECT_FALSE(absl::StrContains(text, "dapple_job_step{")) << text;
  EXPECT_TRUE(absl::StrContains(text, "dapple_job_queue_length 3\n"));
}

TEST(MetricSetTest, BeforeCollectRunsOnEveryCollect) {
  MetricSet set(Binary::kWorker);
  int calls = 0;
  set.SetBeforeCollect([&] {
    ++calls;
    set.Gauge(kWorkerBusy).Set(calls);
  });
  EXPECT_TRUE(absl::StrContains(set.Serialize(), "dapple_worker_busy 1\n"));
  EXPECT_TRUE(absl::StrContains(set.Serialize(), "dapple_worker_busy 2\n"));
  EXPECT_EQ(calls, 2);
}

using MetricSetDeathTest = ::testing::Test;

TEST(MetricSetDeathTest, UndeclaredNameOrWrongLabelsAbortWithTheName) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  MetricSet set(Binary::kWorker);
  EXPECT_DEATH(set.Gauge("dapple_bogus"), "metric dapple_bogus is not declared for the worker");
  EXPECT_DEATH(set.Gauge(kJobQueueLength),
               "dapple_job_queue_length is not declared for the worker");
  EXPECT_DEATH(set.Counter(kWorkerBusy), "dapple_worker_busy is a gauge, not a counter");
  EXPECT_DEATH(set.Gauge(kWorkerRank, {{"job_id", "j"}}),
               "dapple_worker_rank has labels \\{job_id,stage,replica\\}, got \\{job_id\\}");
}

}  // namespace
}  // namespace dapple::metrics
