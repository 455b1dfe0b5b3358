// ValidateJobSpec: the parallel section's rules and the training rules that depend on the schedule
// (skipped steps, restarts, recomputation), with their messages; the others in
// job_spec_validate_test.cc.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/job_spec_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple {
namespace {

using ::dapple::testing::Edit;
using ::dapple::testing::Example;
using ::dapple::testing::ExpectInvalid;
using ::dapple::testing::ExpectParseError;
using ::dapple::testing::kExample;
using ::dapple::testing::Manual;

TEST(ValidateJobSpecTest, Schedule) {
  v1::JobSpec spec = Example();
  spec.mutable_parallel()->set_schedule("zerobubble");
  ExpectInvalid(ValidateJobSpec(spec), {"parallel.schedule 'zerobubble' is unknown; available: "
                                        "gpipe, dapple, pipedream, pipesgd, zb-h1, zb-h2, "
                                        "interleaved, auto"});
  // auto: the planner chooses; on cuda too (it then chooses among dapple and gpipe), with
  // recomputation where the device allows it.
  spec.mutable_parallel()->set_schedule("auto");
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  for (const char* recompute : {"none", "all", "auto"}) {
    v1::JobSpec with = spec;
    with.mutable_training()->set_recompute(recompute);
    EXPECT_TRUE(ValidateJobSpec(with).ok()) << recompute << ": " << ValidateJobSpec(with);
  }
  v1::JobSpec on_cuda = spec;
  on_cuda.mutable_parallel()->set_device_type("cuda");
  EXPECT_TRUE(ValidateJobSpec(on_cuda).ok()) << ValidateJobSpec(on_cuda);
  for (const char* zb : {"zb-h1", "zb-h2"}) {
    spec.mutable_parallel()->set_schedule(zb);
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << zb << ": " << ValidateJobSpec(spec);
    // With clipping too: the global norm comes after every BACKWARD_WEIGHT (generators.h).
    v1::JobSpec clipped = spec;
    clipped.mutable_training()->set_max_grad_norm(1.0);
    EXPECT_TRUE(ValidateJobSpec(clipped).ok()) << zb << ": " << ValidateJobSpec(clipped);
    // The CUDA backend splits its backward too (worker/runtime/cuda/cuda_stage_backend.h).
    v1::JobSpec cuda = spec;
    cuda.mutable_parallel()->set_device_type("cuda");
    EXPECT_TRUE(ValidateJobSpec(cuda).ok()) << zb << ": " << ValidateJobSpec(cuda);
  }
}

// training.max_consecutive_skipped_steps: >= 0; > 0 only under a synchronous schedule (the
// asynchronous ones cannot skip a step on every rank together).
TEST(ValidateJobSpecTest, MaxConsecutiveSkippedSteps) {
  v1::JobSpec spec = Example();
  spec.mutable_training()->set_max_consecutive_skipped_steps(-1);
  ExpectInvalid(ValidateJobSpec(spec),
                {"training.max_consecutive_skipped_steps -1 must be >= 0 (0 = the first step with "
                 "a non-finite loss or gradient fails the job)"});
  spec.mutable_training()->set_max_consecutive_skipped_steps(5);
  for (const char* sync : {"gpipe", "dapple", "zb-h1", "zb-h2"}) {
    spec.mutable_parallel()->set_schedule(sync);
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << sync << ": " << ValidateJobSpec(spec);
  }
  spec.mutable_parallel()->set_schedule("pipedream");
  ExpectInvalid(ValidateJobSpec(spec),
                {"training.max_consecutive_skipped_steps 5 needs a synchronous schedule (gpipe, "
                 "dapple, interleaved, zb-h1, zb-h2), got parallel.schedule pipedream: its "
                 "asynchronous "
                 "updates cannot skip a step on every rank together; use 0 (a non-finite step "
                 "fails the job)"});
  spec.mutable_training()->set_max_consecutive_skipped_steps(0);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
}

// training.restart: max_restarts in [0, 100], the seconds finite and in range, the cap at least
// the first backoff, at least 1 s of waiting for workers when restarts are on.
TEST(ValidateJobSpecTest, Restart) {
  v1::JobSpec spec = Example();
  v1::RestartSpec* r = spec.mutable_training()->mutable_restart();
  EXPECT_TRUE(ValidateJobSpec(spec).ok());  // all zero: no restarts
  r->set_max_restarts(3);
  r->set_backoff_seconds(1);
  r->set_max_backoff_seconds(30);
  r->set_wait_for_workers_seconds(60);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  r->set_max_restarts(101);
  ExpectInvalid(ValidateJobSpec(spec), {"training.restart.max_restarts 101 must be in [0, 100]"});
  r->set_max_restarts(3);
  r->set_max_backoff_seconds(0.5);
  ExpectInvalid(ValidateJobSpec(spec),
                {"training.restart.backoff_seconds 1 is more than "
                 "training.restart.max_backoff_seconds 0.5 (its cap, 30 unless given): lower "
                 "backoff_seconds or raise max_backoff_seconds"});
  r->set_max_backoff_seconds(30);
  r->set_wait_for_workers_seconds(0);
  ExpectInvalid(ValidateJobSpec(spec),
                {"training.restart.wait_for_workers_seconds 0 must be a number of seconds in [1, "
                 "86400]"});
}

// schedule interleaved (Megatron's interleaved 1F1B): parallel.interleave v in 2..8 with it and
// only with it, a fixed stage count P >= 2, P * v <= layers, M >= P (any M from P on, 2P + 1
// included), not on cuda, not with recomputation, tied weights, periodic checkpoints or a
// planner other than balanced and dapple; a spec that passes every rule is valid (runnable).
TEST(ValidateJobSpecTest, Interleaved) {
  v1::JobSpec spec = Example();  // 4 layers, 2 stages on 2 devices, global_batch 256 / 32: M = 8
  spec.mutable_parallel()->set_interleave(2);
  ExpectInvalid(ValidateJobSpec(spec),
                {"parallel.interleave applies only to parallel.schedule interleaved, got "
                 "parallel.schedule dapple"});
  spec.mutable_parallel()->set_schedule("interleaved");
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  v1::JobSpec with_dapple = spec;
  with_dapple.mutable_parallel()->set_planner("dapple");
  EXPECT_TRUE(ValidateJobSpec(with_dapple).ok()) << ValidateJobSpec(with_dapple);
  for (const char* planner : {"uniform", "pipedream"}) {
    v1::JobSpec other = spec;
    other.mutable_parallel()->set_planner(planner);
    ExpectInvalid(ValidateJobSpec(other),
                  {absl::StrCat("parallel.planner ", planner,
                                " with parallel.schedule interleaved is not supported"),
                   "4 virtual stages", "set planner: balanced (or dapple)"});
  }
  // Checkpoints of interleaved jobs: a rank's shard holds all its chunks
  // (worker/checkpoint/stage_checkpointer.h).
  v1::JobSpec periodic = spec;
  periodic.mutable_training()->set_checkpoint_every_steps(10);
  EXPECT_TRUE(ValidateJobSpec(periodic).ok()) << ValidateJobSpec(periodic);
  periodic.mutable_training()->set_checkpoint_every_steps(0);
  periodic.mutable_training()->set_checkpoint_every_minutes(5);
  EXPECT_TRUE(ValidateJobSpec(periodic).ok()) << ValidateJobSpec(periodic);
  for (int v : {0, 1, 9}) {
    v1::JobSpec bad = spec;
    bad.mutable_parallel()->set_interleave(v);
    ExpectInvalid(ValidateJobSpec(bad),
                  {v == 0 ? std::string("parallel.schedule interleaved needs parallel.interleave")
                          : absl::StrCat("parallel.interleave ", v, " must be in 2..8")});
  }
  v1::JobSpec deep = spec;
  deep.mutable_parallel()->set_interleave(3);
  ExpectInvalid(ValidateJobSpec(deep),
                {"parallel.interleave 3 with parallel.stages 2 makes 6 virtual stages, more than "
                 "the 4 layers of the model: each virtual stage needs at least one layer: set "
                 "interleave to at most 2"});
  v1::JobSpec cuda = spec;
  cuda.mutable_parallel()->set_device_type("cuda");
  ExpectInvalid(ValidateJobSpec(cuda), {"parallel.device_type cuda is not implemented"});
  v1::JobSpec auto_stages = spec;
  auto_stages.mutable_parallel()->set_stages(0);
  auto_stages.mutable_parallel()->set_planner("dapple");
  ExpectInvalid(ValidateJobSpec(auto_stages),
                {"needs parallel.stages as a count of at least 2", "got auto"});
  // M = 1 < P = 2: the message names the micro_batch values that give the nearest valid M.
  v1::JobSpec few = spec;
  few.mutable_training()->set_micro_batch(256);
  ExpectInvalid(ValidateJobSpec(few), {"training.micro_batch 256 makes M = 1 micro-batch",
                                       "fewer than "
                                       "parallel.stages 2",
                                       "needs M >= stages (any M from 2 on",
                                       "set micro_batch to 128 (M = 2) or 64 (M = 4)"});
  // M = P and M = 2P + 1 pass the schedule's rules.
  for (auto [global, micro] : {std::pair<int, int>{64, 32}, {160, 32}}) {
    v1::JobSpec m = spec;
    m.mutable_training()->set_global_batch(global);
    m.mutable_training()->set_micro_batch(micro);
    EXPECT_TRUE(ValidateJobSpec(m).ok()) << global / micro << ": " << ValidateJobSpec(m);
  }
  v1::JobSpec recompute = spec;
  recompute.mutable_training()->set_recompute("all");
  ExpectInvalid(ValidateJobSpec(recompute),
                {"training.recompute all with parallel.schedule interleaved is not supported"});
  // The field parses, round-trips and is refused where it does not apply, at its line.
  absl::StatusOr<v1::JobSpec> parsed =
      ParseJobSpec(Edit(kExample, "  devices: 2\n", "  devices: 2\n  interleave: 2\n"), "job.yaml");
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(std::string(parsed.status().message()),
              ::testing::HasSubstr("job.yaml:23:15: parallel.interleave applies only to"));
  // The canonical YAML writes it, and it reads back as the same spec.
  EXPECT_THAT(JobSpecToYaml(spec), ::testing::HasSubstr("\n  interleave: 2\n"));
  absl::StatusOr<v1::JobSpec> round_trip = ParseJobSpec(JobSpecToYaml(spec), "job.yaml");
  ASSERT_TRUE(round_trip.ok()) << round_trip.status();
  EXPECT_EQ(round_trip->parallel().interleave(), 2);
  EXPECT_EQ(round_trip->parallel().schedule(), "interleaved");
}

// schedule pipedream: stages may have replicas (1F1B-RR: whole micro-batches round-robin), at
// most M = global_batch / micro_batch per stage where the spec fixes them (devices / stages of
// balanced, uniform and manual); not with planner dp; an optional parallel.pipedream section
// {vertical_sync}; the section under another schedule is refused.
// A new user's parallel.devices 4096 on 2 stages met the planner's "micro_batch_size 32 is
// smaller than stage 0's 2048 replicas" without the spec's fields: split-concat replicas
// (every schedule but pipedream) need a sample of each micro-batch each, checked at submit where
// the spec fixes D.
TEST(ValidateJobSpecTest, SplitReplicasGetAtLeastOneSampleEach) {
  v1::JobSpec spec = Example();  // 2 stages on 2 devices, global_batch 256, micro_batch 32
  spec.mutable_parallel()->set_devices(64);  // 32 replicas per stage: one sample each
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  spec.mutable_parallel()->set_devices(4096);
  ExpectInvalid(ValidateJobSpec(spec),
                {"parallel.devices 4096 with parallel.stages 2 gives 2048 replicas per stage, but "
                 "a stage's replicas split each micro-batch of training.micro_batch 32 samples "
                 "among them: each replica needs at least one: set devices to at most 64 (32 "
                 "replicas per stage) or use a larger micro_batch"});
  // Planners that choose the replicas themselves are capped by the coordinator, not here.
  spec.mutable_parallel()->set_planner("dapple");
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
}

TEST(ValidateJobSpecTest, PipeDreamReplicasGetAtLeastOneMicroBatchEach) {
  v1::JobSpec spec = Example();  // 2 stages on 2 devices, global_batch 256, micro_batch 32
  spec.mutable_parallel()->set_schedule("pipedream");
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  // 4 devices on 2 stages: 2 replicas per stage, M = 8.
  spec.mutable_parallel()->set_devices(4);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  // M = 2: 2 replicas per stage still get one micro-batch each per step, 4 would not.
  spec.mutable_training()->set_micro_batch(128);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  spec.mutable_parallel()->set_devices(8);
  ExpectInvalid(ValidateJobSpec(spec),
                {"parallel.devices 8 with parallel.stages 2 gives 4 replicas per stage, but "
                 "parallel.schedule pipedream sends whole micro-batches round-robin to a stage's "
                 "replicas and training.global_batch 256 / training.micro_batch 128 = 2 "
                 "micro-batches per step: each replica needs at least one: set devices to at "
                 "most 4 (2 replicas per stage) or use a smaller micro_batch"});
  // Split-concat's micro_batch >= replicas does not apply: a micro-batch is never split.
  spec.mutable_training()->set_micro_batch(2);
  spec.mutable_parallel()->set_devices(8);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  // Planners that choose replicas themselves are capped at M by the coordinator, not here.
  spec.mutable_training()->set_micro_batch(256);
  for (const char* planner : {"pipedream", "dapple"}) {
    spec.mutable_parallel()->set_planner(planner);
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << planner << ": " << ValidateJobSpec(spec);
  }
  spec.mutable_parallel()->set_planner("uniform");
  ExpectInvalid(ValidateJobSpec(spec),
                {"parallel.devices 8 with parallel.stages 2 gives 4 replicas per stage",
                 "training.micro_batch 256 = 1 micro-batch per step",
                 "set devices to at most 2 (1 replica per stage)"});
  // Counts of 1 take the singular: 1 stage, 1 micro-batch.
  spec.mutable_parallel()->set_stages(1);
  ExpectInvalid(ValidateJobSpec(spec),
                {"parallel.devices 8 with parallel.stages 1 gives 8 replicas per stage, but "
                 "parallel.schedule pipedream sends whole micro-batches round-robin to a stage's "
                 "replicas and training.global_batch 256 / training.micro_batch 256 = 1 "
                 "micro-batch per step: each replica needs at least one: set devices to at most 1 "
                 "(1 replica per stage) or use a smaller micro_batch"});
  spec.mutable_parallel()->set_stages(2);
  spec.mutable_parallel()->set_devices(2);
  spec.mutable_parallel()->set_planner("dp");
  spec.mutable_parallel()->set_stages(0);
  ExpectInvalid(ValidateJobSpec(spec),
                {"parallel.planner dp with parallel.schedule pipedream", "schedule pipesgd"});
  spec = Example();
  spec.mutable_parallel()->mutable_pipedream()->set_vertical_sync(true);
  ExpectInvalid(ValidateJobSpec(spec),
                {"parallel.pipedream applies only to parallel.schedule pipedream, got "
                 "parallel.schedule dapple"});
}

// planner pipedream-code (PipeDream's planner as its code plans): it chooses the depth and any
// replica count, which only schedule pipedream's 1F1B-RR runs as planned.
TEST(ValidateJobSpecTest, PipeDreamCodePlannerNeedsSchedulePipeDreamAndStagesAuto) {
  v1::JobSpec spec = Example();
  spec.mutable_parallel()->set_planner("pipedream-code");
  spec.mutable_parallel()->set_stages(0);
  spec.mutable_parallel()->set_devices(8);
  ExpectInvalid(ValidateJobSpec(spec),
                {"parallel.planner pipedream-code with parallel.schedule dapple: PipeDream's "
                 "planner gives stages any replica count, which only its 1F1B-RR runs (whole "
                 "micro-batches round-robin); the synchronous schedules split each micro-batch "
                 "evenly over a stage's replicas: set schedule: pipedream, or use planner "
                 "dapple"});
  spec.mutable_parallel()->set_schedule("pipedream");
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  spec.mutable_parallel()->set_stages(2);
  ExpectInvalid(ValidateJobSpec(spec),
                {"parallel.stages 2 with parallel.planner pipedream-code: PipeDream's planner "
                 "chooses the pipeline depth itself: set stages: auto (or planner pipedream for a "
                 "fixed depth)"});
}

// schedule pipesgd: one stage (stages 1, or planner dp with stages auto), devices >= 2, and a
// parallel.pipesgd section with defaults warmup_steps 2 and compression none.
TEST(ValidateJobSpecTest, PipeSgdRules) {
  v1::JobSpec spec = Example();
  v1::ParallelSpec& p = *spec.mutable_parallel();
  p.set_schedule("pipesgd");
  p.set_planner("dp");
  p.set_stages(0);
  p.set_devices(4);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);  // no section: defaults
  p.set_planner("dapple");
  ExpectInvalid(ValidateJobSpec(spec), {"parallel.stages",
                                        "got parallel.stages auto with "
                                        "parallel.planner dapple: set stages to 1 (or auto with "
                                        "planner dp)"});
  p.set_stages(1);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  p.set_devices(1);
  ExpectInvalid(ValidateJobSpec(spec), {"parallel.devices 1 with parallel.schedule pipesgd: "
                                        "pipesgd is data parallelism: devices must be >= 2"});
  p.set_devices(2);
  for (int bad : {-1, 1001}) {
    p.mutable_pipesgd()->set_warmup_steps(bad);
    ExpectInvalid(ValidateJobSpec(spec), {absl::StrCat("parallel.pipesgd.warmup_steps ", bad,
                                                       " must be between 0 and 1000")});
  }
  p.mutable_pipesgd()->set_warmup_steps(1000);
  for (const char* ok : {"none", "fp16", "int8", ""}) {
    p.mutable_pipesgd()->set_compression(ok);
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ok;
  }
  p.mutable_pipesgd()->set_compression("bf16");
  ExpectInvalid(ValidateJobSpec(spec), {"parallel.pipesgd.compression 'bf16' is unknown; known: "
                                        "none, fp16, int8"});
  p.set_schedule("gpipe");
  ExpectInvalid(ValidateJobSpec(spec), {"parallel.pipesgd applies only to parallel.schedule "
                                        "pipesgd, got parallel.schedule gpipe"});
}

