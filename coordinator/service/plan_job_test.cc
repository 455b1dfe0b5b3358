// PlanJob (the dry run behind `dapplectl plan`) and planning at submission, by direct calls.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/job_spec.h"
#include "common/model/layer_registry.h"
#include "common/profile/model_profile.h"
#include "common/schedule/job_lowering.h"
#include "common/schedule/job_programs.h"
#include "coordinator/auth/test_identities.h"
#include "coordinator/jobs/test_db.h"
#include "coordinator/service/coordinator_service.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr int64_t kStart = 1'700'000'000'000;
constexpr int64_t kGiB = int64_t{1} << 30;

// The demo MLP (6 layers); {PLANNER}, {STAGES} and {DEVICES} are replaced.
constexpr char kSpec[] = R"(name: demo
model:
  input_shape: [1, 28, 28]
  layers:
    - {type: flatten}
    - {type: linear, out: 1024}
    - {type: relu}
    - {type: linear, out: 1024}
    - {type: relu}
    - {type: linear, out: 10}
data: {dataset: fashion-mnist, path: /usr/share/datasets/fashion-mnist}
training:
  global_batch: 256
  micro_batch: 32
  epochs: 1
  max_steps: 3
  optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
parallel:
  schedule: dapple
  planner: {PLANNER}
  stages: {STAGES}
  devices: {DEVICES}
)";

std::string Spec(const std::string& planner, const std::string& stages, int devices) {
  return absl::StrReplaceAll(
      kSpec, {{"{PLANNER}", planner}, {"{STAGES}", stages}, {"{DEVICES}", absl::StrCat(devices)}});
}

// A model of 3 layers, so that a planner choosing the depth uses at most 3 of 4 devices.
constexpr char kSmallSpec[] = R"(name: small
model:
  input_shape: [784]
  layers: [{type: linear, out: 256}, {type: relu}, {type: linear, out: 10}]
training: {global_batch: 64, micro_batch: 8, epochs: 1, max_steps: 2,
           optimizer: {type: sgd, lr: 0.1, momentum: 0.9}}
parallel: {schedule: dapple, planner: dapple, stages: auto, devices: 4}
)";

// A chain profile of `layers` equal layers named `name`.
v1::ModelProfile ChainProfile(int layers, const std::string& name, int64_t batch = 8) {
  v1::ModelProfile p;
  p.set_source("chain.txt");
  p.set_batch_size(batch);
  for (int i = 0; i < layers; ++i) {
    v1::LayerProfile* l = p.add_layers();
    l->set_id(absl::StrCat("node", i));
    l->set_name(name);
    l->set_forward_ms(2.0);
    l->set_backward_ms(4.0);
    l->set_activation_bytes(int64_t{1} << 20);
    l->set_parameter_bytes(int64_t{4} << 20);
  }
  return p;
}

v1::ClusterTopology Cluster(int nodes, int devices, int64_t memory = 16 * kGiB) {
  v1::ClusterTopology t;
  t.set_source("two_nodes.yaml");
  for (int n = 0; n < nodes; ++n) {
    v1::ClusterNode* node = t.add_nodes();
    node->set_name(absl::StrCat("node", n));
    node->set_devices(devices);
    node->set_device_memory_bytes(memory);
  }
  t.set_intra_node_bandwidth_bytes_per_s(130e9);
  t.set_intra_node_latency_ms(0.005);
  t.set_inter_node_bandwidth_bytes_per_s(3.125e9);
  t.set_inter_node_latency_ms(0.01);
  return t;
}

class PlanJobTest : public ::testing::Test {
 protected:
  void SetUp() override { svc_ = Open(); }

  std::unique_ptr<CoordinatorService> Open() {
    CoordinatorOptions options;
    options.measure_profiles = false;  // MeasuredProfileTest plays the measuring worker
    options.db_path = path_;
    options.now_unix_ms = [this] { return now_; };
    options.plan_defaults = defaults_;
    options.profile_cache = cache_;
    options.data_roots.push_back("/nonexistent");
    options.data_roots.push_back(::testing::TempDir());
    auto svc = CoordinatorService::Create(options);
    EXPECT_TRUE(svc.ok()) << svc.status();
    return svc.ok() ? std::move(*svc) : nullptr;
  }

  std::string Register(const std::string& host = "localhost", int64_t memory = 0,
                       bool shared = false) {
    v1::RegisterWorkerRequest req;
    req.set_hostname(host);
    req.set_pid(next_pid_++);
    req.add_devices("cpu");
    req.set_device_memory_bytes(memory);
    req.set_device_memory_shared(shared);
    v1::RegisterWorkerResponse resp;
    EXPECT_TRUE(svc_->RegisterWorker(auth::TestJoin(), req, &resp).ok());
    return resp.worker_id();
  }

