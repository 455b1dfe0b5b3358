#include "common/fashion_mnist_files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/spec_text.h"

namespace dapple {

std::string FashionMnistFile(const std::string& dir, bool train, bool images) {
  std::string base = dir;
  if (!base.empty() && base.back() != '/') base += '/';
  return absl::StrCat(base, train ? "train" : "t10k",
                      images ? "-images-idx3-ubyte.gz" : "-labels-idx1-ubyte.gz");
}

namespace {

constexpr char kWhatItReads[] =
    " (data.dataset fashion-mnist reads the four gzip IDX files of Debian's "
    "dataset-fashion-mnist, installed in /usr/share/datasets/fashion-mnist)";

// Why `path` (which stat refused with `error`) is not there: a link that points nowhere or
// loops is named as one, so that the user looks at the link and not at the folder.
std::string WhyMissing(const std::string& path, int error) {
  struct stat st;
  if (error == ENOENT && lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    char target[4096];
    const ssize_t n = readlink(path.c_str(), target, sizeof(target) - 1);
    return absl::StrCat("is a link to ", n > 0 ? std::string(target, n) : std::string("?"),
                        ", which does not exist");
  }
  if (error == ELOOP) return "is a link that loops (too many levels of symbolic links)";
  if (error == ENOENT) return "does not exist";
  return absl::StrCat("cannot be read: ", std::strerror(error));
}

absl::Status NotAFolder(const std::string& dir, const std::string& why) {
  return absl::InvalidArgumentError(
      job_spec_internal::OneLine(absl::StrCat("data.path ", dir, " ", why, kWhatItReads)));
}

}  // namespace

absl::Status CheckFashionMnistFolder(const std::string& dir) {
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) return NotAFolder(dir, WhyMissing(dir, errno));
  if (!S_ISDIR(st.st_mode)) return NotAFolder(dir, "is not a folder");
  for (const bool train : {true, false}) {
    for (const bool images : {true, false}) {
      const std::string file = FashionMnistFile(dir, train, images);
      const std::string name = file.substr(file.rfind('/') + 1);
      if (stat(file.c_str(), &st) == 0) {
        if (S_ISREG(st.st_mode)) continue;
        return NotAFolder(dir, absl::StrCat("is not a Fashion-MNIST folder: its ", name,
                                            " is not a regular file"));
      }
      const int error = errno;
      const std::string why = WhyMissing(file, error);
      return NotAFolder(dir,
                        why == "does not exist"
                            ? absl::StrCat("is not a Fashion-MNIST folder: it has no ", name)
                            : absl::StrCat("is not a Fashion-MNIST folder: its ", name, " ", why));
    }
  }
  return absl::OkStatus();
}

}  // namespace dapple