TEST(ValidateJobSpecTest, DeviceType) {
  v1::JobSpec spec = Example();
  for (const char* ok : {"any", "cpu", "cuda", ""}) {
    spec.mutable_parallel()->set_device_type(ok);
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ok;
  }
  spec.mutable_parallel()->set_device_type("gpu");
  ExpectInvalid(ValidateJobSpec(spec),
                {"parallel.device_type 'gpu' is unknown; known: any, cpu, cuda"});
}

// training.precision: fp32 anywhere, bf16 only on CUDA devices (a CPU worker cannot run it,
// and device_type any may hand a stage to one).
TEST(ValidateJobSpecTest, Precision) {
  v1::JobSpec spec = Example();
  EXPECT_FALSE(UsesBf16(spec.training()));
  for (const char* device_type : {"any", "cpu", "cuda", ""}) {
    spec.mutable_parallel()->set_device_type(device_type);
    for (const char* ok : {"", "fp32"}) {
      spec.mutable_training()->set_precision(ok);
      EXPECT_TRUE(ValidateJobSpec(spec).ok()) << device_type << " " << ok;
    }
  }
  spec.mutable_training()->set_precision("bf16");
  EXPECT_TRUE(UsesBf16(spec.training()));
  spec.mutable_parallel()->set_device_type("cuda");
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  for (const char* device_type : {"any", "cpu", "emulated"}) {
    spec.mutable_parallel()->set_device_type(device_type);
    if (std::string(device_type) == "emulated") {
      spec.mutable_parallel()->mutable_emulation()->set_profile("/tmp/profile.pb");
      spec.mutable_parallel()->mutable_emulation()->set_scale(1);
    }
    ExpectInvalid(
        ValidateJobSpec(spec),
        {absl::StrCat("training.precision bf16 needs every stage on a CUDA GPU, but "
                      "parallel.device_type is ",
                      device_type, ": set parallel.device_type: cuda (or precision: fp32)")});
  }
  spec.mutable_parallel()->set_device_type("cuda");
  spec.mutable_parallel()->clear_emulation();
  spec.mutable_training()->set_precision("fp16");
  ExpectInvalid(ValidateJobSpec(spec), {"training.precision 'fp16' is unknown; known: fp32, bf16"});
}

