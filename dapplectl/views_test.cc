#include "dapplectl/views.h"

#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::ctl {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kNowMs = 1'700'000'000'000;

v1::Job SampleJob() {
  v1::Job job;
  job.set_id("job-3");
  job.set_name("fmnist-mlp");
  job.set_state(v1::JOB_STATE_RUNNING);
  job.set_spec_yaml("name: fmnist-mlp\nsecret_marker: 1\n");
  job.set_created_unix_ms(kNowMs - 125'000);  // 2 minutes ago
  job.add_step_losses(2.3026);
  job.add_step_losses(1.98765);
  v1::ParallelPlanSummary* plan = job.mutable_plan();
  plan->set_planner("balanced");
  plan->set_schedule("dapple");
  plan->set_micro_batches(8);
  plan->set_micro_batch_size(32);
  plan->set_bubble_fraction(0.125);
  v1::PlanStageSummary* s0 = plan->add_stages();
  s0->set_first_layer(0);
  s0->set_last_layer(2);
  s0->set_replicas(1);
  s0->add_worker_ids("w-1");
  s0->add_devices("cuda:0");
  v1::PlanStageSummary* s1 = plan->add_stages();
  s1->set_first_layer(3);
  s1->set_last_layer(5);
  s1->set_replicas(2);
  s1->add_worker_ids("w-2");
  s1->add_worker_ids("w-3");
  s1->add_devices("cpu");
  s1->add_devices("cpu");
  v1::JobMetrics* m = job.mutable_metrics();
  m->set_step(120);
  m->set_total_steps(702);
  m->set_epoch(1);
  m->set_epochs(3);
  m->set_loss(0.42131);
  m->set_samples_per_second(1234.4);
  m->set_test_accuracy(0.8712);
  m->set_elapsed_seconds(42);
  m->set_eta_seconds(204);
  return job;
}

TEST(ViewsTest, SubmittedAndCancelled) {
  v1::Job job = SampleJob();
  EXPECT_EQ(RenderSubmitted(job), "submitted job-3 (fmnist-mlp)\n");
  EXPECT_EQ(RenderCancelled(job), "cancelled job-3\n");
  job.clear_name();
  EXPECT_EQ(RenderSubmitted(job), "submitted job-3\n");
}

TEST(ViewsTest, JobListColumns) {
  google::protobuf::RepeatedPtrField<v1::Job> jobs;
  *jobs.Add() = SampleJob();
  v1::Job* pending = jobs.Add();
  pending->set_id("job-4");
  pending->set_name("other");
  pending->set_state(v1::JOB_STATE_PENDING);
  pending->set_created_unix_ms(kNowMs - 5'000);
  EXPECT_EQ(RenderJobList(jobs, kNowMs),
            "ID      NAME         STATE     STEP      LOSS     TEST ACC   AGE\n"
            "job-3   fmnist-mlp   RUNNING   120/702   0.4213   87.12%     2m\n"
            "job-4   other        PENDING   -         -        -          5s\n");
}

// A shared cluster's jobs: OWNER (owner/tenant) after NAME, REASON of the pending ones last.
TEST(ViewsTest, JobListShowsOwnersAndWhyPendingJobsWait) {
  google::protobuf::RepeatedPtrField<v1::Job> jobs;
  v1::Job* running = jobs.Add();
  *running = SampleJob();
  running->set_owner("alice");
  running->set_tenant("team-a");
  v1::Job* pending = jobs.Add();
  pending->set_id("job-4");
  pending->set_name("other");
  pending->set_state(v1::JOB_STATE_PENDING);
  pending->set_created_unix_ms(kNowMs - 5'000);
  pending->set_owner("admin");
  pending->set_pending_reason("WaitingForQuota");
  pending->set_message("3 of 4 cpu devices of tenant team-a in use by 2 jobs");
  EXPECT_EQ(RenderJobList(jobs, kNowMs),
            "ID      NAME         OWNER          STATE     STEP      LOSS     TEST ACC   AGE   "
            "REASON\n"
            "job-3   fmnist-mlp   alice/team-a   RUNNING   120/702   0.4213   87.12%     2m    -\n"
            "job-4   other        admin          PENDING   -         -        -          5s    "
            "WaitingForQuota: 3 of 4 cpu devices of tenant team-a in use by 2 jobs\n");
}

TEST(ViewsTest, PendingReasonText) {
  v1::Job job;
  job.set_state(v1::JOB_STATE_PENDING);
  EXPECT_EQ(PendingReasonText(job), "");
  job.set_message("waiting for 4 free devices");
  EXPECT_EQ(PendingReasonText(job), "waiting for 4 free devices");
  job.set_pending_reason("WaitingForDevices");
  EXPECT_EQ(PendingReasonText(job), "WaitingForDevices: waiting for 4 free devices");
  job.set_message("WaitingForDevices: 4 of 8");
  EXPECT_EQ(PendingReasonText(job), "WaitingForDevices: 4 of 8");
  job.clear_message();
  EXPECT_EQ(PendingReasonText(job), "WaitingForDevices");
  job.set_state(v1::JOB_STATE_RUNNING);
  EXPECT_EQ(PendingReasonText(job), "");
}

TEST(ViewsTest, JobDetailsShowThePendingReasonAndSchedulingFacts) {
  v1::Job job = SampleJob();
  job.set_state(v1::JOB_STATE_PENDING);
  job.set_pending_reason("WaitingForPreemption");
  job.set_message("job-1 of tenant team-b is being checkpointed and stopped");
  job.set_owner("bob");
  job.set_tenant("team-a");
  job.mutable_spec()->set_priority(10);
  const std::string details = RenderJobDetails(job, kNowMs);
  EXPECT_THAT(details, HasSubstr("STATE         PENDING\nREASON        WaitingForPreemption: job-1 "
                                 "of tenant team-b is being checkpointed and stopped\n"));
  EXPECT_THAT(details, Not(HasSubstr("MESSAGE")));
  EXPECT_EQ(RenderJobScheduling(job),
            "OWNER         bob\n"
            "TENANT        team-a\n"
            "PRIORITY      10\n"
            "PREEMPTIONS   0\n");
  job.set_preemptions(2);
  job.set_last_preemption("reclaimed by tenant team-b (within its nominal quota)");
  job.set_tenant("");
  job.set_owner("admin");
  EXPECT_EQ(RenderJobScheduling(job),
            "OWNER         admin\n"
            "TENANT        - (an admin's job: outside every quota)\n"
            "PRIORITY      10\n"
            "PREEMPTIONS   2 (last: reclaimed by tenant team-b (within its nominal quota))\n");
}

// A language model's job (data.dataset text) after its last evaluation and its sample.
v1::Job TextJob() {
  v1::Job job = SampleJob();
  job.set_id("job-5");
  job.set_name("kjv-gpt");
  job.set_state(v1::JOB_STATE_SUCCEEDED);
  job.mutable_spec()->mutable_data()->set_dataset("text");
  v1::SampleSpec* sample = job.mutable_spec()->mutable_sample();
  sample->set_prompt("\n");
  sample->set_tokens(200);
  sample->set_temperature(0.8);
  v1::JobMetrics* m = job.mutable_metrics();
  m->clear_test_accuracy();
  m->set_step(702);
  m->set_validation_loss(1.23456);
  m->set_validation_bits_per_byte(1.78108);
  m->set_validation_accuracy(0.6125);
  m->set_eval_step(702);
  job.set_sample_text("And God said,\nLet there be light.");
  return job;
}

TEST(ViewsTest, JobListShowsValidationLossWhenItHoldsATextJob) {
  google::protobuf::RepeatedPtrField<v1::Job> jobs;
  *jobs.Add() = SampleJob();
  *jobs.Add() = TextJob();
  EXPECT_EQ(RenderJobList(jobs, kNowMs),
            "ID      NAME         STATE       STEP      LOSS     TEST ACC   VAL LOSS   AGE\n"
            "job-3   fmnist-mlp   RUNNING     120/702   0.4213   87.12%     -          2m\n"
            "job-5   kjv-gpt      SUCCEEDED   702/702   0.4213   -          1.2346     2m\n");
}

TEST(ViewsTest, JobDetailsOfATextJobShowValidationMetricsAndTheSample) {
  const std::string out = RenderJobDetails(TextJob(), kNowMs);
  EXPECT_THAT(out, HasSubstr("VAL LOSS      1.2346 (step 702)\n"
                             "BITS/BYTE     1.7811\n"
                             "VAL ACCURACY  61.25%\n"));
  EXPECT_THAT(out, Not(HasSubstr("TEST ACCURACY")));
  EXPECT_THAT(out, Not(HasSubstr("TEST LOSS")));
  EXPECT_THAT(out, HasSubstr("SAMPLE        200 bytes generated after sample.prompt \"\\n\", "
                             "temperature 0.8\n"
                             "  And God said,\n"
                             "  Let there be light.\n"));
  // The sample comes last.
  EXPECT_TRUE(absl::EndsWith(out, "\n  Let there be light.\n")) << out;
  // A prompt in UTF-8 reads as written (it read "\303\251..."), what would not show escaped.
  v1::Job job = TextJob();
  job.mutable_spec()->mutable_sample()->set_prompt("\xc3\xa9\xf0\x9f\x98\x80 \"q\"\xe2\x80\x8b");
  EXPECT_THAT(RenderJobDetails(job, kNowMs),
              HasSubstr("after sample.prompt \"\xc3\xa9\xf0\x9f\x98\x80 \\\"q\\\"\\u200b\""));
}

TEST(ViewsTest, TextJobBeforeItsFirstEvaluation) {
  v1::Job job = TextJob();
  job.set_state(v1::JOB_STATE_RUNNING);
  job.mutable_metrics()->clear_validation_loss();
  job.mutable_metrics()->clear_validation_bits_per_byte();
  job.mutable_metrics()->clear_validation_accuracy();
  job.mutable_metrics()->set_eval_step(0);
  job.clear_sample_text();
  const std::string out = RenderJobDetails(job, kNowMs);
  EXPECT_THAT(out, HasSubstr("VAL LOSS      -\nBITS/BYTE     -\nVAL ACCURACY  -\n"));
  EXPECT_THAT(out, Not(HasSubstr("SAMPLE ")));
  EXPECT_EQ(RenderSample(job), "");
}

// A job whose ranks skipped steps for non-finite values says how many (the most any rank
// counted: they skip together); none: no line.
TEST(ViewsTest, JobDetailsShowSkippedSteps) {
  v1::Job job = SampleJob();
  EXPECT_THAT(RenderJobDetails(job, kNowMs), Not(HasSubstr("SKIPPED STEPS")));
  job.mutable_spec()->mutable_training()->set_max_consecutive_skipped_steps(3);
  for (int rank = 0; rank < 2; ++rank) {
    v1::StageMetrics* m = job.add_stage_metrics();
    m->set_stage(rank);
    m->set_skipped_steps(2);
  }
  EXPECT_THAT(RenderJobDetails(job, kNowMs),
              HasSubstr("SKIPPED STEPS 2 (a non-finite loss or gradient; at most 3 in a row)\n"));
}

TEST(ViewsTest, EmptyLists) {
  EXPECT_EQ(RenderJobList({}, kNowMs), "no jobs\n");
  EXPECT_EQ(RenderWorkerList({}, kNowMs), "no workers\n");
}

TEST(ViewsTest, JobDetailsShowPlanAndMetricsButNotSpecOrLosses) {
  const std::string out = RenderJobDetails(SampleJob(), kNowMs);
  EXPECT_THAT(out, HasSubstr("ID            job-3\n"));
  EXPECT_THAT(out, HasSubstr("NAME          fmnist-mlp\n"));
  EXPECT_THAT(out, HasSubstr("STATE         RUNNING\n"));
  EXPECT_THAT(out, HasSubstr("MESSAGE       -\n"));
  EXPECT_THAT(out, HasSubstr("AGE           2m\n"));
  EXPECT_THAT(out, HasSubstr("PLAN          planner balanced, schedule dapple, 2 stages\n"));
  EXPECT_THAT(out, HasSubstr("M             8\n"));
  EXPECT_THAT(out, HasSubstr("MICRO-BATCH   32\n"));
  EXPECT_THAT(out, HasSubstr("BUBBLE        12.50%\n"));
  EXPECT_THAT(out, HasSubstr("  STAGE   LAYERS   REPLICAS   WORKERS   DEVICES\n"
                             "  0       0-2      1          w-1       cuda:0\n"
                             "  1       3-5      2          w-2,w-3   cpu,cpu\n"));
  EXPECT_THAT(out, HasSubstr("STEP          120/702\n"));
  EXPECT_THAT(out, HasSubstr("EPOCH         1/3\n"));
  EXPECT_THAT(out, HasSubstr("LOSS          0.4213\n"));
  EXPECT_THAT(out, HasSubstr("SAMPLES/S     1234\n"));
  EXPECT_THAT(out, HasSubstr("TEST ACCURACY 87.12%\n"));
  EXPECT_THAT(out, HasSubstr("TEST LOSS     -\n"));
  EXPECT_THAT(out, HasSubstr("ELAPSED       0:42\n"));
  EXPECT_THAT(out, HasSubstr("ETA           3:24\n"));
  EXPECT_THAT(out, Not(HasSubstr("secret_marker")));  // spec_yaml
  EXPECT_THAT(out, Not(HasSubstr("2.3026")));         // step_losses
  EXPECT_THAT(out, Not(HasSubstr("1.9876")));
}

TEST(ViewsTest, JobDetailsOfAFailedUnplannedJob) {
  v1::Job job;
  job.set_id("job-9");
  job.set_state(v1::JOB_STATE_FAILED);
  job.set_message("planning failed: 3 devices needed, 2 workers registered");
  const std::string out = RenderJobDetails(job, kNowMs);
  EXPECT_THAT(out, HasSubstr("STATE         FAILED\n"));
  EXPECT_THAT(out, HasSubstr("MESSAGE       planning failed: 3 devices needed, 2 workers "
                             "registered\n"));
  EXPECT_THAT(out, HasSubstr("PLAN          - (not planned yet)\n"));
  EXPECT_THAT(out, HasSubstr("AGE           -\n"));
  EXPECT_THAT(out, Not(HasSubstr("ETA")));  // terminal: no ETA
}

// A plan with the simulator's prediction, as PlanJob and planning at submission give it.
v1::ParallelPlanSummary PredictedPlan() {
  v1::ParallelPlanSummary plan;
  plan.set_planner("dapple");
  plan.set_schedule("dapple");
  plan.set_placement_policy("fresh_first");
  plan.set_micro_batches(8);
  plan.set_micro_batch_size(32);
  plan.set_bubble_fraction(0.1);
  plan.set_predicted_step_ms(12.345);
  plan.set_predicted_samples_per_second(20737.1);
  plan.set_profile_source("estimated from FLOPs at 50 GFLOP/s");
  plan.set_cluster_source("two_nodes_8_gpus.yaml");
  plan.set_num_devices(10);
  plan.add_notes("one replica per stage: the worker runtime has no stage replication yet");
  v1::PlanStageSummary* s0 = plan.add_stages();
  s0->set_first_layer(0);
  s0->set_last_layer(2);
  s0->set_replicas(8);
  for (int i = 0; i < 8; ++i) s0->add_placement("node0/" + std::to_string(i));
  s0->set_compute_ms(10.5);
  s0->set_peak_memory_bytes(int64_t{3} << 29);  // 1.5 GiB
  s0->set_bubble_fraction(0.05);
  v1::PlanStageSummary* s1 = plan.add_stages();
  s1->set_first_layer(3);
  s1->set_last_layer(5);
  s1->set_replicas(2);
  s1->add_placement("node1/0");
  s1->add_placement("node1/1");
  s1->set_compute_ms(9.25);
  s1->set_peak_memory_bytes(int64_t{1} << 30);
  s1->set_bubble_fraction(0.15);
  return plan;
}

TEST(ViewsTest, PlanTableThenPredictionAndSources) {
  v1::ClusterTopology cluster;
  for (int n = 0; n < 2; ++n) cluster.add_nodes()->set_devices(8);
  EXPECT_EQ(RenderPlan(PredictedPlan(), cluster),
            "STAGE   LAYERS   REPLICAS   DEVICES     COMPUTE MS   PEAK MEMORY   BUBBLE\n"
            "0       0-2      8          node0/0-7   10.50        1.5 GiB       5.00%\n"
            "1       3-5      2          node1/0-1   9.25         1.0 GiB       15.00%\n"
            "STEP          12.35 ms (predicted)\n"
            "SAMPLES/S     20737\n"
            "PLANNER       dapple (placement fresh_first)\n"
            "SCHEDULE      dapple\n"
            "M             8 micro-batches of 32 samples\n"
            "BUBBLE        10.00%\n"
            "PROFILE       estimated from FLOPs at 50 GFLOP/s\n"
            "CLUSTER       two_nodes_8_gpus.yaml (10 of 16 devices used)\n"
            "NOTE          one replica per stage: the worker runtime has no stage replication "
            "yet\n");
}

// A plan with a recomputing stage (training.recompute) says which, per stage.
TEST(ViewsTest, PlanTableShowsRecomputationWhenAStageRecomputes) {
  v1::ClusterTopology cluster;
  for (int n = 0; n < 2; ++n) cluster.add_nodes()->set_devices(8);
  v1::ParallelPlanSummary plan = PredictedPlan();
  plan.mutable_stages(0)->set_recompute(true);
  const std::string out = RenderPlan(plan, cluster);
  EXPECT_THAT(out,
              ::testing::StartsWith(
                  "STAGE   LAYERS   REPLICAS   DEVICES     COMPUTE MS   PEAK MEMORY   "
                  "BUBBLE   RECOMPUTE\n"
                  "0       0-2      8          node0/0-7   10.50        1.5 GiB       5.00%    "
                  "yes\n"
                  "1       3-5      2          node1/0-1   9.25         1.0 GiB       15.00%   "
                  "no\n"))
      << out;
}

// An interleaved plan (PlanStageSummary.chunks): a stage's LAYERS are its chunks in order.
TEST(ViewsTest, PlanTableShowsAnInterleavedStagesChunks) {
  v1::ClusterTopology cluster;
  for (int n = 0; n < 2; ++n) cluster.add_nodes()->set_devices(8);
  v1::ParallelPlanSummary plan = PredictedPlan();
  plan.set_schedule("interleaved");
  for (auto [s, ranges] : {std::pair<int, std::vector<std::pair<int, int>>>{0, {{0, 1}, {4, 4}}},
                           {1, {{2, 3}, {5, 5}}}}) {
    v1::PlanStageSummary* stage = plan.mutable_stages(s);
    for (auto [first, last] : ranges) {
      v1::StageRange* r = stage->add_chunks();
      r->set_first_layer(first);
      r->set_last_layer(last);
    }
    stage->set_first_layer(ranges[0].first);
    stage->set_last_layer(ranges[0].second);
  }
  const std::string out = RenderPlan(plan, cluster);
  EXPECT_THAT(out, ::testing::HasSubstr("\n0       0-1,4-4   8 ")) << out;
  EXPECT_THAT(out, ::testing::HasSubstr("\n1       2-3,5-5   2 ")) << out;
}

// parallel.schedule auto: the alternatives side by side below the plan, the chosen one marked,
// then the reason and each refusal.
TEST(ViewsTest, PlanShowsTheAlternativesItChoseAmong) {
  v1::ClusterTopology cluster;
  for (int n = 0; n < 2; ++n) cluster.add_nodes()->set_devices(8);
  v1::ParallelPlanSummary plan = PredictedPlan();
  EXPECT_EQ(RenderPlanAlternatives(plan), "");
  auto add = [&](const char* schedule, const char* recompute, double step_ms, bool chosen) {
    v1::PlanAlternative* a = plan.add_alternatives();
    a->set_schedule(schedule);
    a->set_recompute(recompute);
    a->set_fits(true);
    a->set_layout("3x8 3x2");
    a->set_micro_batches(8);
    a->set_predicted_step_ms(step_ms);
    a->set_bubble_fraction(0.125);
    a->add_peak_memory_bytes(int64_t{3} << 29);
    a->add_peak_memory_bytes(int64_t{1} << 30);
    a->set_chosen(chosen);
  };
  add("dapple", "none", 14.1, false);
  add("dapple", "auto", 14.1, false);  // auto that recomputes nothing says so
  add("gpipe", "auto", 15.5, false);
  plan.mutable_alternatives(2)->set_layout("3x8r 3x2");
  add("zb-h1", "none", 12.35, true);
  v1::PlanAlternative* refused = plan.add_alternatives();
  refused->set_schedule("zb-h2");
  refused->set_recompute("none");
  refused->set_refused("planner dapple: no plan fits device memory");
  plan.set_choice_reason("zb-h1: 12.4% faster than dapple at the same peak memory");
  const std::string out = RenderPlan(plan, cluster);
  EXPECT_THAT(out,
              HasSubstr("NOTE          one replica per stage: the worker runtime has no "
                        "stage replication yet\n"
                        "\n"
                        "ALTERNATIVES (each planned and simulated on its own)\n"
                        "    SCHEDULE   RECOMPUTE      P   LAYOUT     M   STEP MS   BUBBLE   "
                        "PEAK MEMORY\n"
                        "    dapple     none           2   3x8 3x2    8   14.10     12.50%   "
                        "1.5 GiB, 1.0 GiB\n"
                        "    dapple     auto: none     2   3x8 3x2    8   14.10     12.50%   "
                        "1.5 GiB, 1.0 GiB\n"
                        "    gpipe      auto: 1 of 2   2   3x8r 3x2   8   15.50     12.50%   "
                        "1.5 GiB, 1.0 GiB\n"
                        "*   zb-h1      none           2   3x8 3x2    8   12.35     12.50%   "
                        "1.5 GiB, 1.0 GiB\n"
                        "    zb-h2      none           -   -          -   -         -        "
                        "no plan fits\n"
                        "CHOSEN        zb-h1: 12.4% faster than dapple at the same peak memory\n"
                        "REFUSED       zb-h2 (recompute none): planner dapple: no plan fits "
                        "device memory\n"))
      << out;
}

TEST(ViewsTest, OneOfACountIsSingular) {
  v1::ParallelPlanSummary plan = PredictedPlan();
  plan.set_micro_batches(1);
  plan.set_micro_batch_size(1);
  plan.mutable_stages()->RemoveLast();
  v1::ClusterTopology cluster;
  cluster.add_nodes()->set_devices(1);
  plan.set_num_devices(1);
  const std::string out = RenderPlan(plan, cluster);
  EXPECT_THAT(out, HasSubstr("\nM             1 micro-batch of 1 sample\n")) << out;
  EXPECT_THAT(out, HasSubstr("(1 of 1 device used)\n")) << out;
  plan.set_micro_batches(2);
  EXPECT_THAT(RenderPlan(plan, cluster),
              HasSubstr("\nM             2 micro-batches of 1 sample\n"));

  v1::Job job = SampleJob();
  *job.mutable_plan() = plan;
  EXPECT_THAT(RenderJobDetails(job, kNowMs),
              HasSubstr("PLAN          planner dapple, schedule dapple, 1 stage\n"));
}

TEST(ViewsTest, CompactDevices) {
  google::protobuf::RepeatedPtrField<std::string> d;
  EXPECT_EQ(CompactDevices(d), "");
  for (const char* name : {"a/0", "a/1", "a/2", "b/0", "a/3", "a/5", "odd", "b/1", "b/2"}) {
    *d.Add() = name;
  }
  EXPECT_EQ(CompactDevices(d), "a/0-2,b/0,a/3,a/5,odd,b/1-2");
}

TEST(ViewsTest, JobDetailsShowThePredictionOfAPlannedJob) {
  v1::Job job = SampleJob();
  *job.mutable_plan() = PredictedPlan();
  job.mutable_plan()->mutable_stages(0)->add_worker_ids("w-1");
  job.mutable_plan()->mutable_stages(0)->add_devices("cpu");
  const std::string out = RenderJobDetails(job, kNowMs);
  EXPECT_THAT(out, HasSubstr("PREDICTED     12.35 ms/step, 20737 samples/s\n"));
  EXPECT_THAT(out, HasSubstr("PROFILE       estimated from FLOPs at 50 GFLOP/s\n"));
  EXPECT_THAT(out,
              HasSubstr("  STAGE   LAYERS   REPLICAS   WORKERS   DEVICES   COMPUTE MS   PEAK MEMORY"
                        "   BUBBLE\n"
                        "  0       0-2      8          w-1       cpu       10.50        1.5 GiB    "
                        "   5.00%\n"
                        "  1       3-5      2          -         -         9.25         1.0 GiB    "
                        "   15.00%\n"));
  EXPECT_THAT(out, HasSubstr("NOTE          one replica per stage"));
}

// A job whose plan recomputes a stage's activations (training.recompute) says which, as plan does.
TEST(ViewsTest, JobDetailsShowWhichStagesRecompute) {
  v1::Job job = SampleJob();
  *job.mutable_plan() = PredictedPlan();
  job.mutable_plan()->mutable_stages(0)->set_recompute(true);
  const std::string out = RenderJobDetails(job, kNowMs);
  EXPECT_THAT(out, HasSubstr("   BUBBLE   RECOMPUTE\n"));
  EXPECT_THAT(out, HasSubstr("  5.00%    yes\n"));
  EXPECT_THAT(out, HasSubstr("  15.00%   no\n"));
}

// Rank (stage, replica) of a running job with its newest step's memory.
v1::StageMetrics RankMemory(int stage, int replica, const std::string& worker, int in_flight,
                            int64_t activations, int64_t weights, int versions,
                            int64_t version_bytes) {
  v1::StageMetrics m;
  m.set_stage(stage);
  m.set_replica(replica);
  m.set_worker_id(worker);
  v1::StageStepStats* s = m.mutable_last();
  s->set_step(12);
  s->set_peak_in_flight(in_flight);
  s->set_peak_activation_bytes(activations);
  s->set_weight_bytes(weights);
  s->set_peak_memory_bytes(weights + activations);
  s->set_weight_versions(versions);
  s->set_weight_version_bytes(version_bytes);
  return m;
}

TEST(ViewsTest, JobDetailsShowTheMeasuredMemoryPerRank) {
  v1::Job job = SampleJob();
  EXPECT_EQ(RenderRankMemory(job), "");  // no step reported yet
  EXPECT_THAT(RenderJobDetails(job, kNowMs), Not(HasSubstr("MEMORY ")));
  *job.add_stage_metrics() = RankMemory(0, 0, "w-1", 2, 3 << 20, 1536, 1, 0);
  *job.add_stage_metrics() = RankMemory(1, 0, "w-2", 1, 512, int64_t{5} << 30, 2, 70 << 20);
  *job.add_stage_metrics() = RankMemory(1, 1, "", 1, 512, int64_t{5} << 30, 0, 0);
  const std::string table =
      "MEMORY        measured per rank at its newest step\n"
      "  STAGE   REPLICA   WORKER   STEP   IN FLIGHT   ACTIVATIONS   WEIGHTS   VERSIONS   "
      "VERSION BYTES   PEAK\n"
      "  0       0         w-1      12     2           3.0 MiB       1.5 KiB   1          "
      "0 bytes         3.0 MiB\n"
      "  1       0         w-2      12     1           512 bytes     5.0 GiB   2          "
      "70.0 MiB        5.0 GiB\n"
      "  1       1         -        12     1           512 bytes     5.0 GiB   -          "
      "-               5.0 GiB\n";
  EXPECT_EQ(RenderRankMemory(job), table);
  EXPECT_THAT(RenderJobDetails(job, kNowMs), HasSubstr(table));
}

TEST(ViewsTest, WorkerList) {
  google::protobuf::RepeatedPtrField<v1::WorkerInfo> workers;
  v1::WorkerInfo* busy = workers.Add();
  busy->set_id("w-1");
  busy->set_hostname("node-a");
  busy->set_pid(4242);
  busy->add_devices("cpu");
  busy->set_state(v1::WORKER_STATE_BUSY);
  busy->set_job_id("job-3");
  busy->set_stage(1);
  busy->set_last_heartbeat_unix_ms(kNowMs - 1'500);
  v1::WorkerInfo* idle = workers.Add();
  idle->set_id("w-2");
  idle->set_hostname("node-b");
  idle->set_pid(7);
  idle->add_devices("cuda:0");
  idle->add_devices("cuda:1");
  idle->set_state(v1::WORKER_STATE_IDLE);
  idle->set_job_id("stale");
  idle->set_last_heartbeat_unix_ms(kNowMs - 61'000);
  idle->set_device_memory_bytes(int64_t{80} << 30);
  idle->set_device_memory_shared(true);  // with the other workers on its GPU
  idle->set_physical_device("GPU-8c1a3f2e-0012-abcd-ef01-234567890aff");
  busy->set_device_memory_bytes(int64_t{16} << 30);
  busy->set_device_memory_shared(true);
  busy->set_host_compute_capacity(1.874);
  busy->mutable_loopback_link()->set_bandwidth_bytes_per_s(8.5e8);
  busy->mutable_loopback_link()->set_latency_ms(0.123);
  EXPECT_EQ(
      RenderWorkerList(workers, kNowMs),
      "ID    HOSTNAME   PID    DEVICES                        STATE   JOB     STAGE   HEARTBEAT   "
      "MEMORY            CAPACITY   LINK\n"
      "w-1   node-a     4242   cpu                            BUSY    job-3   1       1s ago      "
      "16.0 GiB shared   1.87       850 MB/s 0.12 ms\n"
      "w-2   node-b     7      cuda:0,cuda:1 (GPU-8c1a3f2e)   IDLE    -       -       1m ago      "
      "80.0 GiB shared   -          -\n");
}

TEST(RenderWorkerListTest, AnotherTenantsWorkShowsNeitherJobNorStage) {
  // What the coordinator answers a user of another tenant: job id and stage cleared.
  google::protobuf::RepeatedPtrField<v1::WorkerInfo> workers;
  v1::WorkerInfo* busy = workers.Add();
  busy->set_id("w-1");
  busy->set_hostname("node-a");
  busy->set_pid(4242);
  busy->add_devices("cpu");
  busy->set_state(v1::WORKER_STATE_BUSY);
  busy->set_last_heartbeat_unix_ms(kNowMs - 1'500);
  EXPECT_EQ(
      RenderWorkerList(workers, kNowMs),
      "ID    HOSTNAME   PID    DEVICES   STATE   JOB   STAGE   HEARTBEAT   MEMORY   CAPACITY   "
      "LINK\n"
      "w-1   node-a     4242   cpu       BUSY    -     -       1s ago      -        -          "
      "-\n");
}

}  // namespace
}  // namespace dapple::ctl
