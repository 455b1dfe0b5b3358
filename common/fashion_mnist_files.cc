#include "common/fashion_mnist_files.h"

#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "common/spec_text.h"

namespace dapple {

std::string FashionMnistFile(const std::string& dir, bool train, bool images) {
  std::string base = dir;
  if (!base.empty() && base.back() != '/') base += '/';
  return absl::StrCat(base, train ? "train" : "t10k",
                      images ? "-images-idx3-ubyte.gz" : "-labels-idx1-ubyte.gz");
}

absl::Status CheckFashionMnistFolder(const std::string& dir) {
  for (const bool train : {true, false}) {
    for (const bool images : {true, false}) {
      const std::string file = FashionMnistFile(dir, train, images);
      struct stat st;
      if (stat(file.c_str(), &st) == 0 && S_ISREG(st.st_mode)) continue;
      return absl::InvalidArgumentError(job_spec_internal::OneLine(
          absl::StrCat("data.path ", dir, " is not a Fashion-MNIST folder: it has no ",
                       file.substr(file.rfind('/') + 1),
                       " (data.dataset fashion-mnist reads the four gzip IDX files of Debian's "
                       "dataset-fashion-mnist, installed in /usr/share/datasets/fashion-mnist)")));
    }
  }
  return absl::OkStatus();
}

}  // namespace dapple