  absl::StatusOr<v1::PlanJobResponse> Plan(const v1::PlanJobRequest& request) {
    v1::PlanJobResponse response;
    absl::Status s = svc_->PlanJob(auth::TestAdmin(), request, &response);
    if (!s.ok()) return s;
    return response;
  }

  absl::StatusOr<v1::Job> Submit(const std::string& yaml) {
    v1::SubmitJobRequest req;
    req.set_spec_yaml(yaml);
    req.set_source_name("job.yaml");
    v1::SubmitJobResponse resp;
    absl::Status s = svc_->SubmitJob(auth::TestAdmin(), req, &resp);
    if (!s.ok()) return s;
    return resp.job();
  }

  v1::Job Get(const std::string& id) {
    v1::GetJobRequest req;
    req.set_job_id(id);
    v1::Job job;
    EXPECT_TRUE(svc_->GetJob(auth::TestAdmin(), req, &job).ok()) << id;
    return job;
  }

  int64_t now_ = kStart;
  int next_pid_ = 100;
  PlanDefaults defaults_;
  std::shared_ptr<ProfileCache> cache_;
  std::string path_ = FreshDbPath();
  std::unique_ptr<CoordinatorService> svc_;
};

int SumReplicas(const v1::ParallelPlanSummary& plan) {
  int n = 0;
  for (const v1::PlanStageSummary& s : plan.stages()) n += s.replicas();
  return n;
}

TEST_F(PlanJobTest, AProfileWithoutASpecIsPlannedOnTheWholeCluster) {
  v1::PlanJobRequest req;
  *req.mutable_profile() = ChainProfile(8, "Linear");
  *req.mutable_cluster() = Cluster(2, 4);
  req.set_planner("dapple");
  auto r = Plan(req);
  ASSERT_TRUE(r.ok()) << r.status();
  const v1::ParallelPlanSummary& plan = r->plan();
  EXPECT_EQ(plan.planner(), "dapple");
  EXPECT_EQ(plan.schedule(), "dapple");
  // 16 profile batches of 8 samples per step by default.
  EXPECT_EQ(plan.micro_batches() * plan.micro_batch_size(), 16 * 8);
  EXPECT_GT(plan.predicted_step_ms(), 0);
  EXPECT_GT(plan.predicted_samples_per_second(), 0);
  EXPECT_EQ(plan.cluster_source(), "two_nodes.yaml");
  EXPECT_EQ(plan.profile_source(), "chain.txt");
  ASSERT_GE(plan.stages_size(), 1);
  EXPECT_EQ(plan.stages(0).first_layer(), 0);
  EXPECT_EQ(plan.stages(plan.stages_size() - 1).last_layer(), 7);
  EXPECT_LE(SumReplicas(plan), 8);
  EXPECT_EQ(plan.num_devices(), SumReplicas(plan));
  for (const v1::PlanStageSummary& s : plan.stages()) {
    EXPECT_EQ(s.placement_size(), s.replicas());
    // A dry run shows the topology's devices where a running job shows its workers'.
    EXPECT_EQ(std::vector<std::string>(s.devices().begin(), s.devices().end()),
              std::vector<std::string>(s.placement().begin(), s.placement().end()));
    EXPECT_TRUE(s.worker_ids().empty());
    EXPECT_GT(s.peak_memory_bytes(), 0);
  }
  EXPECT_EQ(r->cluster().source(), "two_nodes.yaml");

  req.set_global_batch(64);
  r = Plan(req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->plan().micro_batches() * r->plan().micro_batch_size(), 64);
}

TEST_F(PlanJobTest, ASpecIsPlannedOnTheRegisteredWorkersLikeASubmission) {
  Register("host-a");
  Register("host-a");
  v1::PlanJobRequest req;
  req.set_spec_yaml(Spec("dapple", "auto", 2));
  req.set_source_name("job.yaml");
  auto r = Plan(req);
  ASSERT_TRUE(r.ok()) << r.status();
  const v1::ParallelPlanSummary& plan = r->plan();
  EXPECT_EQ(plan.planner(), "dapple");
  EXPECT_EQ(plan.micro_batch_size(), 32);  // the job's: workers run training.micro_batch
  EXPECT_EQ(plan.micro_batches(), 8);
  EXPECT_GE(plan.stages_size(), 1);
  EXPECT_LE(plan.stages_size(), 2);
  // dapple chooses stages and replicas on at most the job's 2 devices.
  int ranks = 0;
  for (const v1::PlanStageSummary& s : plan.stages()) {
    EXPECT_GE(s.replicas(), 1);
    ranks += s.replicas();
  }
  EXPECT_LE(ranks, 2);
  EXPECT_EQ(plan.cluster_source(), "2 registered workers on 1 host");
  EXPECT_THAT(plan.profile_source(), HasSubstr("estimated"));
  EXPECT_THAT(plan.notes(), ::testing::Not(::testing::Contains(HasSubstr("no stage replication"))));
  EXPECT_GT(plan.predicted_step_ms(), 0);
  EXPECT_EQ(r->cluster().nodes(0).name(), "host-a");
  // Nothing was stored.
  v1::ListJobsResponse jobs;
  ASSERT_TRUE(svc_->ListJobs(auth::TestAdmin(), {}, &jobs).ok());
  EXPECT_EQ(jobs.jobs_size(), 0);
}