// training.recompute: none, all or auto on every device type; not with a zero-bubble schedule.
TEST(ValidateJobSpecTest, Recompute) {
  v1::JobSpec spec = Example();
  EXPECT_EQ(Recompute(spec.training()), RecomputeMode::kNone);
  for (const char* device_type : {"any", "cpu", ""}) {
    spec.mutable_parallel()->set_device_type(device_type);
    for (const char* ok : {"", "none", "all", "auto"}) {
      spec.mutable_training()->set_recompute(ok);
      EXPECT_TRUE(ValidateJobSpec(spec).ok()) << device_type << " " << ok;
    }
  }
  spec.mutable_training()->set_recompute("all");
  EXPECT_EQ(Recompute(spec.training()), RecomputeMode::kAll);
  spec.mutable_training()->set_recompute("auto");
  EXPECT_EQ(Recompute(spec.training()), RecomputeMode::kAuto);
  spec.mutable_parallel()->set_device_type("cuda");
  for (const char* ok : {"none", "all", "auto"}) {
    spec.mutable_training()->set_recompute(ok);
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << "cuda " << ok << ": " << ValidateJobSpec(spec);
  }
  spec.mutable_parallel()->set_device_type("cpu");
  spec.mutable_training()->set_recompute("selective");
  ExpectInvalid(ValidateJobSpec(spec),
                {"training.recompute 'selective' is unknown; known: none, all, auto"});
  spec.mutable_training()->set_recompute("all");
  spec.mutable_parallel()->set_schedule("zb-h2");
  ExpectInvalid(ValidateJobSpec(spec),
                {"training.recompute all with parallel.schedule zb-h2 is not supported: a "
                 "recomputing stage replays one micro-batch's forward right before its backward, "
                 "and zb-h2 splits that backward around other micro-batches' work: set recompute: "
                 "none (or schedule: dapple)"});
}

