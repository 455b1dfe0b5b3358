#include "dapplectl/spec_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::ctl {
namespace {

// In a folder of this process's own: ctest runs test cases as parallel processes, and files of
// one name written by two of them race.
std::string Write(const std::string& name, const std::string& text) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/spec_file_test.", getpid());
  mkdir(dir.c_str(), 0755);
  const std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(CheckSpecTextTest, AcceptsUtf8Text) {
  EXPECT_TRUE(CheckSpecText("job.yaml", "name: caf\xC3\xA9\n\tx: 1\r\n").ok());
  EXPECT_TRUE(CheckSpecText("job.yaml", std::string(kMaxSpecBytes, 'a')).ok());
}

TEST(CheckSpecTextTest, NamesTheFileLineAndColumn) {
  absl::Status s = CheckSpecText("job.yaml", "name: x\nmodel: y\n# caf\xE9\n");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "job.yaml: not UTF-8 text (invalid byte 0xE9 at line 3, column 6)");
  s = CheckSpecText("caf\xE9.yaml", std::string("\0\x01", 2));
  EXPECT_EQ(s.message(), "caf\\xE9.yaml: not UTF-8 text (control byte 0x00 at line 1, column 1)");
}

TEST(CheckSpecTextTest, CapsTheSizeNamingExactByteCounts) {
  // The user's file: 1 MiB + 9 bytes, which a rounded size would show as "1.0 MiB".
  absl::Status s = CheckSpecText("big.yaml", std::string(kMaxSpecBytes + 9, 'a'));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "big.yaml is 1048585 bytes; a job spec may be at most 1048576 bytes (1 MiB)");
  s = CheckSpecText("big.yaml", std::string(kMaxSpecBytes + 1, 'a'));
  EXPECT_EQ(s.message(),
            "big.yaml is 1048577 bytes; a job spec may be at most 1048576 bytes (1 MiB)");
  EXPECT_TRUE(CheckSpecText("max.yaml", std::string(kMaxSpecBytes, 'a')).ok());
}

TEST(ReadSpecFileTest, ReadsAValidFile) {
  const std::string path = Write("spec_ok.yaml", "name: x\n");
  absl::StatusOr<std::string> text = ReadSpecFile(path);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "name: x\n");
}

TEST(ReadSpecFileTest, RefusesALargeFileFromItsSize) {
  const std::string path = ::testing::TempDir() + "/spec_huge.yaml";
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 70 << 20), 0);  // sparse: nothing is written
  close(fd);
  absl::StatusOr<std::string> text = ReadSpecFile(path);
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(text.status().message(),
            path + " is 73400320 bytes; a job spec may be at most 1048576 bytes (1 MiB)");
  unlink(path.c_str());
}

TEST(ReadSpecFileTest, RefusesAPipeThatCarriesTooMuch) {
  const std::string path = ::testing::TempDir() + "/spec_fifo";
  unlink(path.c_str());
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  const std::string chunk(1 << 16, 'a');  // made before fork: the child only makes syscalls
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int fd = open(path.c_str(), O_WRONLY);
    for (int i = 0; i < 40; ++i) {  // 2.5 MiB, until the reader stops reading
      if (write(fd, chunk.data(), chunk.size()) < 0) break;
    }
    _exit(0);
  }
  absl::StatusOr<std::string> text = ReadSpecFile(path);
  kill(pid, SIGKILL);  // it may be blocked writing to a pipe nobody reads any more
  int status = 0;
  waitpid(pid, &status, 0);
  unlink(path.c_str());
  EXPECT_EQ(text.status().message(), path +
                                         " is more than 1048576 bytes; a job spec may be "
                                         "at most 1048576 bytes (1 MiB)");
}

TEST(ReadSpecFileTest, RefusesBinaryData) {
  std::string garbage;
  for (int i = 0; i < 256; ++i) garbage += static_cast<char>((i * 151 + 7) & 0xFF);
  const std::string path = Write("spec_garbage.bin", "ab" + garbage);
  absl::StatusOr<std::string> text = ReadSpecFile(path);
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(text.status().message()),
              ::testing::StartsWith(path + ": not UTF-8 text ("));
}

TEST(ReadSpecFileTest, MissingFileAndDirectory) {
  absl::StatusOr<std::string> text = ReadSpecFile("/nonexistent/dir/caf\xE9.yaml");
  EXPECT_EQ(text.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(text.status().message(),
            "cannot read job spec /nonexistent/dir/caf\\xE9.yaml: No such file or directory");
  text = ReadSpecFile(::testing::TempDir());
  EXPECT_EQ(text.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(text.status().message()), ::testing::EndsWith(": Is a directory"));
}

}  // namespace
}  // namespace dapple::ctl
