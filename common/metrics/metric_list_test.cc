#include "common/metrics/metric_list.h"

#include <cctype>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "prometheus/check_names.h"

namespace dapple::metrics {
namespace {

// https://prometheus.io/docs/concepts/data_model/ and /docs/practices/naming/.
TEST(MetricListTest, NamesFollowPrometheusRules) {
  const std::regex name_re("[a-zA-Z_:][a-zA-Z0-9_:]*");
  std::set<std::string> seen;
  ASSERT_FALSE(MetricList().empty());
  for (const MetricDef& def : MetricList()) {
    SCOPED_TRACE(def.name);
    EXPECT_TRUE(std::regex_match(def.name, name_re));
    EXPECT_TRUE(prometheus::CheckMetricName(def.name));
    EXPECT_TRUE(absl::StartsWith(def.name, "dapple_"));
    EXPECT_EQ(def.name.find(':'), std::string::npos) << "colons are for recording rules";
    EXPECT_TRUE(seen.insert(def.name).second) << "declared twice";
    // Counters and only counters end in _total.
    EXPECT_EQ(def.type == MetricType::kCounter, absl::EndsWith(def.name, "_total"));
    // Units are base units and come last (before _total).
    std::string base = def.name;
    if (absl::EndsWith(base, "_total")) base.resize(base.size() - 6);
    for (const char* bad : {"_ms", "_milliseconds", "_mib", "_kb", "_mb", "_percent"}) {
      EXPECT_FALSE(absl::StrContains(def.name, bad)) << "not a base unit: " << bad;
    }
    if (absl::StrContains(base, "seconds")) {
      EXPECT_TRUE(absl::EndsWith(base, "_seconds")) << "seconds must be the suffix";
    }
    if (absl::StrContains(base, "bytes")) {
      EXPECT_TRUE(absl::EndsWith(base, "_bytes")) << "bytes must be the suffix";
    }
    if (absl::StrContains(base, "timestamp")) {
      EXPECT_TRUE(absl::EndsWith(base, "_timestamp_seconds"));
      EXPECT_EQ(def.type, MetricType::kGauge);
    }
    // No other metric may be a prefix + "_total" twin (a gauge and a counter sharing a base).
    EXPECT_FALSE(seen.count(base) && base != def.name);
  }
}

TEST(MetricListTest, HelpIsOneSentence) {
  for (const MetricDef& def : MetricList()) {
    SCOPED_TRACE(def.name);
    EXPECT_FALSE(def.help.empty());
    EXPECT_EQ(def.help.find('\n'), std::string::npos);
    EXPECT_EQ(def.help.find('\\'), std::string::npos);
    EXPECT_TRUE(absl::EndsWith(def.help, ".")) << def.help;
    EXPECT_TRUE(std::isupper(static_cast<unsigned char>(def.help[0])) || def.help[0] == '1')
        << def.help;
  }
}

TEST(MetricListTest, LabelsFollowPrometheusRules) {
  const std::set<std::string> reserved = {"job", "instance", "le", "quantile"};
  for (const MetricDef& def : MetricList()) {
    SCOPED_TRACE(def.name);
    std::set<std::string> labels;
    for (const std::string& label : def.labels) {
      EXPECT_TRUE(prometheus::CheckLabelName(label)) << label;
      EXPECT_FALSE(absl::StartsWith(label, "__")) << label;
      EXPECT_EQ(reserved.count(label), 0u) << label << " collides with a Prometheus label";
      EXPECT_TRUE(labels.insert(label).second) << label << " twice";
    }
  }
}

TEST(MetricListTest, CoversTheIssueList) {
  // Issue 6, item 1: jobs by state, queue length, workers by health; per job and stage: step
  // time, forward / backward / idle / communication seconds, samples/s, loss, learning rate,
  // gradient norm, skipped steps, peak memory, last-step timestamp.
  for (const char* name : {kJobs,
                           kJobQueueLength,
                           kWorkers,
                           kJobsFinishedTotal,
                           kJobRestartsTotal,
                           kJobStep,
                           kJobTotalSteps,
                           kJobLoss,
                           kJobSamplesPerSecond,
                           kJobLearningRate,
                           kJobGradientNorm,
                           kJobTestAccuracy,
                           kJobLastStepTimestamp,
                           kStageStepSeconds,
                           kStageForwardSeconds,
                           kStageBackwardSeconds,
                           kStageIdleSeconds,
                           kStageCommSeconds,
                           kStageOptimizerSeconds,
                           kStageBubbleRatio,
                           kStageSamplesPerSecond,
                           kStageGradientNorm,
                           kStageSkippedStepsTotal,
                           kStagePeakMemoryBytes,
                           kStagePeakActivationBytes,
                           kStageLastStepTimestamp,
                           kStageStraggler,
                           kWorkerInfo,
                           kWorkerBusy,
                           kWorkerStepsTotal,
                           kWorkerActionSecondsTotal,
                           kWorkerPeakMemoryBytes}) {
    EXPECT_NE(FindMetric(name), nullptr) << name;
  }
  EXPECT_EQ(FindMetric("dapple_no_such_metric"), nullptr);
  const MetricDef* stage = FindMetric(kStageStepSeconds);
  ASSERT_NE(stage, nullptr);
  EXPECT_EQ(stage->labels,
            (std::vector<std::string>{"job_id", "job_name", "stage", "replica", "worker"}));
  EXPECT_EQ(stage->binary, Binary::kCoordinator);
  EXPECT_EQ(FindMetric(kWorkerStepsTotal)->binary, Binary::kWorker);
}

// docs/operations.md lists every metric, exactly as the table says (regenerate the tables from
// the failure message after changing the list).
TEST(MetricListTest, OperationsDocListsEveryMetric) {
  const std::string path = std::string(DAPPLE_SOURCE_ROOT) + "/docs/operations.md";
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << "cannot read " << path;
  std::stringstream text;
  text << in.rdbuf();
  for (Binary binary : {Binary::kCoordinator, Binary::kWorker}) {
    const std::string table = MetricTableMarkdown(binary);
    EXPECT_TRUE(absl::StrContains(text.str(), table))
        << path << " lacks the current " << BinaryName(binary) << " table:\n"
        << table;
  }
}

TEST(MetricListTest, MarkdownTableHasOneRowPerMetric) {
  const std::string table = MetricTableMarkdown(Binary::kWorker);
  EXPECT_TRUE(absl::StrContains(
      table, "| `dapple_worker_action_seconds_total` | counter | kind | Seconds the worker"));
  size_t rows = 0;
  for (char c : table) rows += c == '\n';
  size_t workers = 0;
  for (const MetricDef& def : MetricList()) workers += def.binary == Binary::kWorker;
  EXPECT_EQ(rows, workers + 2);
}

}  // namespace
}  // namespace dapple::metrics
