#include "worker/checkpoint/stage_checkpointer.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "common/checkpoint_files.h"
#include "common/schedule/ranks.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/checkpoint/checkpoint_loader.h"
#include "worker/runtime/chunked_stage_backend.h"
#include "worker/runtime/testing/parity_testing.h"

namespace dapple::worker {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class StageCheckpointerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ckpt-stage-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    parity::SpecOptions o;
    o.hidden1 = 8;
    o.hidden2 = 4;
    v1::JobSpec spec = parity::ParitySpec(o);
    spec.mutable_training()->set_checkpoint_every_steps(3);
    const v1::ParallelPlanSummary plan = parity::UniformPlan(spec.model().layers_size(), 2);
    assignment_ = parity::Assignment(spec, plan, 1, v1::RankProgram());
    assignment_.set_job_id("job-4");
    assignment_.set_checkpoint_dir(dir_ + "/job-4");
    auto backend =
        MakeCpuStageBackend(spec, plan.stages(1).first_layer(), plan.stages(1).last_layer());
    ASSERT_TRUE(backend.ok());
    backend_ = std::move(*backend);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Publishes step `step` by hand (the coordinator's part): a manifest of one shard, this
  // stage's, and the folder renamed. Returns the manifest's path.
  std::string Publish(int64_t step) {
    const std::string partial = dir_ + "/job-4/step-" + std::to_string(step) + ".partial";
    v1::CheckpointManifest m;
    m.set_format_version(kCheckpointFormatVersion);
    m.set_job_id("job-4");
    m.set_step(step);
    *m.mutable_spec() = assignment_.spec();
    v1::CheckpointShardEntry* e = m.add_shards();
    e->set_stage(1);
    e->set_first_layer(assignment_.plan().stages(1).first_layer());
    e->set_last_layer(assignment_.plan().stages(1).last_layer());
    *e->mutable_chunks() = assignment_.plan().stages(1).chunks();  // as the coordinator does
    e->set_file("stage1.replica0.shard");
    e->set_bytes(fs::file_size(partial + "/stage1.replica0.shard"));
    EXPECT_TRUE(WriteFileAtomically(partial + "/manifest.pb", m.SerializeAsString()).ok());
    const std::string final_dir = dir_ + "/job-4/step-" + std::to_string(step);
    fs::rename(partial, final_dir);
    return final_dir + "/manifest.pb";
  }

  // Every tensor of `a` and `b`, bitwise.
  static void ExpectBitwiseEqual(const StageState& a, const StageState& b) {
    auto same = [](const std::vector<NamedTensor>& x, const std::vector<NamedTensor>& y) {
      ASSERT_EQ(x.size(), y.size());
      for (size_t i = 0; i < x.size(); ++i) {
        EXPECT_EQ(x[i].name, y[i].name);
        EXPECT_EQ(x[i].shape, y[i].shape);
        ASSERT_EQ(x[i].data.size(), y[i].data.size());
        EXPECT_EQ(std::memcmp(x[i].data.data(), y[i].data.data(), x[i].data.size() * 4), 0)
            << x[i].name;
      }
    };
    same(a.params, b.params);
    same(a.optimizer_state, b.optimizer_state);
    same(a.buffers, b.buffers);
    EXPECT_EQ(a.optimizer_steps, b.optimizer_steps);
  }

  // The backend's state with every value of every parameter changed.
  void ChangeWeights() {
    absl::StatusOr<StageState> s = backend_->ExportState();
    ASSERT_TRUE(s.ok());
    for (NamedTensor& t : s->params) {
      for (float& v : t.data) v += 1.0f;
    }
    ASSERT_TRUE(backend_->ImportState(*s).ok());
  }

  std::string dir_;
  v1::StageAssignment assignment_;
  std::unique_ptr<StageBackend> backend_;
  std::atomic<int64_t> requested_{0};
};

TEST_F(StageCheckpointerTest, PeriodicAndOnDemand) {
  StageCheckpointer c(assignment_, &requested_);
  EXPECT_FALSE(c.AfterStep(1, *backend_).has_value());
  EXPECT_FALSE(c.AfterStep(2, *backend_).has_value());
  std::optional<CheckpointReport> r = c.AfterStep(3, *backend_);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->step, 3);
  EXPECT_EQ(r->file, "stage1.replica0.shard");
  EXPECT_EQ(r->error, "");
  EXPECT_EQ(static_cast<int64_t>(fs::file_size(dir_ + "/job-4/step-3.partial/" + r->file)),
            r->bytes);

