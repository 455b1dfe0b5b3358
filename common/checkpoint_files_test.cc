#include "common/checkpoint_files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class CheckpointFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ckpt-files-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

v1::JobSpec Spec() {
  v1::JobSpec s;
  s.mutable_model()->add_input_shape(1);
  s.mutable_model()->add_input_shape(28);
  s.mutable_model()->add_input_shape(28);
  s.mutable_model()->add_layers()->set_type("flatten");
  v1::LayerSpec* l = s.mutable_model()->add_layers();
  l->set_type("linear");
  l->mutable_linear()->set_out(64);
  s.mutable_model()->set_loss("softmax_cross_entropy");
  s.mutable_training()->set_global_batch(128);
  s.mutable_training()->set_micro_batch(32);
  s.mutable_training()->set_seed(3);
  s.mutable_training()->mutable_optimizer()->set_type("sgd");
  s.mutable_training()->mutable_optimizer()->set_lr(0.05);
  s.mutable_training()->mutable_optimizer()->set_momentum(0.9);
  return s;
}

TEST(CheckpointNamesTest, Names) {
  EXPECT_EQ(CheckpointDirName(120), "step-120");
  EXPECT_EQ(PartialCheckpointDirName(120), "step-120.partial");
  EXPECT_EQ(ShardFileName(1, 0), "stage1.replica0.shard");
}

TEST_F(CheckpointFilesTest, AtomicWriteReplacesAndLeavesNoTemp) {
  const std::string path = dir_ + "/f";
  ASSERT_TRUE(WriteFileAtomically(path, "first").ok());
  ASSERT_TRUE(WriteFileAtomically(path, std::string("se\0cond", 7)).ok());
  absl::StatusOr<std::string> got = ReadWholeFile(path);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, std::string("se\0cond", 7));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST_F(CheckpointFilesTest, AtomicWriteIntoMissingFolderNamesIt) {
  absl::Status s = WriteFileAtomically(dir_ + "/no/such/f", "x");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr(dir_ + "/no/such/f.tmp"));
}

TEST_F(CheckpointFilesTest, MissingFileIsNotFound) {
  absl::StatusOr<std::string> got = ReadWholeFile(dir_ + "/none");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(got.status().message(), HasSubstr(dir_ + "/none"));
}

TEST_F(CheckpointFilesTest, ManifestRoundTrip) {
  const std::string ckpt = dir_ + "/step-4";
  fs::create_directories(ckpt);
  v1::CheckpointManifest m;
  m.set_format_version(kCheckpointFormatVersion);
  m.set_step(4);
  m.set_job_id("job-1");
  ASSERT_TRUE(WriteFileAtomically(ckpt + "/manifest.pb", m.SerializeAsString()).ok());
  absl::StatusOr<v1::CheckpointManifest> got = ReadCheckpointManifest(ckpt + "/");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->step(), 4);
  EXPECT_EQ(got->job_id(), "job-1");
}

TEST_F(CheckpointFilesTest, PartialOrMissingManifestIsRefused) {
  const std::string partial = dir_ + "/step-4.partial";
  fs::create_directories(partial);
  absl::StatusOr<v1::CheckpointManifest> got = ReadCheckpointManifest(partial);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(got.status().message(), HasSubstr("not a published checkpoint"));
  EXPECT_THAT(got.status().message(), HasSubstr(".partial"));

  const std::string empty = dir_ + "/step-8";
  fs::create_directories(empty);
  got = ReadCheckpointManifest(empty);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(got.status().message(), HasSubstr("not a published checkpoint: no manifest.pb"));

  got = ReadCheckpointManifest(dir_ + "/nowhere");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(got.status().message(), HasSubstr("No such file"));
}

TEST_F(CheckpointFilesTest, CorruptManifestIsDataLossNamingTheFile) {
  const std::string ckpt = dir_ + "/step-4";
  fs::create_directories(ckpt);
  ASSERT_TRUE(WriteFileAtomically(ckpt + "/manifest.pb", "\xff\xff\xff garbage").ok());
  absl::StatusOr<v1::CheckpointManifest> got = ReadCheckpointManifest(ckpt);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(got.status().message(), HasSubstr(ckpt + "/manifest.pb"));
}

TEST(CheckResumableTest, SameSpecAndLayoutChangesAreFine) {
  v1::JobSpec a = Spec();
  v1::JobSpec b = Spec();
  b.mutable_training()->set_micro_batch(64);
  b.mutable_training()->set_max_steps(99);
  b.mutable_parallel()->set_stages(3);
  EXPECT_TRUE(CheckResumable(a, b).ok());
}

TEST(CheckResumableTest, NamesTheFirstDifference) {
  v1::JobSpec a = Spec();
  v1::JobSpec b = Spec();
  b.mutable_model()->mutable_layers(1)->mutable_linear()->set_out(32);
  EXPECT_EQ(CheckResumable(a, b).message(), "model.layers[1].out differs: checkpoint 64, job 32");
  b = Spec();
  b.mutable_model()->mutable_layers(1)->set_type("relu");
  EXPECT_EQ(CheckSameModel(a.model(), b.model()).message(),
            "model.layers[1].type differs: checkpoint linear, job relu");
  b = Spec();
  b.mutable_model()->add_layers()->set_type("relu");
  EXPECT_EQ(CheckSameModel(a.model(), b.model()).message(),
            "model.layers (count) differs: checkpoint 2, job 3");
  b = Spec();
  b.mutable_training()->set_seed(4);
  EXPECT_EQ(CheckResumable(a, b).message(), "training.seed differs: checkpoint 3, job 4");
  EXPECT_EQ(CheckResumable(a, b).code(), absl::StatusCode::kInvalidArgument);
  b = Spec();
  b.mutable_training()->set_global_batch(256);
  EXPECT_EQ(CheckResumable(a, b).message(),
            "training.global_batch differs: checkpoint 128, job 256");
  b = Spec();
  b.mutable_training()->mutable_optimizer()->set_lr(0.1);
  EXPECT_EQ(CheckResumable(a, b).message(),
            "training.optimizer.lr differs: checkpoint 0.05, job 0.1");
  b = Spec();
  b.mutable_training()->mutable_optimizer()->set_lr(0.05 + 1e-12);
  EXPECT_THAT(CheckResumable(a, b).message(),
              HasSubstr("training.optimizer.lr differs: checkpoint 0.05000000000"));
  b = Spec();
  b.mutable_training()->mutable_optimizer()->set_type("adamw");
  EXPECT_EQ(CheckResumable(a, b).message(),
            "training.optimizer.type differs: checkpoint sgd, job adamw");
}

}  // namespace
}  // namespace dapple