// A layer type without the kernel a job needs: planned (plans do not depend on kernels) with a
// note, refused at submit at the layer's line with one clear line. The image layers have no
// bf16 CUDA kernel, so a bf16 job with a conv2d is such a job (never run in fp32 silently).
TEST_F(PlanJobTest, ALayerWithoutAKernelIsPlannedWithANoteAndRefusedAtSubmit) {
  const std::string missing = "conv2d";
  ASSERT_TRUE(HasKernel(missing, KernelBackend::kCpu));
  ASSERT_FALSE(HasKernel(missing, KernelBackend::kCudaBf16));
  const std::string yaml = R"(name: cnn
model:
  input_shape: [1, 28, 28]
  layers:
    - {type: conv2d, out_channels: 4, kernel: 3}
    - {type: relu}
    - {type: global_avgpool}
    - {type: linear, out: 10}
training: {global_batch: 64, micro_batch: 16, epochs: 1, max_steps: 2,
           optimizer: {type: sgd, lr: 0.05}, precision: bf16}
parallel: {stages: 2, devices: 2, device_type: cuda}
)";
  const std::string message =
      std::string(NoKernelError(0, missing, KernelBackend::kCudaBf16).message());
  v1::PlanJobRequest req;
  req.set_spec_yaml(yaml);
  req.set_source_name("cnn.yaml");
  *req.mutable_cluster() = Cluster(1, 2);
  auto r = Plan(req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->plan().notes(), ::testing::Contains(absl::StrCat(
                                     "submit would refuse this job: cnn.yaml:5:7: ", message)));
  absl::StatusOr<v1::Job> job = Submit(yaml);
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(job.status().message()), ::testing::EndsWith(message));
  EXPECT_THAT(std::string(job.status().message()), HasSubstr(":5:7: "));
}

TEST_F(PlanJobTest, APlannerFlagReplacesTheSpecsPlanner) {
  v1::PlanJobRequest req;
  req.set_spec_yaml(Spec("balanced", "2", 2));
  *req.mutable_cluster() = Cluster(1, 2);
  auto r = Plan(req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->plan().planner(), "balanced");
  EXPECT_EQ(r->plan().stages_size(), 2);
  req.set_planner("uniform");
  r = Plan(req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->plan().planner(), "uniform");
  req.set_planner("magic");
  r = Plan(req);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("'magic' is unknown"));
}

// parallel.schedule auto (and --schedule auto): the planner chooses; the plan names the
// schedule the workers run and lists the alternatives; the spec keeps "auto".
TEST_F(PlanJobTest, AScheduleAutoJobRunsTheChosenSchedule) {
  Register();
  Register();
  const std::string spec =
      absl::StrReplaceAll(Spec("balanced", "2", 2), {{"schedule: dapple", "schedule: auto"}});
  absl::StatusOr<v1::Job> job = Submit(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->spec().parallel().schedule(), "auto");
  const v1::ParallelPlanSummary& plan = job->plan();
  EXPECT_THAT(plan.schedule(),
              ::testing::AnyOf("dapple", "zb-h1", "zb-h2", "interleaved", "gpipe"));
  // dapple and gpipe with and without recomputation, zb-h1, zb-h2, and interleaved with v = 2
  // and 3 (the 6 layers hold at most 3 chunks per stage on 2 stages).
  ASSERT_EQ(plan.alternatives_size(), 8);
  int chosen = 0;
  for (const v1::PlanAlternative& a : plan.alternatives()) {
    if (!a.chosen()) continue;
    ++chosen;
    EXPECT_EQ(a.schedule(), plan.schedule());
    EXPECT_DOUBLE_EQ(a.predicted_step_ms(), plan.predicted_step_ms());
  }
  EXPECT_EQ(chosen, 1);
  EXPECT_THAT(plan.choice_reason(), StartsWith(plan.schedule()));
  // The programs the workers get are the chosen schedule's (the spec says "auto").
  absl::StatusOr<std::vector<v1::RankProgram>> programs =
      schedule::JobPrograms(job->spec(), plan, 0);
  ASSERT_TRUE(programs.ok()) << programs.status();
  const bool split = plan.schedule() == "zb-h1" || plan.schedule() == "zb-h2";
  EXPECT_EQ(schedule::CountActions((*programs)[0], v1::BACKWARD_WEIGHT) > 0, split);

  // The dry run: the same choice; --schedule auto on a spec naming dapple chooses too.
  v1::PlanJobRequest req;
  req.set_spec_yaml(Spec("balanced", "2", 2));
  auto fixed = Plan(req);
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  EXPECT_EQ(fixed->plan().schedule(), "dapple");
  EXPECT_EQ(fixed->plan().alternatives_size(), 0);
  req.set_schedule("auto");
  auto chosen_plan = Plan(req);
  ASSERT_TRUE(chosen_plan.ok()) << chosen_plan.status();
  EXPECT_EQ(chosen_plan->plan().schedule(), plan.schedule());
  EXPECT_EQ(chosen_plan->plan().alternatives_size(), 8);
  req.set_schedule("zb-h3");
  EXPECT_THAT(Plan(req).status().message(),
              HasSubstr("with --schedule zb-h3 in place of the spec's parallel.schedule: "
                        "parallel.schedule 'zb-h3' is unknown"));
  // Both overrides apply before the spec is checked: --planner pipedream-code needs the
  // schedule pipedream that --schedule gives (each alone was refused against the other field).
  req.set_spec_yaml(Spec("balanced", "auto", 2));
  req.set_planner("pipedream-code");
  req.set_schedule("pipedream");
  auto pipedream_code = Plan(req);
  ASSERT_TRUE(pipedream_code.ok()) << pipedream_code.status();
  EXPECT_EQ(pipedream_code->plan().planner(), "pipedream-code");
  EXPECT_EQ(pipedream_code->plan().schedule(), "pipedream");
  req.set_schedule("gpipe");
  EXPECT_THAT(Plan(req).status().message(),
              HasSubstr("with --planner pipedream-code in place of the spec's parallel.planner "
                        "and --schedule gpipe in place of the spec's parallel.schedule: "
                        "parallel.planner pipedream-code with parallel.schedule gpipe"));
  req.clear_planner();
  // Without a spec: a profile on a cluster, the schedule chosen among the alternatives.
  v1::PlanJobRequest profile_only;
  *profile_only.mutable_profile() = ChainProfile(8, "linear");
  *profile_only.mutable_cluster() = Cluster(1, 4);
  profile_only.set_schedule("auto");
  auto p = Plan(profile_only);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->plan().alternatives_size(), 6);
  EXPECT_FALSE(p->plan().choice_reason().empty());
}