  requested_ = 5;
  EXPECT_FALSE(c.AfterStep(4, *backend_).has_value());
  r = c.AfterStep(5, *backend_);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->step, 5);
  EXPECT_TRUE(fs::exists(dir_ + "/job-4/step-5.partial/stage1.replica0.shard"));
}

// An interleaved rank (v layer ranges, PlanStageSummary.chunks: P = 2, v = 2 over the six
// layers, rank 1 holding virtual stages 1 and 3) saves one shard of all its chunks and resumes
// every chunk's parameters and optimizer state bitwise; a plain stage of one of those chunks'
// layers loads them from the same checkpoint (any layout).
TEST_F(StageCheckpointerTest, AnInterleavedRankSavesAndResumesAllItsChunks) {
  const v1::JobSpec& spec = assignment_.spec();
  ASSERT_EQ(spec.model().layers_size(), 6);
  v1::ParallelPlanSummary* plan = assignment_.mutable_plan();
  plan->set_schedule("interleaved");
  const int bounds[2][2][2] = {{{0, 0}, {3, 3}}, {{1, 2}, {4, 5}}};  // [rank][chunk]
  for (int rank = 0; rank < 2; ++rank) {
    v1::PlanStageSummary* stage = plan->mutable_stages(rank);
    stage->clear_chunks();
    for (const auto& b : bounds[rank]) {
      v1::StageRange* r = stage->add_chunks();
      r->set_first_layer(b[0]);
      r->set_last_layer(b[1]);
    }
    stage->set_first_layer(bounds[rank][0][0]);
    stage->set_last_layer(bounds[rank][0][1]);
  }
  auto make = [&](int first, int last) { return MakeCpuStageBackend(spec, first, last); };
  absl::StatusOr<std::unique_ptr<StageBackend>> rank =
      MakeChunkedStageBackend(schedule::StageChunks(*plan, 1), make);
  ASSERT_TRUE(rank.ok()) << rank.status();
  // Momentum in the optimizer state: one update with a gradient of ones.
  const std::vector<float> ones(static_cast<size_t>((*rank)->GradientFloats()), 1.0f);
  ASSERT_TRUE((*rank)->WriteGradients(ones.data()).ok());
  ASSERT_TRUE((*rank)->OptimizerStep().ok());

  StageCheckpointer c(assignment_, &requested_);
  requested_ = 2;
  std::optional<CheckpointReport> r = c.AfterStep(2, **rank);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->error, "");
  EXPECT_EQ(r->file, "stage1.replica0.shard");
  absl::StatusOr<StageState> saved = (*rank)->ExportState();
  ASSERT_TRUE(saved.ok()) << saved.status();
  ASSERT_FALSE(saved->optimizer_state.empty());
  const std::string manifest = Publish(2);

  // Weights and momentum changed by another update, then the checkpoint restores them.
  ASSERT_TRUE((*rank)->WriteGradients(ones.data()).ok());
  ASSERT_TRUE((*rank)->OptimizerStep().ok());
  assignment_.set_resume_manifest(manifest);
  assignment_.set_first_step(2);
  StageCheckpointer resumed(assignment_, &requested_);
  ASSERT_TRUE(resumed.Resume(**rank).ok());
  absl::StatusOr<StageState> back = (*rank)->ExportState();
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectBitwiseEqual(*saved, *back);

  // A plain stage of layers [4, 5] (chunk 1 of rank 1) loads them from the interleaved shard.
  absl::StatusOr<LoadedCheckpoint> plain = LoadCheckpointForLayers(manifest, spec, 4, 5);
  ASSERT_TRUE(plain.ok()) << plain.status();
  absl::StatusOr<std::unique_ptr<StageBackend>> chunk1 = make(4, 5);
  ASSERT_TRUE(chunk1.ok());
  ASSERT_TRUE((*chunk1)->ImportState(plain->state).ok());
  absl::StatusOr<StageState> chunk1_state = (*chunk1)->ExportState();
  ASSERT_TRUE(chunk1_state.ok());
  StageState want;
  want.optimizer_steps = saved->optimizer_steps;
  auto layers_4_5 = [](const std::vector<NamedTensor>& from, std::vector<NamedTensor>* to) {
    for (const NamedTensor& t : from) {
      if (LayerOfTensor(t.name) >= 4) to->push_back(t);
    }
  };
  layers_4_5(saved->params, &want.params);
  layers_4_5(saved->optimizer_state, &want.optimizer_state);
  layers_4_5(saved->buffers, &want.buffers);
  ExpectBitwiseEqual(want, *chunk1_state);

  // Layers no shard holds (rank 0 wrote none here) are named.
  const absl::StatusOr<LoadedCheckpoint> missing = LoadCheckpointForLayers(manifest, spec, 3, 4);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("no shard holding layer 3"));
}