TEST(ValidateJobSpecTest, Planner) {
  v1::JobSpec spec = Example();
  for (const char* planner : {"balanced", "uniform", "dapple", "pipedream"}) {
    spec.mutable_parallel()->set_planner(planner);
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << planner << ": " << ValidateJobSpec(spec);
  }
  spec.mutable_parallel()->set_planner("greedy");
  ExpectInvalid(ValidateJobSpec(spec),
                {"parallel.planner 'greedy' is unknown; available: balanced, uniform, manual, "
                 "dapple, pipedream, pipedream-code, dp"});
  spec.mutable_parallel()->set_planner("manual");
  ExpectInvalid(ValidateJobSpec(spec),
                {"parallel.planner manual needs parallel.stages as a list", "got 2"});
}

TEST(ValidateJobSpecTest, PlannersThatChooseTheDepthTakeMoreDevicesThanLayers) {
  v1::JobSpec spec = Example();  // 4 layers
  spec.mutable_parallel()->set_stages(0);
  spec.mutable_parallel()->set_devices(8);
  for (const char* planner : {"dapple", "pipedream"}) {
    spec.mutable_parallel()->set_planner(planner);
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << planner << ": " << ValidateJobSpec(spec);
  }
  // balanced and uniform make one stage per device with stages auto.
  spec.mutable_parallel()->set_planner("uniform");
  ExpectInvalid(ValidateJobSpec(spec), {"parallel.devices 8 with parallel.stages auto"});
  // An explicit count takes a multiple of it: D = devices / stages replicas of each stage.
  spec.mutable_parallel()->set_planner("dapple");
  spec.mutable_parallel()->set_stages(2);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  spec.mutable_parallel()->set_stages(3);
  ExpectInvalid(ValidateJobSpec(spec), {"parallel.devices 8 is not a multiple of parallel.stages 3",
                                        "set devices to 6 or 9"});
}

