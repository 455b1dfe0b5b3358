#include "common/profile/text_util.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/testing/assert_ok.h"
#include "gtest/gtest.h"

namespace dapple::profile {
namespace {

std::string TempPath(const std::string& name) {
  return absl::StrCat(::testing::TempDir(), "/text_util_test_", ::getpid(), "_", name);
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

TEST(ReadTextFileTest, ReadsUpToTheCapExactly) {
  const std::string path = TempPath("ten");
  WriteFile(path, "0123456789");
  const absl::StatusOr<std::string> text = ReadTextFile(path, 10);
  ASSERT_OK(text.status());
  EXPECT_EQ(*text, "0123456789");
  const absl::Status status = ReadTextFile(path, 9).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(status.message(),
            absl::StrCat(path, ": 10 bytes is more than the 9 B limit (9 bytes)"));
  std::remove(path.c_str());
}

TEST(ReadTextFileTest, EnforcesTheCapWhileReading) {
  // /proc files are regular files whose stat size is 0, like a file that grows after the stat.
  const absl::Status status = ReadTextFile("/proc/self/status", 16).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(status.message(),
            "/proc/self/status: grew past the 16 B limit (16 bytes) while being read");
  const absl::StatusOr<std::string> whole = ReadTextFile("/proc/self/status", 1 << 20);
  ASSERT_OK(whole.status());
  EXPECT_GT(whole->size(), 16u);
}

TEST(ReadTextFileTest, RefusesWhatIsNotARegularFile) {
  // /dev/zero and /dev/urandom never end (bad_alloc, a hang); /dev/null is not a file either.
  for (const char* device : {"/dev/zero", "/dev/urandom", "/dev/null"}) {
    const absl::Status status = ReadTextFile(device, 1 << 20).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << device;
    EXPECT_EQ(status.message(), absl::StrCat(device, ": not a regular file"));
  }
  // A FIFO without a writer would block an ordinary open forever.
  const std::string fifo = TempPath("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const absl::Status status = ReadTextFile(fifo, 1 << 20).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), absl::StrCat(fifo, ": not a regular file"));
  std::remove(fifo.c_str());

  const absl::Status dir = ReadTextFile(::testing::TempDir(), 1 << 20).status();
  EXPECT_EQ(dir.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(dir.message(), absl::StrCat(::testing::TempDir(), ": Is a directory"));
  EXPECT_EQ(ReadTextFile(TempPath("missing"), 1 << 20).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace dapple::profile