TEST_F(StageCheckpointerTest, AMissedRequestIsReportedOnce) {
  StageCheckpointer c(assignment_, &requested_);
  requested_ = 7;  // learnt only after step 8
  std::optional<CheckpointReport> r = c.AfterStep(8, *backend_);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->step, 7);
  EXPECT_EQ(r->file, "");
  EXPECT_EQ(r->error, "stage 1 is already past step 7 (at step 8)");
  EXPECT_FALSE(c.AfterStep(10, *backend_).has_value());
}

TEST_F(StageCheckpointerTest, ASavedRequestIsNotReportedMissedWhileAcksStillCarryIt) {
  StageCheckpointer c(assignment_, &requested_);
  requested_ = 4;
  std::optional<CheckpointReport> r = c.AfterStep(4, *backend_);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->step, 4);
  EXPECT_EQ(r->error, "");
  EXPECT_EQ(r->file, "stage1.replica0.shard");
  // The coordinator has not published step 4 yet, so the next acks still ask for it.
  EXPECT_FALSE(c.AfterStep(5, *backend_).has_value());
  EXPECT_FALSE(c.AfterStep(7, *backend_).has_value());
}

TEST_F(StageCheckpointerTest, AWriteErrorIsReportedNotFatal) {
  assignment_.set_checkpoint_dir("/proc/no-checkpoints-here");
  StageCheckpointer c(assignment_, &requested_);
  std::optional<CheckpointReport> r = c.AfterStep(3, *backend_);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->file, "");
  EXPECT_THAT(r->error, HasSubstr("stage 1: cannot create checkpoint folder"));
}

TEST_F(StageCheckpointerTest, AsyncSavesGoToTheSinkAndHoldTheSnapshotNotTheLiveWeights) {
  absl::Mutex mu;
  std::vector<CheckpointReport> sunk;
  auto sink = [&](CheckpointReport r) {
    absl::MutexLock l(&mu);
    sunk.push_back(std::move(r));
  };
  ShardMemoryCache cache;
  absl::StatusOr<StageState> before = backend_->ExportState();
  ASSERT_TRUE(before.ok());
  {
    StageCheckpointer c(assignment_, &requested_, sink, &cache);
    EXPECT_FALSE(c.AfterStep(2, *backend_).has_value());
    EXPECT_EQ(c.last_save().step, 0);
    // Saved in the background: nothing to send now.
    EXPECT_FALSE(c.AfterStep(3, *backend_).has_value());
    EXPECT_EQ(c.last_save().step, 3);
    EXPECT_GE(c.last_save().snapshot_seconds, 0);
    EXPECT_EQ(c.last_save().write_seconds, 0);
    // The next step changes the weights while the writer may still be encoding the snapshot.
    ChangeWeights();
    c.Finish();
    absl::MutexLock l(&mu);
    ASSERT_EQ(sunk.size(), 1u);
    EXPECT_EQ(sunk[0].step, 3);
    EXPECT_EQ(sunk[0].error, "");
    EXPECT_EQ(sunk[0].file, "stage1.replica0.shard");
  }
  // The file holds the weights of the snapshot, not the changed ones.
  const std::string manifest = Publish(3);
  absl::StatusOr<LoadedCheckpoint> loaded = LoadCheckpointForLayers(
      manifest, assignment_.spec(), assignment_.plan().stages(1).first_layer(),
      assignment_.plan().stages(1).last_layer());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectBitwiseEqual(loaded->state, *before);
}