// --schedule interleaved on a spec without parallel.interleave plans 2 model chunks per stage;
// back to dapple, the spec's interleave is dropped. Each time a NOTE says what the plan's spec
// is, since a submit of the file would run (or refuse) the spec as written.
TEST_F(PlanJobTest, ScheduleInterleavedPlansChunksPerStage) {
  v1::PlanJobRequest req;
  req.set_spec_yaml(Spec("balanced", "2", 2));
  req.set_schedule("interleaved");
  auto r = Plan(req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->plan().schedule(), "interleaved");
  ASSERT_EQ(r->plan().stages_size(), 2);
  for (const v1::PlanStageSummary& s : r->plan().stages()) EXPECT_EQ(s.chunks_size(), 2);
  EXPECT_THAT(r->plan().notes(),
              ::testing::Contains(
                  "planned with --schedule interleaved in place of the spec's parallel.schedule "
                  "and parallel.interleave 2 (unset in the spec); a submit of the file runs its "
                  "own"));
  req.set_spec_yaml(absl::StrReplaceAll(Spec("balanced", "2", 2), {{"schedule: dapple",
                                                                    "schedule: interleaved\n  "
                                                                    "interleave: 3"}}));
  req.set_schedule("dapple");
  r = Plan(req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->plan().schedule(), "dapple");
  EXPECT_EQ(r->plan().stages(0).chunks_size(), 0);
  EXPECT_THAT(r->plan().notes(),
              ::testing::Contains(
                  "planned with --schedule dapple in place of the spec's parallel.schedule and "
                  "without the spec's parallel.interleave 3 (it applies to schedule interleaved "
                  "only); a submit of the file runs its own"));
}

TEST_F(PlanJobTest, WithoutWorkersOrAClusterAProfileSaysToPassACluster) {
  v1::PlanJobRequest profile_only;
  *profile_only.mutable_profile() = ChainProfile(4, "Linear");
  auto r = Plan(profile_only);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.status().message(),
            "no registered workers to plan on: start workers, or give a cluster file (dapplectl "
            "plan --cluster CLUSTER.yaml)");
}

