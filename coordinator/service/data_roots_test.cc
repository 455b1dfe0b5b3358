#include "coordinator/service/data_roots.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

// <tmp>/data_roots_test-<test>/{data/, secret/token}: "data" is the root, "secret" is not.
class DataRootsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Lexically normal (TempDir() ends with '/'), as the messages show paths.
    dir_ = fs::path(absl::StrCat(::testing::TempDir(), "/data_roots_test-",
                                 ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .lexically_normal()
               .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_ + "/data/fashion");
    fs::create_directories(dir_ + "/secret");
    std::ofstream(dir_ + "/data/kjv.txt") << "In the beginning";
    std::ofstream(dir_ + "/secret/admin.token") << "dpl_secret";
    auto roots = DataRoots::Create({dir_ + "/data/"});
    ASSERT_TRUE(roots.ok()) << roots.status();
    roots_ = *std::move(roots);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string dir_;
  DataRoots roots_;
};

TEST_F(DataRootsTest, FilesAndFoldersInsideARootMayBeRead) {
  EXPECT_TRUE(roots_.Check("data.path", dir_ + "/data/kjv.txt").ok());
  EXPECT_TRUE(roots_.Check("data.path", dir_ + "/data/fashion").ok());
  EXPECT_TRUE(roots_.Check("data.path", dir_ + "/data").ok());
  // Missing inside a root: allowed here; the reader says it does not exist.
  EXPECT_TRUE(roots_.Check("data.path", dir_ + "/data/missing.txt").ok());
  EXPECT_TRUE(roots_.Check("data.path", dir_ + "/data/./fashion/../kjv.txt").ok());
}

TEST_F(DataRootsTest, PathsOutsideAreRefusedAlikeWhetherOrNotTheyExist) {
  absl::Status existing = roots_.Check("data.path", dir_ + "/secret/admin.token");
  absl::Status missing = roots_.Check("data.path", dir_ + "/secret/missing");
  EXPECT_EQ(existing.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(existing.message(),
              HasSubstr(absl::StrCat("data.path ", dir_,
                                     "/secret/admin.token is outside the coordinator's data "
                                     "roots (",
                                     dir_, "/data): a job may read files under them only")));
  // The message names only the path and the roots: the same text for an existing file as for
  // a missing one, once the path is replaced.
  EXPECT_EQ(
      std::string(existing.message()).replace(existing.message().find("admin.token"), 11, "X"),
      std::string(missing.message()).replace(missing.message().find("missing"), 7, "X"));
  EXPECT_FALSE(roots_.Check("data.path", "/etc/passwd").ok());
  // ".." cannot climb out, and a root is a whole path component ("data2" is not in "data").
  EXPECT_FALSE(roots_.Check("data.path", dir_ + "/data/../secret/admin.token").ok());
  EXPECT_FALSE(roots_.Check("data.path", dir_ + "/data2/x").ok());
  EXPECT_FALSE(roots_.Check("data.path", dir_).ok());
}

TEST_F(DataRootsTest, ALinkInsideARootCannotLeadOut) {
  fs::create_symlink(dir_ + "/secret/admin.token", dir_ + "/data/link.txt");
  fs::create_directory_symlink(dir_ + "/secret", dir_ + "/data/linked");
  absl::Status s = roots_.Check("data.path", dir_ + "/data/link.txt");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  // It says why a path inside a root is refused (a new user read "is outside" of a path inside
  // one), without naming where the link leads.
  EXPECT_EQ(s.message(),
            absl::StrCat("data.path ", dir_,
                         "/data/link.txt is inside the coordinator's data roots, but it is (or "
                         "lies under) a symbolic link to a file or folder outside them (",
                         dir_,
                         "/data): a job may read files under them only; copy the file there, or "
                         "ask an admin to add its real folder with --data-root"));
  EXPECT_THAT(s.message(), Not(HasSubstr("secret")));
  EXPECT_FALSE(roots_.Check("data.path", dir_ + "/data/linked/admin.token").ok());
  // A link that stays inside is fine.
  fs::create_symlink(dir_ + "/data/kjv.txt", dir_ + "/data/bible.txt");
  EXPECT_TRUE(roots_.Check("data.path", dir_ + "/data/bible.txt").ok());
}

TEST_F(DataRootsTest, ARootReachedThroughALinkAcceptsItsRealPathToo) {
  fs::create_directory_symlink(dir_ + "/data", dir_ + "/datasets");
  auto roots = DataRoots::Create({dir_ + "/datasets"});
  ASSERT_TRUE(roots.ok());
  EXPECT_TRUE(roots->Check("data.path", dir_ + "/datasets/kjv.txt").ok());
  EXPECT_TRUE(roots->Check("data.path", dir_ + "/data/kjv.txt").ok());
  EXPECT_FALSE(roots->Check("data.path", dir_ + "/secret/admin.token").ok());
}

TEST_F(DataRootsTest, RelativePathsAreRefused) {
  absl::Status s = roots_.Check("parallel.emulation.profile", "profiles/x.txt");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("parallel.emulation.profile 'profiles/x.txt' must be an "
                                     "absolute path inside the coordinator's data roots"));
}