TEST_F(StageCheckpointerTest, ResumeFromMemoryEqualsResumeFromDiskBitwise) {
  ShardMemoryCache cache;
  StageCheckpointer writer(
      assignment_, &requested_, [](CheckpointReport) {}, &cache);
  writer.AfterStep(3, *backend_);
  writer.Finish();
  const std::string manifest = Publish(3);
  const int first = assignment_.plan().stages(1).first_layer();
  const int last = assignment_.plan().stages(1).last_layer();
  absl::StatusOr<LoadedCheckpoint> memory =
      LoadCheckpointForLayers(manifest, assignment_.spec(), first, last, &cache);
  absl::StatusOr<LoadedCheckpoint> disk =
      LoadCheckpointForLayers(manifest, assignment_.spec(), first, last);
  ASSERT_TRUE(memory.ok()) << memory.status();
  ASSERT_TRUE(disk.ok()) << disk.status();
  EXPECT_EQ(memory->shards_from_memory, 1);
  EXPECT_EQ(memory->shards_from_disk, 0);
  EXPECT_EQ(disk->shards_from_memory, 0);
  EXPECT_EQ(disk->shards_from_disk, 1);
  ExpectBitwiseEqual(memory->state, disk->state);

  // Resume through the checkpointer (the daemon's path) reports its source.
  v1::StageAssignment resumed = assignment_;
  resumed.set_job_id("job-5");
  resumed.set_resume_manifest(manifest);
  resumed.set_first_step(3);
  StageCheckpointer from_memory(resumed, nullptr, nullptr, &cache);
  ASSERT_TRUE(from_memory.Resume(*backend_).ok());
  EXPECT_EQ(from_memory.resume_sources().shards_from_memory, 1);
  // Another worker (another cache: empty) reads the file.
  ShardMemoryCache other;
  StageCheckpointer from_disk(resumed, nullptr, nullptr, &other);
  ASSERT_TRUE(from_disk.Resume(*backend_).ok());
  EXPECT_EQ(from_disk.resume_sources().shards_from_disk, 1);

  // A newer checkpoint replaced the copy of step 3 (one per job): step 3 comes from disk.
  StageCheckpointer again(
      assignment_, &requested_, [](CheckpointReport) {}, &cache);
  again.AfterStep(6, *backend_);
  again.Finish();
  absl::StatusOr<LoadedCheckpoint> after =
      LoadCheckpointForLayers(manifest, assignment_.spec(), first, last, &cache);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->shards_from_disk, 1);
}

TEST_F(StageCheckpointerTest, ResumeChecksTheStep) {
  StageCheckpointer writer(assignment_, &requested_);
  ASSERT_TRUE(writer.AfterStep(3, *backend_).has_value());
  // Publish by hand (the coordinator's part) with a manifest of one shard holding this stage.
  v1::CheckpointManifest m;
  m.set_format_version(kCheckpointFormatVersion);
  m.set_step(3);
  *m.mutable_spec() = assignment_.spec();
  v1::CheckpointShardEntry* e = m.add_shards();
  e->set_stage(1);
  e->set_first_layer(assignment_.plan().stages(1).first_layer());
  e->set_last_layer(assignment_.plan().stages(1).last_layer());
  e->set_file("stage1.replica0.shard");
  e->set_bytes(fs::file_size(dir_ + "/job-4/step-3.partial/stage1.replica0.shard"));
  ASSERT_TRUE(
      WriteFileAtomically(dir_ + "/job-4/step-3.partial/manifest.pb", m.SerializeAsString()).ok());
  fs::rename(dir_ + "/job-4/step-3.partial", dir_ + "/job-4/step-3");

  v1::StageAssignment resumed = assignment_;
  resumed.set_resume_manifest(dir_ + "/job-4/step-3/manifest.pb");
  resumed.set_first_step(3);
  EXPECT_TRUE(StageCheckpointer(resumed, nullptr).Resume(*backend_).ok());
  resumed.set_first_step(4);
  absl::Status s = StageCheckpointer(resumed, nullptr).Resume(*backend_);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("resume from '" + dir_ +
                                     "/job-4/step-3/manifest.pb': the "
                                     "checkpoint was taken after step 3"));
}

}  // namespace
}  // namespace dapple::worker