// The promise of docs/dapplectl.md: `plan JOB` shows the job as `submit` would plan it, also
// when fewer workers than parallel.devices are registered (then on a hypothetical node).
TEST_F(PlanJobTest, WithTooFewWorkersASpecIsPlannedLikeASubmissionOnAHypotheticalNode) {
  for (int workers : {0, 2}) {
    SCOPED_TRACE(workers);
    svc_.reset();
    path_ = FreshDbPath();
    svc_ = Open();
    for (int w = 0; w < workers; ++w) Register("host-a");
    v1::PlanJobRequest req;
    req.set_spec_yaml(Spec("dapple", "auto", 4096));
    req.set_source_name("job.yaml");
    auto r = Plan(req);
    ASSERT_TRUE(r.ok()) << r.status();
    auto job = Submit(req.spec_yaml());
    ASSERT_TRUE(job.ok()) << job.status();
    const v1::ParallelPlanSummary& plan = r->plan();
    const v1::ParallelPlanSummary& stored = job->plan();
    EXPECT_EQ(plan.cluster_source(), "one node of 4096 devices (coordinator defaults)");
    EXPECT_EQ(plan.cluster_source(), stored.cluster_source());
    EXPECT_EQ(r->cluster().source(), plan.cluster_source());
    ASSERT_EQ(r->cluster().nodes_size(), 1);
    EXPECT_EQ(r->cluster().nodes(0).devices(), 4096);
    EXPECT_EQ(plan.stages_size(), stored.stages_size());
    for (int s = 0; s < plan.stages_size() && s < stored.stages_size(); ++s) {
      EXPECT_EQ(plan.stages(s).first_layer(), stored.stages(s).first_layer()) << s;
      EXPECT_EQ(plan.stages(s).last_layer(), stored.stages(s).last_layer()) << s;
    }
    EXPECT_EQ(plan.micro_batches(), stored.micro_batches());
    EXPECT_DOUBLE_EQ(plan.predicted_step_ms(), stored.predicted_step_ms());
    const int wanted = plan.num_devices();
    EXPECT_THAT(plan.notes(),
                ::testing::Contains(
                    absl::StrCat(workers,
                                 " registered workers for parallel.devices 4096: planned as submit "
                                 "plans it, on a hypothetical node (coordinator defaults); the job "
                                 "would wait for ",
                                 wanted, wanted == 1 ? " worker" : " workers")));
  }
}

TEST_F(PlanJobTest, AProfileMustMatchTheJobsModelNamingTheFirstMismatch) {
  v1::PlanJobRequest req;
  req.set_spec_yaml(Spec("dapple", "auto", 2));
  *req.mutable_cluster() = Cluster(1, 2);
  *req.mutable_profile() = ChainProfile(6, "Conv2d(3, 64)");
  auto r = Plan(req);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("does not match the job's model"));
  EXPECT_THAT(r.status().message(), HasSubstr("model.layers[0] (flatten)"));

  *req.mutable_profile() = ChainProfile(4, "linear");
  r = Plan(req);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("does not match the job's model"));

  // One that matches is used as given.
  v1::ModelProfile matching = ChainProfile(6, "");
  const char* types[] = {"flatten", "linear", "relu", "linear", "relu", "linear"};
  for (int i = 0; i < 6; ++i) {
    matching.mutable_layers(i)->set_name(types[i]);
    matching.mutable_layers(i)->set_parameter_bytes(0);  // unknown: not checked against the model
  }
  *req.mutable_profile() = matching;
  r = Plan(req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->plan().profile_source(), "chain.txt");
}

TEST_F(PlanJobTest, RequestsAreChecked) {
  v1::PlanJobRequest req;
  *req.mutable_cluster() = Cluster(1, 2);
  EXPECT_EQ(Plan(req).status().message(),
            "a plan without a job spec needs a profile (dapplectl plan --profile FILE)");
  req.set_spec_yaml("name: [");
  req.set_source_name("broken.yaml");
  auto r = Plan(req);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), StartsWith("broken.yaml:"));
  v1::PlanJobRequest bad_cluster;
  *bad_cluster.mutable_profile() = ChainProfile(4, "Linear");
  *bad_cluster.mutable_cluster() = Cluster(1, 2);
  bad_cluster.mutable_cluster()->set_intra_node_bandwidth_bytes_per_s(-1);
  EXPECT_EQ(Plan(bad_cluster).status().message(),
            "cluster.intra_node_bandwidth_bytes_per_s -1 must be a finite number > 0");
}

// An emulated job whose profile file cannot be read is refused at submit, and by a dry run,
// at the spec's line and column of parallel.emulation.profile like the parser's refusals; nothing
// is stored.
TEST_F(PlanJobTest, AnUnreadableEmulationProfileIsRefusedAtItsPlaceInTheSpec) {
  for (const auto& [profile, why] : std::vector<std::pair<std::string, std::string>>{
           {"/nonexistent/x-pbs-4.txt", "No such file or directory"},
           {::testing::TempDir(), "Is a directory"}}) {
    const std::string yaml = Spec("balanced", "2", 2) +
                             "  device_type: emulated\n  emulation: {profile: " + profile + "}\n";
    const std::string expected =
        absl::StrCat("job.yaml:24:24: parallel.emulation.profile: ", profile, ": ", why);
    absl::StatusOr<v1::Job> job = Submit(yaml);
    EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(job.status().message(), expected);
    v1::PlanJobRequest req;
    req.set_spec_yaml(yaml);
    req.set_source_name("job.yaml");
    EXPECT_EQ(Plan(req).status().message(), expected);
  }
  // A file outside the data roots is refused before it is read (data_roots.h).
  const std::string outside =
      Spec("balanced", "2", 2) + "  device_type: emulated\n  emulation: {profile: /etc/passwd}\n";
  EXPECT_THAT(Submit(outside).status().message(),
              HasSubstr("job.yaml:24:24: parallel.emulation.profile /etc/passwd is outside the "
                        "coordinator's data roots (/usr/share/datasets, "));
  v1::ListJobsResponse list;
  ASSERT_TRUE(svc_->ListJobs(auth::TestAdmin(), v1::ListJobsRequest(), &list).ok());
  EXPECT_EQ(list.jobs_size(), 0);
}