TEST(ValidateJobSpecTest, DataParallelIsOneStageOnEveryDevice) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(
      Edit(Edit(Edit(kExample, "planner: balanced", "planner: dp"), "stages: 2 ", "stages: auto"),
           "devices: 2", "devices: 1"),
      "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->parallel().planner(), "dp");
  v1::JobSpec s = *spec;
  s.mutable_parallel()->set_stages(1);
  EXPECT_TRUE(ValidateJobSpec(s).ok()) << ValidateJobSpec(s);
  s.mutable_parallel()->set_stages(0);
  s.mutable_parallel()->set_devices(4);  // P = 1, D = 4
  EXPECT_TRUE(ValidateJobSpec(s).ok()) << ValidateJobSpec(s);
  s.mutable_parallel()->set_stages(2);
  s.mutable_parallel()->set_devices(2);
  ExpectInvalid(ValidateJobSpec(s), {"parallel.stages 2 with parallel.planner dp", "one stage"});
}

TEST(ValidateJobSpecTest, StageListNeedsManualPlanner) {
  absl::StatusOr<v1::JobSpec> spec =
      ParseJobSpec(Edit(kExample, "stages: 2 ", "stages: [[0, 1], [2, 3]]"), "job.yaml");
  ExpectInvalid(spec.status(), {"job.yaml:20:12: ", "parallel.stages is an explicit list",
                                "parallel.planner manual", "got parallel.planner balanced"});
}