TEST(DataRootsCreateTest, RootsMustBeAbsoluteFoldersOtherThanTheFileSystemRoot) {
  EXPECT_THAT(DataRoots::Create({"datasets"}).status().message(),
              HasSubstr("--data-root 'datasets' must be an absolute path"));
  EXPECT_THAT(DataRoots::Create({"/"}).status().message(),
              HasSubstr("--data-root / would let every job read every file"));
  EXPECT_THAT(DataRoots::Create({"/a/.."}).status().message(),
              HasSubstr("--data-root / would let"));
  EXPECT_TRUE(DataRoots::Create({"/no/such/folder"}).ok());
  EXPECT_TRUE(DataRoots::Create(DefaultDataRoots()).ok());
}

TEST(DataRootsCreateTest, NoRootsRefuseEveryPath) {
  auto roots = DataRoots::Create({});
  ASSERT_TRUE(roots.ok());
  EXPECT_THAT(roots->Check("data.path", "/usr/share/datasets/fashion-mnist").message(),
              HasSubstr("outside the coordinator's data roots (none configured)"));
}

TEST_F(DataRootsTest, TheCoordinatorsOwnFilesMustBeOutsideTheRoots) {
  EXPECT_TRUE(CheckOwnFilesOutside(roots_, {{"--db", dir_ + "/secret/dapple.db"},
                                            {"--checkpoint-dir", dir_ + "/checkpoints"}})
                  .ok());
  absl::Status s = CheckOwnFilesOutside(
      roots_, {{"--db", dir_ + "/secret/dapple.db"}, {"--admin-token-file", dir_ + "/data/a.tok"}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("--data-root ", dir_,
                                                  "/data contains "
                                                  "--admin-token-file ",
                                                  dir_, "/data/a.tok: jobs could read")));
  // A relative path is taken from the working folder.
  const fs::path cwd = fs::current_path();
  fs::current_path(dir_ + "/data");
  s = CheckOwnFilesOutside(roots_, {{"--db", "dapple.db"}});
  fs::current_path(cwd);
  EXPECT_THAT(s.message(), HasSubstr("contains --db"));
}

TEST_F(DataRootsTest, AJobsFilesAreCheckedAtTheirFieldsLocation) {
  absl::StatusOr<v1::JobSpec> spec =
      ParseJobSpec(absl::StrCat(R"(name: leak
model:
  layers:
    - {type: embedding, vocab: 256, dim: 8}
    - {type: lm_head, vocab: 256}
data: {dataset: text, path: )",
                                dir_, R"(/secret/admin.token, seq_len: 4}
training:
  global_batch: 4
  micro_batch: 2
  epochs: 1
  optimizer: {type: sgd, lr: 0.1}
parallel:
  stages: 1
)"),
                   "leak.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  absl::Status s = CheckJobFiles(*spec, roots_);
  EXPECT_THAT(s.message(), HasSubstr("data.path "));
  EXPECT_THAT(s.message(), HasSubstr("is outside the coordinator's data roots"));
  spec->mutable_data()->set_path(dir_ + "/data/kjv.txt");
  EXPECT_TRUE(CheckJobFiles(*spec, roots_).ok());
  spec->mutable_parallel()->set_device_type("emulated");
  spec->mutable_parallel()->mutable_emulation()->set_profile(dir_ + "/secret/admin.token");
  EXPECT_THAT(CheckJobFiles(*spec, roots_).message(), HasSubstr("parallel.emulation.profile "));
}

}  // namespace
}  // namespace dapple::coordinator