TEST_F(PlanJobTest, APlanThatFitsNoDeviceIsRejectedWithTheMemoryItNeeds) {
  v1::PlanJobRequest req;
  req.set_spec_yaml(Spec("dapple", "auto", 2));
  *req.mutable_cluster() = Cluster(1, 2, /*memory=*/1 << 20);  // 1 MiB: the weights are 3+ MiB
  auto r = Plan(req);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("but devices have"));

  v1::PlanJobRequest profile_only;
  *profile_only.mutable_profile() = ChainProfile(4, "Linear");
  *profile_only.mutable_cluster() = Cluster(1, 2, /*memory=*/1 << 20);
  r = Plan(profile_only);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("but devices have"));
}

// ------------------------------------------------------------------- planning at submission

TEST_F(PlanJobTest, AnAutoJobIsPlannedAtSubmissionAndWaitsForItsStagesNotItsDevices) {
  absl::StatusOr<v1::Job> job = Submit(kSmallSpec);
  ASSERT_TRUE(job.ok()) << job.status();
  const v1::ParallelPlanSummary& plan = job->plan();
  ASSERT_GE(plan.stages_size(), 1);
  const int p = plan.stages_size();
  ASSERT_LE(p, 3);  // 3 layers, though parallel.devices is 4
  // The job needs one worker per rank: the sum of its stages' replicas (at most the devices).
  int ranks = 0;
  for (const v1::PlanStageSummary& s : plan.stages()) ranks += s.replicas();
  ASSERT_LE(ranks, 4);
  EXPECT_EQ(plan.planner(), "dapple");
  EXPECT_GT(plan.predicted_step_ms(), 0);
  EXPECT_THAT(plan.profile_source(), HasSubstr("estimated"));
  EXPECT_THAT(plan.cluster_source(), HasSubstr("one node of 4 devices"));  // no workers yet
  if (ranks < 4) {
    EXPECT_THAT(plan.notes(), ::testing::Contains(StartsWith(
                                  absl::StrCat("uses ", ranks, " of the 4 parallel.devices: "))));
  }
  for (const v1::PlanStageSummary& s : plan.stages()) EXPECT_TRUE(s.worker_ids().empty());

  for (int i = 0; i < ranks - 1; ++i) Register();
  svc_->Tick();
  v1::Job pending = Get(job->id());
  EXPECT_EQ(pending.state(), v1::JOB_STATE_PENDING);
  EXPECT_THAT(pending.message(), StartsWith(absl::StrCat("waiting for ", ranks, " idle worker")));
  Register();
  svc_->Tick();
  v1::Job running = Get(job->id());
  ASSERT_EQ(running.state(), v1::JOB_STATE_RUNNING) << running.message();
  EXPECT_EQ(running.worker_ids_size(), ranks);
  // The stored plan is the one that runs, its prediction kept.
  EXPECT_EQ(running.plan().stages_size(), p);
  EXPECT_DOUBLE_EQ(running.plan().predicted_step_ms(), plan.predicted_step_ms());
  for (int s = 0; s < p; ++s) {
    EXPECT_EQ(running.plan().stages(s).first_layer(), plan.stages(s).first_layer());
    EXPECT_EQ(running.plan().stages(s).worker_ids_size(), plan.stages(s).replicas());
  }
  v1::HeartbeatRequest hb;
  hb.set_worker_id(running.worker_ids(0));
  v1::HeartbeatResponse resp;
  ASSERT_TRUE(svc_->Heartbeat(auth::TestWorker((hb).worker_id()), hb, &resp).ok());
  ASSERT_TRUE(resp.has_assignment());
  EXPECT_EQ(resp.assignment().num_stages(), p);
  EXPECT_GT(resp.assignment().program().actions_size(), 0);
}

TEST_F(PlanJobTest, AJobWithEnoughWorkersIsPlannedOnThem) {
  Register("host-a", 8 * kGiB, /*shared=*/false);
  Register("host-a", 8 * kGiB, /*shared=*/false);
  absl::StatusOr<v1::Job> job = Submit(Spec("balanced", "2", 2));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->plan().cluster_source(), "2 registered workers on 1 host");
  // Balanced by time on the estimated profile: the same stages as by FLOPs.
  ASSERT_EQ(job->plan().stages_size(), 2);
  EXPECT_EQ(job->plan().stages(0).last_layer(), 2);
  EXPECT_EQ(job->plan().stages(1).first_layer(), 3);
}