TEST(ValidateJobSpecTest, StageCount) {
  v1::JobSpec spec = Example();
  spec.mutable_parallel()->set_stages(-1);
  ExpectInvalid(ValidateJobSpec(spec), {"parallel.stages -1 must be >= 0"});
  spec.mutable_parallel()->set_stages(8);
  spec.mutable_parallel()->set_devices(8);
  ExpectInvalid(ValidateJobSpec(spec),
                {"parallel.stages 8 is more than the 4 layers of the model: each stage needs at "
                 "least one layer: set stages to at most 4"});
  spec.mutable_parallel()->set_stages(0);
  ExpectInvalid(ValidateJobSpec(spec), {"parallel.devices 8 with parallel.stages auto", "8 stages",
                                        "more than the 4 layers"});
  spec.mutable_parallel()->set_stages(4);
  spec.mutable_parallel()->set_devices(4);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  spec = Manual({{0, 0}});
  spec.mutable_model()->mutable_layers()->DeleteSubrange(0, 3);  // only linear 784 -> 10
  spec.mutable_model()->clear_input_shape();
  spec.mutable_model()->add_input_shape(784);
  ASSERT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  spec.mutable_parallel()->set_planner("balanced");
  spec.mutable_parallel()->clear_stage_ranges();
  spec.mutable_parallel()->set_stages(2);
  ExpectInvalid(ValidateJobSpec(spec), {"parallel.stages 2 is more than the 1 layer of the model"});
}

TEST(ValidateJobSpecTest, StageRanges) {
  EXPECT_TRUE(ValidateJobSpec(Manual({{0, 3}})).ok());
  EXPECT_TRUE(ValidateJobSpec(Manual({{0, 0}, {1, 2}, {3, 3}})).ok());
  ExpectInvalid(ValidateJobSpec(Manual({{0, 1}, {3, 2}})),
                {"parallel.stages[1] [3, 2] is empty", "first_layer 3 > last_layer 2"});
  ExpectInvalid(ValidateJobSpec(Manual({{0, 1}, {3, 3}})),
                {"layer 2 is missing", "parallel.stages[1] [3, 3]", "exactly once"});
  ExpectInvalid(ValidateJobSpec(Manual({{1, 3}})),
                {"layer 0 is missing", "parallel.stages[0] [1, 3]"});
  ExpectInvalid(ValidateJobSpec(Manual({{0, 2}, {2, 3}})),
                {"layer 2 is duplicated", "parallel.stages[0] [0, 2]", "parallel.stages[1] [2, 3]",
                 "exactly once"});
  ExpectInvalid(ValidateJobSpec(Manual({{0, 1}, {2, 3}, {0, 0}})),
                {"parallel.stages[2] [0, 0] comes after parallel.stages[1] [2, 3]", "layer order"});
  ExpectInvalid(ValidateJobSpec(Manual({{2, 3}, {0, 1}})), {"layer 0 is missing"});
  ExpectInvalid(ValidateJobSpec(Manual({{0, 1}, {2, 2}})),
                {"layer 3 is missing", "parallel.stages[1] [2, 2]", "last layer 3"});
  ExpectInvalid(ValidateJobSpec(Manual({{0, 1}, {2, 5}})),
                {"parallel.stages[1] [2, 5] goes past the last layer 3 of the model (4 layers): "
                 "end it at layer 3 at most"});
  ExpectInvalid(ValidateJobSpec(Manual({{-1, 1}, {2, 3}})),
                {"parallel.stages[0] [-1, 1]", "must be >= 0"});
  v1::JobSpec spec = Manual({{0, 1}, {2, 3}});
  spec.mutable_parallel()->set_stages(3);
  ExpectInvalid(ValidateJobSpec(spec),
                {"parallel.stages 3 does not match the 2 explicit stage ranges"});
  spec = Manual({{0, 3}});
  spec.mutable_parallel()->set_stages(2);
  ExpectInvalid(ValidateJobSpec(spec),
                {"parallel.stages 2 does not match the 1 explicit stage range"});
  spec = Manual({{0, 1}, {2, 3}});
  spec.mutable_parallel()->set_planner("balanced");
  ExpectInvalid(ValidateJobSpec(spec), {"explicit list", "parallel.planner manual"});
}