TEST_F(PlanJobTest, ASubmissionThatFitsNoDeviceFailsWithThePlannersMessage) {
  svc_.reset();
  defaults_.device_memory_bytes = 1 << 20;
  svc_ = Open();
  absl::StatusOr<v1::Job> job = Submit(Spec("dapple", "auto", 2));
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(job.status().message(), HasSubstr("but devices have"));
  v1::ListJobsResponse jobs;
  ASSERT_TRUE(svc_->ListJobs(auth::TestAdmin(), {}, &jobs).ok());
  EXPECT_EQ(jobs.jobs_size(), 0);
}

// The fresh user's case: a worker given a small --device-memory beside a large one on the same
// host. Each device is planned with its own memory (before, both with the smallest): the
// stage on the small worker does not fit, and the refusal says the host's memories differ.
TEST_F(PlanJobTest, AMemoryRefusalNamesTheSmallWorkerItWasPlannedOn) {
  Register("host-a", 24 * kGiB, /*shared=*/true);
  const std::string small = Register("host-a", 13 << 20, /*shared=*/false);
  absl::StatusOr<v1::Job> job = Submit(Spec("balanced", "2", 2));
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(job.status().message(),
              HasSubstr("the best needs 13.8 MiB on a device (stage 1: weights 12.1 MiB"))
      << job.status();
  EXPECT_THAT(job.status().message(), HasSubstr("but devices have 13.0 MiB"));
  EXPECT_THAT(std::string(job.status().message()),
              HasSubstr("(host host-a: its workers report from 13.0 MiB (" + small +
                        ") to 24.0 GiB; each device is planned with its own)"));
}

// Devices of one host planned each with its own memory: the same job with the 13 MiB worker
// registered first puts stage 0 (12.8 MB) on it and stage 1 (13.8 MiB) on the large one. Both
// planned with the smallest, as before, it was refused like the job above.
TEST_F(PlanJobTest, EachDeviceOfAHostIsPlannedWithItsOwnMemory) {
  const std::string small = Register("host-a", 13 << 20, /*shared=*/false);
  const std::string large = Register("host-a", 24 * kGiB, /*shared=*/true);
  absl::StatusOr<v1::Job> job = Submit(Spec("balanced", "2", 2));
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->plan().stages_size(), 2);
  EXPECT_LE(job->plan().stages(0).peak_memory_bytes(), 13 << 20);
  EXPECT_GT(job->plan().stages(1).peak_memory_bytes(), 13 << 20);
  svc_->Tick();
  EXPECT_THAT(Get(job->id()).worker_ids(), ::testing::ElementsAre(small, large));
}

TEST_F(PlanJobTest, DataParallelIsOneStageOnEveryDevice) {
  absl::StatusOr<v1::Job> job = Submit(Spec("dp", "auto", 1));
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->plan().stages_size(), 1);
  EXPECT_EQ(job->plan().stages(0).replicas(), 1);
  EXPECT_EQ(job->plan().stages(0).last_layer(), 5);
  job = Submit(Spec("dp", "auto", 2));
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->plan().stages_size(), 1);
  EXPECT_EQ(job->plan().stages(0).replicas(), 2);
}