TEST(ValidateJobSpecTest, Devices) {
  v1::JobSpec spec = Example();
  spec.mutable_parallel()->set_devices(0);
  ExpectInvalid(ValidateJobSpec(spec), {"parallel.devices 0 must be >= 1"});
  spec.mutable_parallel()->set_devices(4);  // 2 replicas of each of the 2 stages
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  spec.mutable_parallel()->set_devices(1);
  ExpectInvalid(ValidateJobSpec(spec),
                {"parallel.devices 1 is fewer than parallel.stages 2", "set devices to 2"});
  spec.mutable_parallel()->set_devices(3);
  ExpectInvalid(ValidateJobSpec(spec),
                {"parallel.devices 3 is not a multiple of parallel.stages 2",
                 "each stage gets devices / stages replicas", "set devices to 2 or 4"});
  spec = Manual({{0, 1}, {2, 3}});
  spec.mutable_parallel()->set_devices(6);  // 3 replicas of each stage
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  spec.mutable_parallel()->set_devices(5);
  ExpectInvalid(
      ValidateJobSpec(spec),
      {"parallel.devices 5 is not a multiple of the 2 stages of parallel.stages: each stage "
       "gets devices / stages replicas: set devices to 4 or 6"});
}

}  // namespace
}  // namespace dapple