TEST_F(PlanJobTest, FixedStagesGetDevicesOverStagesReplicasEach) {
  for (const char* planner : {"balanced", "uniform"}) {
    absl::StatusOr<v1::Job> job = Submit(Spec(planner, "2", 4));
    ASSERT_TRUE(job.ok()) << planner << ": " << job.status();
    ASSERT_EQ(job->plan().stages_size(), 2) << planner;
    for (const v1::PlanStageSummary& s : job->plan().stages()) {
      EXPECT_EQ(s.replicas(), 2) << planner;
      EXPECT_EQ(s.placement_size(), 2) << planner;
    }
    EXPECT_GT(job->plan().stages(0).allreduce_ms(), 0) << planner;
  }
  EXPECT_EQ(Submit(Spec("balanced", "2", 3)).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(PlanJobTest, TheStoredPlanAndItsPredictionSurviveARestart) {
  absl::StatusOr<v1::Job> job = Submit(Spec("dapple", "auto", 2));
  ASSERT_TRUE(job.ok()) << job.status();
  svc_.reset();
  svc_ = Open();
  const v1::Job back = Get(job->id());
  EXPECT_EQ(back.state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(back.plan().SerializeAsString(), job->plan().SerializeAsString());
  EXPECT_GT(back.plan().predicted_step_ms(), 0);
  EXPECT_GT(back.plan().stages(0).peak_memory_bytes(), 0);
}

TEST_F(PlanJobTest, AMeasuredProfileFromTheCacheIsPreferred) {
  v1::ModelProfile measured = ChainProfile(6, "");
  const char* types[] = {"flatten", "linear", "relu", "linear", "relu", "linear"};
  for (int i = 0; i < 6; ++i) {
    measured.mutable_layers(i)->set_name(types[i]);
    measured.mutable_layers(i)->set_parameter_bytes(0);  // unknown: not checked against the model
  }
  measured.set_source("measured on cpu by worker w-9");
  measured.set_device_kind("cpu");
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(Spec("dapple", "auto", 2), "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  measured.set_model_fingerprint(profile::ModelFingerprint(spec->model()));
  auto cache = std::make_shared<ProfileCache>();
  cache->Insert(measured);
  svc_.reset();
  cache_ = cache;
  svc_ = Open();
  absl::StatusOr<v1::Job> job = Submit(Spec("dapple", "auto", 2));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->plan().profile_source(), "measured on cpu by worker w-9");
  // A cuda measurement does not stand in for cpu workers.
  measured.set_device_kind("cuda:0");
  measured.set_source("measured on cuda:0");
  cache->Insert(measured);
  job = Submit(Spec("dapple", "auto", 2));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->plan().profile_source(), "measured on cpu by worker w-9");
}

// Two cuda workers on one GPU (as tests/gpu/gpu_jobs.py runs them): planned as sharing its
// compute (one process's kernels at a time) and its memory; a physical device that is not a
// GPU's name is ignored. (Two GPUs of their own: PlanJobTest.AJobWithEnoughWorkersIsPlannedOnThem
// and the other tests of workers that report no physical device.)
TEST_F(PlanJobTest, WorkersOnOneGpuArePlannedAsSharingIt) {
  const auto register_cuda = [&](const std::string& gpu) {
    v1::RegisterWorkerRequest req;
    req.set_hostname("g");
    req.set_pid(next_pid_++);
    req.add_devices("cuda:0");
    req.set_device_memory_bytes(140 * kGiB);
    req.set_device_memory_shared(true);
    req.set_physical_device(gpu);
    v1::RegisterWorkerResponse resp;
    EXPECT_TRUE(svc_->RegisterWorker(auth::TestJoin(), req, &resp).ok());
    return resp.worker_id();
  };
  register_cuda("GPU-8c1a3f2e-0012-abcd-ef01-234567890aff");
  register_cuda("GPU-8c1a3f2e-0012-abcd-ef01-234567890aff");
  // Six equal layers: a 2-stage pipeline computes on both stages at once in its steady state,
  // which one GPU runs one after the other; dapple then plans on one of the two workers.
  v1::PlanJobRequest req;
  *req.mutable_profile() = ChainProfile(6, "Linear");
  req.set_planner("balanced");
  auto r = Plan(req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->plan().cluster_source(),
            "2 registered workers on 1 host; 2 of them share GPUs (one process's kernels at a "
            "time, the memory split)");
  EXPECT_THAT(r->cluster().nodes(0).device_group(), ::testing::ElementsAre(0, 0));
  EXPECT_EQ(r->cluster().nodes(0).device_memory_bytes(), 70 * kGiB);
  ASSERT_EQ(r->plan().stages_size(), 2);
  for (const v1::PlanStageSummary& s : r->plan().stages()) {
    EXPECT_GT(s.contention_ms(), 0.4 * s.compute_ms());
  }
  const double pipeline_ms = r->plan().predicted_step_ms();
  req.set_planner("dapple");
  r = Plan(req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->plan().num_devices(), 1);
  EXPECT_LT(r->plan().predicted_step_ms(), pipeline_ms);

  const std::string odd = register_cuda("GPU 1; rm -rf /");
  v1::ListWorkersResponse workers;
  ASSERT_TRUE(svc_->ListWorkers(auth::TestAdmin(), {}, &workers).ok());
  ASSERT_EQ(workers.workers_size(), 3);
  EXPECT_EQ(workers.workers(0).physical_device(), "GPU-8c1a3f2e-0012-abcd-ef01-234567890aff");
  EXPECT_EQ(workers.workers(2).id(), odd);
  EXPECT_EQ(workers.workers(2).physical_device(), "");
}

TEST_F(PlanJobTest, RegisteredWorkersKeepTheirReportedMemory) {
  const std::string id = Register("h", 12 * kGiB, /*shared=*/true);
  v1::ListWorkersResponse workers;
  ASSERT_TRUE(svc_->ListWorkers(auth::TestAdmin(), {}, &workers).ok());
  ASSERT_EQ(workers.workers_size(), 1);
  EXPECT_EQ(workers.workers(0).id(), id);
  EXPECT_EQ(workers.workers(0).device_memory_bytes(), 12 * kGiB);
  EXPECT_TRUE(workers.workers(0).device_memory_shared());
}

}  // namespace
}  // namespace dapple::coordinator
